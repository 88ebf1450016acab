package cli

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	"github.com/galleon-mesh/galleon/internal/xdsclient/xdsclienttest"
)

const (
	seV1 = "networking.istio.io/v1/ServiceEntry"
	weV1 = "networking.istio.io/v1/WorkloadEntry"
)

// run runs galleonctl with args and returns its exit status and output.
func run(ctx context.Context, args ...string) (int, string, string) {
	var stdout, stderr syncbuf.Buffer
	code := Run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func se(t *testing.T, name, version string, hosts ...string) *anypb.Any {
	return xdsclienttest.MCPResource(t, name, version, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), nil,
		&networking.ServiceEntry{
			Hosts:      hosts,
			Ports:      []*networking.ServicePort{{Number: 80, Protocol: "HTTP", Name: "http"}},
			Resolution: networking.ServiceEntry_DNS,
		})
}

func TestTypeURLs(t *testing.T) {
	for _, tc := range []struct {
		types, version string
		want           string
		err            string
	}{
		{"serviceentries", "v1", seV1, ""},
		{"se", "v1alpha3", "networking.istio.io/v1alpha3/ServiceEntry", ""},
		{"se, we,serviceentry", "v1beta1", "networking.istio.io/v1beta1/ServiceEntry networking.istio.io/v1beta1/WorkloadEntry", ""},
		{"networking.istio.io/v1/DestinationRule", "v1", "networking.istio.io/v1/DestinationRule", ""},
		{"services", "v1", "", "use serviceentries, workloadentries, or a full type URL"},
		{"se", "v2", "", "--api-version"},
		{"se,", "v1", "", "empty type"},
	} {
		got, err := typeURLs(tc.types, tc.version)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("typeURLs(%q, %q) error = %v, want %q", tc.types, tc.version, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("typeURLs(%q, %q) = %v, %v; want %s", tc.types, tc.version, got, err, tc.want)
		}
	}
}

func TestUsage(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{{"--help"}, {"help"}, {"get", "--help"}, {"watch", "-h"}, {"help", "watch"}} {
		code, out, _ := run(ctx, args...)
		if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "galleonctl") {
			t.Errorf("%v: exit %d, stdout:\n%s", args, code, out)
		}
	}
	code, out, _ := run(ctx, "get", "--help")
	for _, want := range []string{"-addr", "-type", "-api-version", "-o", "-timeout"} {
		if !strings.Contains(out, want) || code != 0 {
			t.Errorf("get --help lacks %s:\n%s", want, out)
		}
	}
	for _, args := range [][]string{{}, {"frobnicate"}, {"get", "--bogus"}, {"get", "-o", "xml"}, {"watch", "-o", "table"}, {"get", "extra"}, {"get", "--type", "pods"}} {
		if code, _, errOut := run(ctx, args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, errOut)
		}
	}
}

