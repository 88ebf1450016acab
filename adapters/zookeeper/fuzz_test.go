package zookeeper

import (
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"text/template"
	"unicode/utf8"

	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/model"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
)

// The decoders of what anyone who can write to ZooKeeper controls: a Dubbo provider URL and an
// override URL (node names), a Curator ServiceInstance (node data), a Dubbo 3 application
// instance (node data). Each fuzz target checks, for any input:
//   - no panic;
//   - an error is short (maxErrorBytes) and quotes no secret parameter;
//   - what is decoded is bounded by the input: labels and their bytes, ports;
//   - what is decoded never makes its service invalid in the core (convert.ConvertService);
//   - memory: the bytes allocated by one call are bounded by a multiple of the input's size
//     (allocBound), checked on every input and on the largest the adapter accepts
//     (TestDecodersAllocationBounded).

// maxErrorBytes bounds a rejection's text: a few quoted pieces of registry.MaxQuoted bytes, escaped.
const maxErrorBytes = 1024

// allocBound is the most a decoder may allocate for an input of n bytes: a fixed part for the
// small structures of one call, and a multiple of the input (decoding, one copy of the labels,
// a map entry per label).
func allocBound(n int) uint64 { return 256<<10 + 48*uint64(n) }

// allocated is the bytes f allocates, measured with the runtime's counters (the fuzzing worker
// runs one input at a time, so the process's allocations are f's and the fuzzer's own, small).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// checkDecoded checks the invariants of one decoded instance of an input of n bytes.
func checkDecoded(t *testing.T, what, raw string, n int, e endpoint, err error, maxLabels int) {
	t.Helper()
	if err != nil {
		if len(err.Error()) > maxErrorBytes {
			t.Fatalf("%s: a %d-byte error: %.200s", what, len(err.Error()), err)
		}
		if secretInQuery(raw) && strings.Contains(err.Error(), "fuzzsecret") {
			t.Fatalf("%s: the error quotes a secret: %s", what, err)
		}
		return
	}
	if len(e.inst.Labels) > maxLabels {
		t.Fatalf("%s: %d labels, at most %d", what, len(e.inst.Labels), maxLabels)
	}
	size := 0
	for k, v := range e.inst.Labels {
		size += len(k) + len(v)
	}
	if size > n {
		t.Fatalf("%s: %d bytes of labels from %d bytes of input", what, size, n)
	}
	if len(e.ports) == 0 || len(e.ports) > maxServicePorts {
		t.Fatalf("%s: %d ports", what, len(e.ports))
	}
	tmpl := template.Must(template.New("h").Parse(DefaultHostTemplate))
	name := e.host().Name
	if name == "" {
		name = "fuzz"
	}
	svc, _, ok, err := mapService(hostData{Name: name, Namespace: "default"}, tmpl, []*endpoint{&e}, portMemory{})
	if !ok || err != nil {
		t.Fatalf("%s: mapService: %v %v", what, ok, err)
	}
	if _, err := convert.ConvertService(svc, convert.Options{Mode: convert.ModeServiceEntry}); err != nil {
		t.Fatalf("%s: an instance the adapter accepts makes its service invalid: %v", what, err)
	}
}

// secretInQuery reports whether raw (URL-encoded or not) carries the fuzz secret as the value of
// a secret parameter (token, password, secret: the seeds' keys), the only place a provider URL
// holds one: an error must never quote it. The word anywhere else is not a secret, and the
// fuzzer finds such inputs: "fuzzsecret" as the whole node name and "?=fuzzsecret" (a parameter
// with no name) are quoted back as what is not a URL, rightly (both 2026-11-27).
func secretInQuery(raw string) bool {
	if u, err := url.QueryUnescape(raw); err == nil {
		raw = u
	}
	_, query, ok := strings.Cut(raw, "?")
	if !ok {
		return false
	}
	for _, param := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		key, value, _ := strings.Cut(param, "=")
		switch strings.ToLower(key) {
		case "token", "password", "secret":
			if strings.Contains(value, "fuzzsecret") {
				return true
			}
		}
	}
	return false
}

