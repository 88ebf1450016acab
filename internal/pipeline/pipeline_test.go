package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	mcp "istio.io/api/mcp/v1alpha1"

	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	"github.com/galleon-mesh/galleon/internal/vip"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

func service(name string, ips ...string) model.Service {
	s := model.Service{
		Namespace: "ns", Name: name,
		Hosts: []string{name + ".ns.test"},
		Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}},
	}
	for i, ip := range ips {
		s.Instances = append(s.Instances, model.Instance{ID: fmt.Sprint(name, i), Address: ip})
	}
	return s
}

// run starts a pipeline over a new store and stops it when the test ends.
func run(t *testing.T, cfg Config) (*Pipeline, *snapshot.Store) {
	t.Helper()
	if cfg.Quiet == 0 {
		cfg.Quiet = 5 * time.Millisecond
	}
	store := snapshot.NewStore()
	p := New(store, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run returned %v", err)
		}
	})
	return p, store
}

// waitSeq waits for the store to pass seq and returns the new snapshot.
func waitSeq(t *testing.T, store *snapshot.Store, seq uint64) *snapshot.Snapshot {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s := store.Current(); s.Seq > seq {
			return s
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no snapshot after seq %d", seq)
	return nil
}

func endpoints(t *testing.T, snap *snapshot.Snapshot, name string) []string {
	t.Helper()
	if snap.Collection(snapshot.ServiceEntry).Get(name) == nil {
		return nil
	}
	se := serviceEntry(t, snap, name)
	var out []string
	for _, e := range se.Endpoints {
		out = append(out, e.Address)
	}
	if len(se.Hosts) == 0 || len(se.Ports) == 0 {
		t.Fatalf("%s decoded without hosts or ports: %v", name, se)
	}
	return out
}

func TestReplaceUpdateDelete(t *testing.T) {
	p, store := run(t, Config{})
	p.Update(service("early", "10.0.0.9")) // superseded by the Replace below
	p.Replace([]model.Service{service("a", "10.0.0.1"), service("b", "10.0.0.2")})
	snap := waitSeq(t, store, 0)
	if !snap.Ready || snap.Collection(snapshot.ServiceEntry).Len() != 2 {
		t.Fatalf("after Replace: ready=%v len=%d", snap.Ready, snap.Collection(snapshot.ServiceEntry).Len())
	}
	if got := endpoints(t, snap, "ns/a"); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Fatalf("ns/a endpoints %v", got)
	}
	// The status is updated just after the snapshot is published: wait
	// for it rather than race it.
	for deadline := time.Now().Add(5 * time.Second); !p.Status().Synced; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("status not synced 5 s after the Replace was served")
		}
	}

	p.Update(service("a", "10.0.0.1", "10.0.0.3"))
	snap = waitSeq(t, store, snap.Seq)
	if d := snap.Collection(snapshot.ServiceEntry).LastDiff(); !slices.Equal(d.EndpointOnly, []string{"ns/a"}) {
		t.Fatalf("instance added: diff %+v, want endpoint-only", d)
	}
	port := service("a", "10.0.0.1", "10.0.0.3")
	port.Ports = append(port.Ports, model.Port{Number: 443, Protocol: model.ProtocolHTTPS})
	p.Update(port)
	snap = waitSeq(t, store, snap.Seq)
	if d := snap.Collection(snapshot.ServiceEntry).LastDiff(); len(d.EndpointOnly) != 0 || len(d.Updated) != 1 {
		t.Fatalf("port added: diff %+v, want a full update", d)
	}

	p.Delete(model.ServiceKey{Namespace: "ns", Name: "b"})
	snap = waitSeq(t, store, snap.Seq)
	if snap.Collection(snapshot.ServiceEntry).Get("ns/b") != nil {
		t.Fatal("deleted service still served")
	}
	p.Replace([]model.Service{service("c", "10.0.0.4")})
	snap = waitSeq(t, store, snap.Seq)
	var names []string
	for _, r := range snap.Collection(snapshot.ServiceEntry).Resources() {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"ns/c"}) {
		t.Fatalf("after a second Replace: %v", names)
	}
}

