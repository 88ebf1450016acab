package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/internal/nacosclient"
	"github.com/galleon-mesh/galleon/test/istiod"
)

// The Nacos registry of TestNacosToIstiod: a Nacos namespace "shop" (not public: galleon-nacos is
// told which namespaces to watch) holding orders in DEFAULT_GROUP, whose instances come and go,
// and payments in group PAY, one instance there throughout. The ServiceEntries go to the Istio
// namespace nacosMeshNS (--namespace), with the default host template
// (<service>.<group>.<namespace>.nacos, each part a DNS label).
const (
	nacosNS         = "shop"
	nacosOrders     = "orders"
	nacosPayments   = "payments"
	nacosPayGroup   = "PAY"
	nacosPort       = 8080
	nacosMeshNS     = "mesh-nacos"
	nacosOrdersHost = "orders.default-group.shop.nacos"
	nacosPaymentsIP = "10.81.0.1"
)

// nacosOrder is instance i of orders as its application registers it: 10.80.0.<i>:8080,
// metadata version=v1, ephemeral (bound to the client's gRPC connection).
func nacosOrder(i int) nacosclient.Instance {
	return nacosclient.Instance{IP: fmt.Sprintf("10.80.0.%d", i), Port: nacosPort, Weight: 1, Metadata: map[string]string{"version": "v1"}}
}

// nacosServerAddr is s as the official client is given it.
func nacosServerAddr(s *nacostest.Server) nacosclient.Server {
	return nacosclient.Server{HTTPAddr: s.HTTPAddr, GRPCAddr: s.GRPCAddr}
}

// nacosIPs are the IPs of the instances listed (the enabled ones: Nacos and Polaris list no
// other), sorted.
func nacosIPs(si *nacostest.ServiceInfo) []string {
	var out []string
	for _, in := range si.Hosts {
		if in.Enabled {
			out = append(out, in.IP)
		}
	}
	sort.Strings(out)
	return out
}

// waitNacosListed waits until s lists exactly the instances ips of ref over the Nacos HTTP API
// (GET /nacos/v1/ns/instance/list, as a Nacos 1.x client or an operator reads it).
func waitNacosListed(t *testing.T, ctx context.Context, s *nacostest.Server, ref nacostest.Ref, ips ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := s.Client().WaitInstances(ctx, ref, func(si *nacostest.ServiceInfo) bool { return slices.Equal(nacosIPs(si), ips) }); err != nil {
		t.Fatalf("%s does not list instances %v of %s: %v", s.HTTPAddr, ips, ref.Grouped(), err)
	}
}