func TestGetPrintsListAndACKs(t *testing.T) {
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{SotW: map[string][]*discoveryv3.DiscoveryResponse{
		seV1: {{TypeUrl: seV1, VersionInfo: "v7", Nonce: "n1", Resources: []*anypb.Any{
			se(t, "shop/b", "h2", "b.example"), se(t, "bookinfo/a", "h1", "a.example"),
		}}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, out, errOut := run(ctx, "get", "--addr", srv.Addr)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	want := `apiVersion: v1
items:
- apiVersion: networking.istio.io/v1
  kind: ServiceEntry
  metadata:
    creationTimestamp: "2026-01-02T03:04:05Z"
    name: a
    namespace: bookinfo
    resourceVersion: h1
  spec:
    hosts:
    - a.example
    ports:
    - name: http
      number: 80
      protocol: HTTP
    resolution: DNS
- apiVersion: networking.istio.io/v1
  kind: ServiceEntry
  metadata:
    creationTimestamp: "2026-01-02T03:04:05Z"
    name: b
    namespace: shop
    resourceVersion: h2
  spec:
    hosts:
    - b.example
    ports:
    - name: http
      number: 80
      protocol: HTTP
    resolution: DNS
kind: List
metadata:
  resourceVersion: ""
`
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}

	// The request/ACK sequence: subscribe, ACK with the version and
	// nonce, then a half-close rather than a reset.
	select {
	case <-srv.HalfClosed():
	case <-ctx.Done():
		t.Fatal("get did not half-close the stream")
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("requests = %v, want subscribe + ACK", reqs)
	}
	if r := reqs[0]; r.GetTypeUrl() != seV1 || r.GetResponseNonce() != "" || r.GetVersionInfo() != "" || len(r.GetResourceNames()) != 0 || r.GetNode().GetId() != "galleonctl" {
		t.Errorf("subscribe = %v", r)
	}
	if r := reqs[1]; r.GetTypeUrl() != seV1 || r.GetResponseNonce() != "n1" || r.GetVersionInfo() != "v7" || r.GetErrorDetail() != nil {
		t.Errorf("ACK = %v", r)
	}
}

func TestGetSeveralTypesNamesAndJSON(t *testing.T) {
	script := xdsclienttest.Script{SotW: map[string][]*discoveryv3.DiscoveryResponse{
		seV1: {{TypeUrl: seV1, VersionInfo: "1", Nonce: "s1", Resources: []*anypb.Any{se(t, "ns/x", "1", "x")}}},
		weV1: {{TypeUrl: weV1, VersionInfo: "1", Nonce: "w1"}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	srv := xdsclienttest.NewServer(t, script)
	code, out, errOut := run(ctx, "get", "--addr", "xds://"+srv.Addr, "--type", "se,we", "-o", "names")
	if code != 0 || out != "ServiceEntry/ns/x\n" {
		t.Errorf("names: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Errorf("%d requests, want 2 subscribes + 2 ACKs", n)
	}

	srv = xdsclienttest.NewServer(t, script)
	code, out, errOut = run(ctx, "get", "--addr", srv.Addr, "-o", "json")
	if code != 0 || !strings.Contains(out, `"kind": "List"`) || !strings.Contains(out, `"resourceVersion": "1"`) || !strings.Contains(out, `"resolution": "DNS"`) {
		t.Errorf("json: exit %d, stdout:\n%s\nstderr %s", code, out, errOut)
	}
	// kubectl sorts keys: apiVersion, items, kind, metadata.
	if !strings.HasPrefix(out, "{\n    \"apiVersion\": \"v1\",\n    \"items\": [") || !strings.HasSuffix(out, "\"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n") {
		t.Errorf("json keys not in kubectl's order:\n%s", out)
	}
}

func TestGetEmpty(t *testing.T) {
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{SotW: map[string][]*discoveryv3.DiscoveryResponse{
		seV1: {{TypeUrl: seV1, VersionInfo: "0", Nonce: "n"}},
	}})
	code, out, _ := run(context.Background(), "get", "--addr", srv.Addr)
	if code != 0 || !strings.Contains(out, "items: []") {
		t.Errorf("exit %d, stdout:\n%s", code, out)
	}
}

// TestGetReportsDroppedResources: a resource istiod would drop (here the
// go-control-plane mistake of stamping the collection type URL on the Any)
// is an error, named on stderr.
func TestGetReportsDroppedResources(t *testing.T) {
	bad := se(t, "ns/bad", "1", "bad")
	bad.TypeUrl = seV1
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{SotW: map[string][]*discoveryv3.DiscoveryResponse{
		seV1: {{TypeUrl: seV1, VersionInfo: "1", Nonce: "n", Resources: []*anypb.Any{se(t, "ns/good", "1", "good"), bad}}},
	}})
	code, out, errOut := run(context.Background(), "get", "--addr", srv.Addr, "-o", "names")
	if code != 1 || out != "ns/good\n" || !strings.Contains(errOut, "resource 1: type URL is \""+seV1+"\"") {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
}

func TestGetConnectFailure(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	start := time.Now()
	code, _, errOut := run(context.Background(), "get", "--addr", addr)
	if code != 1 || !strings.Contains(errOut, "cannot reach "+addr) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to fail", d)
	}
}

func TestGetTimeout(t *testing.T) {
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{}) // never answers
	code, _, errOut := run(context.Background(), "get", "--addr", srv.Addr, "--timeout", "300ms")
	if code != 1 || !strings.Contains(errOut, "no response from "+srv.Addr+" within 300ms for "+seV1) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestGetWrongTypeEcho: a source that answers with another type URL than
// the one requested (istiod matches exactly) is called out.
func TestGetWrongTypeEcho(t *testing.T) {
	const alpha = "networking.istio.io/v1alpha3/ServiceEntry"
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{SotW: map[string][]*discoveryv3.DiscoveryResponse{
		seV1: {{TypeUrl: alpha, VersionInfo: "1", Nonce: "n1"}},
	}})
	code, _, errOut := run(context.Background(), "get", "--addr", srv.Addr, "--timeout", "300ms")
	if code != 1 || !strings.Contains(errOut, "it answered "+alpha+" instead, but must echo the requested type URL") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestWatchSotW(t *testing.T) {
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{SotW: map[string][]*discoveryv3.DiscoveryResponse{
		seV1: {
			{TypeUrl: seV1, VersionInfo: "1", Nonce: "n1", Resources: []*anypb.Any{se(t, "ns/a", "a1", "a"), se(t, "ns/b", "b1", "b")}},
			{TypeUrl: seV1, VersionInfo: "2", Nonce: "n2", Resources: []*anypb.Any{se(t, "ns/a", "a2", "a2"), se(t, "ns/b", "b1", "b"), se(t, "ns/c", "c1", "c")}},
			{TypeUrl: seV1, VersionInfo: "3", Nonce: "n3", Resources: []*anypb.Any{se(t, "ns/a", "a2", "a2"), se(t, "ns/c", "c1", "c")}},
			{TypeUrl: seV1, VersionInfo: "4", Nonce: "n4", Resources: []*anypb.Any{se(t, "ns/a", "a2", "a2"), se(t, "ns/c", "c1", "c")}},
		},
	}})
	out, errOut := watchUntilAcked(t, srv, "watch", "--addr", srv.Addr, "-o", "names")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		`ServiceEntry sotw version="1" nonce="n1" resources=2 added=[ns/a ns/b]`,
		`  + ns/a`, `  + ns/b`,
		`ServiceEntry sotw version="2" nonce="n2" resources=3 added=[ns/c] updated=[ns/a]`,
		`  + ns/c`, `  ~ ns/a`,
		`ServiceEntry sotw version="3" nonce="n3" resources=2 removed=[ns/b]`,
		`  - ns/b`,
		`ServiceEntry sotw version="4" nonce="n4" resources=2 no changes (the source resent the same state)`,
	}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s\nstderr:\n%s", out, errOut)
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d = %q, want suffix %q", i, lines[i], w)
		}
	}
	// Arrival time first, RFC 3339 with milliseconds.
	if ts, _, _ := strings.Cut(lines[0], " "); !isTimestamp(ts) {
		t.Errorf("line starts with %q, not an RFC 3339 ms timestamp", ts)
	}
	reqs := srv.Requests()
	if len(reqs) != 5 {
		t.Fatalf("requests = %d, want 1 subscribe + 4 ACKs", len(reqs))
	}
	for i, r := range reqs[1:] {
		if r.GetResponseNonce() != "n"+string(rune('1'+i)) || r.GetVersionInfo() != string(rune('1'+i)) {
			t.Errorf("ACK %d = %v", i+1, r)
		}
	}
}