func TestUnchangedReportMakesNoSnapshot(t *testing.T) {
	p, store := run(t, Config{})
	p.Replace([]model.Service{service("a", "10.0.0.1")})
	snap := waitSeq(t, store, 0)
	p.Update(service("a", "10.0.0.1"))
	p.Update(service("z", "10.0.0.9")) // a real change, to know the flush happened
	snap = waitSeq(t, store, snap.Seq)
	if d := snap.Collection(snapshot.ServiceEntry).LastDiff(); !slices.Equal(d.Added, []string{"ns/z"}) || len(d.Updated) != 0 {
		t.Fatalf("diff %+v: an unchanged report changed something", d)
	}
}

func TestBadUpdateKeepsLastGoodVersion(t *testing.T) {
	p, store := run(t, Config{})
	p.Replace([]model.Service{service("a", "10.0.0.1")})
	snap := waitSeq(t, store, 0)
	bad := service("a", "10.0.0.2")
	bad.Ports = nil // istiod requires a port
	p.Update(bad)
	p.Update(service("marker", "10.0.0.5"))
	snap = waitSeq(t, store, snap.Seq)
	if got := endpoints(t, snap, "ns/a"); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Fatalf("after a bad update ns/a serves %v, want the last good endpoints", got)
	}
	// Bad in a full listing: still kept.
	p.Replace([]model.Service{bad, service("marker", "10.0.0.6")})
	snap = waitSeq(t, store, snap.Seq)
	if got := endpoints(t, snap, "ns/a"); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Fatalf("after a Replace with a bad record ns/a serves %v", got)
	}
}

func TestNamesCollidingAfterSanitisingAreRejected(t *testing.T) {
	p, store := run(t, Config{})
	upper := service("Orders", "10.0.0.1")
	lower := service("orders", "10.0.0.2")
	p.Replace([]model.Service{upper})
	snap := waitSeq(t, store, 0)
	p.Update(lower)
	p.Update(service("marker", "10.0.0.5"))
	snap = waitSeq(t, store, snap.Seq)
	if got := endpoints(t, snap, "ns/orders"); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Fatalf("colliding service took over: %v", got)
	}
	// Deleting the loser must not delete the winner's resource.
	p.Delete(lower.Key())
	p.Update(service("marker", "10.0.0.6"))
	snap = waitSeq(t, store, snap.Seq)
	if got := endpoints(t, snap, "ns/orders"); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Fatalf("deleting the rejected twin removed the served one: %v", got)
	}
}

func TestWorkloadEntryModeRemovesGoneInstances(t *testing.T) {
	p, store := run(t, Config{Convert: convert.Options{Mode: convert.ModeWorkloadEntry}})
	p.Replace([]model.Service{service("a", "10.0.0.1", "10.0.0.2")})
	snap := waitSeq(t, store, 0)
	if n := snap.Collection(snapshot.WorkloadEntry).Len(); n != 2 {
		t.Fatalf("%d WorkloadEntries, want 2", n)
	}
	se := snap.Collection(snapshot.ServiceEntry).Get("ns/a").Version
	p.Update(service("a", "10.0.0.1"))
	snap = waitSeq(t, store, snap.Seq)
	if n := snap.Collection(snapshot.WorkloadEntry).Len(); n != 1 {
		t.Fatalf("%d WorkloadEntries after an instance left, want 1", n)
	}
	if snap.Collection(snapshot.ServiceEntry).Get("ns/a").Version != se {
		t.Fatal("the ServiceEntry changed although only an instance left")
	}
}

