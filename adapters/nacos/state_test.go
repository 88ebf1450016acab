package nacos

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// stateFixture is a services table reporting to a Recorder through a Reconciler.
type stateFixture struct {
	rec  *registrytest.Recorder
	r    *registry.Reconciler
	svcs *services
}

func newStateFixture(t *testing.T) *stateFixture {
	t.Helper()
	m, errs := (&Naming{Dubbo: true}).compile()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	rec := registrytest.NewRecorder()
	r := registry.NewReconciler(rec)
	return &stateFixture{rec: rec, r: r, svcs: newServices(r, m, slog.New(slog.DiscardHandler), newMetrics(nil), 100)}
}

// provider is a Dubbo 2 provider instance: the Dubbo name depends on the interface, group and
// version only, so the same interface in two Nacos namespaces maps to one key.
func provider(ip string) wire.Instance {
	return wire.Instance{IP: ip, Port: 20880, Weight: 1, Healthy: true, Enabled: true, Ephemeral: true, ClusterName: "DEFAULT",
		Metadata: map[string]string{"protocol": "dubbo", "interface": "org.x.Foo", "version": "1.0", "group": "g", "side": "provider", "category": "providers", "path": "org.x.Foo"}}
}

const fooService = "providers:org.x.Foo:1.0:g"

func (f *stateFixture) apply(t *testing.T, ref wire.Ref, lastRef int64, hosts ...wire.Instance) {
	t.Helper()
	f.svcs.add(ref)
	f.svcs.apply(ref, &wire.ServiceInfo{Name: ref.Service, LastRefTime: lastRef, Hosts: hosts}, false)
	f.r.Flush()
}

// served is the one service served, with its instances' addresses.
func (f *stateFixture) served(t *testing.T) (model.Service, []string) {
	t.Helper()
	state := f.rec.State()
	if len(state) != 1 {
		t.Fatalf("%d services served, want 1:\n%s", len(state), f.rec.Dump())
	}
	for _, svc := range state {
		var addrs []string
		for _, in := range svc.Instances {
			addrs = append(addrs, in.Address)
		}
		return svc, addrs
	}
	panic("unreachable")
}

// rejection is the last Rejected error of record, nil when the last one cleared it or there
// was none.
func (f *stateFixture) rejection(record string) error {
	var err error
	for _, e := range f.rec.Events() {
		if e.Op == registrytest.OpRejected && e.Record == record {
			err = e.Err
		}
	}
	return err
}

// TestCollision: two Nacos services that map to one ServiceKey: the first in (namespace,
// group, service) order is served, the other rejected as a collision under its service
// record; when the first goes, the other takes the key and its rejection is cleared.
func TestCollision(t *testing.T) {
	f := newStateFixture(t)
	a := wire.Ref{Namespace: "a", Group: DefaultGroup, Service: fooService}
	b := wire.Ref{Namespace: "b", Group: DefaultGroup, Service: fooService}
	// b is answered first; a sorts first and takes the key: the same choice every start makes.
	f.apply(t, b, 1, provider("10.0.0.2"))
	f.apply(t, a, 1, provider("10.0.0.1"))
	if _, addrs := f.served(t); len(addrs) != 1 || addrs[0] != "10.0.0.1" {
		t.Errorf("served %v, want a's instance 10.0.0.1", addrs)
	}
	err := f.rejection(serviceRecord(b))
	if registry.ReasonOf(err, "") != "collision" || !strings.Contains(err.Error(), serviceRecord(a)) {
		t.Errorf("b's record: %v, want a collision naming %s", err, serviceRecord(a))
	}
	if err := f.rejection(serviceRecord(a)); err != nil {
		t.Errorf("a's record rejected: %v", err)
	}
	// A change of b's does not reach the key.
	f.apply(t, b, 2, provider("10.0.0.2"), provider("10.0.0.3"))
	if _, addrs := f.served(t); len(addrs) != 1 {
		t.Errorf("b's change overwrote a's service: %v", addrs)
	}
	// a goes: b takes the key, its rejection cleared.
	f.svcs.remove(a)
	f.r.Flush()
	if _, addrs := f.served(t); len(addrs) != 2 {
		t.Errorf("after a was removed, served %v, want b's two instances", addrs)
	}
	if err := f.rejection(serviceRecord(b)); err != nil {
		t.Errorf("b's record still rejected after it took the key: %v", err)
	}
	// b empties: it keeps the key, with no endpoints, while it is listed; removed, the key is
	// deleted.
	f.apply(t, b, 3)
	if svc, addrs := f.served(t); len(addrs) != 0 || len(svc.Ports) == 0 {
		t.Errorf("after the last instance left, served %v with ports %v, want no endpoints and the last ports", addrs, svc.Ports)
	}
	f.svcs.remove(b)
	f.r.Flush()
	if n := len(f.rec.State()); n != 0 {
		t.Errorf("%d services served after the last service was removed, want 0", n)
	}
	if err := f.rec.Check(); err != nil {
		t.Error(err)
	}
}

