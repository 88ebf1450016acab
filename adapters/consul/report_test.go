package consul

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// testWatch is a watch of datacenters listed already, with no loop and no
// workers: a test calls the loop's handlers itself, in the loop's order
// (an event, then flush), and reads what the Sink was told. A relisting
// starts the signals' goroutines, on a client of a closed port: their
// answers (failures) are never applied, and they stop with the test.
type testWatch struct {
	t   *testing.T
	w   *watch
	rec *registrytest.Recorder
}

func newTestWatch(t *testing.T, cfg Config, dcs ...string) *testWatch {
	t.Helper()
	cfg.Address = "127.0.0.1:1"
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	mp, err := newMapper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics(nil)
	c, err := newClient(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec := registrytest.NewRecorder()
	w := &watch{
		cfg: cfg, log: slog.New(slog.DiscardHandler), m: m, mapper: mp, c: c, ctx: ctx,
		report:   registry.NewReconciler(rec),
		events:   make(chan event, 16),
		dcsSet:   true,
		dcs:      map[string]*dcWatch{},
		pending:  map[jobKey]bool{},
		inflight: map[jobKey]bool{},
		again:    map[jobKey]bool{},
		byKey:    map[model.ServiceKey]map[partRef]bool{},
		collided: map[partRef]collision{},
	}
	for _, name := range dcs {
		dctx, dcancel := context.WithCancel(ctx)
		w.dcs[name] = &dcWatch{name: name, ctx: dctx, cancel: dcancel, svcs: map[string]*dcService{}, failing: map[string]error{},
			names: map[string][]string{}, awaiting: map[string]bool{}, unexplained: map[uint64]bool{},
			catalogSeen: true, checksSeen: true, listed: true, answered: true}
	}
	t.Cleanup(func() {
		cancel()
		w.wg.Wait()
		c.close()
		if err := rec.Check(); err != nil {
			t.Errorf("Sink calls break the contract: %v\n%s", err, rec.Dump())
		}
	})
	return &testWatch{t: t, w: w, rec: rec}
}

func (tw *testWatch) at(dc string) dcGen { return dcGen{dc, tw.w.dcs[dc].gen} }

// fetched applies a fetch of a service listed in the catalog.
func (tw *testWatch) fetched(dc, name string, entries ...*api.ServiceEntry) {
	d := tw.w.dcs[dc]
	d.names[name] = nil
	var index uint64 = 1
	if s := d.svcs[name]; s != nil {
		index = s.index + 1
	}
	tw.w.onFetch(fetchEvent{dcGen: tw.at(dc), name: name, final: true, index: index, entries: entries})
	tw.w.flush()
}

// removed applies a catalog listing without the service.
func (tw *testWatch) removed(dc, name string) {
	d := tw.w.dcs[dc]
	names := map[string][]string{}
	for n, tags := range d.names {
		if n != name {
			names[n] = tags
		}
	}
	tw.w.onCatalog(catalogEvent{signalAnswer: signalAnswer{dcGen: tw.at(dc), index: d.catalogIndex + 1}, names: names})
	tw.w.flush()
}

// catalogFails applies a failed catalog query.
func (tw *testWatch) catalogFails(dc string, err error) {
	tw.w.onCatalog(catalogEvent{signalAnswer: signalAnswer{dcGen: tw.at(dc), err: err}})
	tw.w.flush()
}

// relisted applies the answers of a datacenter back from an outage: the
// catalog answers again (which lists it again: that answer is the old
// generation's, not applied), then the new generation's catalog, checks and
// fetches.
func (tw *testWatch) relisted(dc string, services map[string][]*api.ServiceEntry) {
	names := map[string][]string{}
	for name := range services {
		names[name] = nil
	}
	gen := tw.w.dcs[dc].gen
	tw.w.onCatalog(catalogEvent{signalAnswer: signalAnswer{dcGen: tw.at(dc), index: 100}, names: names})
	tw.w.flush()
	if tw.w.dcs[dc].gen == gen {
		tw.t.Fatalf("%s answering again was not listed again", dc)
	}
	if tw.w.dcs[dc].catalogSeen {
		tw.t.Fatalf("%s: the old generation's answer that ended the outage was applied to the new one", dc)
	}
	tw.w.onCatalog(catalogEvent{signalAnswer: signalAnswer{dcGen: tw.at(dc), index: 100}, names: names})
	tw.w.flush()
	tw.w.onChecks(checksEvent{signalAnswer: signalAnswer{dcGen: tw.at(dc), index: 100}, state: api.HealthAny})
	tw.w.flush()
	for name, entries := range services {
		tw.w.onFetch(fetchEvent{dcGen: tw.at(dc), name: name, final: true, index: 100, entries: entries})
		tw.w.flush()
	}
}

// told returns the Sink calls since mark, described, and the new mark.
func (tw *testWatch) told(mark int) ([]string, int) {
	events := tw.rec.Events()
	var out []string
	for _, e := range events[mark:] {
		out = append(out, e.String())
	}
	return out, len(events)
}

func (tw *testWatch) expect(mark int, what string, want ...string) int {
	tw.t.Helper()
	got, next := tw.told(mark)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		tw.t.Fatalf("%s: the Sink was told\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	return next
}

// TestReportsOnlyChanges: the first consistent view is a Replace, a
// service fetched again unchanged is not reported, a change is an Update,
// and a service gone from the catalog a Delete.
func TestReportsOnlyChanges(t *testing.T) {
	tw := newTestWatch(t, Config{}, "dc1")
	mark := 0
	tw.fetched("dc1", "web", entry("n1", "10.0.0.1", "web-1", 80))
	mark = tw.expect(mark, "the first fetch", "Replace(1 services: consul/web)")
	tw.fetched("dc1", "web", entry("n1", "10.0.0.1", "web-1", 80))
	mark = tw.expect(mark, "the same instances fetched again")
	tw.fetched("dc1", "web", entry("n1", "10.0.0.1", "web-1", 8080))
	mark = tw.expect(mark, "a port change", "Update(consul/web)")
	tw.removed("dc1", "web")
	tw.expect(mark, "the service gone from the catalog", "Delete(consul/web)")
}

// TestNameCollisionRejections follows a Consul service whose name
// sanitises to the key of one with a smaller name: it is rejected while it
// collides, and the rejection it shares a record with (the mapping's
// rejection of the service as a whole) is not lost when the collision
// ends.
func TestNameCollisionRejections(t *testing.T) {
	// Fails to execute for a service in Consul namespace "broken": the
	// mapping rejects the service as a whole, under the record name a
	// collision uses.
	tw := newTestWatch(t, Config{HostTemplate: `{{if eq .Namespace "broken"}}{{slice .Service 0 99}}{{else}}{{.Service}}.service.consul{{end}}`}, "dc1")
	broken := func(e *api.ServiceEntry) { e.Service.Namespace = "broken" }
	const loser = `"consul service dc1/web_"`
	taken := fmt.Sprintf(`Rejected(%s, its ServiceEntry consul/web is taken by consul service "web" (names sanitise to the same))`, loser)
	mark := 0

	tw.fetched("dc1", "web", entry("n1", "10.0.0.1", "web-1", 80))
	mark = tw.expect(mark, "web", "Replace(1 services: consul/web)")
	tw.fetched("dc1", "web_", entry("n1", "10.0.0.2", "web-2", 80))
	mark = tw.expect(mark, "web_, whose name sanitises to web's", taken)
	tw.fetched("dc1", "web_", entry("n1", "10.0.0.2", "web-2", 80, broken))
	got, next := tw.told(mark)
	if len(got) != 1 || !strings.HasPrefix(got[0], "Rejected("+loser+", --consul-host-template: ") {
		t.Fatalf("web_ rejected as a whole by the mapping: the Sink was told %q, want its Rejected", got)
	}
	mark = next
	tw.fetched("dc1", "web_", entry("n1", "10.0.0.2", "web-2", 80, broken))
	mark = tw.expect(mark, "web_ fetched again, still rejected by the mapping (told once)")
	tw.removed("dc1", "web")
	mark = tw.expect(mark, "web gone", "Delete(consul/web)")
	tw.fetched("dc1", "web_", entry("n1", "10.0.0.2", "web-2", 80))
	mark = tw.expect(mark, "web_ fixed: it serves consul/web now", "Rejected("+loser+", <nil>)", "Update(consul/web)")
	tw.fetched("dc1", "web", entry("n1", "10.0.0.1", "web-1", 80))
	tw.expect(mark, "web back: it wins again, and web_ is rejected again", taken, "Update(consul/web)")
}

// TestFailedFetchIsAnOutage: with one datacenter, a failed per-service
// request is reported at once; nothing is reported while it fails (the
// reconciler would take the next report as the end of the outage); once
// requests succeed again the state is reported with a Replace, then
// Unreachable(nil).
func TestFailedFetchIsAnOutage(t *testing.T) {
	tw := newTestWatch(t, Config{}, "dc1")
	mark := 0
	tw.fetched("dc1", "web", entry("n1", "10.0.0.1", "web-1", 80))
	tw.fetched("dc1", "api", entry("n1", "10.0.0.1", "api-1", 80))
	mark = tw.expect(mark, "the listing", "Replace(1 services: consul/web)", "Update(consul/api)")

	tw.w.onFetch(fetchEvent{dcGen: tw.at("dc1"), name: "web", err: errors.New("connection refused")})
	tw.w.flush()
	mark = tw.expect(mark, "a failed fetch", "Unreachable(connection refused)")
	// A change to another service, fetched meanwhile, waits.
	tw.w.handleFetch(tw.w.dcs["dc1"], fetchEvent{dcGen: tw.at("dc1"), name: "api", final: true, index: 10,
		entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "api-1", 8080)}})
	tw.w.flush()
	mark = tw.expect(mark, "a change while a fetch fails")
	tw.fetched("dc1", "web", entry("n1", "10.0.0.1", "web-1", 80))
	tw.expect(mark, "the fetch retried with success", "Replace(2 services: consul/api, consul/web)", "Unreachable(<nil>)")
}

