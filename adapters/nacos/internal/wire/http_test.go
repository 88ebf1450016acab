package wire

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const instanceListAnswer = `{"name":"G1@@svc","groupName":"G1","clusters":"","cacheMillis":10000,` +
	`"hosts":[{"instanceId":"10.0.0.1#8080#DEFAULT#G1@@svc","ip":"10.0.0.1","port":8080,"weight":2.5,` +
	`"healthy":true,"enabled":true,"ephemeral":true,"clusterName":"DEFAULT","serviceName":"G1@@svc",` +
	`"metadata":{"version":"1"}}],"lastRefTime":1700000000000,"checksum":"abc","allIPs":false,` +
	`"reachProtectionThreshold":false,"valid":true}`

// recorder is an httptest server that records the last request and answers with status and body.
func recorder(t *testing.T, status int, body string) (*httptest.Server, *atomic.Pointer[http.Request]) {
	t.Helper()
	var last atomic.Pointer[http.Request]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last.Store(r.Clone(context.Background()))
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &last
}

func TestInstancesRequestAndAnswer(t *testing.T) {
	srv, last := recorder(t, 200, instanceListAnswer)
	tokens := NewTokenSource(func(context.Context) (string, time.Duration, error) { return "tok-1", time.Hour, nil })
	c := NewHTTPClient(HTTPConfig{BaseURL: srv.URL + "/", Tokens: tokens, AccessKey: "ak", SecretKey: "sk", ClientIP: "10.1.2.3"})
	info, err := c.Instances(context.Background(), Ref{Namespace: "ns1", Group: "G1", Service: "svc"}, 54321)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Hosts) != 1 || info.Hosts[0].IP != "10.0.0.1" || info.Hosts[0].Weight != 2.5 ||
		info.Hosts[0].Metadata["version"] != "1" || info.CacheMillis != 10000 || info.Name != "G1@@svc" {
		t.Fatalf("decoded %+v", info)
	}
	r := last.Load()
	q := r.URL.Query()
	want := map[string]string{
		"serviceName": "G1@@svc", "groupName": "G1", "namespaceId": "ns1", "clusters": "",
		"healthyOnly": "false", "udpPort": "54321", "clientIP": "10.1.2.3", "accessToken": "tok-1", "ak": "ak",
	}
	for k, v := range want {
		if got, ok := q[k]; !ok || got[0] != v {
			t.Errorf("query %s = %v, want %q", k, got, v)
		}
	}
	if r.URL.Path != "/nacos/v1/ns/instance/list" || r.Method != http.MethodGet {
		t.Errorf("%s %s", r.Method, r.URL.Path)
	}
	if d := q.Get("data"); !strings.HasSuffix(d, "@@G1@@svc") || q.Get("signature") == "" {
		t.Errorf("signature fields: data %q, signature %q", d, q.Get("signature"))
	}
	if ua := r.Header.Get("User-Agent"); !strings.HasPrefix(ua, "Nacos-Go-Client:v") {
		t.Errorf("User-Agent %q: Alibaba's 1.x server pushes only to agents it knows", ua)
	}
}

func TestInstancesDefaultsAndNoPush(t *testing.T) {
	srv, last := recorder(t, 200, instanceListAnswer)
	c := NewHTTPClient(HTTPConfig{BaseURL: srv.URL, ContextPath: "/"})
	if _, err := c.Instances(context.Background(), Ref{Service: "svc"}, 0); err != nil {
		t.Fatal(err)
	}
	r := last.Load()
	q := r.URL.Query()
	if r.URL.Path != "/v1/ns/instance/list" {
		t.Errorf("path %s with context path \"/\"", r.URL.Path)
	}
	if q.Get("serviceName") != "DEFAULT_GROUP@@svc" || q.Get("groupName") != "DEFAULT_GROUP" {
		t.Errorf("query %v", q)
	}
	for _, k := range []string{"udpPort", "clientIP", "namespaceId", "accessToken", "ak", "signature"} {
		if q.Has(k) {
			t.Errorf("query has %s: %v", k, q)
		}
	}
}