func checkAlloc(t *testing.T, what string, n int, f func()) {
	t.Helper()
	if got := allocated(f); got > allocBound(n) {
		t.Fatalf("%s: %d bytes allocated for %d bytes of input, more than %d", what, got, n, allocBound(n))
	}
}

// FuzzProviderURL: Dubbo 2 provider URLs (node names, URL-encoded or not) and override URLs.
func FuzzProviderURL(f *testing.F) {
	for _, u := range append(twoProtocolURLs("10.0.0.1"),
		"dubbo://10.0.0.1:20880/org.apache.demo.DemoService?application=demo&group=g1&version=1.0.0&weight=100&token=fuzzsecret",
		"rest://[::1]:8080/x?side=provider&enabled=false",
		"consumer://10.0.0.1/x?side=consumer",
		"override://0.0.0.0/x?category=configurators&disabled=true&application=demo&token=fuzzsecret",
		"override://10.0.0.1:20880/x?weight=200",
		"empty://0.0.0.0/x",
		"%2F%3F", "x?token=fuzzsecret", "dubbo://[::1:20880/x?password=fuzzsecret", "dubbo://10.0.0.1:20880/x?a=%zz&secret=fuzzsecret",
	) {
		f.Add(u)
		f.Add(url.QueryEscape(u))
	}
	d := newDubbo(map[string]string{"hessian": "HTTP2"})
	f.Fuzz(func(t *testing.T, raw string) {
		var e endpoint
		var err error
		checkAlloc(t, "parseInstance", len(raw), func() { e, err = d.parseInstance("org.apache.demo.DemoService", raw, nil) })
		if err == errNotInstance {
			err = nil
			e = endpoint{inst: model.Instance{ID: "x", Address: "10.0.0.1"}, ports: []model.Port{{Number: 1}}}
		}
		checkDecoded(t, "provider URL", raw, len(raw)+64, e, err, len(dubboreg.ProviderLabelKeys()))
		var oerr error
		checkAlloc(t, "parseOverride", len(raw), func() { _, oerr = parseOverride(raw) })
		if oerr != nil && oerr != errNotInstance {
			checkDecoded(t, "override URL", raw, len(raw), endpoint{}, oerr, 0)
		}
		r := redactURL(raw)
		if redactURL(r) != r || strings.Count(r, redacted) > strings.Count(raw, "=")+strings.Count(strings.ToLower(raw), "%3d")+strings.Count(raw, redacted) {
			t.Fatalf("redactURL(%q) = %q: not stable, or more redactions than parameters", raw, r)
		}
	})
}

