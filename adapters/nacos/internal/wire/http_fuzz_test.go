package wire

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
	"time"
)

// httpFuzzLimits are small, so that the fuzzer reaches them with small inputs.
var httpFuzzLimits = Limits{MaxInstances: 4, MaxMetadataEntries: 4, MaxKeyBytes: 16, MaxValueBytes: 64, MaxStringBytes: 64, MaxServiceNames: 8}

const fuzzMaxPushBytes = 8 << 10

// checkErrorBounded fails if a decoding error is not a bounded *DecodeError or *ServerError.
func checkErrorBounded(t *testing.T, err error) {
	t.Helper()
	switch e := err.(type) {
	case *DecodeError, *ServerError:
	default:
		t.Fatalf("error %T %v, want a *DecodeError or *ServerError", e, e)
	}
	if n := len(err.Error()); n > 2*maxErrorMessage+64 {
		t.Fatalf("error of %d bytes: unbounded", n)
	}
}

func FuzzDecodePush(f *testing.F) {
	f.Add([]byte(`{"type":"dom","lastRefTime":1,"data":"{\"name\":\"G@@s\",\"hosts\":[{\"ip\":\"1.2.3.4\",\"port\":1,\"metadata\":{\"a\":\"b\"}}]}"}`))
	f.Add([]byte(`{"type":"dom","lastRefTime":42,"data":{"dom":"svc-a","cacheMillis":1000,"hosts":[{"ip":"10.0.0.1","port":8080}],"metadata":{}}}`))
	f.Add([]byte(`{"type":"dump","lastRefTime":5,"data":""}`))
	f.Add([]byte(`{"type":"service","data":null}`))
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(`{"type":"dom","lastRefTime":1,"data":"{\"name\":\"s\",\"hosts\":[]}"}`))
	_ = zw.Close()
	f.Add(buf.Bytes())
	f.Add([]byte{0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		p, err := decodePush(pkt, fuzzMaxPushBytes, httpFuzzLimits)
		if err != nil {
			checkErrorBounded(t, err)
			return
		}
		if p.Type == "" {
			t.Fatal("accepted a push without a type")
		}
		if (p.Type == "dom" || p.Type == "service") != (p.Info != nil) {
			t.Fatalf("type %q with info %v", p.Type, p.Info != nil)
		}
		if p.Info == nil {
			return
		}
		if p.Info.Name == "" || len(p.Info.Name) > httpFuzzLimits.MaxStringBytes {
			t.Fatalf("name %q", p.Info.Name)
		}
		if len(p.Info.Hosts) > httpFuzzLimits.MaxInstances {
			t.Fatalf("%d hosts over the limit", len(p.Info.Hosts))
		}
		for _, h := range p.Info.Hosts {
			if len(h.Metadata) > httpFuzzLimits.MaxMetadataEntries {
				t.Fatalf("%d metadata entries over the limit", len(h.Metadata))
			}
		}
		ref := pushRef(pushHeader{}, p.Info)
		if ref.Service == "" || ref.Group == "" {
			t.Fatalf("ref %+v from name %q", ref, p.Info.Name)
		}
	})
}

func FuzzDecodeLogin(f *testing.F) {
	f.Add([]byte(`{"accessToken":"eyJhbGciOiJIUzI1NiJ9.x.y","tokenTtl":18000,"globalAdmin":true}`))
	f.Add([]byte(`{"accessToken":"","globalAdmin":false,"tokenTtl":120,"username":"polaris"}`))
	f.Add([]byte(`{"tokenTtl":-1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		tok, ttl, err := decodeLogin(body, httpFuzzLimits)
		if err != nil {
			checkErrorBounded(t, err)
			// The answer holds the token: no error may quote it.
			if i := bytes.Index(body, []byte(`"accessToken":"`)); i >= 0 {
				rest := body[i+len(`"accessToken":"`):]
				if j := bytes.IndexByte(rest, '"'); j >= 8 && strings.Contains(err.Error(), string(rest[:j])) {
					t.Fatalf("error quotes the token: %v", err)
				}
			}
			return
		}
		if len(tok) > maxTokenBytes || ttl < 0 || ttl > maxTokenTTLSeconds*time.Second {
			t.Fatalf("token of %d bytes, ttl %v", len(tok), ttl)
		}
	})
}

func FuzzDecodeServiceList(f *testing.F) {
	f.Add([]byte(`{"count":3,"doms":["a","b","G1__c"]}`))
	f.Add([]byte(`{"count":0,"doms":[]}`))
	f.Add([]byte(`{"doms":null,"count":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		page, err := decodeServiceList(body, httpFuzzLimits)
		if err != nil {
			checkErrorBounded(t, err)
			return
		}
		if page.Count < 0 || len(page.Names) > httpFuzzLimits.MaxServiceNames {
			t.Fatalf("page %+v", page)
		}
		for _, n := range page.Names {
			if len(n) > httpFuzzLimits.MaxStringBytes {
				t.Fatalf("name of %d bytes", len(n))
			}
		}
	})
}

func FuzzDecodeNamespaces(f *testing.F) {
	f.Add([]byte(`{"code":200,"message":null,"data":[{"namespace":"","namespaceShowName":"public","quota":200,"configCount":0,"type":0},{"namespace":"dev","type":2}]}`))
	f.Add([]byte(`{"code":200,"data":[{"namespace":"public"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ids, err := decodeNamespaces(body, httpFuzzLimits)
		if err != nil {
			checkErrorBounded(t, err)
			return
		}
		if len(ids) > httpFuzzLimits.MaxServiceNames {
			t.Fatalf("%d namespaces over the limit", len(ids))
		}
		for _, id := range ids {
			if id == defaultNamespaceID || len(id) > httpFuzzLimits.MaxStringBytes {
				t.Fatalf("id %q", id)
			}
		}
	})
}