func TestListServices(t *testing.T) {
	srv, last := recorder(t, 200, `{"count":3,"doms":["a","b"]}`)
	c := NewHTTPClient(HTTPConfig{BaseURL: srv.URL, AccessKey: "ak", SecretKey: "sk"})
	page, err := c.ListServices(context.Background(), "ns1", "G1", 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if page.Count != 3 || strings.Join(page.Names, ",") != "a,b" {
		t.Fatalf("page %+v", page)
	}
	q := last.Load().URL.Query()
	if q.Get("pageNo") != "2" || q.Get("pageSize") != "2" || q.Get("groupName") != "G1" || q.Get("namespaceId") != "ns1" {
		t.Errorf("query %v", q)
	}
	if d := q.Get("data"); d == "" || strings.Contains(d, "@@") {
		t.Errorf("a listing is signed with the timestamp alone (Java NamingProxy getSignData without serviceName): data %q", d)
	}
}

func TestNamespaces(t *testing.T) {
	srv, last := recorder(t, 200, `{"code":200,"message":null,"data":[`+
		`{"namespace":"","namespaceShowName":"public","quota":200,"configCount":0,"type":0},`+
		`{"namespace":"dev-id","namespaceShowName":"dev","quota":200,"configCount":1,"type":2},`+
		`{"namespace":"public","namespaceShowName":"public","type":0}]}`)
	ids, err := NewHTTPClient(HTTPConfig{BaseURL: srv.URL}).Namespaces(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ids, ",") != ",dev-id," {
		t.Fatalf("ids %q", ids)
	}
	if p := last.Load().URL.Path; p != "/nacos/v1/console/namespaces" {
		t.Errorf("path %s", p)
	}
}

func TestNamespacesNotServed(t *testing.T) {
	srv, _ := recorder(t, 404, "404: Page Not Found")
	_, err := NewHTTPClient(HTTPConfig{BaseURL: srv.URL}).Namespaces(context.Background())
	if !IsNotFound(err) {
		t.Fatalf("err = %v, want a 404 ServerError", err)
	}
}

func TestBodyLimit(t *testing.T) {
	big := `{"count":1,"doms":["` + strings.Repeat("a", 2000) + `"]}`
	srv, _ := recorder(t, 200, big)
	c := NewHTTPClient(HTTPConfig{BaseURL: srv.URL, MaxBodyBytes: 1000})
	_, err := c.ListServices(context.Background(), "", "", 1, 10)
	var de *DecodeError
	if !errors.As(err, &de) || !strings.Contains(de.Reason, "longer than 1000 bytes") {
		t.Fatalf("err = %v, want a DecodeError for the body limit", err)
	}
	// At the limit exactly, the answer is read.
	exact := `{"count":1,"doms":["a"]}`
	srv2, _ := recorder(t, 200, exact)
	c2 := NewHTTPClient(HTTPConfig{BaseURL: srv2.URL, MaxBodyBytes: int64(len(exact))})
	if _, err := c2.ListServices(context.Background(), "", "", 1, 10); err != nil {
		t.Fatalf("answer of exactly MaxBodyBytes: %v", err)
	}
}

func TestServerErrorShape(t *testing.T) {
	body := "caused: service not found\n\x1b[31m" + strings.Repeat("detail ", 1000) + "tok-SECRET"
	srv, _ := recorder(t, 500, body)
	tokens := NewTokenSource(func(context.Context) (string, time.Duration, error) { return "tok-SECRET", time.Hour, nil })
	c := NewHTTPClient(HTTPConfig{BaseURL: srv.URL, Tokens: tokens})
	_, err := c.Instances(context.Background(), Ref{Service: "svc"}, 0)
	var se *ServerError
	if !errors.As(err, &se) || se.Code != 500 {
		t.Fatalf("err = %v, want a ServerError 500", err)
	}
	if len(se.Message) > maxErrorMessage+len("…") || strings.ContainsAny(se.Message, "\n\x1b") ||
		!strings.HasPrefix(se.Message, "caused: service not found") {
		t.Fatalf("message not cut or not cleaned: %q", se.Message)
	}
	if strings.Contains(err.Error(), "tok-SECRET") {
		t.Fatalf("error holds the token: %v", err)
	}
}

func TestServerErrorRedactsEchoedSecrets(t *testing.T) {
	var sig atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sig.Store(r.URL.Query().Get("signature"))
		w.WriteHeader(400)
		// A server that echoes the request, decoded and raw.
		_, _ = w.Write([]byte("bad request " + r.URL.Query().Get("accessToken") + " " + r.URL.Query().Get("signature")))
	}))
	defer srv.Close()
	tokens := NewTokenSource(func(context.Context) (string, time.Duration, error) { return "tok-SECRET", time.Hour, nil })
	c := NewHTTPClient(HTTPConfig{BaseURL: srv.URL, Tokens: tokens, AccessKey: "ak", SecretKey: "sk"})
	_, err := c.Instances(context.Background(), Ref{Service: "svc"}, 0)
	if !IsServerError(err) {
		t.Fatalf("err = %v", err)
	}
	s, _ := sig.Load().(string)
	if s == "" || strings.Contains(err.Error(), "tok-SECRET") || strings.Contains(err.Error(), s) {
		t.Fatalf("error holds a secret: %v", err)
	}
}

