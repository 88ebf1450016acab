package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
)

func TestNacosGenInstanceAndChurn(t *testing.T) {
	in := nacosGenInstance("10.0.0.1", 0, "")
	if in.Weight != 1 || !in.Healthy || !in.Enabled || in.Metadata[nacosChurnKey] != "" || in.Metadata["version"] != "v1" {
		t.Fatalf("a generated instance: %+v", in)
	}
	if in := nacosGenInstance("10.0.0.1", 7, NacosChurnMetadata); in.Metadata[nacosChurnKey] != "7" || in.Weight != 1 {
		t.Errorf("metadata churn 7: %+v", in)
	}
	if in := nacosGenInstance("10.0.0.1", 7, NacosChurnWeight); in.Weight != 8 || in.Metadata[nacosChurnKey] != "" {
		t.Errorf("weight churn 7: %+v", in)
	}
	if in := nacosGenInstance("10.0.0.1", 199, NacosChurnWeight); in.Weight != 100 {
		t.Errorf("weight churn 199: %+v, want weight 100 (1 to 100)", in)
	}
	// Changes take one instance of every service before a second of any, and come back to the
	// first after every instance had one.
	g := &nacosGenerator{cfg: NacosGenerateConfig{Services: 3, Instances: 2, ChurnKind: NacosChurnMetadata}}
	var got []string
	for n := int64(1); n <= 7; n++ {
		i, in := g.churned(n)
		got = append(got, fmt.Sprintf("%d/%s/%s", i, in.IP, in.Metadata[nacosChurnKey]))
	}
	want := []string{
		"0/" + filegen.InstanceAddr(0, 0) + "/1", "1/" + filegen.InstanceAddr(1, 0) + "/2", "2/" + filegen.InstanceAddr(2, 0) + "/3",
		"0/" + filegen.InstanceAddr(0, 1) + "/4", "1/" + filegen.InstanceAddr(1, 1) + "/5", "2/" + filegen.InstanceAddr(2, 1) + "/6",
		"0/" + filegen.InstanceAddr(0, 0) + "/7",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("churn order:\n got %v\nwant %v", got, want)
	}
	// The target's instances are at the target's addresses, the others at theirs.
	if in := g.instance(-1, 1); in.IP != targetAddr(1) {
		t.Errorf("target instance 1: %+v", in)
	}
	if in := g.instance(2, 0); in.IP != filegen.InstanceAddr(2, 0) {
		t.Errorf("service 2's instance 0: %+v", in)
	}
	if r := g.ref(-1); r.Service != NacosTargetService {
		t.Errorf("ref(-1) = %+v", r)
	}
}

// Configuration errors name the flag to fix; defaults are filled in.
func TestNacosGenerateConfigCheck(t *testing.T) {
	ok := NacosGenerateConfig{Server: "127.0.0.1:8848", Services: 10, Instances: 3}
	if err := ok.check(); err != nil {
		t.Fatal(err)
	}
	if ok.GRPC != "127.0.0.1:9848" || ok.Namespace != "public" || ok.Group != "DEFAULT_GROUP" || ok.Concurrency != DefaultNacosConcurrency ||
		ok.ChurnKind != NacosChurnMetadata || ok.Progress == nil {
		t.Fatalf("defaults: %+v", ok)
	}
	for _, c := range []NacosGenerateConfig{
		{Server: "127.0.0.1:8848", Services: 0, Instances: 1},
		{Server: "127.0.0.1:8848", Services: 1, Instances: 251},
		{Server: "127.0.0.1:8848", Services: 1, Instances: 1, Concurrency: 2000},
		{Server: "127.0.0.1:8848", Services: 1, Instances: 1, Churn: -1},
		{Server: "127.0.0.1:8848", Services: 1, Instances: 1, ChurnKind: "health"},
		{Server: "127.0.0.1", Services: 1, Instances: 1},
		{Server: "127.0.0.1:65000", Services: 1, Instances: 1},
		{Server: "127.0.0.1:8848", Services: 1, Instances: 1, ReportInterval: time.Millisecond},
	} {
		if err := c.check(); err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %v, want an error naming a flag", c, err)
		}
	}
	if _, err := NacosGenerate(context.Background(), NacosGenerateConfig{Server: "", Services: 1, Instances: 1}); err == nil || !strings.Contains(err.Error(), "--nacos-server") {
		t.Errorf("no server: %v", err)
	}
}

func TestScrapeNacosCounts(t *testing.T) {
	const page = `# HELP galleon_nacos_pushes_total x
galleon_nacos_pushes_total{outcome="applied"} 12
galleon_nacos_pushes_total{outcome="stale"} 1
galleon_nacos_requests_total{kind="list",result="ok",server="127.0.0.1:8848"} 4
galleon_nacos_requests_total{kind="subscribe",result="ok",server="127.0.0.1:8848"} 201
galleon_nacos_requests_total{kind="subscribe",result="unreachable",server="127.0.0.1:8848"} 2
galleon_nacos_subscriptions 201
process_resident_memory_bytes 1e+07
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(page)) }))
	defer srv.Close()
	pushes, requests, err := scrapeNacosCounts(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if len(pushes) != 2 || pushes["applied"] != 12 || pushes["stale"] != 1 {
		t.Errorf("pushes %v", pushes)
	}
	if len(requests) != 3 || requests["list"] != 4 || requests["subscribe"] != 201 || requests["subscribe unreachable"] != 2 {
		t.Errorf("requests %v", requests)
	}
	d := diffCounts(map[string]float64{"applied": 15, "stale": 1}, pushes)
	if d["applied"] != 3 || d["stale"] != 0 {
		t.Errorf("diff %v", d)
	}
	if got := formatCounts(map[string]float64{"list": 4, "subscribe": 0, "applied": 3}); got != "applied 3, list 4" {
		t.Errorf("formatCounts: %q", got)
	}
	if got := formatCounts(nil); got != "none" {
		t.Errorf("formatCounts(nil): %q", got)
	}
	if v := labelValue(`m{kind="list",result="ok"} 1`, "result"); v != "ok" {
		t.Errorf("labelValue result: %q", v)
	}
	if v := labelValue(`m{xkind="list"} 1`, "kind"); v != "" {
		t.Errorf("labelValue matched inside another label's name: %q", v)
	}
}

func TestNacosReportString(t *testing.T) {
	r := &NacosReport{
		Report: Report{Sinks: 2, Protocol: "delta", Registry: "nacos", Changes: 2, Updates: 3,
			Latencies: []time.Duration{time.Second, 2 * time.Second}},
		Listed: []time.Duration{900 * time.Millisecond, 1800 * time.Millisecond},
		Served: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
		Pushes: map[string]float64{"applied": 5}, Requests: map[string]float64{"list": 2},
	}
	out := r.String()
	for _, want := range []string{
		"registry change -> every sink (2 changes): p50 1s  p99 2s  max 2s",
		"registry change -> listed by the server (GET /nacos/v1/ns/instance/list every 50ms): p50 900ms  p99 1.8s  max 1.8s",
		"listed by the server -> every sink (per change, within the 50ms of the polls): p50 100ms  p99 200ms  max 200ms",
		"nacos pushes over the changes: applied 5",
		"nacos requests over the changes: list 2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}
