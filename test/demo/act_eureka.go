package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/internal/proc"
	"github.com/galleon-mesh/galleon/test/istiod"
)

const eurekaApp = "ORDERS"

// order is instance orders-<i> of ORDERS at 10.70.0.<i>:8080, with a 90 s lease renewed every
// 30 s, as a Netflix or Spring Cloud client registers it.
func order(i int) eurekatest.Instance {
	return eurekatest.Instance{
		App: eurekaApp, ID: fmt.Sprintf("orders-%d", i), IPAddr: fmt.Sprintf("10.70.0.%d", i),
		Port: 8080, SecurePort: 443, SecurePortOff: true, Metadata: map[string]string{"version": "v1"},
		LeaseDuration: 90 * time.Second, RenewalInterval: 30 * time.Second,
	}
}

// eurekaServers are polaris-servers A and B, which do not replicate to each other: the demo makes
// every change in each live one, as a Eureka cluster's peers would copy it.
type eurekaServers struct {
	a, b    *eurekatest.Server
	aMember *member
	beats   *heartbeats
}

// eurekaAct starts two Eureka servers, registers ORDERS in both, starts galleon-eureka on both
// and restarts istiod on all four adapters: an instance is taken out of service, then server A
// crashes and B takes over.
func (d *demo) eurekaAct(ctx context.Context) error {
	d.heading("13. polaris-server " + eurekatest.Version + ", a Eureka API server (built from the Go module proxy)")
	if _, err := d.serverBinary(ctx, toolcache.Polaris(),
		"    The first run builds polaris-server (about 2.5 min on 2 cores, ~330 MB of module source)",
		"    and caches the binary; later runs reuse it."); err != nil {
		return err
	}
	d.note("    PolarisMesh's server speaks Eureka's REST API (/eureka/apps, /apps/delta, status overrides):")
	d.note("    no Netflix Eureka server can be built here without a Maven repository.")

	d.heading("14. Start two Eureka servers, A and B, on loopback and register ORDERS in both")
	es, err := d.startEurekaServers(ctx)
	if err != nil {
		return err
	}
	if err := d.registerOrders(ctx, es); err != nil {
		return err
	}

	d.heading("15. Start galleon-eureka on both servers")
	g, err := d.startGalleonEureka(ctx, es)
	if err != nil {
		return err
	}

	d.heading("16. Restart istiod with four configSources: galleon-file, galleon-consul, galleon-zookeeper and galleon-eureka")
	if err := d.restartOn(ctx, "istiod-eureka", d.daemons["galleon-file"], d.daemons["galleon-consul"], d.daemons["galleon-zookeeper"], g); err != nil {
		return err
	}
	c, err := d.ordersShown(ctx, g)
	if err != nil {
		return err
	}
	if c, err = d.outOfService(ctx, es, c); err != nil {
		return err
	}
	if err := d.failover(ctx, es, c); err != nil {
		return err
	}
	return d.eurekaOwnView(ctx, es, g)
}

func (d *demo) startEurekaServers(ctx context.Context) (*eurekaServers, error) {
	t0 := time.Now()
	es := &eurekaServers{}
	var err error
	if es.a, es.aMember, err = d.startPolaris(ctx, "A"); err != nil {
		return nil, err
	}
	if es.b, _, err = d.startPolaris(ctx, "B"); err != nil {
		return nil, err
	}
	d.ok("polaris-server A (pid %d): %s; B (pid %d): %s (%s)", es.a.Proc().Pid(), es.a.BaseURL(), es.b.Proc().Pid(), es.b.BaseURL(), since(t0))
	d.note("    Polaris servers do not replicate to each other as Eureka peers do: the demo makes every")
	d.note("    change in both, which is what a Eureka cluster's replication would do.")
	return es, nil
}