// TestStalePushIgnored: a state older (lastRefTime) than the one applied is not applied; the
// first answer of a new session is, whatever its time.
func TestStalePushIgnored(t *testing.T) {
	f := newStateFixture(t)
	ref := wire.Ref{Group: DefaultGroup, Service: "orders"}
	in := func(ip string) wire.Instance {
		return wire.Instance{IP: ip, Port: 8080, Weight: 1, Healthy: true, Enabled: true, ClusterName: "DEFAULT"}
	}
	f.apply(t, ref, 200, in("10.0.0.1"), in("10.0.0.2"))
	f.apply(t, ref, 100, in("10.0.0.1"))
	if _, addrs := f.served(t); len(addrs) != 2 {
		t.Errorf("an older state was applied: %v", addrs)
	}
	f.svcs.resetAnswers()
	f.apply(t, ref, 100, in("10.0.0.1"))
	if _, addrs := f.served(t); len(addrs) != 1 {
		t.Errorf("a new session's first answer was not applied: %v", addrs)
	}
}

// TestInstanceLimit: a service over --nacos-max-instances keeps its last state, rejected.
func TestInstanceLimit(t *testing.T) {
	f := newStateFixture(t)
	f.svcs.maxInstances = 2
	ref := wire.Ref{Group: DefaultGroup, Service: "orders"}
	in := func(i int) wire.Instance {
		return wire.Instance{IP: fmt.Sprintf("10.0.0.%d", i), Port: 8080, Weight: 1, Healthy: true, Enabled: true}
	}
	f.apply(t, ref, 1, in(1))
	f.apply(t, ref, 2, in(1), in(2), in(3))
	if _, addrs := f.served(t); len(addrs) != 1 {
		t.Errorf("served %v, want the last state (one instance)", addrs)
	}
	if err := f.rejection(serviceRecord(ref)); registry.ReasonOf(err, "") != "limit" || !strings.Contains(err.Error(), "--nacos-max-instances") {
		t.Errorf("rejection %v, want a limit naming --nacos-max-instances", err)
	}
	f.apply(t, ref, 3, in(1), in(2))
	if err := f.rejection(serviceRecord(ref)); err != nil {
		t.Errorf("rejection not cleared once under the limit: %v", err)
	}
}

// TestInboxCoalesces: pushes for one service are held as one, the newest by lastRefTime;
// over the bound, pushes are dropped and overflow is said.
func TestInboxCoalesces(t *testing.T) {
	b := newInbox(2)
	a, c, d := wire.Ref{Service: "a"}, wire.Ref{Service: "c"}, wire.Ref{Service: "d"}
	b.put(a, &wire.ServiceInfo{LastRefTime: 1})
	b.put(a, &wire.ServiceInfo{LastRefTime: 3})
	b.put(a, &wire.ServiceInfo{LastRefTime: 2}) // late: dropped
	b.put(c, &wire.ServiceInfo{LastRefTime: 1})
	select {
	case <-b.signal:
	default:
		t.Fatal("no signal after a push")
	}
	got, overflow := b.take()
	if len(got) != 2 || got[a].LastRefTime != 3 || overflow {
		t.Errorf("take: %v overflow %v, want a at 3 and c, no overflow", got, overflow)
	}
	b.put(a, &wire.ServiceInfo{})
	b.put(c, &wire.ServiceInfo{})
	b.put(d, &wire.ServiceInfo{})
	got, overflow = b.take()
	if len(got) != 2 || !overflow {
		t.Errorf("take: %d pending, overflow %v; want 2 and an overflow", len(got), overflow)
	}
	if got, overflow := b.take(); got != nil || overflow {
		t.Errorf("take after take: %v %v, want nothing", got, overflow)
	}
}

