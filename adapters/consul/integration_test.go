package consul_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/adapters/consul"
	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/internal/testing/procstat"
	"github.com/galleon-mesh/galleon/internal/testing/testpki"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

const waitFor = 20 * time.Second

// running is one Run of the adapter, recorded.
type running struct {
	rec     *registrytest.Recorder
	metrics *prometheus.Registry
	cancel  context.CancelFunc
	done    chan error
}

// run starts the adapter with cfg and stops it when the test ends.
func run(t *testing.T, cfg consul.Config) *running {
	t.Helper()
	r := &running{rec: registrytest.NewRecorder(), metrics: prometheus.NewRegistry(), done: make(chan error, 1)}
	cfg.Registerer = r.metrics
	reg, err := consul.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- reg.Run(ctx, r.rec) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancellation")
		}
		if err := r.rec.Check(); err != nil {
			t.Errorf("Sink calls break the contract: %v\n%s", err, r.rec.Dump())
		}
	})
	return r
}

// requests sums galleon_consul_requests_total.
func (r *running) requests(t *testing.T) float64 {
	t.Helper()
	mfs, err := r.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "galleon_consul_requests_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// caused is requests without the blocking queries that ran out their wait
// with nothing changed: those answer the passing of time, not a change
// (with --consul-service-watches, one per service every --consul-wait).
func (r *running) caused(t *testing.T) float64 {
	t.Helper()
	return r.requests(t) - r.counter(t, "galleon_consul_blocking_wakeups_total", "outcome", "unchanged")
}

// resyncs reads galleon_consul_resyncs_total for one reason.
func resyncs(t *testing.T, r *running, reason string) float64 {
	t.Helper()
	mfs, err := r.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "galleon_consul_resyncs_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// waitService waits until the service is reported and cond holds for it.
func (r *running) waitService(t *testing.T, name, what string, cond func(model.Service) bool) model.Service {
	t.Helper()
	key := model.ServiceKey{Namespace: consul.DefaultNamespace, Name: name}
	var got model.Service
	r.rec.WaitFor(t, waitFor, func(state map[model.ServiceKey]model.Service) bool {
		svc, ok := state[key]
		if ok && cond(svc) {
			got = svc
			return true
		}
		return false
	})
	if t.Failed() {
		t.Fatalf("waiting for %s", what)
	}
	return got
}

func (r *running) waitGone(t *testing.T, name string) {
	t.Helper()
	key := model.ServiceKey{Namespace: consul.DefaultNamespace, Name: name}
	r.rec.WaitFor(t, waitFor, func(state map[model.ServiceKey]model.Service) bool {
		_, ok := state[key]
		return !ok
	})
}

func register(t *testing.T, a *consultest.Agent, instances ...consultest.Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := consultest.Register(ctx, a, instances); err != nil {
		t.Fatal(err)
	}
}

func deregister(t *testing.T, a *consultest.Agent, node, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Do(ctx, "PUT", "/v1/catalog/deregister", map[string]any{"Node": node, "ServiceID": id}, nil); err != nil {
		t.Fatal(err)
	}
}

func instance(svc model.Service, suffix string) (model.Instance, bool) {
	for _, inst := range svc.Instances {
		if strings.HasSuffix(inst.ID, "/"+suffix) {
			return inst, true
		}
	}
	return model.Instance{}, false
}

func healthOf(svc model.Service, suffix string) model.Health {
	inst, ok := instance(svc, suffix)
	if !ok {
		return -1
	}
	return inst.Health
}

// TestChanges follows every kind of change to one service, each through
// the path the adapter learns it by.
func TestChanges(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	web := func(id, check string, port int, tags []string, meta map[string]string) consultest.Instance {
		return consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: id, Service: "web", Port: port,
			Tags: tags, Meta: meta, Check: check}
	}
	register(t, a, web("web-1", "passing", 8080, []string{"v1"}, nil), web("web-2", "passing", 8080, []string{"v1"}, nil))
	r := run(t, testConfig(a))
	r.waitService(t, "web", "the initial listing", func(s model.Service) bool { return len(s.Instances) == 2 })

	t.Run("register a checked instance", func(t *testing.T) {
		register(t, a, web("web-3", "passing", 8080, []string{"v1"}, nil))
		r.waitService(t, "web", "web-3", func(s model.Service) bool { return len(s.Instances) == 3 })
	})
	t.Run("register a check-less instance (no signal names it: found by a sweep)", func(t *testing.T) {
		register(t, a, web("web-4", "", 8080, []string{"v1"}, nil))
		r.waitService(t, "web", "web-4", func(s model.Service) bool { return len(s.Instances) == 4 })
	})
	t.Run("tag change", func(t *testing.T) {
		register(t, a, web("web-1", "passing", 8080, []string{"v1", "version=v2"}, nil))
		r.waitService(t, "web", "the tag", func(s model.Service) bool {
			i, _ := instance(s, "web-1")
			return i.Labels["version"] == "v2"
		})
	})
	t.Run("meta change", func(t *testing.T) {
		register(t, a, web("web-2", "passing", 8080, []string{"v1"}, map[string]string{"protocol": "http", "owner": "team-a"}))
		r.waitService(t, "web", "the meta", func(s model.Service) bool {
			i, _ := instance(s, "web-2")
			return i.Labels["owner"] == "team-a"
		})
	})
	t.Run("port change", func(t *testing.T) {
		register(t, a, web("web-4", "", 9090, []string{"v1"}, nil))
		r.waitService(t, "web", "port 9090", func(s model.Service) bool { return hasPort(s, 9090) })
	})
	t.Run("health flip critical and back", func(t *testing.T) {
		register(t, a, web("web-3", "critical", 8080, []string{"v1"}, nil))
		r.waitService(t, "web", "web-3 unhealthy", func(s model.Service) bool { return healthOf(s, "web-3") == model.Unhealthy })
		register(t, a, web("web-3", "passing", 8080, []string{"v1"}, nil))
		r.waitService(t, "web", "web-3 healthy again", func(s model.Service) bool { return healthOf(s, "web-3") == model.Healthy })
	})
	t.Run("every instance failing: no endpoint served", func(t *testing.T) {
		deregister(t, a, "n1", "web-4")
		var all []consultest.Instance
		for _, id := range []string{"web-1", "web-2", "web-3"} {
			all = append(all, web(id, "critical", 8080, []string{"v1"}, nil))
		}
		register(t, a, all...)
		svc := r.waitService(t, "web", "every instance unhealthy", func(s model.Service) bool {
			for _, i := range s.Instances {
				if i.Health != model.Unhealthy {
					return false
				}
			}
			return len(s.Instances) == 3
		})
		res, err := convert.Convert(svc, convert.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if se := res[0].Spec.(*networking.ServiceEntry); len(se.Endpoints) != 0 {
			t.Errorf("endpoints served while every instance fails: %v", se.Endpoints)
		}
	})
	t.Run("deregister an instance, then the service", func(t *testing.T) {
		deregister(t, a, "n1", "web-3")
		r.waitService(t, "web", "two instances left", func(s model.Service) bool { return len(s.Instances) == 2 })
		deregister(t, a, "n1", "web-1")
		deregister(t, a, "n1", "web-2")
		r.waitGone(t, "web")
	})
}

// TestNodeCheck follows node-level checks (no service: serfHealth, or one
// registered on the node), which make every instance on their node
// unhealthy, and checks deleted while failing.
func TestNodeCheck(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a,
		consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: "web-1", Service: "web", Port: 80, Check: "passing"},
		consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: "api-1", Service: "api", Port: 80},
		consultest.Instance{Node: "n2", NodeAddress: "10.0.0.2", ID: "web-2", Service: "web", Port: 80, Check: "passing"},
		consultest.Instance{Node: "n2", NodeAddress: "10.0.0.2", ID: "db-1", Service: "db", Port: 5432, Check: "passing"})
	r := run(t, testConfig(a))
	r.waitService(t, "web", "the initial listing", func(s model.Service) bool { return len(s.Instances) == 2 })
	nodeCheck := func(status string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Do(ctx, "PUT", "/v1/catalog/register", map[string]any{"Node": "n1", "Address": "10.0.0.1",
			"Check": map[string]any{"CheckID": "node-disk", "Name": "disk", "Status": status}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	deleteCheck := func(node, id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Do(ctx, "PUT", "/v1/catalog/deregister", map[string]any{"Node": node, "CheckID": id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	onN1 := func(want model.Health) {
		t.Helper()
		r.waitService(t, "web", fmt.Sprintf("web-1 health %d", want), func(s model.Service) bool {
			return healthOf(s, "web-1") == want && healthOf(s, "web-2") == model.Healthy
		})
		r.waitService(t, "api", fmt.Sprintf("api-1 health %d", want), func(s model.Service) bool { return healthOf(s, "api-1") == want })
	}

	nodeCheck("passing") // a new passing check on the node changes nothing served
	nodeCheck("critical")
	onN1(model.Unhealthy)
	if got := healthOf(r.rec.State()[model.ServiceKey{Namespace: consul.DefaultNamespace, Name: "db"}], "db-1"); got != model.Healthy {
		t.Errorf("db-1 on the other node: %v, want healthy", got)
	}
	nodeCheck("passing")
	onN1(model.Healthy)
	nodeCheck("critical")
	onN1(model.Unhealthy)
	deleteCheck("n1", "node-disk") // deleted while failing: out of the failing set
	onN1(model.Healthy)

	// A service check deleted while failing (the instance stays).
	register(t, a, consultest.Instance{Node: "n2", NodeAddress: "10.0.0.2", ID: "db-1", Service: "db", Port: 5432, Check: "critical"})
	r.waitService(t, "db", "db-1 unhealthy", func(s model.Service) bool { return healthOf(s, "db-1") == model.Unhealthy })
	deleteCheck("n2", "service:db-1")
	r.waitService(t, "db", "db-1 healthy without its check", func(s model.Service) bool { return healthOf(s, "db-1") == model.Healthy })
}

// TestRequestsPerChange registers 300 services and counts the HTTP
// requests one instance change costs: a few, whatever the number of
// services (one signal wakes, one service is fetched, the signal is armed
// again). A change no signal attributes costs a sweep: one probe per
// service, still a single connection at a time per worker.
func TestRequestsPerChange(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	const n = 300
	var all []consultest.Instance
	for i := range n {
		all = append(all, consultest.Instance{Node: fmt.Sprintf("node-%d", i%10), NodeAddress: fmt.Sprintf("10.0.%d.1", i%10),
			ID: fmt.Sprintf("svc-%d-1", i), Service: fmt.Sprintf("svc-%d", i), Port: 8080, Check: "passing"})
	}
	register(t, a, all...)
	cfg := testConfig(a)
	cfg.SweepInterval = time.Second
	r := run(t, cfg)
	r.rec.WaitFor(t, waitFor, func(state map[model.ServiceKey]model.Service) bool { return len(state) >= n })
	if t.Failed() {
		t.FailNow()
	}
	settle := func() { time.Sleep(1500 * time.Millisecond) }
	settle()

	checksBytes := func() float64 { return r.counter(t, "galleon_consul_response_bytes_total", "endpoint", "health_state") }
	full := checksBytes() // the first listing: every check
	for i, status := range []string{"critical", "passing"} {
		before, beforeBytes := r.requests(t), checksBytes()
		flipped := all[123]
		flipped.Check = status
		register(t, a, flipped)
		want := model.Unhealthy
		if status == "passing" {
			want = model.Healthy
		}
		r.waitService(t, "svc-123", "the health flip", func(s model.Service) bool { return s.Instances[0].Health == want })
		settle()
		flip, read := r.requests(t)-before, checksBytes()-beforeBytes
		t.Logf("health flip #%d with %d services: %v HTTP requests, %.0f bytes of checks read (the full listing: %.0f)", i+1, n, flip, read, full)
		if flip > 4 {
			t.Errorf("one health flip cost %v requests; want at most 4 (signal, fetch, and re-armed signals)", flip)
		}
		// Only the failing checks are listed, whatever the number of
		// passing ones.
		if read > full/10 {
			t.Errorf("one health flip read %.0f bytes of checks; want a fraction of the %.0f of every check", read, full)
		}
	}

	before := r.requests(t)
	added := all[7]
	added.ID = "svc-7-2"
	register(t, a, added)
	r.waitService(t, "svc-7", "the new checked instance", func(s model.Service) bool { return len(s.Instances) == 2 })
	settle()
	reg := r.requests(t) - before
	t.Logf("HTTP requests for a checked instance registered next to another with %d services: %v (sweeps: %v)", n, reg, r.counter(t, "galleon_consul_sweeps_total"))
	if reg > 6 {
		t.Errorf("registering a checked instance cost %v requests; want at most 6 (the catalog and checks signals, the checks index, one full checks listing, a fetch), not a sweep", reg)
	}
	before = r.requests(t)
	deregister(t, a, added.Node, added.ID)
	r.waitService(t, "svc-7", "the checked instance deregistered", func(s model.Service) bool { return len(s.Instances) == 1 })
	settle()
	dereg := r.requests(t) - before
	t.Logf("HTTP requests for a checked instance deregistered with %d services: %v (sweeps: %v)", n, dereg, r.counter(t, "galleon_consul_sweeps_total"))
	if dereg > 6 {
		t.Errorf("deregistering a checked instance cost %v requests; want at most 6, not a sweep", dereg)
	}

	before = r.requests(t)
	moved := all[42]
	moved.Meta = map[string]string{"owner": "team-b"}
	register(t, a, moved)
	r.waitService(t, "svc-42", "the meta edit", func(s model.Service) bool { return s.Instances[0].Labels["owner"] == "team-b" })
	settle()
	meta := r.requests(t) - before
	t.Logf("HTTP requests for one meta edit (no signal attributes it: a sweep) with %d services: %v", n, meta)
	if meta > n+6 {
		t.Errorf("one unattributed edit cost %v requests; want at most one probe per service plus a few", meta)
	}
}

// TestTwoDatacenters merges a service present in two datacenters joined
// over WAN into one, with the datacenter as locality, and follows "all".
func TestTwoDatacenters(t *testing.T) {
	dc1 := consultest.Start(t, consultest.Options{Datacenter: "dc1"})
	dc2 := consultest.Start(t, consultest.Options{Datacenter: "dc2", JoinWAN: dc1})
	register(t, dc1, consultest.Instance{Node: "a1", NodeAddress: "10.1.0.1", ID: "api-1", Service: "api", Port: 80, Check: "passing"})
	register(t, dc2, consultest.Instance{Node: "b1", NodeAddress: "10.2.0.1", ID: "api-1", Service: "api", Port: 80, Check: "passing"},
		consultest.Instance{Node: "b1", NodeAddress: "10.2.0.1", ID: "db-1", Service: "db", Port: 5432})

	for _, dcs := range [][]string{{"dc1", "dc2"}, {consul.AllDatacenters}} {
		t.Run(strings.Join(dcs, ","), func(t *testing.T) {
			cfg := testConfig(dc1)
			cfg.Datacenters = dcs
			r := run(t, cfg)
			r.waitService(t, "api", "api merged from both datacenters", func(s model.Service) bool {
				a, ok1 := instance(s, "a1/api-1")
				b, ok2 := instance(s, "b1/api-1")
				return ok1 && ok2 && a.Locality == "dc1" && b.Locality == "dc2" && a.Address == "10.1.0.1" && b.Address == "10.2.0.1"
			})
			r.waitService(t, "db", "db from dc2", func(s model.Service) bool { return len(s.Instances) == 1 })
			// A change in the remote datacenter is followed too.
			register(t, dc2, consultest.Instance{Node: "b1", NodeAddress: "10.2.0.1", ID: "api-1", Service: "api", Port: 80, Check: "critical"})
			r.waitService(t, "api", "the dc2 health flip", func(s model.Service) bool {
				b, _ := instance(s, "b1/api-1")
				return b.Health == model.Unhealthy
			})
			register(t, dc2, consultest.Instance{Node: "b1", NodeAddress: "10.2.0.1", ID: "api-1", Service: "api", Port: 80, Check: "passing"})
		})
	}
}

// TestACL reads an ACL-enabled agent with a token, reports a wrong token
// as a clear error, and picks up a token file once it holds a good one.
func TestACL(t *testing.T) {
	a := consultest.Start(t, consultest.Options{ACL: true})
	register(t, a, consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: "pay-1", Service: "pay", Port: 443, Check: "passing"})

	t.Run("good token", func(t *testing.T) {
		r := run(t, testConfig(a))
		r.waitService(t, "pay", "pay", func(s model.Service) bool { return len(s.Instances) == 1 })
	})
	t.Run("wrong token, then the token file is fixed", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(file, []byte("00000000-0000-0000-0000-000000000000\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(a)
		cfg.Token, cfg.TokenFile = "", file
		r := run(t, cfg)
		r.rec.WaitForEvents(t, waitFor, func(events []registrytest.Event) bool {
			for _, e := range events {
				if e.Op == registrytest.OpUnreachable && e.Err != nil {
					return true
				}
			}
			return false
		})
		err := r.rec.UnreachableError()
		if err == nil || !strings.Contains(err.Error(), "ACL token") {
			t.Fatalf("Unreachable(%v): want an error that says to check the ACL token", err)
		}
		t.Logf("a wrong token reads: %v", err)
		if r.rec.Synced() {
			t.Fatal("a Replace without access to the catalog")
		}
		if err := os.WriteFile(file, []byte(a.Token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r.waitService(t, "pay", "pay once the token file is fixed", func(s model.Service) bool { return len(s.Instances) == 1 })
	})
}

// TestAgentRestart stops the agent under a running adapter: nothing is
// removed while it is down, Unreachable says so, and once it is back the
// adapter converges, including changes made while it was away.
func TestAgentRestart(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a, consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: "web-1", Service: "web", Port: 80, Check: "passing"})
	r := run(t, testConfig(a))
	r.waitService(t, "web", "web", func(s model.Service) bool { return len(s.Instances) == 1 })
	mark := r.rec.Len()
	a.Stop(t)
	r.rec.WaitForEvents(t, waitFor, func(events []registrytest.Event) bool { return lastUnreachable(events[mark:]) != nil })
	time.Sleep(time.Second) // several failed retries
	a.Restart(t)
	register(t, a, consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: "web-2", Service: "web", Port: 80, Check: "passing"})
	r.waitService(t, "web", "web-2, registered after the restart", func(s model.Service) bool { return len(s.Instances) == 2 })
	r.rec.WaitForEvents(t, waitFor, func(events []registrytest.Event) bool { return lastUnreachable(events[mark:]) == errReachable })
	for i, e := range r.rec.Events()[mark:] {
		if e.Op == registrytest.OpDelete || (e.Op == registrytest.OpReplace && len(e.Services) == 0) {
			t.Errorf("call #%d %s during or after the outage", mark+i, e)
		}
	}
}

// TestIndexReset wipes the agent's data: its indexes start again below
// the adapter's, which must list everything again and report a Replace
// that drops what is gone.
func TestIndexReset(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	// One transaction each: the index climbs well above where the wiped
	// agent will start again.
	for i := range 20 {
		register(t, a, consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: fmt.Sprintf("old-%d", i), Service: fmt.Sprintf("old-%d", i), Port: 80})
	}
	cfg := testConfig(a)
	cfg.Wait = 2 * time.Second // a query at an index above the server's waits this long
	r := run(t, cfg)
	r.waitService(t, "old-19", "the old services", func(model.Service) bool { return true })
	replaces := countOps(r.rec, registrytest.OpReplace)

	a.Stop(t)
	entries, err := os.ReadDir(a.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(a.DataDir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	a.Restart(t)
	register(t, a, consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: "new-1", Service: "new", Port: 80})
	r.waitService(t, "new", "the service registered after the reset", func(model.Service) bool { return true })
	r.waitGone(t, "old-0")
	if countOps(r.rec, registrytest.OpReplace) <= replaces {
		t.Errorf("no Replace after the index went backwards:\n%s", r.rec.Dump())
	}
	// Which path resynchronised depends on timing: a query in flight while
	// the agent is down fails, and the relisting after the outage starts
	// from index 0 (reason outage); a query sent after the restart sees the
	// index go backwards (reason index_reset). Either is right; the state
	// checks above are what matter. TestSnapshotRestore sees the index go
	// backwards with no outage.
	if n := resyncs(t, r, "index_reset") + resyncs(t, r, "outage"); n < 1 {
		t.Errorf("galleon_consul_resyncs_total{reason=index_reset|outage} = %v, want at least 1", n)
	}
}

// TestSnapshotRestore restores an older Consul snapshot while the adapter
// watches: the catalog goes back, and its index with it, with no outage.
// The adapter must notice the index going backwards and resynchronise:
// services registered after the snapshot go away.
func TestSnapshotRestore(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a, consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: "keep-1", Service: "keep", Port: 80})
	snap := snapshotBytes(t, a, http.MethodGet, nil)
	for i := range 20 {
		register(t, a, consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: fmt.Sprintf("later-%d", i), Service: fmt.Sprintf("later-%d", i), Port: 80})
	}
	cfg := testConfig(a)
	cfg.Wait = 2 * time.Second
	r := run(t, cfg)
	r.waitService(t, "later-19", "the services registered after the snapshot", func(model.Service) bool { return true })

	snapshotBytes(t, a, http.MethodPut, snap)
	r.waitGone(t, "later-0")
	r.waitGone(t, "later-19")
	r.waitService(t, "keep", "the service in the snapshot", func(model.Service) bool { return true })
	if n := resyncs(t, r, "index_reset"); n < 1 {
		t.Errorf("galleon_consul_resyncs_total{reason=index_reset} = %v, want at least 1:\n%s", n, r.rec.Dump())
	}
}

// snapshotBytes saves (GET) or restores (PUT body) a Consul snapshot.
func snapshotBytes(t *testing.T, a *consultest.Agent, method string, body []byte) []byte {
	t.Helper()
	req, err := http.NewRequest(method, a.URL()+"/v1/snapshot", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if a.Token != "" {
		req.Header.Set("X-Consul-Token", a.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /v1/snapshot: %d %v %s", method, resp.StatusCode, err, out)
	}
	return out
}

// errReachable stands for Unreachable(nil) in lastUnreachable's answer.
var errReachable = errors.New("reachable")

// lastUnreachable returns the error of the last Unreachable call among
// events, errReachable for Unreachable(nil), or nil if there is none.
func lastUnreachable(events []registrytest.Event) error {
	for i := len(events) - 1; i >= 0; i-- {
		if e := events[i]; e.Op == registrytest.OpUnreachable {
			if e.Err == nil {
				return errReachable
			}
			return e.Err
		}
	}
	return nil
}

func countOps(rec *registrytest.Recorder, op registrytest.Op) int {
	n := 0
	for _, e := range rec.Events() {
		if e.Op == op {
			n++
		}
	}
	return n
}

// TestScale is the scale check, run on demand
// (GALLEON_CONSUL_SCALE=10000): N services x 5 instances with a check each
// against an agent with default limits. It logs the initial sync (time
// from Run to the listing served, and requests) and, for each kind of
// change, the median over a few repetitions of: the time from the Consul
// write returning to the sink receiving the report, the HTTP requests,
// and the bytes received (on the wire, and decoded). With
// GALLEON_CONSUL_BINARY=<path to galleon-consul> it also runs that binary
// against the loaded agent and logs its resident memory.
func TestScale(t *testing.T) {
	n := 0
	if _, err := fmt.Sscan(os.Getenv("GALLEON_CONSUL_SCALE"), &n); err != nil || n <= 0 {
		t.Skip("set GALLEON_CONSUL_SCALE=<services> to run")
	}
	// GALLEON_CONSUL_SCALE_WATCHES=1: every service watched on its own
	// (--consul-service-watches), over HTTP/2 on the agent's HTTPS listener.
	watches := os.Getenv("GALLEON_CONSUL_SCALE_WATCHES") == "1"
	opts := consultest.Options{}
	var pki testpki.Files
	if watches {
		var err error
		if pki, err = testpki.Write(t.TempDir(), "galleon"); err != nil {
			t.Fatal(err)
		}
		opts.HTTPSCert, opts.HTTPSKey = pki.ServerCert, pki.ServerKey
	}
	a := consultest.Start(t, opts)
	var all []consultest.Instance
	for i := range n {
		for j := range 5 {
			node := (i*5 + j) % 2000
			all = append(all, consultest.Instance{Node: fmt.Sprintf("node-%d", node), NodeAddress: fmt.Sprintf("10.%d.%d.1", node/250, node%250),
				ID: fmt.Sprintf("svc-%d-%d", i, j), Service: fmt.Sprintf("svc-%d", i), Port: 8080, Check: "passing"})
		}
	}
	start := time.Now()
	register(t, a, all...)
	t.Logf("registered %d instances in %v", len(all), time.Since(start).Round(time.Millisecond))
	cfg := testConfig(a)
	if watches {
		cfg = watchConfig(a, pki.CA, consul.MaxServiceWatches)
	}
	cfg.Wait = time.Minute
	start = time.Now()
	r := run(t, cfg)
	r.rec.WaitFor(t, 5*time.Minute, func(state map[model.ServiceKey]model.Service) bool { return len(state) >= n })
	syncs := []float64{float64(time.Since(start).Milliseconds())}
	t.Logf("initial sync of %d services: %v, %v requests, %.1f MB received (%.1f MB decoded)", n, time.Since(start).Round(time.Millisecond),
		r.requests(t), r.counter(t, "galleon_consul_received_bytes_total")/1e6, r.counter(t, "galleon_consul_response_bytes_total")/1e6)
	r.settle(t)
	for range 2 {
		start := time.Now()
		again := run(t, cfg)
		again.rec.WaitFor(t, 5*time.Minute, func(state map[model.ServiceKey]model.Service) bool { return len(state) >= n })
		syncs = append(syncs, float64(time.Since(start).Milliseconds()))
		again.cancel()
		again.settle(t)
	}
	t.Logf("initial sync (median of %d Runs): %.0f ms; %v ms", len(syncs), median(syncs), syncs)

	// What the checks queries cost the agent and the client, directly
	// (Go's client asks for gzip, as the adapter's does).
	for _, q := range []string{"?filter=" + url.QueryEscape(`Status != "passing"`), ""} {
		var took []float64
		size := 0
		for range 5 {
			start := time.Now()
			resp, err := http.Get(a.URL() + "/v1/health/state/any" + q)
			if err != nil {
				t.Fatal(err)
			}
			var checks []map[string]any
			err = json.NewDecoder(resp.Body).Decode(&checks)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			took = append(took, float64(time.Since(start).Microseconds())/1000)
			size = len(checks)
		}
		t.Logf("GET /v1/health/state/any%s: %d checks, %.0f ms to read and decode (median of 5; %v)", q, size, median(took), took)
	}

	// measure runs change(i) reps times; each is served once cond(i)
	// holds for the service it names.
	measure := func(what string, reps int, change func(i int) (svc string, cond func(model.Service) bool)) {
		t.Helper()
		var lat, reqs, wire, body []float64
		for i := range reps {
			r0, w0, b0 := r.caused(t), r.counter(t, "galleon_consul_received_bytes_total"), r.counter(t, "galleon_consul_response_bytes_total")
			svc, cond := change(i) // returns once the write returned
			start := time.Now()
			r.waitService(t, svc, what, cond)
			lat = append(lat, float64(time.Since(start).Microseconds())/1000)
			r.settle(t)
			reqs = append(reqs, r.caused(t)-r0)
			wire = append(wire, r.counter(t, "galleon_consul_received_bytes_total")-w0)
			body = append(body, r.counter(t, "galleon_consul_response_bytes_total")-b0)
		}
		t.Logf("%s (median of %d): served %.0f ms after the write, %v requests, %.1f KB received (%.1f KB decoded); latencies %v ms, requests %v",
			what, reps, median(lat), median(reqs), median(wire)/1e3, median(body)/1e3, lat, reqs)
	}
	flipped := all[5*(n/2)]
	measure("health flip", 6, func(i int) (string, func(model.Service) bool) {
		want := model.Unhealthy
		flipped.Check = "critical"
		if i%2 == 1 {
			flipped.Check, want = "passing", model.Healthy
		}
		register(t, a, flipped)
		return flipped.Service, func(s model.Service) bool { return healthOf(s, flipped.ID) == want }
	})
	added := func(i int) consultest.Instance {
		in := all[5*(n/4+i)]
		in.ID = fmt.Sprintf("%s-new", in.Service)
		return in
	}
	measure("checked instance registered", 3, func(i int) (string, func(model.Service) bool) {
		in := added(i)
		register(t, a, in)
		return in.Service, func(s model.Service) bool { return len(s.Instances) == 6 }
	})
	measure("checked instance deregistered", 3, func(i int) (string, func(model.Service) bool) {
		in := added(i)
		deregister(t, a, in.Node, in.ID)
		return in.Service, func(s model.Service) bool { return len(s.Instances) == 5 }
	})
	measure("meta edit (a sweep, or the service's watch)", 3, func(i int) (string, func(model.Service) bool) {
		in := all[5*(n/3+i)]
		in.Meta = map[string]string{"owner": "team-b"}
		register(t, a, in)
		return in.Service, func(s model.Service) bool {
			inst, _ := instance(s, in.ID)
			return inst.Labels["owner"] == "team-b"
		}
	})

	if bin := os.Getenv("GALLEON_CONSUL_BINARY"); bin != "" {
		var flags []string
		if watches {
			flags = []string{"--consul-address", "https://" + a.HTTPSAddr, "--consul-tls-ca", pki.CA, "--consul-tls-server-name", "localhost",
				"--consul-service-watches", fmt.Sprint(consul.MaxServiceWatches)}
		}
		scaleRSS(t, bin, a, n, flags...)
	}
}

// settle waits until no request has been made for a second (a sweep, the
// re-armed signals) but blocking queries that ran out their wait, at most
// 60 s.
func (r *running) settle(t *testing.T) {
	t.Helper()
	r.settleFor(t, time.Second)
}

// settleFor is settle with quiet instead of a second.
func (r *running) settleFor(t *testing.T, quiet time.Duration) {
	t.Helper()
	last := r.caused(t)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		time.Sleep(quiet)
		now := r.caused(t)
		if now == last {
			return
		}
		last = now
	}
}

// counter sums a counter (or a gauge) over its labels, or with label and
// value only where that label has that value.
func (r *running) counter(t *testing.T, name string, labelValue ...string) float64 {
	t.Helper()
	mfs, err := r.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(labelValue) == 2 {
				for _, l := range m.GetLabel() {
					if l.GetName() == labelValue[0] && l.GetValue() != labelValue[1] {
						continue metrics
					}
				}
			}
			n += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return n
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// scaleRSS runs galleon-consul against the loaded agent until it serves
// n services, and logs its resident memory then and after a minute idle,
// with the CPU time and connections of that minute. flags
// name the agent (default: its HTTP listener).
func scaleRSS(t *testing.T, bin string, a *consultest.Agent, n int, flags ...string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if len(flags) == 0 {
		flags = []string{"--consul-address", a.HTTPAddr}
	}
	cmd := exec.CommandContext(ctx, bin, append(flags, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:16914")...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		resp, err := http.Get("http://127.0.0.1:16914/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("galleon-consul not ready after 5 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	status := func() string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmRSS") || strings.HasPrefix(l, "VmHWM") {
				out = append(out, strings.Join(strings.Fields(l), " "))
			}
		}
		return strings.Join(out, ", ")
	}
	t.Logf("galleon-consul ready with %d services after %v: %s", n, time.Since(start).Round(time.Millisecond), status())
	cpu0 := cpuSeconds(t, cmd.Process.Pid)
	time.Sleep(time.Minute)
	t.Logf("galleon-consul after a minute idle: %s; %.2f s of CPU in that minute; %s", status(), cpuSeconds(t, cmd.Process.Pid)-cpu0,
		metricLine(t, "http://127.0.0.1:16914/metrics", "galleon_consul_connections"))
}

// cpuSeconds reads the user and system CPU time of a process.
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	st, err := procstat.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.CPU().Seconds()
}

// metricLine returns the line of one metric from a /metrics page.
func metricLine(t *testing.T, url, name string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	return name + " not found"
}
