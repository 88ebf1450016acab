package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/test/istiod"
	"github.com/galleon-mesh/galleon/test/sidecar"
)

// The Dubbo service of TestZooKeeperToIstiod whose providers come and go: one interface, one
// version, no group. A second one, stockIface, serves on the same port from the start to the end.
const (
	greetingIface   = "org.apache.demo.GreetingService"
	greetingVersion = "1.0.0"
	greetingDir     = "/dubbo/" + greetingIface
	greetingPort    = 20880
	stockIface      = "org.apache.demo.StockService"
	stockDir        = "/dubbo/" + stockIface
	// zkSessionTimeout is galleon-zookeeper's --zk-session-timeout: the server (tick 500ms)
	// allows 1s to 10s.
	zkSessionTimeout = 2 * time.Second
)

// greetingName is the ServiceEntry name galleon-zookeeper gives (interface, "", version).
func greetingName() string { return dubboServiceName(greetingIface, greetingVersion) }

// dubboServiceName is the ServiceEntry name galleon-zookeeper gives a Dubbo interface without a
// group, as adapters/zookeeper/dubbo.go (dubboName) documents it: the interface and version
// sanitised to a DNS label (lower case, dots to dashes: enough for the names of these tests),
// "--", then the first 10 hex digits of SHA-256(interface NUL group NUL version).
func dubboServiceName(iface, version string) string {
	sum := sha256.Sum256([]byte(iface + "\x00" + "" + "\x00" + version))
	label := strings.ReplaceAll(strings.ToLower(iface+"-"+version), ".", "-")
	return label + "--" + hex.EncodeToString(sum[:])[:10]
}

// stockName is stockIface's ServiceEntry name (interface, "", version 1.0.0), as greetingName.
func stockName() string { return dubboServiceName(stockIface, greetingVersion) }

// dubboProvider is the znode name a Dubbo 2 provider of greetingIface on ip registers under
// /dubbo/<interface>/providers: its URL, URL-encoded (URL.encode in Dubbo, which is Java's
// URLEncoder), with the parameters a Dubbo 2.7 provider writes.
func dubboProvider(ip string) string {
	return dubboProviderOf(greetingIface, "greeter", "greet,greetAsync", ip)
}

// dubboProviderOf is dubboProvider for interface iface (version greetingVersion, port
// greetingPort) of application app.
func dubboProviderOf(iface, app, methods, ip string) string {
	q := url.Values{
		"anyhost":     {"true"},
		"application": {app},
		"deprecated":  {"false"},
		"dubbo":       {"2.0.2"},
		"dynamic":     {"true"},
		"generic":     {"false"},
		"interface":   {iface},
		"methods":     {methods},
		"pid":         {"4242"},
		"release":     {"2.7.23"},
		"side":        {"provider"},
		"timestamp":   {"1700000000000"},
		"version":     {greetingVersion},
		"weight":      {"100"},
	}
	return url.QueryEscape(fmt.Sprintf("dubbo://%s:%d/%s?%s", ip, greetingPort, iface, q.Encode()))
}

// stockTriPort is where stockIface's providers also export it over Triple, as Dubbo 3 processes
// do beside the dubbo protocol: one provider URL per protocol, one endpoint per host.
const stockTriPort = 50051

// triProviderOf is the Triple twin of dubboProviderOf's URL.
func triProviderOf(iface, app, methods, ip string) string {
	u, err := url.QueryUnescape(dubboProviderOf(iface, app, methods, ip))
	if err != nil {
		panic(err)
	}
	u = strings.Replace(u, fmt.Sprintf("dubbo://%s:%d/", ip, greetingPort), fmt.Sprintf("tri://%s:%d/", ip, stockTriPort), 1)
	return url.QueryEscape(u)
}

// proxyEndpoints asks istiod, as a newly connected sidecar would (test/sidecar), for the
// endpoints of cluster, and returns their addresses, sorted; none when the sidecar is given no
// such cluster.
func proxyEndpoints(ctx context.Context, ist *istiod.Istiod, cluster string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := sidecar.Fetch(ctx, ist.GRPCAddr, sidecarPod())
	if err != nil {
		return nil, err
	}
	if _, ok := v.Clusters[cluster]; !ok {
		return nil, nil
	}
	eps, err := v.Endpoints(cluster)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(eps))
	for _, ep := range eps {
		host, _, err := net.SplitHostPort(ep)
		if err != nil {
			return nil, err
		}
		out = append(out, host)
	}
	slices.Sort(out)
	return out, nil
}