func TestForbiddenInvalidatesToken(t *testing.T) {
	srv, _ := recorder(t, 403, "token expired!")
	var n atomic.Int32
	tokens := NewTokenSource(func(context.Context) (string, time.Duration, error) {
		n.Add(1)
		return "tok", time.Hour, nil
	})
	c := NewHTTPClient(HTTPConfig{BaseURL: srv.URL, Tokens: tokens})
	for range 2 {
		if _, err := c.ListServices(context.Background(), "", "", 1, 1); !IsServerError(err) {
			t.Fatalf("err = %v", err)
		}
	}
	if n.Load() != 2 {
		t.Fatalf("%d logins for two requests answered 403, want 2", n.Load())
	}
}

func TestTimeoutAndUnreachableErrorsHoldNoSecrets(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hang }))
	defer srv.Close()
	defer close(hang)
	tokens := NewTokenSource(func(context.Context) (string, time.Duration, error) { return "tok-SECRET", time.Hour, nil })
	for _, base := range []string{srv.URL, "http://127.0.0.1:1"} {
		c := NewHTTPClient(HTTPConfig{BaseURL: base, Tokens: tokens, AccessKey: "ak", SecretKey: "sk", Timeout: 200 * time.Millisecond})
		start := time.Now()
		_, err := c.Instances(context.Background(), Ref{Service: "svc"}, 0)
		if err == nil || IsServerError(err) {
			t.Fatalf("%s: err = %v, want a transport error", base, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%s: took %v with a 200ms timeout", base, d)
		}
		if msg := err.Error(); strings.Contains(msg, "tok-SECRET") || strings.Contains(msg, "signature") || strings.Contains(msg, "accessToken") {
			t.Fatalf("%s: error holds the query: %s", base, msg)
		}
	}
}

func TestNoRedirect(t *testing.T) {
	var followed atomic.Bool
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Store(true) }))
	defer target.Close()
	srv := httptest.NewServer(http.RedirectHandler(target.URL+"/steal", http.StatusFound))
	defer srv.Close()
	_, err := NewHTTPClient(HTTPConfig{BaseURL: srv.URL}).ListServices(context.Background(), "", "", 1, 1)
	var se *ServerError
	if !errors.As(err, &se) || se.Code != http.StatusFound || followed.Load() {
		t.Fatalf("err = %v, followed = %v; want a 302 ServerError and no request to the target", err, followed.Load())
	}
}

func TestDecodeServiceListRejects(t *testing.T) {
	lim := Limits{MaxServiceNames: 2, MaxStringBytes: 8}
	for _, body := range []string{
		`{"doms":[]}`,
		`{"count":-1,"doms":[]}`,
		`{"count":3,"doms":["a","b","c"]}`,
		`{"count":1,"doms":["123456789"]}`,
		`{"count":1,"doms":[1]}`,
		`{"count":1,"doms":["a"]`,
		`[]`,
	} {
		if _, err := decodeServiceList([]byte(body), lim); err == nil {
			t.Errorf("%s: accepted", body)
		} else if _, ok := err.(*DecodeError); !ok {
			t.Errorf("%s: %T %v, want a *DecodeError", body, err, err)
		}
	}
	page, err := decodeServiceList([]byte(`{"count":0,"doms":null,"extra":{"x":[1]}}`), lim)
	if err != nil || page.Count != 0 || len(page.Names) != 0 {
		t.Fatalf("empty listing: %+v, %v", page, err)
	}
}

func TestDecodeNamespacesRejects(t *testing.T) {
	for _, body := range []string{
		`{"code":200}`,
		`{"code":200,"data":[{"namespaceShowName":"x"}]}`,
		`{"code":200,"data":[{"namespace":1}]}`,
		`{"code":500,"data":[]}`,
	} {
		if _, err := decodeNamespaces([]byte(body), Limits{}); err == nil {
			t.Errorf("%s: accepted", body)
		}
	}
}