// FuzzCuratorInstance: a Curator ServiceInstance as Spring Cloud Zookeeper writes it.
func FuzzCuratorInstance(f *testing.F) {
	f.Add(curatorJSON("a", "a1", "10.0.0.1", 8080, 8443, map[string]string{"zone": "z1", "protocol": "grpc", statusKey: "UP"}))
	f.Add(curatorJSON("a", "a1", "web.example.com", 8080, 0, map[string]string{"protocol": "dubbo"}))
	f.Add(dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(dubboTri, nil)))
	f.Add([]byte(`{"address":"10.0.0.1","port":1,"payload":{"metadata":{"a":1,"b":true,"c":null,"d":[1],"e":{"f":1}}}}`))
	f.Add([]byte(`{"address":"10.0.0.1","port":-1,"sslPort":70000}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var e endpoint
		var err error
		checkAlloc(t, "curator", len(data), func() { e, err = curator{}.parseInstance("a", "a1", data) })
		checkDecoded(t, "curator instance", string(data), len(data), e, err, len(data))
	})
}

// FuzzDubbo3Instance: a Dubbo 3 application instance, its metadata and "dubbo.endpoints".
func FuzzDubbo3Instance(f *testing.F) {
	f.Add(dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(dubboTri, map[string]any{"zone": "z1"})))
	f.Add(dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(`[{"port":20880,"protocol":"dubbo"},{"port":20880,"protocol":"tri"},{"port":8080,"protocol":"rest"}]`, nil)))
	f.Add(dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta("", nil)))
	f.Add(dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(`[{"port":"x"}]`, nil)))
	d := newDubbo3(nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		var e endpoint
		var err error
		checkAlloc(t, "dubbo3", len(data), func() { e, err = d.parseInstance("demo-provider", "10.0.0.1:20880", data) })
		checkDecoded(t, "dubbo3 instance", string(data), len(data), e, err, dubboreg.MaxLabels)
		for k, v := range e.inst.Labels {
			if utf8.RuneCountInString(v) > dubboreg.MaxLabelValue {
				t.Fatalf("label %q: %d characters", k, utf8.RuneCountInString(v))
			}
		}
	})
}

// TestDecodersAllocationBounded runs the fuzz targets' checks on the largest inputs the
// adapter reads (a node of up to 1 MiB, a node name of up to ZooKeeper's path limit) with the
// most records a byte: 40,000 metadata keys, 60,000 "dubbo.endpoints" entries, 30,000 URL
// parameters. It also bounds the allocations of a typical provider URL, which the adapter parses
// for each of 100,000 providers at start.
func TestDecodersAllocationBounded(t *testing.T) {
	meta := map[string]string{}
	for i := range 40_000 {
		meta[fmt.Sprintf("k%05d", i)] = "v"
	}
	spring := curatorJSON("a", "a1", "10.0.0.1", 8080, 0, meta)
	var eps strings.Builder
	eps.WriteString("[")
	for i := range 60_000 {
		if i > 0 {
			eps.WriteString(",")
		}
		fmt.Fprintf(&eps, `{"port":%d,"protocol":"tri"}`, 1+i%200)
	}
	eps.WriteString("]")
	metaAny := map[string]any{}
	for k, v := range meta {
		metaAny[k] = v
	}
	d3many := dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(eps.String(), nil))
	d3meta := dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(dubboTri, metaAny))
	longURL := "dubbo://10.0.0.1:20880/x?" + strings.Repeat("application=a&", 30_000) + "token=fuzzsecret"
	for _, tc := range []struct {
		name string
		data []byte
		f    func([]byte) (endpoint, error)
		max  int
	}{
		{"spring, 40,000 metadata keys", spring, func(b []byte) (endpoint, error) { return curator{}.parseInstance("a", "a1", b) }, 40_000},
		{"dubbo3, 60,000 endpoints", d3many, func(b []byte) (endpoint, error) { return newDubbo3(nil).parseInstance("demo-provider", "x", b) }, dubboreg.MaxLabels},
		{"dubbo3, 40,000 metadata keys", d3meta, func(b []byte) (endpoint, error) { return newDubbo3(nil).parseInstance("demo-provider", "x", b) }, dubboreg.MaxLabels},
		{"provider URL, 30,000 parameters", []byte(longURL), func(b []byte) (endpoint, error) { return newDubbo(nil).parseInstance("x", string(b), nil) }, len(dubboreg.ProviderLabelKeys())},
		{"provider URL encoded, 30,000 parameters", []byte(url.QueryEscape(longURL)), func(b []byte) (endpoint, error) { return newDubbo(nil).parseInstance("x", string(b), nil) }, len(dubboreg.ProviderLabelKeys())},
	} {
		var e endpoint
		var err error
		got := allocated(func() { e, err = tc.f(tc.data) })
		t.Logf("%s: %d bytes in, %d allocated (%.1f a byte), %d labels, %d ports, err %.80v", tc.name, len(tc.data), got, float64(got)/float64(len(tc.data)), len(e.inst.Labels), len(e.ports), err)
		if got > allocBound(len(tc.data)) {
			t.Errorf("%s: %d bytes allocated for %d bytes of input, more than %d", tc.name, got, len(tc.data), allocBound(len(tc.data)))
		}
		checkDecoded(t, tc.name, string(tc.data), len(tc.data), e, err, tc.max)
	}
	d := newDubbo(nil)
	typical := url.QueryEscape(twoProtocolURLs("10.0.0.1")[1])
	if n := testing.AllocsPerRun(100, func() { _, _ = d.parseInstance(greeter, typical, nil) }); n > 60 {
		t.Errorf("a typical provider URL: %.0f allocations a parse, want at most 60", n)
	}
}