func (d *demo) startPolaris(ctx context.Context, name string) (*eurekatest.Server, *member, error) {
	s, err := eurekatest.StartServer(ctx, eurekatest.Options{
		Dir: filepath.Join(d.dir, "eureka", strings.ToLower(name)), Detach: d.detach(),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("polaris-server %s: %w", name, err)
	}
	m := &member{
		name: "polaris-server " + name, pid: s.Proc().Pid, exited: func() bool { return !s.Proc().Running() },
		// polaris-server takes 5-15 s to stop on SIGTERM; its store is thrown away with the
		// demo's directory.
		stop: func() { _ = s.Proc().Kill() },
		logs: []namedLog{{"polaris-server " + name, s.OutPath},
			{"polaris-server " + name + "'s own log", filepath.Join(s.Dir, "log", "runtime", "polaris-default.log")}},
		keepMsg: func() string {
			return fmt.Sprintf("pid %d  %s/apps   log %s", s.Proc().Pid(), s.BaseURL(), s.OutPath)
		},
	}
	d.crew.add(m)
	return s, m, nil
}

// registerOrders registers orders-1..3 in A and B, hands them to the heartbeats and waits until
// both list them.
func (d *demo) registerOrders(ctx context.Context, es *eurekaServers) error {
	t0 := time.Now()
	d.command("POST %s/apps/%s  %s", es.a.BaseURL(), eurekaApp, order(1).JSON())
	d.say("    %s", d.dimmed("and the same for orders-2 (10.70.0.2) and orders-3 (10.70.0.3), in A and in B"))
	beats, err := d.startHeartbeats(filepath.Join(d.dir, "eureka", "heartbeats"))
	if err != nil {
		return err
	}
	es.beats = beats
	for _, s := range []*eurekatest.Server{es.a, es.b} {
		for i := 1; i <= 3; i++ {
			if err := d.register(ctx, es, s, order(i)); err != nil {
				return err
			}
		}
	}
	d.ok("a heartbeat process (pid %d) renews the 6 registrations every %v (PUT /eureka/apps/%s/<id>)", beats.p.Pid(), heartbeatInterval, eurekaApp)
	for _, s := range []*eurekatest.Server{es.a, es.b} {
		if err := d.waitListing(ctx, s, "UP_3_"); err != nil {
			return err
		}
	}
	d.command("GET %s/apps    %s", es.a.BaseURL(), d.dimmed("# instanceId, ipAddr:port and status of each"))
	if err := d.showListing(ctx, es.a); err != nil {
		return err
	}
	d.ok("A and B both list them, apps__hashcode UP_3_ (%s since the first server's start)", since(t0))
	return nil
}

func (d *demo) register(ctx context.Context, es *eurekaServers, s *eurekatest.Server, in eurekatest.Instance) error {
	if err := s.Register(ctx, in); err != nil {
		return fmt.Errorf("registering %s in %s: %w (see the polaris-server logs)", in.ID, s.BaseURL(), err)
	}
	return es.beats.add(s.BaseURL(), in.App, in.ID)
}

// waitListing waits until the server's /apps has the apps__hashcode want (instances counted by
// status, e.g. UP_3_).
func (d *demo) waitListing(ctx context.Context, s *eurekatest.Server, want string) error {
	return d.waitUntil(ctx, 20*time.Second, s.BaseURL()+"/apps lists apps__hashcode "+want, func(ctx context.Context) (bool, error) {
		a, err := s.Apps(ctx, "/apps")
		if err != nil {
			return false, err
		}
		if a.AppsHashcode != want {
			return false, fmt.Errorf("apps__hashcode %s", a.AppsHashcode)
		}
		return true, nil
	})
}

// showListing prints the server's instances: "ID IP:PORT STATUS", sorted.
func (d *demo) showListing(ctx context.Context, s *eurekatest.Server) error {
	a, err := s.Apps(ctx, "/apps")
	if err != nil {
		return err
	}
	var lines []string
	for _, app := range a.Application {
		for _, in := range app.Instance {
			lines = append(lines, fmt.Sprintf("%s %s:%d %s", in.InstanceID, in.IPAddr, in.Port.Port, in.Status))
		}
	}
	slices.Sort(lines)
	d.indent(strings.Join(lines, "\n"))
	return nil
}

func (d *demo) startGalleonEureka(ctx context.Context, es *eurekaServers) (*daemon, error) {
	t0 := time.Now()
	args := []string{"--eureka-urls", es.a.BaseURL() + "," + es.b.BaseURL(), "--eureka-poll-interval", "500ms", "--debounce-quiet", "20ms"}
	d.command("galleon-eureka %s", strings.Join(args, " "))
	g, err := d.startDaemon(ctx, "galleon-eureka", args...)
	if err != nil {
		return nil, err
	}
	if err := d.waitServes(ctx, g, []string{"default/orders"}); err != nil {
		return nil, err
	}
	d.ok("galleon-eureka (pid %d) serves MCP on %s, ready %s after its start", g.srv.Pid(), g.XDS, since(t0))
	d.note("    It reads one server at a time, A first: the full listing once, then /apps/delta every")
	d.note("    500 ms, checked against the server's apps__hashcode; B is only read if A fails.")
	d.hints = append(d.hints,
		fmt.Sprintf("Follow what galleon-eureka serves:    %s watch --addr %s --delta", d.galleonctlPath(), g.XDS),
		fmt.Sprintf("Use Eureka (server B):                GET %s/apps (Accept: application/json)", es.b.BaseURL()))
	return g, nil
}

// ordersShown shows what galleon-eureka serves and istiod holds, and checks default/orders.
func (d *demo) ordersShown(ctx context.Context, g *daemon) (istiod.PushCounters, error) {
	d.heading("Q. What galleon-eureka serves")
	d.command("galleonctl get --addr %s -o names", g.XDS)
	names, err := d.names(ctx, g)
	if err != nil {
		return istiod.PushCounters{}, err
	}
	d.indent(strings.Join(names, "\n"))
	d.say("")
	if err := d.showYAML(ctx, g, "", "the one service"); err != nil {
		return istiod.PushCounters{}, err
	}
	d.note("    One ServiceEntry per application (--namespace default), host <app, lower case>.eureka;")
	d.note("    UP instances are endpoints, their metadata (and what Polaris adds to it) endpoint labels;")
	d.note("    OUT_OF_SERVICE, DOWN and STARTING ones are left out.")

	d.heading("R. What istiod holds: four registries")
	es, err := d.showEntries(ctx)
	if err != nil {
		return istiod.PushCounters{}, err
	}
	i := slices.IndexFunc(es, func(e entry) bool { return e.Name == "default/orders" })
	if i < 0 || es[i].hosts() != "orders.eureka" || es[i].ports() != "8080/HTTP" || es[i].addresses() != "10.70.0.1,10.70.0.2,10.70.0.3" {
		return istiod.PushCounters{}, errors.New("istiod's default/orders is not host orders.eureka, port 8080/HTTP and endpoints 10.70.0.1,10.70.0.2,10.70.0.3")
	}
	d.ok("default/orders: host orders.eureka, port 8080/HTTP, 3 endpoints (%s)", es[i].addresses())
	return d.showCounters(ctx, "(restarted) so far")
}

func (d *demo) outOfService(ctx context.Context, es *eurekaServers, before istiod.PushCounters) (istiod.PushCounters, error) {
	d.heading("S. An operator takes orders-2 out of service (a status override, in A and in B)")
	for _, s := range []*eurekatest.Server{es.a, es.b} {
		d.command("PUT %s/apps/%s/orders-2/status?value=OUT_OF_SERVICE", s.BaseURL(), eurekaApp)
		if err := s.SetStatus(ctx, eurekaApp, "orders-2", "OUT_OF_SERVICE"); err != nil {
			return before, err
		}
	}
	t0 := time.Now()
	if _, err := d.waitEntry(ctx, "istiod holds default/orders with endpoints 10.70.0.1 and 10.70.0.3", "default/orders",
		func(e entry, _ bool) bool { return e.addresses() == "10.70.0.1,10.70.0.3" }); err != nil {
		return before, err
	}
	after, err := d.pushed(ctx, before)
	if err != nil {
		return before, err
	}
	d.ok("istiod has it %s after the PUTs: endpoints 10.70.0.1,10.70.0.3", since(t0))
	if err := d.edsOnly(before, after, "an instance going OUT_OF_SERVICE", "an endpoint-only (EDS) update, no full push"); err != nil {
		return after, err
	}
	for _, s := range []*eurekatest.Server{es.a, es.b} {
		if err := d.waitListing(ctx, s, "OUT_OF_SERVICE_1_UP_2_"); err != nil {
			return after, err
		}
	}
	d.command("GET %s/apps    %s", es.b.BaseURL(), d.dimmed("# B says the same as A"))
	if err := d.showListing(ctx, es.b); err != nil {
		return after, err
	}
	d.note("    The next /apps/delta listed orders-2 MODIFIED with its new status: galleon-eureka changed")
	d.note("    the endpoints alone, so istiod updated EDS without recomputing the mesh config.")
	return after, nil
}

func (d *demo) failover(ctx context.Context, es *eurekaServers, before istiod.PushCounters) error {
	d.heading("T. Server A crashes; B takes over")
	d.command("kill -9 %d    %s", es.a.Proc().Pid(), d.dimmed("# polaris-server A: no clean shutdown, connections refused from now on"))
	d.crew.retire(es.aMember)
	if err := es.a.Proc().Kill(); err != nil {
		return err
	}
	t0 := time.Now()
	if err := es.beats.drop(es.a.BaseURL()); err != nil {
		return err
	}
	d.command("POST %s/apps/%s  %s", es.b.BaseURL(), eurekaApp, order(4).JSON())
	if err := d.register(ctx, es, es.b, order(4)); err != nil {
		return err
	}
	d.note("    orders-4 registers with B alone: only B can tell galleon-eureka about it.")
	// istiod must hold orders-4 through B, and never lose what it had meanwhile.
	var e entry
	err := d.waitUntil(ctx, 30*time.Second, "istiod holds default/orders with endpoints 10.70.0.1, 10.70.0.3 and 10.70.0.4", func(ctx context.Context) (bool, error) {
		var err error
		if e, _, err = d.entry(ctx, "default/orders"); err != nil {
			return false, err
		}
		if !keptDuringFailover(e.Addresses) {
			return false, proc.Permanent(fmt.Errorf("istiod's endpoints of default/orders are %s after A crashed: it lost 10.70.0.1 or 10.70.0.3", e.addresses()))
		}
		return e.addresses() == "10.70.0.1,10.70.0.3,10.70.0.4", nil
	})
	if err != nil {
		return err
	}
	after, err := d.pushed(ctx, before)
	if err != nil {
		return err
	}
	d.ok("istiod has it %s after A crashed: endpoints %s; it never held fewer meanwhile", since(t0), e.addresses())
	if err := d.edsOnly(before, after, "the failover to B and orders-4 joining", "the failover and orders-4 were endpoint-only (EDS)"); err != nil {
		return err
	}
	d.note("    orders-2 stays out: B holds its OUT_OF_SERVICE override too.")
	return nil
}

func keptDuringFailover(addrs []string) bool {
	return slices.Contains(addrs, "10.70.0.1") && slices.Contains(addrs, "10.70.0.3")
}

var eurekaLogLines = regexp.MustCompile(`msg="(Eureka server failed|reading another Eureka server|no Eureka server answers|Eureka server answers again|a Eureka server answers again)`)
var eurekaLogNoise = regexp.MustCompile(` registry=eureka| eureka="?\[[^]]*\]"?`)

func (d *demo) eurekaOwnView(ctx context.Context, es *eurekaServers, g *daemon) error {
	d.heading("U. galleon-eureka's own view: its log and metrics")
	picked := d.showLog(g, eurekaLogLines, eurekaLogNoise, "registry=, eureka=")
	if len(picked) == 0 {
		return errors.New("galleon-eureka logged nothing about server A failing")
	}
	if !slices.ContainsFunc(picked, func(l string) bool { return strings.Contains(l, `msg="reading another Eureka server"`) }) {
		return errors.New("galleon-eureka did not log that it reads another server")
	}
	d.say("")
	body, err := d.showMetrics(ctx, g, `^galleon_eureka_(server_up|requests_total|full_fetches_total)`)
	if err != nil {
		return err
	}
	if err := d.checkEurekaMetrics(body, es); err != nil {
		return err
	}
	d.say("")
	status, err := d.showStatus(ctx, g)
	if err != nil {
		return err
	}
	if !strings.Contains(status, `"stale":false`) {
		return errors.New("galleon-eureka's /debug/status says it is stale")
	}
	if !strings.Contains(status, `"`+es.a.BaseURL()+`":`) {
		return fmt.Errorf("galleon-eureka's /debug/status does not list A (%s) as degraded", es.a.BaseURL())
	}
	d.note("    A failed (unreachable): galleon-eureka moved to B at once and stays there, probing A in")
	d.note("    the background with back-off; A is listed degraded, and what is served is not stale.")
	return nil
}

func (d *demo) checkEurekaMetrics(body []byte, es *eurekaServers) error {
	fams, err := istiod.ParseMetrics(body)
	if err != nil {
		return err
	}
	value := func(name string, labels map[string]string) (float64, bool) {
		v, err := istiod.MetricValue(fams, name, labels)
		return v, err == nil
	}
	upA, okA := value("galleon_eureka_server_up", map[string]string{"server": es.a.BaseURL()})
	upB, okB := value("galleon_eureka_server_up", map[string]string{"server": es.b.BaseURL()})
	if !okA || upA != 0 {
		return fmt.Errorf("galleon_eureka_server_up for A (%s) is %v (exported: %v); want 0", es.a.BaseURL(), upA, okA)
	}
	if !okB || upB != 1 {
		return fmt.Errorf("galleon_eureka_server_up for B (%s) is %v (exported: %v); want 1", es.b.BaseURL(), upB, okB)
	}
	deltasB, _ := value("galleon_eureka_requests_total", map[string]string{"kind": "delta", "result": "ok", "server": es.b.BaseURL()})
	if deltasB <= 0 {
		return errors.New("galleon-eureka counts no delta answered by B (galleon_eureka_requests_total)")
	}
	d.ok("galleon_eureka_server_up: A %.0f, B %.0f; B has answered %.0f /apps/delta requests", upA, upB, deltasB)
	all, _ := value("galleon_eureka_full_fetches_total", nil)
	atStart, _ := value("galleon_eureka_full_fetches_total", map[string]string{"reason": "start"})
	if all == atStart {
		d.note("    One full listing, at the start: B's deltas reconciled with what A had served (the same")
		d.note("    apps__hashcode), so the failover needed none.")
	} else {
		d.note("    A delta of B did not reconcile with what A had served (apps__hashcode): galleon-eureka")
		d.note("    fetched B's full listing, and served only the difference.")
	}
	return nil
}