// TestOutageEndsWithRelisting: a failed signal is an outage; once the
// datacenter answers again it is listed again, and only then is the state
// reported, with a Replace that has what changed meanwhile, then
// Unreachable(nil).
func TestOutageEndsWithRelisting(t *testing.T) {
	tw := newTestWatch(t, Config{}, "dc1")
	mark := 0
	tw.fetched("dc1", "web", entry("n1", "10.0.0.1", "web-1", 80))
	tw.fetched("dc1", "api", entry("n1", "10.0.0.1", "api-1", 80))
	mark = tw.expect(mark, "the listing", "Replace(1 services: consul/web)", "Update(consul/api)")

	tw.catalogFails("dc1", errors.New("connection refused"))
	mark = tw.expect(mark, "the catalog query failing", "Unreachable(connection refused)")
	tw.relisted("dc1", map[string][]*api.ServiceEntry{"web": {entry("n1", "10.0.0.1", "web-1", 8080)}})
	tw.expect(mark, "the relisting: web changed, api gone", "Replace(1 services: consul/web)", "Unreachable(<nil>)")
}

// TestDatacenterDegraded: with two datacenters, one whose requests fail
// while the other answers is degraded: the other's changes go on being
// reported, and once it is listed again what changed is reported, then
// Degraded(dc, nil). When both fail, the registry is unreachable.
func TestDatacenterDegraded(t *testing.T) {
	tw := newTestWatch(t, Config{}, "dc1", "dc2")
	mark := 0
	e2 := func(id string, port int) *api.ServiceEntry {
		e := entry("m1", "10.2.0.1", id, port)
		e.Node.Datacenter = "dc2"
		return e
	}
	tw.fetched("dc1", "web", entry("n1", "10.1.0.1", "web-1", 80))
	tw.fetched("dc2", "web", e2("web-1", 80))
	tw.fetched("dc2", "db", e2("db-1", 5432))
	mark = tw.expect(mark, "the listing", "Replace(1 services: consul/web)", "Update(consul/web)", "Update(consul/db)")

	tw.catalogFails("dc2", errors.New("No path to datacenter"))
	mark = tw.expect(mark, "dc2 failing", `Degraded("dc2", No path to datacenter)`)
	tw.fetched("dc1", "web", entry("n1", "10.1.0.1", "web-1", 8080))
	mark = tw.expect(mark, "a change in dc1 while dc2 is down", "Update(consul/web)")
	tw.relisted("dc2", map[string][]*api.ServiceEntry{"web": {e2("web-1", 80)}})
	mark = tw.expect(mark, "dc2 listed again: db gone", "Delete(consul/db)", `Degraded("dc2", <nil>)`)

	tw.catalogFails("dc2", errors.New("No path to datacenter"))
	tw.catalogFails("dc1", errors.New("connection refused"))
	mark = tw.expect(mark, "dc2 failing, then dc1", `Degraded("dc2", No path to datacenter)`, "Unreachable(connection refused)")
	tw.relisted("dc1", map[string][]*api.ServiceEntry{"web": {entry("n1", "10.1.0.1", "web-1", 8080)}})
	mark = tw.expect(mark, "dc1 listed again, dc2 still down", "Replace(1 services: consul/web)", "Unreachable(<nil>)")
	tw.relisted("dc2", map[string][]*api.ServiceEntry{"web": {e2("web-1", 80)}, "db": {e2("db-1", 5432)}})
	tw.expect(mark, "dc2 listed again: db back", "Update(consul/db)", `Degraded("dc2", <nil>)`)
}