// TestReportsCoalesce: reports inside the quiet period make one snapshot. The first listing is
// not held back (TestFirstListingIsNotDebounced).
func TestReportsCoalesce(t *testing.T) {
	p, store := run(t, Config{Quiet: 200 * time.Millisecond, MaxDelay: 10 * time.Second})
	p.Replace([]model.Service{service("a", "10.0.0.1")})
	synced := waitSeq(t, store, 0)
	for i := range 50 {
		p.Update(service("a", fmt.Sprintf("10.0.1.%d", i)))
	}
	snap := waitSeq(t, store, synced.Seq)
	if snap.Seq != synced.Seq+1 {
		t.Fatalf("50 reports inside the quiet period made %d snapshots", snap.Seq-synced.Seq)
	}
	if got := endpoints(t, snap, "ns/a"); !slices.Equal(got, []string{"10.0.1.49"}) {
		t.Fatalf("coalesced state %v, want the last report", got)
	}
}

func TestUnreachableIsReported(t *testing.T) {
	p, _ := run(t, Config{})
	p.Unreachable(fmt.Errorf("connection refused"))
	if p.Status().Unreachable == nil {
		t.Fatal("status does not say the registry is unreachable")
	}
	p.Unreachable(nil)
	if p.Status().Unreachable != nil {
		t.Fatal("status still unreachable")
	}
}

// a_b.example.com is served as a-b.example.com ('_' is not allowed in a DNS
// name): that used to happen without a word.
func TestRewrittenHostsAreLoggedOnce(t *testing.T) {
	var logs syncbuf.Buffer
	p, store := run(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	svc := service("a", "10.0.0.1")
	svc.Hosts = []string{"a_b.example.com", "Upper.Example.com"}
	p.Replace([]model.Service{svc})
	snap := waitSeq(t, store, 0)
	svc = service("a", "10.0.0.2") // an endpoint change: same hosts
	svc.Hosts = []string{"a_b.example.com", "Upper.Example.com"}
	p.Update(svc)
	waitSeq(t, store, snap.Seq)

	lines := strings.Count(logs.String(), "host rewritten")
	if lines != 1 {
		t.Fatalf("%d 'host rewritten' lines, want 1 (once per change of hosts, none for a change of case):\n%s", lines, logs.String())
	}
	if l := logs.String(); !strings.Contains(l, "host=a_b.example.com served_as=a-b.example.com") || !strings.Contains(l, "service=ns/a") {
		t.Errorf("the line does not name the host, what it is served as and the service:\n%s", l)
	}
}

// Before the first listing nothing is served, so an outage then must not
// claim the last good state is (galleon-file once said so at start).
func TestUnreachableBeforeSyncSaysNothingIsServed(t *testing.T) {
	var logs syncbuf.Buffer
	p, store := run(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p.Unreachable(fmt.Errorf("connection refused"))
	if l := logs.String(); !strings.Contains(l, "nothing is served until it has been listed once") || strings.Contains(l, "serving the last good state") {
		t.Errorf("outage before the first listing logged:\n%s", l)
	}
	p.Unreachable(nil)
	p.Replace([]model.Service{service("a", "10.0.0.1")})
	waitSeq(t, store, 0)
	for deadline := time.Now().Add(5 * time.Second); !p.Status().Synced; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not synced")
		}
	}
	p.Unreachable(fmt.Errorf("connection refused"))
	if !strings.Contains(logs.String(), "serving the last good state") {
		t.Errorf("outage after the first listing does not say the last good state is served:\n%s", logs.String())
	}
}

// TestRegistryIsStamped: the daemon's registry name is recorded on what is
// served (model.Service has no field for it: adapters need not say it and
// cannot say it differently).
func TestRegistryIsStamped(t *testing.T) {
	p, store := run(t, Config{Registry: "acme"})
	p.Replace([]model.Service{service("a", "10.0.0.1"), service("b", "10.0.0.2")})
	snap := waitSeq(t, store, 0)
	for _, name := range []string{"ns/a", "ns/b"} {
		r := snap.Collection(snapshot.ServiceEntry).Get(name)
		if r == nil {
			t.Fatalf("%s not served", name)
		}
		var res mcp.Resource
		if err := proto.Unmarshal(r.MCP(), &res); err != nil {
			t.Fatal(err)
		}
		if got := res.GetMetadata().GetAnnotations()[convert.AnnotationRegistry]; got != "acme" {
			t.Errorf("%s served with registry %q, want the daemon's \"acme\"", name, got)
		}
	}
}