func TestWatchSotWYAML(t *testing.T) {
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{SotW: map[string][]*discoveryv3.DiscoveryResponse{
		seV1: {
			{TypeUrl: seV1, VersionInfo: "1", Nonce: "n1", Resources: []*anypb.Any{se(t, "ns/a", "a1", "a")}},
			{TypeUrl: seV1, VersionInfo: "2", Nonce: "n2", Resources: []*anypb.Any{se(t, "ns/a", "", "a")}},
		},
	}})
	out, errOut := watchUntilAcked(t, srv, "watch", "--addr", srv.Addr, "-o", "yaml")
	if strings.Count(out, "\n---\nkind: ServiceEntry") != 0 || strings.Count(out, "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\n") != 2 {
		t.Errorf("output:\n%s", out)
	}
	if !strings.Contains(errOut, "empty metadata.version") {
		t.Errorf("no warning about the empty version; stderr:\n%s", errOut)
	}
}

func TestWatchDelta(t *testing.T) {
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{Delta: map[string][]*discoveryv3.DeltaDiscoveryResponse{
		seV1: {
			{TypeUrl: seV1, Nonce: "d1", SystemVersionInfo: "s1", Resources: []*discoveryv3.Resource{
				{Name: "ns/a", Version: "a1", Resource: se(t, "ns/a", "a1", "a")},
				{Name: "ns/b", Version: "b1", Resource: se(t, "ns/b", "b1", "b")},
			}},
			{TypeUrl: seV1, Nonce: "d2", Resources: []*discoveryv3.Resource{
				{Name: "ns/a", Version: "a2", Resource: se(t, "ns/a", "a2", "a")},
				{Name: "ns/b", Version: "b1", Resource: se(t, "ns/b", "b1", "b")},
			}, RemovedResources: []string{"ns/zz"}},
			{TypeUrl: seV1, Nonce: "d3", RemovedResources: []string{"ns/b"}},
		},
	}})
	out, errOut := watchUntilAcked(t, srv, "watch", "--addr", srv.Addr, "--delta")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		`ServiceEntry delta version="s1" nonce="d1" resources=2 added=[ns/a ns/b]`,
		`ServiceEntry delta version="" nonce="d2" resources=2 updated=[ns/a] removed=[ns/zz] unchanged=[ns/b]`,
		`ServiceEntry delta version="" nonce="d3" resources=1 removed=[ns/b]`,
	}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s\nstderr:\n%s", out, errOut)
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d = %q, want suffix %q", i, lines[i], w)
		}
	}
	if !strings.Contains(errOut, `removal of "ns/zz", which was never sent`) {
		t.Errorf("stderr:\n%s", errOut)
	}
	reqs := srv.DeltaRequests()
	if len(reqs) != 4 || len(reqs[0].GetResourceNamesSubscribe()) != 0 || reqs[0].GetTypeUrl() != seV1 ||
		reqs[1].GetResponseNonce() != "d1" || reqs[2].GetResponseNonce() != "d2" || reqs[3].GetResponseNonce() != "d3" {
		t.Errorf("delta requests = %v", reqs)
	}
}

