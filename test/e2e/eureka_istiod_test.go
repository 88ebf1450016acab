package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
	"github.com/galleon-mesh/galleon/test/istiod"
)

// The Eureka application of TestEurekaToIstiod and what galleon-eureka makes of it (the
// defaults: --namespace default, --eureka-host-template {{.Name}}.eureka).
const (
	ordersApp  = "orders"
	ordersPort = 8080
	ordersKey  = "default/orders"
	ordersHost = "orders.eureka"
	// ordersRenewEvery is how often the test renews its instances: Polaris drops an instance
	// nobody renews about 90-100 s after it registered.
	ordersRenewEvery = 10 * time.Second
	// payments is a second application on the same port, one instance, there throughout.
	paymentsKey  = "default/payments"
	paymentsHost = "payments.eureka"
	paymentsIP   = "10.61.0.1"
)

// ordersInstance is instance i of orders: id orders-<i>, at 10.60.0.<i>:8080, UP.
func ordersInstance(i int) eurekatest.Instance {
	return eurekatest.Instance{App: ordersApp, ID: fmt.Sprintf("orders-%d", i), IPAddr: fmt.Sprintf("10.60.0.%d", i), Port: ordersPort}
}

// eurekaReplicas stands for a Eureka cluster: Polaris servers do not replicate to each other, so
// every change is made in each live server, as a Eureka cluster's peer replication would. It
// renews what it registered in every live server until stopped.
type eurekaReplicas struct {
	mu         sync.Mutex
	live       []*eurekatest.Server
	registered map[*eurekatest.Server][]eurekatest.Instance
}

// inEach runs f (a change) on each of servers in order; it fails the test with what and the
// server's URL on the first error.
func inEach(t *testing.T, what string, servers []*eurekatest.Server, f func(*eurekatest.Server) error) {
	t.Helper()
	for _, s := range servers {
		if err := f(s); err != nil {
			t.Fatalf("%s in %s: %v", what, s.BaseURL(), err)
		}
	}
}

// register registers in in each of servers and renews it there from then on.
func (r *eurekaReplicas) register(t *testing.T, ctx context.Context, in eurekatest.Instance, servers ...*eurekatest.Server) {
	t.Helper()
	inEach(t, "registering "+in.ID, servers, func(s *eurekatest.Server) error {
		if err := s.Register(ctx, in); err != nil {
			return err
		}
		r.mu.Lock()
		r.registered[s] = append(r.registered[s], in)
		r.mu.Unlock()
		return nil
	})
}

// all is every live server.
func (r *eurekaReplicas) all() []*eurekatest.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.live)
}

// kill crashes s (SIGKILL) and stops renewing there.
func (r *eurekaReplicas) kill(t *testing.T, s *eurekatest.Server) {
	t.Helper()
	r.mu.Lock()
	r.live = slices.DeleteFunc(r.live, func(l *eurekatest.Server) bool { return l == s })
	r.mu.Unlock()
	s.Kill(t)
}

// renew renews every registered instance in every live server every interval until the test
// ends (stopped in t.Cleanup).
func (r *eurekaReplicas) renew(t *testing.T, interval time.Duration) {
	eurekatest.Every(t, interval, func(ctx context.Context) {
		r.mu.Lock()
		todo := map[*eurekatest.Server][]eurekatest.Instance{}
		for _, s := range r.live {
			todo[s] = slices.Clone(r.registered[s])
		}
		r.mu.Unlock()
		for s, ins := range todo {
			for _, in := range ins {
				// Polaris answers 200 for an unknown instance too: an error is the server
				// failing (or being killed meanwhile, which kill tells apart).
				if err := s.Renew(ctx, in.App, in.ID); err != nil && ctx.Err() == nil && slices.Contains(r.all(), s) {
					t.Logf("renewing %s in %s: %v", in.ID, s.BaseURL(), err)
				}
			}
		}
	})
}