type zkQuietLogger struct{}

func (zkQuietLogger) Printf(string, ...any) {}

// TestZooKeeperToIstiod runs a real ZooKeeper holding Dubbo 2 providers, galleon-zookeeper
// watching it (--zk-layout dubbo) and a real istiod reading galleon-zookeeper over MCP. Providers
// joining and leaving must be EDS-only updates in istiod; an expiry of the adapter's ZooKeeper
// session, with providers changing meanwhile, must converge without istiod ever losing the
// service or all its endpoints; the last provider leaving keeps the ServiceEntry with no
// endpoints, and deleting the interface removes it. Throughout, a sidecar's view of istiod
// (test/sidecar) must tell the two interfaces served on port 20880 apart: each host resolves to
// an address of its own (allocated, docs/vips.md), which it keeps, and which reaches the
// service's own providers; istiod reports no listener conflict.
func TestZooKeeperToIstiod(t *testing.T) { istiod.ForEachRelease(t, testZooKeeperToIstiod) }

func testZooKeeperToIstiod(t *testing.T, rel istiod.Release) {
	bin := galleonBinary(t, "galleon-zookeeper")
	server := zktest.Start(t, zktest.Options{TickTime: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// 1. The Dubbo 2 layout as a provider writes it: persistent interface nodes, ephemeral
	// provider nodes of the writer's session.
	zc, _, err := zk.Connect([]string{server.Addr()}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkQuietLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	for _, p := range []string{"/dubbo", greetingDir, greetingDir + "/providers", greetingDir + "/consumers",
		greetingDir + "/configurators", greetingDir + "/routers"} {
		if _, err := zc.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	providerPath := func(ip string) string { return greetingDir + "/providers/" + dubboProvider(ip) }
	join := func(ip string) error {
		_, err := zc.Create(providerPath(ip), nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		return err
	}
	leave := func(ip string) error { return zc.Delete(providerPath(ip), -1) }
	for _, ip := range []string{"10.40.0.1", "10.40.0.2"} {
		if err := join(ip); err != nil {
			t.Fatalf("provider %s: %v", ip, err)
		}
	}
	// A second interface on the same port, its providers there for the whole test: one on a
	// host of its own, one in the same application process as greeting's 10.40.0.1 (one Dubbo
	// protocol port serves every interface the process exports).
	for _, p := range []string{stockDir, stockDir + "/providers", stockDir + "/consumers", stockDir + "/configurators", stockDir + "/routers"} {
		if _, err := zc.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	for _, ip := range []string{"10.41.0.1", "10.40.0.1"} {
		for _, u := range []string{dubboProviderOf(stockIface, "stock", "reserve,release", ip), triProviderOf(stockIface, "stock", "reserve,release", ip)} {
			if _, err := zc.Create(stockDir+"/providers/"+u, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
				t.Fatalf("%s provider %s: %v", stockIface, ip, err)
			}
		}
	}
	// A consumer, as Dubbo registers it: not an instance (and not under providers anyway).
	consumer := url.QueryEscape("consumer://10.40.9.9/" + greetingIface + "?application=caller&category=consumers&side=consumer&version=" + greetingVersion)
	if _, err := zc.Create(greetingDir+"/consumers/"+consumer, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}

	// 2. galleon-zookeeper and istiod.
	args := []string{"--zk-servers", server.Addr(), "--zk-layout", "dubbo",
		"--zk-session-timeout", zkSessionTimeout.String(), "--zk-unreachable-after", "1s", "--debounce-quiet", "20ms"}
	// The last-endpoint label only where istiod needs it (step 5).
	labelled := !rel.ClearsLastEndpoint()
	if !labelled {
		args = append(args, "--no-endpoints-label=false")
	}
	g := startGalleon(t, bin, args...)
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: []string{g.Addr}})

	name := greetingName()
	key := "default/" + name
	host := name + ".default.dubbo"
	stockKey := "default/" + stockName()
	stockHost := stockName() + ".default.dubbo"
	ses := waitForServiceEntries(t, ctx, ist, "initial state", func(ses map[string]serviceEntry) string {
		m := endpointsAre(key, "10.40.0.1", "10.40.0.2")(ses)
		if m == "" {
			m = endpointsAre(stockKey, "10.40.0.1", "10.41.0.1")(ses)
		}
		if m != "" {
			var dubbo []string
			for k, se := range ses {
				if slices.ContainsFunc(se.Spec.Hosts, func(h string) bool { return strings.HasSuffix(h, ".dubbo") }) {
					dubbo = append(dubbo, fmt.Sprintf("%s %v", k, se.Spec.Hosts))
				}
			}
			return fmt.Sprintf("%s (ServiceEntries with a .dubbo host: %v)", m, dubbo)
		}
		if len(ses) != 2 {
			return fmt.Sprintf("%d ServiceEntries, want 2", len(ses))
		}
		return ""
	})
	// shapeOf checks what must not change while providers come and go: host, port, resolution.
	shapeOf := func(se serviceEntry) string {
		if !slices.Equal(se.Spec.Hosts, []string{host}) {
			return fmt.Sprintf("hosts %v, want [%s]", se.Spec.Hosts, host)
		}
		if len(se.Spec.Ports) != 1 || se.Spec.Ports[0].Number != greetingPort || se.Spec.Ports[0].Protocol != "TCP" ||
			se.Spec.Ports[0].Name != "tcp-dubbo" {
			return fmt.Sprintf("ports %+v, want one: 20880 TCP tcp-dubbo", se.Spec.Ports)
		}
		if se.Spec.Resolution != "STATIC" {
			return fmt.Sprintf("resolution %q, want STATIC", se.Spec.Resolution)
		}
		return ""
	}
	se := ses[key]
	if m := shapeOf(se); m != "" {
		t.Errorf("%s: %s", key, m)
	}
	// Four provider URLs, two per host (dubbo and tri): two endpoints, each serving both ports.
	if st := ses[stockKey]; !slices.Equal(st.Spec.Hosts, []string{stockHost}) || len(st.Spec.Ports) != 2 ||
		st.Spec.Ports[0].Number != greetingPort || st.Spec.Ports[0].Protocol != "TCP" ||
		st.Spec.Ports[1].Number != stockTriPort || st.Spec.Ports[1].Protocol != "GRPC" {
		t.Errorf("%s: hosts %v ports %+v, want [%s], TCP port %d and GRPC port %d", stockKey, st.Spec.Hosts, st.Spec.Ports, stockHost, greetingPort, stockTriPort)
	}
	// The provider URL's parameters: weight, and the labels the adapter copies.
	var raw struct {
		Endpoints []struct {
			Address string            `json:"address"`
			Weight  uint32            `json:"weight"`
			Labels  map[string]string `json:"labels"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(se.Config.Spec, &raw); err != nil {
		t.Fatal(err)
	}
	for _, e := range raw.Endpoints {
		if e.Weight != 100 || e.Labels["application"] != "greeter" || e.Labels["version"] != greetingVersion || e.Labels["side"] != "provider" {
			t.Errorf("%s endpoint %s: weight %d labels %v, want weight 100 and application=greeter, version=%s, side=provider",
				key, e.Address, e.Weight, e.Labels, greetingVersion)
		}
	}
	pushes := trackPushes(t, ctx, ist)
	lastPush := time.Now()

	// A sidecar's view: both interfaces on 20880, each on its own allocated address, which it
	// keeps from then on (checkRoutes with the greeting service's current providers).
	// Each stock host sits once in each port's cluster (one endpoint per host, not per URL).
	stockRoutes := []meshRoute{
		{host: stockHost, port: greetingPort, endpoints: portEndpoints(greetingPort, "10.40.0.1", "10.41.0.1")},
		{host: stockHost, port: stockTriPort, http: true, endpoints: portEndpoints(stockTriPort, "10.40.0.1", "10.41.0.1")},
	}
	_, addrs := expectRoutes(t, ctx, ist, "initial state", append([]meshRoute{
		{host: host, port: greetingPort, endpoints: portEndpoints(greetingPort, "10.40.0.1", "10.40.0.2")}}, stockRoutes...))
	checkRoutes := func(what string, providers ...string) {
		t.Helper()
		expectRoutes(t, ctx, ist, what, withAddresses(append([]meshRoute{
			{host: host, port: greetingPort, endpoints: portEndpoints(greetingPort, providers...)}}, stockRoutes...), addrs))
	}
	// No listener conflict, 0.0.0.0_20880 or any other (istiod publishes its push status up
	// to 10 s late: see listenerConflicts).
	if c := listenerConflicts(t, ctx, ist, lastPush, "both interfaces on 20880", func(map[string]map[string]string) bool { return true }); len(c) > 0 {
		t.Errorf("istiod reports listener conflicts: %v", c)
	}

	// holds is what every look at istiod must find while providers change: the ServiceEntry,
	// its shape, and the given endpoints.
	holds := func(want ...string) func(map[string]serviceEntry) string {
		return func(ses map[string]serviceEntry) string {
			if m := endpointsAre(key, want...)(ses); m != "" {
				return m
			}
			if m := shapeOf(ses[key]); m != "" {
				return key + ": " + m
			}
			return ""
		}
	}
	// proxyGets checks what a sidecar connecting now is given for the service's cluster.
	cluster := fmt.Sprintf("outbound|%d||%s", greetingPort, host)
	proxyGets := func(what string, want ...string) {
		t.Helper()
		got, err := proxyEndpoints(ctx, ist, cluster)
		if err != nil {
			t.Fatalf("%s: EDS request for %s: %v", what, cluster, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: a sidecar connecting now is given endpoints %v for %s, want %v", what, got, cluster, want)
		}
	}
	proxyGets("initial state", "10.40.0.1", "10.40.0.2")
	change := pushes.change
	// step is a change that leaves the service with endpoints want, in istiod and for a sidecar.
	step := func(what string, do func() error, want ...string) float64 {
		t.Helper()
		full := change(what, do, holds(want...))
		proxyGets(what, want...)
		return full
	}

	// 3. A provider leaves and comes back: endpoints only, no full push.
	if full := step("provider 10.40.0.2 leaves", func() error { return leave("10.40.0.2") }, "10.40.0.1"); full != 0 {
		t.Errorf("a provider leaving caused %v full pushes in istiod, want 0 (EDS only)", full)
	}
	if full := step("provider 10.40.0.2 is back", func() error { return join("10.40.0.2") }, "10.40.0.1", "10.40.0.2"); full != 0 {
		t.Errorf("a provider joining caused %v full pushes in istiod, want 0 (EDS only)", full)
	}
	checkRoutes("provider 10.40.0.2 left and came back", "10.40.0.1", "10.40.0.2")

	// 4. The adapter's session expires while providers change: galleon-zookeeper is stopped
	// (SIGSTOP) until ZooKeeper has expired its session, 10.40.0.2 leaves and 10.40.0.3 joins
	// meanwhile, then it runs again. It must relist on a new session, and istiod must go from
	// {1, 2} to {1, 3} without ever missing the service or all its endpoints.
	sid := regexp.MustCompile(`ZooKeeper session established.* session=(0x[0-9a-f]+)`).FindStringSubmatch(g.Log())
	if sid == nil {
		t.Fatal("galleon-zookeeper logged no \"ZooKeeper session established ... session=0x...\"")
	}
	// cons lists a session as sid=0x<hex> without leading zeros, like the adapter's log.
	if out, err := server.FourLetter("cons"); err != nil || !strings.Contains(out, "sid="+sid[1]) {
		t.Fatalf("ZooKeeper's cons does not list the adapter's session %s (%v): %s", sid[1], err, out)
	}
	before := pushes.now
	logOffset := g.LogOffset()
	if err := g.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	resume := func() {
		if stopped {
			stopped = false
			if err := g.Signal(syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT: %v", err)
			}
		}
	}
	t.Cleanup(resume) // before the process is stopped (cleanups run last-in first-out)
	pausedAt := time.Now()
	if err := leave("10.40.0.2"); err != nil {
		t.Fatal(err)
	}
	if err := join("10.40.0.3"); err != nil {
		t.Fatal(err)
	}
	// Until ZooKeeper drops the session, istiod keeps what it had: the adapter is stopped.
	pauseLooks := 0
	for {
		out, err := server.FourLetter("cons")
		if err != nil {
			t.Fatalf("cons: %v", err)
		}
		if !strings.Contains(out, "sid="+sid[1]) {
			break
		}
		if time.Since(pausedAt) > 10*zkSessionTimeout {
			t.Fatalf("ZooKeeper still lists session %s %v after galleon-zookeeper was stopped:\n%s", sid[1], time.Since(pausedAt), out)
		}
		ses, err := serviceEntries(ctx, ist)
		if err != nil {
			t.Fatal(err)
		}
		if m := holds("10.40.0.1", "10.40.0.2")(ses); m != "" {
			t.Fatalf("istiod changed while galleon-zookeeper was stopped: %s", m)
		}
		pauseLooks++
		time.Sleep(100 * time.Millisecond)
	}
	expiredAfter := time.Since(pausedAt)
	// Stay stopped past the timeout for good measure: the adapter must find out on its own.
	time.Sleep(time.Until(pausedAt.Add(2 * zkSessionTimeout)))
	resume()
	resumedAt := time.Now()
	t.Logf("ZooKeeper dropped session %s %v after galleon-zookeeper was stopped (%d looks at istiod meanwhile); resumed it after %v",
		sid[1], expiredAfter.Round(time.Millisecond), pauseLooks, resumedAt.Sub(pausedAt).Round(time.Millisecond))

	var seen []string // the distinct endpoint lists istiod held, in order
	looks := 0
	for {
		ses, err := serviceEntries(ctx, ist)
		if err != nil {
			t.Fatal(err)
		}
		looks++
		se, ok := ses[key]
		if !ok {
			t.Fatalf("after the session expiry, look %d: istiod lost %s (holds %d ServiceEntries)", looks, key, len(ses))
		}
		eps := se.endpoints()
		if s := fmt.Sprint(eps); len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		if len(eps) == 0 || !slices.Contains(eps, "10.40.0.1") {
			t.Fatalf("after the session expiry, look %d: istiod's endpoints of %s are %v: 10.40.0.1 never left (endpoint lists seen: %v)", looks, key, eps, seen)
		}
		if m := shapeOf(se); m != "" {
			t.Fatalf("after the session expiry, look %d: %s: %s", looks, key, m)
		}
		if slices.Equal(eps, []string{"10.40.0.1", "10.40.0.3"}) {
			break
		}
		if time.Since(resumedAt) > time.Minute {
			t.Fatalf("istiod did not converge to [10.40.0.1 10.40.0.3] within a minute of the resume (endpoint lists seen: %v)", seen)
		}
		time.Sleep(25 * time.Millisecond)
	}
	converged := time.Since(resumedAt)
	after, err := ist.WaitPushed(ctx, before)
	if err != nil {
		t.Fatalf("session expiry: istiod did not push: %v", err)
	}
	pushes.now = after
	t.Logf("session expiry with 10.40.0.2 -> 10.40.0.3 meanwhile: converged %v after the resume in %d looks (endpoint lists seen: %v); full pushes +%v, EDS updates +%v",
		converged.Round(time.Millisecond), looks, seen, after.FullPushes-before.FullPushes, after.EDSUpdates-before.EDSUpdates)
	if full := after.FullPushes - before.FullPushes; full != 0 {
		t.Errorf("a session expiry with a provider change caused %v full pushes in istiod, want 0 (EDS only)", full)
	}
	proxyGets("after the session expiry", "10.40.0.1", "10.40.0.3")
	checkRoutes("after the session expiry", "10.40.0.1", "10.40.0.3")
	// The expiry really happened, and the adapter relisted on a new session.
	for _, line := range []string{"ZooKeeper session expired", "relisting every service on the new session"} {
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(g.LogSince(logOffset), line) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !strings.Contains(g.LogSince(logOffset), line) {
			t.Errorf("galleon-zookeeper did not log %q after the pause", line)
		}
	}
	if m := regexp.MustCompile(`old_session=(0x[0-9a-f]+)`).FindStringSubmatch(g.LogSince(logOffset)); m == nil || m[1] != sid[1] {
		t.Errorf("the expiry logged is not of session %s: %v", sid[1], m)
	}

	// 5. The providers leave one by one: the last one leaving keeps the ServiceEntry, with its
	// port and no endpoints; deleting the interface removes it.
	if full := step("provider 10.40.0.3 leaves", func() error { return leave("10.40.0.3") }, "10.40.0.1"); full != 0 {
		t.Errorf("a provider leaving caused %v full pushes in istiod, want 0 (EDS only)", full)
	}
	// The last provider leaving. istiod 1.29 applies an update of a STATIC ServiceEntry's
	// endpoints alone as an EDS update of the new endpoints' hosts, of which there are none
	// (pilot/pkg/serviceregistry/serviceentry/controller.go, serviceEntryHandler -> edsUpdate),
	// so it would keep the last provider for good. There Galleon labels a ServiceEntry with no
	// endpoint (convert.LabelNoEndpoints): a service change, one full push, and istiod rebuilds
	// the service's endpoints to none. From 1.30 istiod sends the empty list itself, so Galleon
	// runs with --no-endpoints-label=false and each flip is EDS-only. Either way a sidecar must
	// then get none.
	wantFull, why := 0.0, "EDS only: this istiod clears the last endpoint itself"
	if labelled {
		wantFull, why = 1, "the label that makes istiod clear the endpoints"
	}
	if full := step("last provider 10.40.0.1 leaves", func() error { return leave("10.40.0.1") }); full != wantFull {
		t.Errorf("the last provider leaving caused %v full pushes in istiod, want %v (%s)", full, wantFull, why)
	}
	if se := waitForServiceEntries(t, ctx, ist, "no endpoint", holds())[key]; (se.Labels["galleon.io/endpoints"] == "none") != labelled {
		t.Errorf("the ServiceEntry without endpoints has labels %v; galleon.io/endpoints=none wanted: %v", se.Labels, labelled)
	}
	checkRoutes("no provider left") // the host keeps its address; its cluster has no endpoint
	// One comes back (with the label, it goes: a full push again), and leaves again.
	if full := step("provider 10.40.0.1 is back", func() error { return join("10.40.0.1") }, "10.40.0.1"); full != wantFull {
		t.Errorf("the first provider coming back caused %v full pushes in istiod, want %v (%s)", full, wantFull, why)
	}
	if full := step("last provider 10.40.0.1 leaves again", func() error { return leave("10.40.0.1") }); full != wantFull {
		t.Errorf("the last provider leaving again caused %v full pushes in istiod, want %v (%s)", full, wantFull, why)
	}
	if full := change("interface node deleted", func() error {
		// Children first, as zkCli's deleteall does.
		for _, p := range []string{greetingDir + "/consumers/" + consumer, greetingDir + "/providers", greetingDir + "/consumers",
			greetingDir + "/configurators", greetingDir + "/routers", greetingDir} {
			if err := zc.Delete(p, -1); err != nil {
				return fmt.Errorf("delete %s: %w", p, err)
			}
		}
		return nil
	}, func(ses map[string]serviceEntry) string {
		if _, ok := ses[key]; ok {
			return key + " still held"
		}
		if len(ses) != 1 {
			return fmt.Sprintf("%d ServiceEntries left, want %s alone", len(ses), stockKey)
		}
		return endpointsAre(stockKey, "10.40.0.1", "10.41.0.1")(ses)
	}); full < 1 {
		t.Errorf("removing the service caused %v full pushes in istiod, want >= 1", full)
	}
	proxyGets("interface node deleted")
	// The other interface is untouched, and DNS capture no longer answers the removed host.
	if v, _ := expectRoutes(t, ctx, ist, "interface node deleted", withAddresses(stockRoutes, addrs)); v.Resolve(host) != nil {
		t.Errorf("after its interface was deleted NDS still resolves %s to %v", host, v.Resolve(host))
	}
}