// endpointWeights are the endpoint weights of a ServiceEntry as istiod holds it, by address.
func endpointWeights(se serviceEntry) (map[string]uint32, error) {
	var raw struct {
		Endpoints []struct {
			Address string `json:"address"`
			Weight  uint32 `json:"weight"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(se.Config.Spec, &raw); err != nil {
		return nil, err
	}
	out := map[string]uint32{}
	for _, e := range raw.Endpoints {
		out[e.Address] = e.Weight
	}
	return out, nil
}

// nacosKeyOf is the key ("namespace/name") and host of the ServiceEntry whose one host starts
// with prefix, or "" when there is none or more than one.
func nacosKeyOf(ses map[string]serviceEntry, prefix string) (key, host string) {
	for k, se := range ses {
		if len(se.Spec.Hosts) == 1 && strings.HasPrefix(se.Spec.Hosts[0], prefix) {
			if key != "" {
				return "", ""
			}
			key, host = k, se.Spec.Hosts[0]
		}
	}
	return key, host
}

// TestNacosToIstiod runs two real Nacos API servers (polaris-server's service-nacos, see
// adapters/nacos/nacostest), applications registering in each through the official Go client
// (nacos-sdk-go v2, gRPC, ephemeral instances) as a Nacos 2 application does, galleon-nacos
// reading them (--nacos-servers A,B; a Nacos namespace other than public, every group) and a
// real istiod reading galleon-nacos over MCP. The ServiceEntries land in the Istio namespace
// --namespace names. An instance disabled (enabled=false) and enabled again, one deregistered and
// a weight change must be EDS-only updates in istiod; so must the changes of a service in another
// group, which Polaris never pushes and galleon-nacos's refresh (--nacos-refresh-interval) finds
// and counts as lost pushes. When server A, the one galleon-nacos reads,
// crashes, galleon-nacos must go on with B without istiod ever losing the service or one of its
// endpoints, and an instance registered only in B must reach istiod. The last instance leaving
// keeps the ServiceEntry with no endpoints; deleting the service removes it. Throughout, a
// sidecar's view of istiod (test/sidecar) must resolve both services to addresses of their own
// and route an HTTP request to each to its own instances.
func TestNacosToIstiod(t *testing.T) { istiod.ForEachRelease(t, testNacosToIstiod) }

func testNacosToIstiod(t *testing.T, rel istiod.Release) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	bin := galleonBinary(t, "galleon-nacos")
	srvA := nacostest.Start(t, nacostest.Options{})
	srvB := nacostest.Start(t, nacostest.Options{})
	// Cleanups run last-registered first: the servers crash after galleon-nacos, istiod and the
	// clients have stopped (SIGTERM takes polaris-server 5-15 s).
	t.Cleanup(func() { srvB.Kill(t); srvA.Kill(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// 1. An application process per server: the official client, connected to that server alone
	// (Polaris servers do not replicate to each other; writing both stands for a Nacos
	// cluster's own replication, as TestEurekaToIstiod does).
	clientOpts := func(s *nacostest.Server) nacosclient.Options {
		// The client logs from goroutines of its own, possibly after the test: not t.Logf.
		return nacosclient.Options{Servers: []nacosclient.Server{nacosServerAddr(s)}, Namespace: nacosNS}
	}
	cA := nacosclient.New(t, clientOpts(srvA))
	cB := nacosclient.New(t, clientOpts(srvB))
	live := []*nacosclient.Client{cA, cB}
	servers := []*nacostest.Server{srvA, srvB}
	inEachClient := func(what string, f func(*nacosclient.Client) error) {
		t.Helper()
		for i, c := range live {
			if err := f(c); err != nil {
				t.Fatalf("%s (client %d): %v", what, i+1, err)
			}
		}
	}
	for i := 1; i <= 3; i++ {
		inEachClient("registering orders-"+fmt.Sprint(i), func(c *nacosclient.Client) error {
			return c.Register("", nacosOrders, nacosOrder(i))
		})
	}
	inEachClient("registering payments-1", func(c *nacosclient.Client) error {
		return c.Register(nacosPayGroup, nacosPayments, nacosclient.Instance{IP: nacosPaymentsIP, Port: nacosPort})
	})
	listed := func(ips ...string) {
		t.Helper()
		for _, s := range servers {
			waitNacosListed(t, ctx, s, nacostest.Ref{Namespace: nacosNS, Service: nacosOrders}, ips...)
		}
	}
	listed("10.80.0.1", "10.80.0.2", "10.80.0.3")
	for _, s := range servers {
		waitNacosListed(t, ctx, s, nacostest.Ref{Namespace: nacosNS, Group: nacosPayGroup, Service: nacosPayments}, nacosPaymentsIP)
	}

	// 2. galleon-nacos on A then B, and istiod. --nacos-refresh-interval 1s (default 1m): Polaris
	// never pushes a change of a service outside DEFAULT_GROUP (payments, in PAY), so its
	// changes reach galleon-nacos by the refresh alone; a short one keeps the test short.
	args := []string{"--nacos-servers", srvA.HTTPAddr + "," + srvB.HTTPAddr,
		"--nacos-namespaces", nacosNS, "--namespace", nacosMeshNS,
		"--nacos-discovery-interval", "1s", "--nacos-refresh-interval", "1s", "--debounce-quiet", "20ms"}
	// The last-endpoint label only where istiod needs it (step 7), as TestZooKeeperToIstiod.
	labelled := !rel.ClearsLastEndpoint()
	if !labelled {
		args = append(args, "--no-endpoints-label=false")
	}
	g := startGalleon(t, bin, args...)
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: []string{g.Addr}})

	var ordersKey, paymentsKey, paymentsHost string
	shapeOf := func(se serviceEntry, host string) string {
		if !slices.Equal(se.Spec.Hosts, []string{host}) {
			return fmt.Sprintf("hosts %v, want [%s]", se.Spec.Hosts, host)
		}
		if len(se.Spec.Ports) != 1 || se.Spec.Ports[0].Number != nacosPort {
			return fmt.Sprintf("ports %+v, want one: %d", se.Spec.Ports, nacosPort)
		}
		if se.Spec.Resolution != "STATIC" {
			return fmt.Sprintf("resolution %q, want STATIC", se.Spec.Resolution)
		}
		return ""
	}
	// holdsWith: orders has the endpoints want, payments those of payments, both their shape,
	// and nothing else is held.
	holdsWith := func(payments []string, want ...string) func(map[string]serviceEntry) string {
		return func(ses map[string]serviceEntry) string {
			if ordersKey == "" {
				if ordersKey, _ = nacosKeyOf(ses, nacosOrdersHost); ordersKey == "" {
					return "no ServiceEntry with host " + nacosOrdersHost
				}
			}
			if paymentsKey == "" {
				if paymentsKey, paymentsHost = nacosKeyOf(ses, nacosPayments+"."); paymentsKey == "" {
					return "no one ServiceEntry with a host payments.*"
				}
			}
			if m := endpointsAre(ordersKey, want...)(ses); m != "" {
				return m
			}
			if m := shapeOf(ses[ordersKey], nacosOrdersHost); m != "" {
				return ordersKey + ": " + m
			}
			if m := endpointsAre(paymentsKey, payments...)(ses); m != "" {
				return m
			}
			if m := shapeOf(ses[paymentsKey], paymentsHost); m != "" {
				return paymentsKey + ": " + m
			}
			if len(ses) != 2 {
				return fmt.Sprintf("istiod holds %d ServiceEntries, want %s and %s alone", len(ses), ordersKey, paymentsKey)
			}
			return ""
		}
	}
	holds := func(want ...string) func(map[string]serviceEntry) string {
		return holdsWith([]string{nacosPaymentsIP}, want...)
	}
	ses := waitForServiceEntries(t, ctx, ist, "initial state", holds("10.80.0.1", "10.80.0.2", "10.80.0.3"))
	// The Istio namespace is the flag's, whatever the Nacos namespace and group are called.
	for _, k := range []string{ordersKey, paymentsKey} {
		if ns, _, _ := strings.Cut(k, "/"); ns != nacosMeshNS {
			t.Errorf("ServiceEntry %s is in Istio namespace %q, want %q (--namespace)", k, ns, nacosMeshNS)
		}
	}
	t.Logf("orders is %s (host %s), payments (group %s) is %s (host %s); orders' endpoint labels: %v",
		ordersKey, nacosOrdersHost, nacosPayGroup, paymentsKey, paymentsHost, ses[ordersKey].Spec.Endpoints[0].Labels)
	// Hosts are unique per (namespace, group, service): the Nacos namespace and group are in them.
	if !strings.HasSuffix(paymentsHost, "."+nacosNS+".nacos") || paymentsHost == nacosPayments+".default-group."+nacosNS+".nacos" {
		t.Errorf("payments (group %s, namespace %s) has host %s: want its group and namespace in it", nacosPayGroup, nacosNS, paymentsHost)
	}
	if v := ses[ordersKey].Spec.Endpoints[0].Labels["version"]; v != "v1" {
		t.Errorf("orders' endpoint labels %v: want version=v1 (the instance's metadata)", ses[ordersKey].Spec.Endpoints[0].Labels)
	}
	counters, err := ist.WaitPushed(ctx, istiod.PushCounters{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after initial sync: %+v", counters)

	// A sidecar's view: both services on 8080, each on an address of its own that it keeps.
	// The port's protocol is whatever the mapping makes of an instance without a protocol:
	// routed as TCP (no Host) unless it is an HTTP kind.
	httpPort := func(se serviceEntry) bool {
		switch se.Spec.Ports[0].Protocol {
		case "HTTP", "HTTP2", "GRPC":
			return true
		}
		return false
	}
	ordersHTTP, paymentsHTTP := httpPort(ses[ordersKey]), httpPort(ses[paymentsKey])
	paymentsRoute := meshRoute{host: paymentsHost, port: nacosPort, http: paymentsHTTP, endpoints: portEndpoints(nacosPort, nacosPaymentsIP)}
	_, addrs := expectRoutes(t, ctx, ist, "initial state", []meshRoute{
		{host: nacosOrdersHost, port: nacosPort, http: ordersHTTP, endpoints: portEndpoints(nacosPort, "10.80.0.1", "10.80.0.2", "10.80.0.3")}, paymentsRoute})
	checkRoutes := func(what string, ips ...string) {
		t.Helper()
		expectRoutes(t, ctx, ist, what, withAddresses([]meshRoute{
			{host: nacosOrdersHost, port: nacosPort, http: ordersHTTP, endpoints: portEndpoints(nacosPort, ips...)}, paymentsRoute}, addrs))
	}
	cluster := fmt.Sprintf("outbound|%d||%s", nacosPort, nacosOrdersHost)
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

	// change makes a change, waits until istiod's ServiceEntries satisfy ok and istiod has
	// pushed, and returns the full pushes it caused.
	change := func(what string, do func(), ok func(map[string]serviceEntry) string) float64 {
		t.Helper()
		before := counters
		do()
		// A change reaches istiod in about a second (Polaris publishes its cache every second):
		// a minute is plenty, and a failure says so before the test's own deadline.
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		waitForServiceEntries(t, wctx, ist, what, ok)
		after, err := ist.WaitPushed(ctx, before)
		if err != nil {
			t.Fatalf("%s: istiod did not push: %v", what, err)
		}
		counters = after
		t.Logf("%s: full pushes +%v, EDS updates +%v", what, after.FullPushes-before.FullPushes, after.EDSUpdates-before.EDSUpdates)
		return after.FullPushes - before.FullPushes
	}

	// 3. An operator disables orders-2 (enabled=false, the console's "offline") and enables it
	// again: endpoints only, no full push.
	disabled := nacosOrder(2)
	disabled.Disabled = true
	if full := change("orders-2 disabled", func() {
		inEachClient("disabling orders-2", func(c *nacosclient.Client) error { return c.Update("", nacosOrders, disabled) })
	}, holds("10.80.0.1", "10.80.0.3")); full != 0 {
		t.Errorf("an instance disabled caused %v full pushes in istiod, want 0 (EDS only)", full)
	}
	proxyGets("orders-2 disabled", "10.80.0.1", "10.80.0.3")
	if full := change("orders-2 enabled again", func() {
		inEachClient("enabling orders-2", func(c *nacosclient.Client) error { return c.Update("", nacosOrders, nacosOrder(2)) })
	}, holds("10.80.0.1", "10.80.0.2", "10.80.0.3")); full != 0 {
		t.Errorf("an instance enabled again caused %v full pushes in istiod, want 0 (EDS only)", full)
	}

	// 4. orders-1's weight goes from 1 to 3: the endpoint weights keep Nacos's ratio (whatever
	// the scale), EDS only.
	heavy := nacosOrder(1)
	heavy.Weight = 3
	if full := change("orders-1 weight 3", func() {
		inEachClient("weighting orders-1", func(c *nacosclient.Client) error { return c.Update("", nacosOrders, heavy) })
	}, func(ses map[string]serviceEntry) string {
		if m := holds("10.80.0.1", "10.80.0.2", "10.80.0.3")(ses); m != "" {
			return m
		}
		w, err := endpointWeights(ses[ordersKey])
		if err != nil {
			return err.Error()
		}
		if w["10.80.0.2"] == 0 || w["10.80.0.1"] != 3*w["10.80.0.2"] {
			return fmt.Sprintf("endpoint weights %v: want 10.80.0.1's three times 10.80.0.2's", w)
		}
		return ""
	}); full != 0 {
		t.Errorf("a weight change caused %v full pushes in istiod, want 0 (EDS only)", full)
	}

	// 5. orders-3 is deregistered (its application stops): EDS only.
	if full := change("orders-3 deregistered", func() {
		inEachClient("deregistering orders-3", func(c *nacosclient.Client) error { return c.Deregister("", nacosOrders, nacosOrder(3)) })
	}, holds("10.80.0.1", "10.80.0.2")); full != 0 {
		t.Errorf("an instance deregistered caused %v full pushes in istiod, want 0 (EDS only)", full)
	}
	proxyGets("orders-3 deregistered", "10.80.0.1", "10.80.0.2")
	checkRoutes("orders-3 deregistered", "10.80.0.1", "10.80.0.2")

	// A change in a group other than DEFAULT_GROUP: payments-2 joins in PAY and leaves. Polaris
	// pushes no change of such a service to its subscribers (docs/adapters/nacos.md, "Polaris
	// differences"): galleon-nacos must find it all the same, EDS only.
	payments2 := nacosclient.Instance{IP: "10.81.0.2", Port: nacosPort}
	for _, step := range []struct {
		what string
		do   func(*nacosclient.Client) error
		ips  []string
	}{
		{"payments-2 joins in group PAY", func(c *nacosclient.Client) error { return c.Register(nacosPayGroup, nacosPayments, payments2) }, []string{nacosPaymentsIP, "10.81.0.2"}},
		{"payments-2 leaves group PAY", func(c *nacosclient.Client) error { return c.Deregister(nacosPayGroup, nacosPayments, payments2) }, []string{nacosPaymentsIP}},
	} {
		if full := change(step.what, func() { inEachClient(step.what, step.do) }, holdsWith(step.ips, "10.80.0.1", "10.80.0.2")); full != 0 {
			t.Errorf("%s caused %v full pushes in istiod, want 0 (EDS only)", step.what, full)
		}
	}
	// Both servers list the same before A goes: what B serves after the failover is what A
	// served.
	listed("10.80.0.1", "10.80.0.2")

	// 6. A crashes; an instance then registers in B alone. galleon-nacos must move to B: istiod
	// gets orders-4 and, from the crash on, never holds less than orders-1 and orders-2.
	before := counters
	srvA.Kill(t)
	crashed := time.Now()
	// A's application process loses its server; closing its client now deregisters nothing.
	cA.Close()
	live = []*nacosclient.Client{cB}
	inEachClient("registering orders-4 in B", func(c *nacosclient.Client) error { return c.Register("", nacosOrders, nacosOrder(4)) })
	want := []string{"10.80.0.1", "10.80.0.2", "10.80.0.4"}
	var seen []string
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
			t.Fatalf("after A crashed, look %d: istiod lost %s (endpoint lists seen: %v)", looks, ordersKey, seen)
		}
		eps := se.endpoints()
		if s := fmt.Sprint(eps); len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		for _, e := range want[:2] {
			if !slices.Contains(eps, e) {
				t.Fatalf("after A crashed, look %d: istiod's endpoints of %s are %v: %s left (endpoint lists seen: %v)", looks, ordersKey, eps, e, seen)
			}
		}
		if m := shapeOf(se, nacosOrdersHost); m != "" {
			t.Fatalf("after A crashed, look %d: %s: %s", looks, ordersKey, m)
		}
		if _, ok := ses[paymentsKey]; !ok {
			t.Fatalf("after A crashed, look %d: istiod lost %s", looks, paymentsKey)
		}
		if slices.Equal(eps, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("istiod did not hold %v for %s within a minute of A's crash (endpoint lists seen: %v; galleon-nacos's log:\n%s)", want, ordersKey, seen, g.Tail(30))
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
	proxyGets("after the failover", want...)
	checkRoutes("after the failover", want...)
	// galleon-nacos's own account: A degraded, B serving, not stale.
	var status *galleonStatusReport
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := g.WaitFor(wctx, func() (bool, error) {
		var err error
		if status, err = galleonStatus(ctx, g); err != nil {
			return false, err
		}
		_, degradedA := status.Degraded[srvA.HTTPAddr]
		return status.Synced && !status.Stale && degradedA, nil
	}); err != nil {
		t.Errorf("galleon-nacos after A crashed: /debug/status %+v: want synced, not stale, %s degraded (%v)", status, srvA.HTTPAddr, err)
	}

	// 7. The instances leave one by one: the last one leaving keeps the ServiceEntry with its
	// port and no endpoints (see TestZooKeeperToIstiod for why istiod 1.29 needs a full push,
	// the no-endpoints label, there); deleting the service removes it.
	wantFull, why := 0.0, "EDS only: this istiod clears the last endpoint itself"
	if labelled {
		wantFull, why = 1, "the label that makes istiod clear the endpoints"
	}
	for _, step := range []struct {
		i    int
		left []string
	}{{4, []string{"10.80.0.1", "10.80.0.2"}}, {2, []string{"10.80.0.1"}}} {
		if full := change(fmt.Sprintf("orders-%d deregistered", step.i), func() {
			inEachClient("deregistering", func(c *nacosclient.Client) error { return c.Deregister("", nacosOrders, nacosOrder(step.i)) })
		}, holds(step.left...)); full != 0 {
			t.Errorf("orders-%d leaving caused %v full pushes in istiod, want 0 (EDS only)", step.i, full)
		}
	}
	if full := change("the last instance, orders-1, deregistered", func() {
		inEachClient("deregistering orders-1", func(c *nacosclient.Client) error { return c.Deregister("", nacosOrders, heavy) })
	}, holds()); full != wantFull {
		t.Errorf("the last instance leaving caused %v full pushes in istiod, want %v (%s)", full, wantFull, why)
	}
	proxyGets("no instance left")
	checkRoutes("no instance left") // the host keeps its address; its cluster has no endpoint

	// The service itself is deleted (the console's or the OpenAPI's DELETE
	// /nacos/v1/ns/service): its ServiceEntry goes, payments stays.
	if full := change("orders deleted", func() {
		if err := srvB.Client().DeleteService(ctx, nacostest.Ref{Namespace: nacosNS, Service: nacosOrders}); err != nil {
			t.Fatalf("deleting orders in B: %v", err)
		}
	}, func(ses map[string]serviceEntry) string {
		if _, ok := ses[ordersKey]; ok {
			return ordersKey + " still held"
		}
		if len(ses) != 1 {
			return fmt.Sprintf("%d ServiceEntries, want %s alone", len(ses), paymentsKey)
		}
		return endpointsAre(paymentsKey, nacosPaymentsIP)(ses)
	}); full < 1 {
		t.Errorf("removing the service caused %v full pushes in istiod, want >= 1", full)
	}
	proxyGets("orders deleted")
	if v, _ := expectRoutes(t, ctx, ist, "orders deleted", withAddresses([]meshRoute{paymentsRoute}, addrs)); v.Resolve(nacosOrdersHost) != nil {
		t.Errorf("after orders was deleted NDS still resolves %s to %v", nacosOrdersHost, v.Resolve(nacosOrdersHost))
	}

	// The evidence of the lost pushes: the two changes of payments (group PAY) came by the
	// refresh alone, each counted once no push had brought it for 5 s; those of orders
	// (DEFAULT_GROUP) were pushed, and are not counted.
	var lost float64
	wctx, wcancel = context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	err = g.WaitFor(wctx, func() (bool, error) {
		fams, _, err := scrapeMetrics(ctx, g)
		if err != nil {
			return false, err
		}
		lost, _ = metricSum(fams, "galleon_nacos_refresh_changes_total", nil)
		return lost >= 2, nil
	})
	if err != nil || lost != 2 {
		t.Errorf("galleon_nacos_refresh_changes_total is %v (%v), want 2: payments-2 joining and leaving group PAY, which Polaris does not push", lost, err)
	}
}