// TestSuspiciousListingHeld: a listing that would remove every service, or most, is held once
// and applied when the next says the same; one that lists them again clears it.
func TestSuspiciousListingHeld(t *testing.T) {
	r, err := New(Config{Servers: []string{"127.0.0.1:8848"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w := newWatcher(r, registrytest.NewRecorder())
	d := w.disc
	lk := listingKey{"", DefaultGroup}
	if got := d.accept(w, lk, []string{"a", "b", "c"}); len(got) != 3 {
		t.Fatalf("first listing: %v", got)
	}
	if got := d.accept(w, lk, nil); len(got) != 3 {
		t.Errorf("an empty listing was applied at once: %v", got)
	}
	if got := d.accept(w, lk, []string{"a", "b", "c", "d"}); len(got) != 4 {
		t.Errorf("a listing with the services again: %v", got)
	}
	d.accept(w, lk, []string{"a"})
	if got := d.accept(w, lk, []string{"a"}); len(got) != 1 {
		t.Errorf("a confirmed removal of most services was not applied: %v", got)
	}
	if got := d.accept(w, lk, []string{"a", "b"}); len(got) != 2 {
		t.Errorf("an addition: %v", got)
	}
}

func TestPolarisName(t *testing.T) {
	for name, want := range map[string]string{
		"billing__invoices":  "billing/invoices",
		"invoices":           "",
		"__invoices":         "",
		"billing__":          "",
		"a__b__c":            "",
		"DEFAULT_GROUP__svc": "",
	} {
		g, s, ok := polarisName(name)
		got := ""
		if ok {
			got = g + "/" + s
		}
		if got != want {
			t.Errorf("polarisName(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestPollEvery: the HTTP API's poll follows cacheMillis within bounds (Polaris's 1 s would be
// a request per service per second).
func TestPollEvery(t *testing.T) {
	for _, tt := range []struct {
		udp   int
		cache int64
		lo    time.Duration
	}{
		{0, 1000, pollFloor},
		{0, 30000, 30 * time.Second},
		{0, 3600000, pollCeiling},
		{-1, 1000, time.Second},
	} {
		w := &watcher{r: &Registry{cfg: Config{UDPPort: tt.udp}}}
		got := w.pollEvery(&wire.ServiceInfo{CacheMillis: tt.cache})
		if got < tt.lo || got > tt.lo+tt.lo/5 {
			t.Errorf("udp %d cacheMillis %d: poll every %v, want %v to %v", tt.udp, tt.cache, got, tt.lo, tt.lo+tt.lo/5)
		}
	}
}

func TestRateLimit(t *testing.T) {
	l := rateLimit{every: time.Minute, burst: 2}
	now := time.Now()
	for i, want := range []bool{true, true, false, false} {
		if ok, _ := l.allow(now); ok != want {
			t.Errorf("event %d: allowed %v, want %v", i, ok, want)
		}
	}
	ok, dropped := l.allow(now.Add(time.Minute))
	if !ok || dropped != 2 {
		t.Errorf("after a minute: allowed %v, %d dropped told; want true, 2", ok, dropped)
	}
}

// TestServerBackoff: a failing server is probed with a back-off doubling from minProbe to
// maxProbe (with up to a fifth of jitter), reset when it answers; it is reported Degraded
// while it is not the one in use, and back with the next Flush.
func TestServerBackoff(t *testing.T) {
	r, err := New(Config{Servers: []string{"a:8848", "b:8848"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rec := registrytest.NewRecorder()
	w := newWatcher(r, rec)
	want := minProbe
	for range 10 {
		before := time.Now()
		w.serverDown(1, fmt.Errorf("refused"))
		s := w.servers[1]
		if s.backoff != want || s.next.Before(before.Add(want)) || s.next.After(time.Now().Add(want+want/5)) {
			t.Fatalf("back-off %v, next in %v; want %v plus up to a fifth", s.backoff, time.Until(s.next), want)
		}
		want = min(2*want, maxProbe)
	}
	w.reportDown()
	w.rec.Flush()
	w.serverUp(1)
	if s := w.servers[1]; s.down || s.backoff != 0 {
		t.Errorf("after an answer: down %v back-off %v, want up and reset", s.down, s.backoff)
	}
	w.rec.Flush()
	var parts []string
	for _, e := range rec.Events() {
		if e.Op == registrytest.OpDegraded {
			parts = append(parts, fmt.Sprintf("%s:%v", e.Record, e.Err != nil))
		}
	}
	if strings.Join(parts, ",") != "b:8848:true,b:8848:false" {
		t.Errorf("Degraded reports %v, want b:8848 down then back", parts)
	}
}

// TestEmptyServiceKept: the last instance leaving keeps the ServiceEntry as served last (key,
// hosts, ports) with no endpoints, while the service is listed; instances coming back fill it
// again; removed from its listing, it goes. A service never served with an instance is not
// served empty (no port is known), and one whose every instance is rejected is served as one
// without instances.
func TestEmptyServiceKept(t *testing.T) {
	m, errs := (&Naming{NamespaceMetaKey: "istio-namespace"}).compile()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	rec := registrytest.NewRecorder()
	r := registry.NewReconciler(rec)
	f := &stateFixture{rec: rec, r: r, svcs: newServices(r, m, slog.New(slog.DiscardHandler), newMetrics(nil), 100)}
	ref := wire.Ref{Group: DefaultGroup, Service: "orders"}
	in := func(ip string) wire.Instance {
		// The instance's metadata picks the Istio namespace: with none left, the mapping would
		// fall back to the default one, another key.
		return wire.Instance{IP: ip, Port: 8080, Weight: 1, Healthy: true, Enabled: true, ClusterName: "DEFAULT",
			Metadata: map[string]string{"istio-namespace": "shop"}}
	}
	f.apply(t, ref, 1, in("10.0.0.1"))
	first, _ := f.served(t)
	if first.Namespace != "shop" {
		t.Fatalf("served in namespace %q, want shop (the instance's metadata)", first.Namespace)
	}
	f.apply(t, ref, 2)
	svc, addrs := f.served(t)
	if len(addrs) != 0 || svc.Key() != first.Key() || !slices.Equal(svc.Hosts, first.Hosts) || !slices.Equal(svc.Ports, first.Ports) {
		t.Errorf("after the last instance left: %s hosts %v ports %v endpoints %v; want %s hosts %v ports %v and no endpoints",
			svc.Key(), svc.Hosts, svc.Ports, addrs, first.Key(), first.Hosts, first.Ports)
	}
	// An instance on port 0 is rejected: the service is served without instances, as if it
	// had none, its instance's record rejected.
	bad := in("10.0.0.9")
	bad.Port = 0
	f.apply(t, ref, 3, bad)
	if svc, addrs := f.served(t); len(addrs) != 0 || svc.Key() != first.Key() || !slices.Equal(svc.Ports, first.Ports) {
		t.Errorf("with every instance rejected: %s ports %v endpoints %v, want %s with its ports and no endpoints", svc.Key(), svc.Ports, addrs, first.Key())
	}
	if err := f.rejection(instanceRecord(ref, bad)); err == nil {
		t.Errorf("the instance on port 0 was not rejected")
	}
	f.apply(t, ref, 4, in("10.0.0.2"))
	if _, addrs := f.served(t); !slices.Equal(addrs, []string{"10.0.0.2"}) {
		t.Errorf("an instance back: endpoints %v, want 10.0.0.2", addrs)
	}
	f.apply(t, ref, 5)
	f.svcs.remove(ref)
	f.r.Flush()
	if n := len(f.rec.State()); n != 0 {
		t.Errorf("%d services served after the service left its listing, want 0", n)
	}
	// Never served with an instance: nothing to serve, no port to give it.
	never := wire.Ref{Group: DefaultGroup, Service: "never"}
	f.apply(t, never, 1)
	f.apply(t, never, 2, bad)
	if n := len(f.rec.State()); n != 0 {
		t.Errorf("a service never seen with an instance is served: %s", f.rec.Dump())
	}
	if err := f.rec.Check(); err != nil {
		t.Error(err)
	}
}

// TestRefreshLostPush: a refresh that finds the state held changes nothing; one that finds
// another state applies it at once, and counts it as a lost push when no push brings it (or a
// newer one) within pushGrace; a push that does, even one applied as stale, was only late.
func TestRefreshLostPush(t *testing.T) {
	f := newStateFixture(t)
	ref := wire.Ref{Group: "PAY", Service: "payments"}
	in := func(ip string) wire.Instance {
		return wire.Instance{IP: ip, Port: 8080, Weight: 1, Healthy: true, Enabled: true, ClusterName: "DEFAULT", Metadata: map[string]string{"a": "1", "b": "2"}}
	}
	info := func(at int64, ips ...string) *wire.ServiceInfo {
		si := &wire.ServiceInfo{Name: ref.Service, LastRefTime: at}
		for _, ip := range ips {
			si.Hosts = append(si.Hosts, in(ip))
		}
		return si
	}
	lost := func() float64 {
		var m dto.Metric
		if err := f.svcs.metrics.refreshChanges.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	f.apply(t, ref, 100, in("10.0.0.1"))
	now := time.Now()

	// The same state (another lastRefTime: Polaris gives each answer its own time; the
	// instances in another order): nothing.
	two := info(200, "10.0.0.1", "10.0.0.2")
	f.svcs.apply(ref, two, false)
	f.r.Flush()
	events := len(f.rec.Events())
	f.svcs.refreshed(ref, info(300, "10.0.0.2", "10.0.0.1"), now)
	f.r.Flush()
	if n := len(f.rec.Events()); n != events {
		t.Errorf("a refresh finding the state held reported %d events", n-events)
	}
	if e := f.svcs.entries[ref]; !e.unpushed.IsZero() {
		t.Error("a refresh finding the state held counts as a change")
	}

	// Another state: served at once; a lost push once pushGrace passed with no push.
	f.svcs.refreshed(ref, info(400, "10.0.0.1", "10.0.0.2", "10.0.0.3"), now)
	f.r.Flush()
	if _, addrs := f.served(t); len(addrs) != 3 {
		t.Errorf("the refresh's state was not served: %v", addrs)
	}
	f.svcs.lost(now.Add(pushGrace / 2))
	if got := lost(); got != 0 {
		t.Errorf("counted %v lost pushes within the grace, want 0", got)
	}
	f.svcs.lost(now.Add(pushGrace))
	if got := lost(); got != 1 {
		t.Errorf("counted %v lost pushes after the grace, want 1", got)
	}
	f.svcs.lost(now.Add(2 * pushGrace))
	if got := lost(); got != 1 {
		t.Errorf("a lost push counted twice: %v", got)
	}

	// Another state, and its push delivered after the refresh (older lastRefTime, so not
	// applied): late, not lost.
	f.svcs.refreshed(ref, info(600, "10.0.0.1"), now)
	f.svcs.apply(ref, info(550, "10.0.0.1"), true)
	f.svcs.lost(now.Add(pushGrace))
	if got := lost(); got != 1 {
		t.Errorf("a late push counted as lost: %v lost pushes, want 1", got)
	}
	// Another, and a push of a newer state within the grace: the pushes work.
	f.svcs.refreshed(ref, info(700, "10.0.0.4"), now)
	f.svcs.apply(ref, info(800, "10.0.0.5"), true)
	f.svcs.lost(now.Add(pushGrace))
	if got := lost(); got != 1 {
		t.Errorf("a change followed by a push counted as lost: %v lost pushes, want 1", got)
	}
	// A metadata value changed is a change.
	changed := info(900, "10.0.0.5")
	changed.Hosts[0].Metadata = map[string]string{"a": "2", "b": "1"}
	f.svcs.refreshed(ref, changed, now)
	if e := f.svcs.entries[ref]; e.unpushed.IsZero() {
		t.Error("metadata swapped between keys is not seen as a change")
	}
}

// TestRefreshLostPushEach: two states found by refreshes in a row, no push in between: two
// lost pushes, the first counted when the second is found.
func TestRefreshLostPushEach(t *testing.T) {
	f := newStateFixture(t)
	ref := wire.Ref{Group: "PAY", Service: "payments"}
	in := func(ip string) wire.Instance {
		return wire.Instance{IP: ip, Port: 8080, Weight: 1, Healthy: true, Enabled: true}
	}
	lost := func() float64 {
		var m dto.Metric
		if err := f.svcs.metrics.refreshChanges.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	f.apply(t, ref, 1, in("10.0.0.1"))
	now := time.Now()
	f.svcs.refreshed(ref, &wire.ServiceInfo{LastRefTime: 2, Hosts: []wire.Instance{in("10.0.0.1"), in("10.0.0.2")}}, now)
	f.svcs.refreshed(ref, &wire.ServiceInfo{LastRefTime: 3, Hosts: []wire.Instance{in("10.0.0.1")}}, now.Add(time.Second))
	if got := lost(); got != 1 {
		t.Errorf("%v lost pushes when the second state was found, want 1", got)
	}
	f.svcs.lost(now.Add(time.Second + pushGrace))
	if got := lost(); got != 2 {
		t.Errorf("%v lost pushes after the grace, want 2", got)
	}
}
