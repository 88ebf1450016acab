package wire

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fuzzLimits are small, so that the fuzzer reaches them with small inputs.
var fuzzLimits = Limits{MaxBody: 1 << 20, MaxApps: 50, MaxInstances: 100}

// Allocation bounds of decoding a listing of n bytes within fuzzLimits: allocBase plus
// allocPerByte for each byte. A decoded instance takes about a kilobyte with its garbage (and
// fuzzLimits allow 100 of them, well within allocBase); the decoders' own garbage is a few
// dozen bytes a byte of input at worst (XML tokens of one character, JSON of empty values).
const (
	allocBase    = 2 << 20
	allocPerByte = 64
)

// checkDecoded checks what DecodeLimits made of body: no more records than the limits allow
// (the limits are what bound memory, not the body's bytes), the instances served well-formed,
// and the memory allocated within allocBase + allocPerByte a byte.
func checkDecoded(t *testing.T, body []byte, format Format) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	a, err := DecodeLimits(bytes.NewReader(body), format.MediaType(), fuzzLimits)
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > allocBase+allocPerByte*uint64(len(body)) {
		t.Fatalf("decoding %d bytes of %v allocated %d bytes, over %d + %d a byte", len(body), format, alloc, allocBase, allocPerByte)
	}
	if err != nil {
		if len(err.Error()) > 4<<10 && !errors.Is(err, ErrTooLarge) {
			t.Logf("a long error: %d bytes (cut by fetch before it is reported)", len(err.Error()))
		}
		return
	}
	if len(a.Apps) > fuzzLimits.MaxApps {
		t.Fatalf("%d applications, over the limit of %d", len(a.Apps), fuzzLimits.MaxApps)
	}
	n := len(a.Skipped)
	for _, app := range a.Apps {
		n += len(app.Instances)
		if len(app.Instances) == 0 {
			t.Fatalf("application %q without instances", app.Name)
		}
		for _, in := range app.Instances {
			if in.InstanceID == "" || in.App == "" || !knownStatus(in.Status) || (in.IPAddr == "" && in.HostName == "") ||
				!(in.Port.Enabled && in.Port.Number > 0 || in.SecurePort.Enabled && in.SecurePort.Number > 0) {
				t.Fatalf("served a malformed instance %+v", in)
			}
		}
	}
	if n > fuzzLimits.MaxInstances {
		t.Fatalf("%d instances, over the limit of %d", n, fuzzLimits.MaxInstances)
	}
	// What is kept is bounded by the input too: every string of the result is from it.
	if len(body) > 0 {
		var kept int
		for _, app := range a.Apps {
			kept += len(app.Name)
			for _, in := range app.Instances {
				kept += len(in.InstanceID) + len(in.IPAddr) + len(in.HostName) + len(in.VIPAddress) + len(in.SecureVIPAddress)
				for k, v := range in.Metadata {
					kept += len(k) + len(v)
				}
			}
		}
		if kept > 2*len(body) {
			t.Fatalf("%d bytes of strings kept from %d bytes of listing", kept, len(body))
		}
	}
}

// FuzzDecodeLimits: through the streaming decoder with limits (what the adapter runs), in
// JSON and XML: no input panics, none yields more applications or instances than the limits,
// and none allocates more than a bounded multiple of its size. The seeds are the fixtures and
// listings at and over the limits; `go test -fuzz FuzzDecodeLimits` explores from them.
func FuzzDecodeLimits(f *testing.F) {
	for _, name := range []string{"netflix-apps.json", "netflix-apps.xml", "netflix-apps-xstream.json", "netflix-delta.json", "polaris-delta.xml"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, r := range []func() []byte{
		func() []byte { return readAll(minimalJSON(100)) },
		func() []byte { return readAll(minimalJSON(101)) },
		func() []byte { return readAll(minimalXML(101)) },
		func() []byte { return readAll(manyAppsJSON(51)) },
		func() []byte {
			return []byte(`{"applications":{"application":[{"instance":[` + strings.Repeat(`{},`, 200) + `{}]}]}}`)
		},
		func() []byte {
			return []byte(`<applications><application>` + strings.Repeat(`<instance/>`, 200) + `</application></applications>`)
		},
		func() []byte {
			return []byte(`{"applications":{"application":[{"instance":[{"hostName":"h","status":"UP","port":1}],"name":"LATE"}]}}`)
		},
	} {
		f.Add(r())
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, format := range []Format{FormatJSON, FormatXML} {
			checkDecoded(t, body, format)
		}
	})
}

func readAll(r interface{ Read([]byte) (int, error) }) []byte {
	var b bytes.Buffer
	_, _ = b.ReadFrom(r)
	return b.Bytes()
}

// TestDecodeAllocationBounded runs checkDecoded on the inputs with the most records a byte,
// the worst cases for the bound FuzzDecodeLimits checks.
func TestDecodeAllocationBounded(t *testing.T) {
	for _, body := range []string{
		`{"applications":{"application":[{"instance":[` + strings.Repeat(`{},`, 100_000) + `{}]}]}}`,
		`{"applications":{"application":[{"instance":[` + strings.Repeat(`1,`, 100_000) + `1]}]}}`,
		`{"applications":{"application":[` + strings.Repeat(`1,`, 100_000) + `1]}}`,
		`<applications><application>` + strings.Repeat(`<instance/>`, 100_000) + `</application></applications>`,
		`<applications>` + strings.Repeat(`<application/>`, 100_000) + `</applications>`,
		`<applications>` + strings.Repeat(`<x/>`, 100_000) + `</applications>`,
		`{"applications":{"x":[` + strings.Repeat(`[],`, 100_000) + `[]]}}`,
	} {
		for _, format := range []Format{FormatJSON, FormatXML} {
			checkDecoded(t, []byte(body), format)
		}
	}
}