// upIDs is the ids of app's UP instances in a listing, sorted.
func upIDs(a *eurekatest.Applications, app string) []string {
	var ids []string
	for _, ap := range a.Application {
		if !strings.EqualFold(ap.Name, app) {
			continue
		}
		for _, in := range ap.Instance {
			if in.Status == "UP" {
				ids = append(ids, in.InstanceID)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// metricLines are the series of name, one "labels value" string each, for logs and messages.
func metricLines(fams map[string]*dto.MetricFamily, name string) []string {
	var out []string
	for _, m := range fams[name].GetMetric() {
		var ls []string
		for _, lp := range m.GetLabel() {
			ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
		}
		out = append(out, fmt.Sprintf("{%s} %v", strings.Join(ls, ","), m.GetCounter().GetValue()+m.GetGauge().GetValue()))
	}
	slices.Sort(out)
	return out
}

// TestEurekaToIstiod runs two real Eureka API servers (polaris-server, see
// adapters/eureka/eurekatest) holding the same registry, as the peers of a Eureka cluster do,
// galleon-eureka reading them (--eureka-urls A,B) and a real istiod reading galleon-eureka over
// MCP. An instance taken OUT_OF_SERVICE and put back must be EDS-only updates in istiod. When
// server A, the one galleon-eureka reads, crashes, galleon-eureka must go on with B without istiod
// ever losing the service or one of its endpoints, and an instance registered only in B must
// reach istiod. Throughout, a sidecar's view of istiod (test/sidecar) must resolve orders and a
// second application on the same port to addresses of their own (allocated, docs/vips.md),
// which they keep, and route an HTTP request to each to its own cluster and instances.
func TestEurekaToIstiod(t *testing.T) { istiod.ForEachRelease(t, testEurekaToIstiod) }

func testEurekaToIstiod(t *testing.T, rel istiod.Release) {
	bin := galleonBinary(t, "galleon-eureka")
	srvA := eurekatest.Start(t, eurekatest.Options{})
	srvB := eurekatest.Start(t, eurekatest.Options{})
	// Cleanups run last-registered first, so this one runs after galleon-eureka and istiod have
	// stopped: a crash ends the servers at once where SIGTERM takes 5-15 s each, and their
	// directories go with the test.
	t.Cleanup(func() { srvB.Kill(t); srvA.Kill(t) })
	reps := &eurekaReplicas{live: []*eurekatest.Server{srvA, srvB}, registered: map[*eurekatest.Server][]eurekatest.Instance{}}
	reps.renew(t, ordersRenewEvery)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// 1. orders with three instances, in both servers.
	for i := 1; i <= 3; i++ {
		reps.register(t, ctx, ordersInstance(i), srvA, srvB)
	}
	reps.register(t, ctx, eurekatest.Instance{App: "payments", ID: "payments-1", IPAddr: paymentsIP, Port: ordersPort}, srvA, srvB)
	// listed waits until every live server lists exactly the UP instances ids of orders.
	listed := func(what string, ids ...string) {
		t.Helper()
		for _, s := range reps.all() {
			if _, err := s.WaitApps(ctx, "/apps", func(a *eurekatest.Applications) bool { return slices.Equal(upIDs(a, ordersApp), ids) }); err != nil {
				t.Fatalf("%s: %s does not list UP instances %v of %s: %v", what, s.BaseURL(), ids, ordersApp, err)
			}
		}
	}
	listed("registered", "orders-1", "orders-2", "orders-3")

	// 2. galleon-eureka on A then B, and istiod.
	g := startGalleon(t, bin, "--eureka-urls", srvA.BaseURL()+","+srvB.BaseURL(), "--eureka-poll-interval", "500ms", "--debounce-quiet", "20ms")
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: []string{g.Addr}})

	// shapeOf checks what must not change while instances come and go: host, port, resolution.
	shapeOf := func(se serviceEntry) string {
		if !slices.Equal(se.Spec.Hosts, []string{ordersHost}) {
			return fmt.Sprintf("hosts %v, want [%s]", se.Spec.Hosts, ordersHost)
		}
		if len(se.Spec.Ports) != 1 || se.Spec.Ports[0].Number != ordersPort || se.Spec.Ports[0].Protocol != "HTTP" {
			return fmt.Sprintf("ports %+v, want one: %d HTTP", se.Spec.Ports, ordersPort)
		}
		if se.Spec.Resolution != "STATIC" {
			return fmt.Sprintf("resolution %q, want STATIC", se.Spec.Resolution)
		}
		return ""
	}
	holds := func(want ...string) func(map[string]serviceEntry) string {
		return func(ses map[string]serviceEntry) string {
			if m := endpointsAre(ordersKey, want...)(ses); m != "" {
				return m
			}
			if m := shapeOf(ses[ordersKey]); m != "" {
				return ordersKey + ": " + m
			}
			if m := endpointsAre(paymentsKey, paymentsIP)(ses); m != "" {
				return m
			}
			if len(ses) != 2 {
				keys := make([]string, 0, len(ses))
				for k := range ses {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				return fmt.Sprintf("istiod holds ServiceEntries %v, want %s and %s alone", keys, ordersKey, paymentsKey)
			}
			return ""
		}
	}
	waitForServiceEntries(t, ctx, ist, "initial state", holds("10.60.0.1", "10.60.0.2", "10.60.0.3"))
	counters, err := ist.WaitPushed(ctx, istiod.PushCounters{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after initial sync: %+v", counters)

	// A sidecar's view: orders and payments, both HTTP on 8080, each on an address of its own
	// that it keeps (checkRoutes, with orders' current instances).
	paymentsRoute := meshRoute{host: paymentsHost, port: ordersPort, http: true, endpoints: portEndpoints(ordersPort, paymentsIP)}
	_, addrs := expectRoutes(t, ctx, ist, "initial state", []meshRoute{
		{host: ordersHost, port: ordersPort, http: true, endpoints: portEndpoints(ordersPort, "10.60.0.1", "10.60.0.2", "10.60.0.3")}, paymentsRoute})
	checkRoutes := func(what string, ips ...string) {
		t.Helper()
		expectRoutes(t, ctx, ist, what, withAddresses([]meshRoute{
			{host: ordersHost, port: ordersPort, http: true, endpoints: portEndpoints(ordersPort, ips...)}, paymentsRoute}, addrs))
	}

	// change makes a change, waits until istiod's ServiceEntries satisfy ok and istiod has
	// pushed, and returns the full pushes it caused.
	change := func(what string, do func(), ok func(map[string]serviceEntry) string) float64 {
		t.Helper()
		before := counters
		do()
		waitForServiceEntries(t, ctx, ist, what, ok)
		after, err := ist.WaitPushed(ctx, before)
		if err != nil {
			t.Fatalf("%s: istiod did not push: %v", what, err)
		}
		counters = after
		t.Logf("%s: full pushes +%v, EDS updates +%v", what, after.FullPushes-before.FullPushes, after.EDSUpdates-before.EDSUpdates)
		return after.FullPushes - before.FullPushes
	}

	// 3. An operator takes orders-2 out of service (a status override, in both servers) and
	// puts it back: endpoints only, no full push.
	if full := change("orders-2 OUT_OF_SERVICE", func() {
		inEach(t, "OUT_OF_SERVICE for orders-2", reps.all(), func(s *eurekatest.Server) error {
			return s.SetStatus(ctx, ordersApp, "orders-2", "OUT_OF_SERVICE")
		})
	}, holds("10.60.0.1", "10.60.0.3")); full != 0 {
		t.Errorf("an instance going OUT_OF_SERVICE caused %v full pushes in istiod, want 0 (EDS only)", full)
	}
	checkRoutes("orders-2 OUT_OF_SERVICE", "10.60.0.1", "10.60.0.3")
	if full := change("orders-2 override removed (UP)", func() {
		inEach(t, "removing orders-2's override", reps.all(), func(s *eurekatest.Server) error {
			return s.ClearStatus(ctx, ordersApp, "orders-2")
		})
	}, holds("10.60.0.1", "10.60.0.2", "10.60.0.3")); full != 0 {
		t.Errorf("an instance coming back UP caused %v full pushes in istiod, want 0 (EDS only)", full)
	}
	// Both servers list the same again before A goes: what B serves after the failover is
	// what A served.
	listed("override removed", "orders-1", "orders-2", "orders-3")

	fams, _, err := scrapeMetrics(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if up, ok := metricSum(fams, "galleon_eureka_server_up", map[string]string{"server": srvA.BaseURL()}); !ok || up != 1 {
		t.Errorf("before the crash: galleon_eureka_server_up{server=%q} is %v (exported: %v), want 1; series: %v",
			srvA.BaseURL(), up, ok, metricLines(fams, "galleon_eureka_server_up"))
	}
	okB0, _ := metricSum(fams, "galleon_eureka_requests_total", map[string]string{"server": srvB.BaseURL(), "result": "ok"})

	// 4. A crashes; an instance then registers in B alone. galleon-eureka must move to B: istiod
	// gets orders-4 and, from the crash on, never holds less than orders-1..3.
	before := counters
	reps.kill(t, srvA)
	crashed := time.Now()
	reps.register(t, ctx, ordersInstance(4), srvB)
	want := []string{"10.60.0.1", "10.60.0.2", "10.60.0.3", "10.60.0.4"}
	var seen []string // the distinct endpoint lists istiod held, in order
	looks := 0
	deadline := crashed.Add(time.Minute)
	for {
		ses, err := serviceEntries(ctx, ist)
		if err != nil {
			t.Fatalf("after A crashed, look %d: reading istiod: %v", looks+1, err)
		}
		looks++
		se, ok := ses[ordersKey]
		if !ok {
			t.Fatalf("after A crashed, look %d: istiod lost %s (holds %d ServiceEntries; endpoint lists seen: %v)", looks, ordersKey, len(ses), seen)
		}
		eps := se.endpoints()
		if s := fmt.Sprint(eps); len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		for _, e := range want[:3] {
			if !slices.Contains(eps, e) {
				t.Fatalf("after A crashed, look %d: istiod's endpoints of %s are %v: %s left (endpoint lists seen: %v)", looks, ordersKey, eps, e, seen)
			}
		}
		if m := shapeOf(se); m != "" {
			t.Fatalf("after A crashed, look %d: %s: %s", looks, ordersKey, m)
		}
		if slices.Equal(eps, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("istiod did not hold %v for %s within a minute of A's crash (endpoint lists seen: %v; galleon-eureka's log:\n%s)", want, ordersKey, seen, g.Tail(30))
		}
		time.Sleep(25 * time.Millisecond)
	}
	after, err := ist.WaitPushed(ctx, before)
	if err != nil {
		t.Fatalf("failover: istiod did not push: %v", err)
	}
	counters = after
	t.Logf("A crashed, orders-4 registered in B: istiod held %v %v after the crash, in %d looks (endpoint lists seen: %v); full pushes +%v, EDS updates +%v",
		want, time.Since(crashed).Round(time.Millisecond), looks, seen, after.FullPushes-before.FullPushes, after.EDSUpdates-before.EDSUpdates)
	if full := after.FullPushes - before.FullPushes; full != 0 {
		t.Errorf("the failover to B and orders-4 joining caused %v full pushes in istiod, want 0 (EDS only)", full)
	}
	proxyGot, err := proxyEndpoints(ctx, ist, fmt.Sprintf("outbound|%d||%s", ordersPort, ordersHost))
	if err != nil {
		t.Fatalf("EDS request for %s: %v", ordersHost, err)
	}
	if !slices.Equal(proxyGot, want) {
		t.Errorf("after the failover a sidecar connecting now is given endpoints %v for %s, want %v", proxyGot, ordersHost, want)
	}
	checkRoutes("after the failover", want...)

	// galleon-eureka's own account: A down, B answering (/metrics); /debug/status names A
	// degraded and is not stale.
	var fams2 map[string]*dto.MetricFamily
	wrong := "nothing read yet"
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	err = g.WaitFor(wctx, func() (bool, error) {
		var err error
		if fams2, _, err = scrapeMetrics(ctx, g); err != nil {
			return false, err
		}
		status, err := galleonStatus(ctx, g)
		if err != nil {
			return false, err
		}
		upA, foundA := metricSum(fams2, "galleon_eureka_server_up", map[string]string{"server": srvA.BaseURL()})
		upB, foundB := metricSum(fams2, "galleon_eureka_server_up", map[string]string{"server": srvB.BaseURL()})
		okB, _ := metricSum(fams2, "galleon_eureka_requests_total", map[string]string{"server": srvB.BaseURL(), "result": "ok"})
		_, degradedA := status.Degraded[srvA.BaseURL()]
		switch {
		case !foundA || upA != 0:
			wrong = fmt.Sprintf("galleon_eureka_server_up{server=%q} is %v (exported: %v), want 0", srvA.BaseURL(), upA, foundA)
		case !foundB || upB != 1:
			wrong = fmt.Sprintf("galleon_eureka_server_up{server=%q} is %v (exported: %v), want 1", srvB.BaseURL(), upB, foundB)
		case okB <= okB0:
			wrong = fmt.Sprintf("galleon_eureka_requests_total{server=%q,result=\"ok\"} is %v, want more than before the crash (%v)", srvB.BaseURL(), okB, okB0)
		case !status.Synced || status.Stale:
			wrong = fmt.Sprintf("/debug/status says synced %v, stale %v; want synced and not stale (B answers)", status.Synced, status.Stale)
		case !degradedA:
			wrong = fmt.Sprintf("/debug/status names degraded %v, not %s", status.Degraded, srvA.BaseURL())
		default:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("galleon-eureka after A crashed: %s (%v)\nserver_up: %v\nrequests: %v", wrong, err,
			metricLines(fams2, "galleon_eureka_server_up"), metricLines(fams2, "galleon_eureka_requests_total"))
	}
	t.Logf("galleon-eureka after the failover: server_up %v; requests %v; full fetches %v",
		metricLines(fams2, "galleon_eureka_server_up"), metricLines(fams2, "galleon_eureka_requests_total"),
		metricLines(fams2, "galleon_eureka_full_fetches_total"))
}

// galleonStatusReport is the part of /debug/status (daemon) TestEurekaToIstiod reads.
type galleonStatusReport struct {
	Synced   bool              `json:"synced"`
	Stale    bool              `json:"stale"`
	Degraded map[string]string `json:"degraded"`
	Shards   []shardStatus     `json:"shards"`
}

func galleonStatus(ctx context.Context, g *galleon) (*galleonStatusReport, error) {
	body, err := g.get(ctx, "/debug/status")
	if err != nil {
		return nil, err
	}
	var r galleonStatusReport
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("/debug/status: %w in %.500s", err, body)
	}
	return &r, nil
}
