package wire

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// fuzzLimits are small, so that the fuzzer reaches them with small inputs.
var fuzzLimits = Limits{MaxInstances: 8, MaxMetadataEntries: 4, MaxKeyBytes: 8, MaxValueBytes: 16, MaxStringBytes: 32, MaxServiceNames: 8}

// polarisSeeds are the payloads captured from polaris-server (testdata/polaris), and their
// JSON bodies.
func polarisSeeds(f *testing.F) (payloads, bodies [][]byte) {
	files, _ := filepath.Glob(filepath.Join("testdata", "polaris", "*.pb"))
	if len(files) == 0 {
		f.Fatal("no captured payloads in testdata/polaris")
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		p, err := UnmarshalPayload(b)
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		payloads = append(payloads, b)
		bodies = append(bodies, p.Body)
	}
	return payloads, bodies
}

func FuzzUnmarshalPayload(f *testing.F) {
	payloads, _ := polarisSeeds(f)
	for _, p := range payloads {
		f.Add(p)
	}
	f.Add(MarshalPayload(goldenPayload))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := UnmarshalPayload(data)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a DecodeError", err)
			}
			return
		}
		if len(p.Headers) > maxPayloadHeaders || len(p.Type) > maxPayloadTypeBytes || len(p.Body) > len(data) {
			t.Fatalf("beyond the bounds: %d headers, type of %d bytes", len(p.Headers), len(p.Type))
		}
		// What decodes re-encodes to bytes that decode to the same payload.
		again, err := UnmarshalPayload(MarshalPayload(p))
		if err != nil || !payloadEqual(again, p) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, p)
		}
	})
}

// fuzzJSON seeds f with every captured body and the given extra inputs.
func fuzzJSON(f *testing.F, extra ...string) {
	_, bodies := polarisSeeds(f)
	for _, b := range bodies {
		f.Add(b)
	}
	for _, s := range extra {
		f.Add([]byte(s))
	}
}

func checkDecodeErr(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	var se *ServerError
	if err != nil && !errors.As(err, &de) && !errors.As(err, &se) {
		t.Fatalf("error %v is neither a DecodeError nor a ServerError", err)
	}
}

func checkServiceInfo(t *testing.T, info *ServiceInfo) {
	t.Helper()
	if len(info.Hosts) > fuzzLimits.MaxInstances {
		t.Fatalf("%d instances", len(info.Hosts))
	}
	for _, h := range info.Hosts {
		if len(h.Metadata) > fuzzLimits.MaxMetadataEntries || len(h.IP) > fuzzLimits.MaxStringBytes {
			t.Fatalf("instance beyond the limits: %+v", h)
		}
		for k, v := range h.Metadata {
			if len(k) > fuzzLimits.MaxKeyBytes || len(v) > fuzzLimits.MaxValueBytes {
				t.Fatalf("metadata beyond the limits: %q=%q", k, v)
			}
		}
	}
}

func FuzzDecodeServiceInfo(f *testing.F) {
	fuzzJSON(f, `{"hosts":[{"ip":"1.2.3.4","port":1,"metadata":{"a":"b"}}],"reachProtectThreshold":true}`, `null`)
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := DecodeServiceInfo(data, fuzzLimits)
		checkDecodeErr(t, err)
		if err == nil {
			checkServiceInfo(t, info)
		}
	})
}

func FuzzDecodeSubscribeResponse(f *testing.F) {
	fuzzJSON(f, `{"resultCode":200,"serviceInfo":{"hosts":[{}]}}`, `{"resultCode":500,"errorCode":403,"message":"x"}`)
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := decodeSubscribeResponse(data, fuzzLimits)
		checkDecodeErr(t, err)
		if err == nil {
			checkServiceInfo(t, info)
		}
	})
}

func FuzzDecodeNotifySubscriber(f *testing.F) {
	fuzzJSON(f, `{"requestId":"1","serviceName":"a@@b","serviceInfo":{"hosts":[]}}`)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, ref, info, err := decodeNotifySubscriber(data, fuzzLimits)
		checkDecodeErr(t, err)
		if err == nil {
			checkServiceInfo(t, info)
			if ref.Service == "" || ref.Group == "" || ref.Namespace == defaultNamespaceID {
				t.Fatalf("ref %+v", ref)
			}
		}
		if _, err := decodePushHeader(data, "request", fuzzLimits); err != nil {
			checkDecodeErr(t, err)
		}
	})
}

func FuzzDecodeServiceListResponse(f *testing.F) {
	fuzzJSON(f, `{"resultCode":200,"count":2,"serviceNames":["a","b"]}`)
	f.Fuzz(func(t *testing.T, data []byte) {
		page, err := decodeServiceListResponse(data, fuzzLimits)
		checkDecodeErr(t, err)
		if err == nil && (len(page.Names) > fuzzLimits.MaxServiceNames || page.Count < 0) {
			t.Fatalf("page %+v", page)
		}
		id, err := decodeServerCheckResponse(data, fuzzLimits)
		checkDecodeErr(t, err)
		if err == nil && (id == "" || len(id) > fuzzLimits.MaxStringBytes) {
			t.Fatalf("connection ID %q", id)
		}
		if err := decodeResponse(data, "x", fuzzLimits, nil); err != nil {
			checkDecodeErr(t, err)
			if len(err.Error()) > 2*maxErrorMessage+100 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
		}
	})
}