func TestWatchJSON(t *testing.T) {
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{SotW: map[string][]*discoveryv3.DiscoveryResponse{
		seV1: {{TypeUrl: seV1, VersionInfo: "1", Nonce: "n1", Resources: []*anypb.Any{se(t, "ns/a", "a1", "a")}}},
	}})
	out, _ := watchUntilAcked(t, srv, "watch", "--addr", srv.Addr, "-o", "json")
	if !strings.HasPrefix(out, `{"time":"`) || !strings.Contains(out, `"added":["ns/a"],"objects":[{"apiVersion":"networking.istio.io/v1","kind":"ServiceEntry"`) {
		t.Errorf("output:\n%s", out)
	}
}

func TestWatchConnectFailureAndTimeout(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	if code, _, errOut := run(context.Background(), "watch", "--addr", addr); code != 1 || !strings.Contains(errOut, "cannot reach") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	srv := xdsclienttest.NewServer(t, xdsclienttest.Script{})
	if code, _, errOut := run(context.Background(), "watch", "--addr", srv.Addr, "--timeout", "200ms"); code != 1 || !strings.Contains(errOut, "no response") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// watchUntilAcked runs a watch until srv saw every scripted response
// ACKed, then interrupts it as Ctrl-C would and checks it exits 0.
func watchUntilAcked(t *testing.T, srv *xdsclienttest.Server, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- Run(ctx, args, &stdout, &stderr) }()
	select {
	case <-srv.AllAcked():
	case code := <-done:
		t.Fatalf("watch exited with %d before the end of the script; stderr:\n%s", code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("not every response was ACKed; stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	// A response is ACKed before it is printed: wait for the output too.
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(stdout.String(), "nonce") < countNonces(srv) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("watch exited with %d after Ctrl-C; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not stop after Ctrl-C")
	}
	return stdout.String(), stderr.String()
}

// countNonces is how many responses srv has been asked to ACK so far.
func countNonces(srv *xdsclienttest.Server) int {
	n := 0
	for _, r := range srv.Requests() {
		if r.GetResponseNonce() != "" {
			n++
		}
	}
	for _, r := range srv.DeltaRequests() {
		if r.GetResponseNonce() != "" {
			n++
		}
	}
	return n
}

func isTimestamp(s string) bool {
	_, err := time.Parse("2006-01-02T15:04:05.000Z07:00", s)
	return err == nil && strings.Contains(s, ".")
}