// TestRejectionsAreListedAndCleared: the records malformed now are listed
// (for /debug/status) and counted by a gauge until the adapter clears them,
// and the list is bounded whatever the registry holds.
func TestRejectionsAreListedAndCleared(t *testing.T) {
	var logs syncbuf.Buffer
	p, _ := run(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p.Rejected("b.yaml:3", fmt.Errorf("port is not a number"))
	p.Rejected("a.yaml:1", fmt.Errorf("no hosts"))
	p.Rejected("a.yaml:1", fmt.Errorf("no hosts, still"))
	list, total := p.Rejections(10)
	if total != 2 || len(list) != 2 || list[0] != (Rejection{"a.yaml:1", "other", "no hosts, still"}) || list[1].Record != "b.yaml:3" {
		t.Fatalf("rejections %v (total %d), want a.yaml:1 with its newest message and b.yaml:3", list, total)
	}
	if got := gauge(t, p.metrics.recordsRejectedNow); got != 2 {
		t.Fatalf("galleon_registry_malformed_records = %v, want 2", got)
	}
	p.Rejected("a.yaml:1", nil)
	p.Rejected("never.yaml:1", nil) // not rejected: nothing to clear
	if list, total := p.Rejections(10); total != 1 || list[0].Record != "b.yaml:3" {
		t.Fatalf("after clearing a.yaml:1: %v (total %d)", list, total)
	}
	if got := gauge(t, p.metrics.recordsRejectedNow); got != 1 {
		t.Fatalf("galleon_registry_malformed_records = %v after a clear, want 1", got)
	}
	if !strings.Contains(logs.String(), `msg="registry record fixed" record=a.yaml:1`) {
		t.Errorf("no log line for the fixed record:\n%s", logs.String())
	}
	for i := range MaxListedRejections + 10 {
		p.Rejected(fmt.Sprintf("many.yaml:%d", i), fmt.Errorf("bad"))
	}
	if list, total := p.Rejections(5); len(list) != 5 || total != MaxListedRejections+11 {
		t.Fatalf("%d listed, total %d; want 5 and %d", len(list), total, MaxListedRejections+11)
	}
	if got := gauge(t, p.metrics.recordsRejectedNow); got != MaxListedRejections+11 {
		t.Fatalf("galleon_registry_malformed_records = %v, want all %d, listed or not", got, MaxListedRejections+11)
	}
}

func gauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestDegradedPartsAreListed: a part of the registry down is listed with
// its error and counted until it is back, apart from Unreachable; the
// number of parts kept is bounded.
func TestDegradedPartsAreListed(t *testing.T) {
	var logs syncbuf.Buffer
	p, _ := run(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p.Degraded("dc2", fmt.Errorf("connection refused"))
	p.Degraded("dc3", fmt.Errorf("timeout"))
	p.Degraded("dc4", nil) // never down
	if got := p.DegradedParts(); len(got) != 2 || got["dc2"] != "connection refused" || got["dc3"] != "timeout" {
		t.Fatalf("degraded parts %v", got)
	}
	if p.Status().Unreachable != nil {
		t.Fatal("a part down made the whole registry unreachable")
	}
	p.Degraded("dc2", nil)
	if got := p.DegradedParts(); len(got) != 1 || got["dc3"] == "" {
		t.Fatalf("after dc2 came back: %v", got)
	}
	if got := gauge(t, p.metrics.degradedParts); got != 1 {
		t.Fatalf("galleon_registry_degraded_parts = %v, want 1", got)
	}
	if !strings.Contains(logs.String(), `msg="registry part reachable again" part=dc2`) {
		t.Errorf("no log line for dc2 back:\n%s", logs.String())
	}
	for i := range MaxDegradedParts + 5 {
		p.Degraded(fmt.Sprintf("server-%d", i), fmt.Errorf("down"))
	}
	if got := len(p.DegradedParts()); got != MaxDegradedParts {
		t.Fatalf("%d parts kept, want the bound %d", got, MaxDegradedParts)
	}
}

// TestRejectionReasonsAreBounded: galleon_registry_records_rejected_total
// counts by the reason the adapter gave (registry.Reason), "other" without
// one, and a reason that is not a short snake_case word, or one past the
// bound, as "other" too.
func TestRejectionReasonsAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, _ := run(t, Config{Registerer: reg})
	if got := counterVec(t, reg, "galleon_registry_records_rejected_total"); len(got) != 1 || got["other"] != 0 {
		t.Fatalf("before any rejection: %v, want other=0 present", got)
	}
	p.Rejected("a", registry.Reason("port", fmt.Errorf("port 0")))
	p.Rejected("b", fmt.Errorf("wrapped: %w", registry.Reason("port", fmt.Errorf("port 70000"))))
	p.Rejected("c", fmt.Errorf("no reason"))
	p.Rejected("d", registry.Reason("Not A Reason", fmt.Errorf("x")))
	for i := range maxReasons + 5 {
		p.Rejected(fmt.Sprintf("r%d", i), registry.Reason(fmt.Sprintf("reason_%d", i), fmt.Errorf("x")))
	}
	got := counterVec(t, reg, "galleon_registry_records_rejected_total")
	if got["port"] != 2 || got["other"] != 2+6 || len(got) != maxReasons+1 {
		t.Fatalf("by reason: %v; want port=2, other=8 (none, malformed, 6 past the bound) and %d labels", got, maxReasons+1)
	}
}

func counterVec(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestAppliedSaysWhenTheChangeWasReported: the hook of the change -> ACK
// latency gets each new ready snapshot with the time of the oldest report
// it holds, and nothing for a flush that changed nothing.
func TestAppliedSaysWhenTheChangeWasReported(t *testing.T) {
	type applied struct {
		seq      uint64
		reported time.Time
	}
	got := make(chan applied, 8)
	p, store := run(t, Config{Quiet: 50 * time.Millisecond, Applied: func(seq uint64, reported time.Time) {
		got <- applied{seq, reported}
	}})
	before := time.Now()
	p.Update(service("early", "10.0.0.1")) // before the first listing: not ready, not told
	p.Replace([]model.Service{service("a", "10.0.0.1")})
	first := <-got
	if snap := store.Current(); first.seq != snap.Seq || !snap.Ready {
		t.Fatalf("told seq %d, store at %d (ready %v)", first.seq, snap.Seq, snap.Ready)
	}
	if first.reported.Before(before) || first.reported.After(time.Now()) {
		t.Fatalf("reported %v: want the first report of the batch (after %v)", first.reported, before)
	}
	beforeSecond := time.Now()
	p.Update(service("a", "10.0.0.1")) // unchanged: no new snapshot
	p.Update(service("b", "10.0.0.2"))
	second := <-got
	if second.seq != first.seq+1 {
		t.Fatalf("second snapshot told as seq %d after %d", second.seq, first.seq)
	}
	if second.reported.Before(beforeSecond) || time.Since(second.reported) < 50*time.Millisecond {
		t.Fatalf("reported %v: want the first report of the batch, at least the quiet period ago", second.reported)
	}
	p.Update(service("b", "10.0.0.2"))
	select {
	case a := <-got:
		t.Fatalf("told %+v for a flush that changed nothing", a)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestLastSyncTimestamp: the registry's state is known current now while
// it is reachable and listed, as of the moment it became unreachable while
// it is not, and as of the start until the first listing.
func TestLastSyncTimestamp(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, store := run(t, Config{Registry: "acme", Registerer: reg})
	lastSync := func() float64 {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == "galleon_registry_last_sync_timestamp_seconds" {
				m := f.GetMetric()[0]
				if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "registry" || l[0].GetValue() != "acme" {
					t.Fatalf("labels %v, want registry=acme", l)
				}
				return m.GetGauge().GetValue()
			}
		}
		t.Fatal("galleon_registry_last_sync_timestamp_seconds not registered")
		return 0
	}
	unix := func(tm time.Time) float64 { return float64(tm.UnixNano()) / 1e9 }
	started := lastSync()
	time.Sleep(20 * time.Millisecond)
	if got := lastSync(); got != started || got > unix(time.Now().Add(-20*time.Millisecond)) {
		t.Fatalf("before the first listing: %v then %v, want the start both times", started, got)
	}
	p.Replace([]model.Service{service("a", "10.0.0.1")})
	waitSeq(t, store, 0)
	for !p.Status().Synced {
		time.Sleep(time.Millisecond)
	}
	if got := lastSync(); got < unix(time.Now().Add(-time.Second)) {
		t.Fatalf("listed and reachable: %v, want now", got)
	}
	down := time.Now()
	p.Unreachable(fmt.Errorf("connection refused"))
	time.Sleep(300 * time.Millisecond)
	p.Unreachable(fmt.Errorf("still refused"))
	if got := lastSync(); got < unix(down) || got > unix(down.Add(150*time.Millisecond)) {
		t.Fatalf("unreachable: %v, want the moment it went (%v)", got, unix(down))
	}
	p.Unreachable(nil)
	if got := lastSync(); got < unix(time.Now().Add(-time.Second)) {
		t.Fatalf("reachable again: %v, want now", got)
	}
}

// TestLargeFlushConvertsOnEveryCore sends a listing large enough for convertAll to spread its
// conversions over goroutines (run with -race): every good service is served, the bad one and
// one of a colliding pair are rejected, and a second, equal listing changes nothing.
func TestLargeFlushConvertsOnEveryCore(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, store := run(t, Config{Registerer: reg})
	var listing []model.Service
	for i := range 3 * convertParallelMin {
		listing = append(listing, service(fmt.Sprintf("svc-%04d", i), fmt.Sprintf("10.0.%d.%d", i/200, i%200+1)))
	}
	bad := service("bad", "10.1.0.1")
	bad.Ports = nil // istiod requires a port
	listing = append(listing, bad, service("Twin", "10.1.0.2"), service("twin", "10.1.0.3"))
	p.Replace(listing)
	snap := waitSeq(t, store, 0)
	col := snap.Collection(snapshot.ServiceEntry)
	if got, want := col.Len(), 3*convertParallelMin+1; got != want {
		t.Errorf("%d ServiceEntries served, want %d (every good service and one twin)", got, want)
	}
	for _, i := range []int{0, convertParallelMin, 3*convertParallelMin - 1} {
		name := fmt.Sprintf("ns/svc-%04d", i)
		if got, want := endpoints(t, snap, name), []string{fmt.Sprintf("10.0.%d.%d", i/200, i%200+1)}; !slices.Equal(got, want) {
			t.Errorf("%s serves %v, want %v", name, got, want)
		}
	}
	if got := endpoints(t, snap, "ns/bad"); got != nil {
		t.Errorf("the service without ports is served: %v", got)
	}
	if got := counterSum(t, reg, "galleon_services_rejected_total"); got != 2 {
		t.Errorf("galleon_services_rejected_total = %v, want 2 (the bad service and one twin)", got)
	}

	p.Replace(listing)
	p.Update(service("marker", "10.2.0.1"))
	next := waitSeq(t, store, snap.Seq)
	if got, want := next.Collection(snapshot.ServiceEntry).Len(), col.Len()+1; got != want {
		t.Errorf("after the same listing again and a marker: %d ServiceEntries, want %d", got, want)
	}
}

// counterSum is the sum of a counter family's values.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestFirstListingIsNotDebounced: the first full listing is served without waiting for the quiet
// period (nothing is served yet to coalesce it with); what follows it is debounced as usual.
func TestFirstListingIsNotDebounced(t *testing.T) {
	p, store := run(t, Config{Quiet: time.Hour, MaxDelay: time.Hour})
	p.Replace([]model.Service{service("a", "10.0.0.1"), service("c", "10.0.0.3")})
	snap := waitSeq(t, store, 0)
	if !snap.Ready || snap.Collection(snapshot.ServiceEntry).Len() != 2 {
		t.Fatalf("first snapshot: ready %v with %d ServiceEntries, want ready with a and c", snap.Ready, snap.Collection(snapshot.ServiceEntry).Len())
	}
	p.Update(service("b", "10.0.0.2"))
	time.Sleep(50 * time.Millisecond)
	if s := store.Current(); s.Seq != snap.Seq {
		t.Fatalf("an update after the first listing was served within 50 ms of an hour's quiet period (seq %d -> %d)", snap.Seq, s.Seq)
	}
}

// BenchmarkFirstListing is the core's part of a start: the first full listing of 10,000
// services x 10 instances converted, validated, encoded and applied to a new store. -cpu 1,2
// shows what converting on every core gives.
func BenchmarkFirstListing(b *testing.B) { benchmarkFirstListing(b, false) }

// BenchmarkFirstListingWithVIPs is the same with the allocator binaries use by default.
func BenchmarkFirstListingWithVIPs(b *testing.B) { benchmarkFirstListing(b, true) }

func benchmarkFirstListing(b *testing.B, vips bool) {
	listing := make([]model.Service, 10000)
	for i := range listing {
		ips := make([]string, 10)
		for j := range ips {
			ips[j] = fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)
		}
		listing[i] = service(fmt.Sprintf("svc-%05d", i), ips...)
	}
	b.ReportAllocs()
	for b.Loop() {
		store := snapshot.NewStore()
		cfg := Config{}
		if vips {
			ranges, _ := vip.ParsePrefixes(vip.DefaultRanges)
			exclude, _ := vip.ParsePrefixes(vip.DefaultExclude)
			a, err := vip.New(ranges, exclude)
			if err != nil {
				b.Fatal(err)
			}
			cfg.VIPs = a
		}
		p := New(store, cfg)
		services := slices.Clone(listing)
		p.Replace(services)
		p.flush()
		if n := store.Current().Collection(snapshot.ServiceEntry).Len(); n != len(listing) {
			b.Fatalf("%d ServiceEntries, want %d", n, len(listing))
		}
	}
}

// TestDNSResolutionServicesAreCounted: a service whose instances are host names is served with
// resolution DNS, which istiod answers with a full push per endpoint change: the gauge says how
// many there are, following updates and deletions.
func TestDNSResolutionServicesAreCounted(t *testing.T) {
	p, store := run(t, Config{})
	p.Replace([]model.Service{service("byname", "db-1.example.com"), service("byip", "10.0.0.1")})
	snap := waitSeq(t, store, 0)
	if got := gauge(t, p.metrics.dnsServices); got != 1 {
		t.Fatalf("galleon_dns_resolution_services = %v with one service on host names, want 1", got)
	}
	p.Update(service("byname", "10.0.0.2"))
	snap = waitSeq(t, store, snap.Seq)
	if got := gauge(t, p.metrics.dnsServices); got != 0 {
		t.Fatalf("after the instance moved to an IP: %v, want 0", got)
	}
	p.Update(service("byip", "db-2.example.com"))
	snap = waitSeq(t, store, snap.Seq)
	if got := gauge(t, p.metrics.dnsServices); got != 1 {
		t.Fatalf("after byip moved to a host name: %v, want 1", got)
	}
	p.Delete(model.ServiceKey{Namespace: "ns", Name: "byip"})
	waitSeq(t, store, snap.Seq)
	if got := gauge(t, p.metrics.dnsServices); got != 0 {
		t.Fatalf("after its deletion: %v, want 0", got)
	}
}
