package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/test/istiod"
	"github.com/galleon-mesh/galleon/test/sidecar"
)

// dubboService is a Dubbo-like TCP service: one port 20880 ("tcp-dubbo"), STATIC providers.
type dubboService struct {
	name      string
	vip       string
	providers []string
}

func (s dubboService) host() string    { return s.name + ".dubbo.internal" }
func (s dubboService) cluster() string { return "outbound|20880||" + s.host() }

func (s dubboService) fileService(withVIP bool) fileService {
	fs := fileService{
		Name: s.name, Namespace: "dubbo", Hosts: []string{s.host()},
		Ports: []filePort{{Number: 20880, Protocol: "TCP", Name: "tcp-dubbo"}},
	}
	if withVIP {
		fs.Addresses = []string{s.vip}
	}
	for _, p := range s.providers {
		fs.Instances = append(fs.Instances, fileInstance{Address: p})
	}
	return fs
}

func (s dubboService) endpoints() []string {
	var out []string
	for _, p := range s.providers {
		out = append(out, p+":20880")
	}
	sort.Strings(out)
	return out
}

// sidecarPod is the pod whose sidecar's view the tests read.
func sidecarPod() sidecar.Pod {
	return sidecar.Pod{Name: "client-0", Namespace: "shop", IP: "10.99.0.1", Labels: map[string]string{"app": "client"}}
}

// httpHosts are the HTTP services' hosts and their one instance each.
func httpHosts() map[string]string {
	return map[string]string{"web.shop.internal": "10.30.1.1", "api.shop.internal": "10.30.2.1"}
}

func dubboServices() []dubboService {
	return []dubboService{
		{name: "order", vip: "240.100.0.1", providers: []string{"10.20.1.1", "10.20.1.2"}},
		{name: "user", vip: "240.100.0.2", providers: []string{"10.20.2.1"}},
		{name: "stock", vip: "240.100.0.3", providers: []string{"10.20.3.1"}},
	}
}

func httpServices() []fileService {
	var out []fileService
	hosts := httpHosts()
	for _, h := range slices.Sorted(maps.Keys(hosts)) {
		out = append(out, fileService{
			Name: strings.SplitN(h, ".", 2)[0], Namespace: "shop", Hosts: []string{h},
			Ports:     []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}},
			Instances: []fileInstance{{Address: hosts[h]}},
		})
	}
	return out
}

// TestSidecarViewOfFileRegistry checks galleon-file's services the way a sidecar sees them, from
// the xDS istiod sends a real sidecar (test/sidecar): Dubbo-like TCP services sharing port 20880
// each reach their own providers only when they have an address, and HTTP services sharing port
// 8080 are told apart by Host.
func TestSidecarViewOfFileRegistry(t *testing.T) { istiod.ForEachRelease(t, testSidecarView) }

func testSidecarView(t *testing.T, rel istiod.Release) {
	bin := galleonBinary(t, "galleon-file")
	t.Run("registry-addresses", func(t *testing.T) { testSidecarWithAddresses(t, rel, bin, false) })
	t.Run("allocated-addresses", func(t *testing.T) { testSidecarWithAddresses(t, rel, bin, true) })
	t.Run("without-addresses", func(t *testing.T) { testSidecarWithoutAddresses(t, rel, bin) })
}

// testSidecarWithAddresses: the TCP services have addresses, given in the registry file or, with
// allocated, none there and the ones galleon-file allocates (docs/vips.md), read back from the
// sidecar's name table.
func testSidecarWithAddresses(t *testing.T, rel istiod.Release, bin string, allocated bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dubbo := dubboServices()
	dir := t.TempDir()
	reg := fileRegistry{Services: httpServices()}
	for _, s := range dubbo {
		reg.Services = append(reg.Services, s.fileService(!allocated))
	}
	writeRegistryFile(t, dir, "services.yaml", reg)
	g := startGalleon(t, bin, "--file-dir", dir)
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: []string{g.Addr}})
	waitForServiceEntries(t, ctx, ist, "initial state", hasServiceEntries(reg))
	counters, err := ist.WaitPushed(ctx, istiod.PushCounters{})
	if err != nil {
		t.Fatal(err)
	}
	if allocated {
		// Every host, TCP and HTTP, has one allocated address in the name table; the TCP
		// services' become their VIPs below.
		v := waitForView(t, ctx, ist, "an address per host in the name table", func(v *sidecar.View) string {
			for _, h := range append(slices.Collect(maps.Keys(httpHosts())), dubbo[0].host(), dubbo[1].host(), dubbo[2].host()) {
				if ips := v.Resolve(h); len(ips) != 1 {
					return fmt.Sprintf("NDS resolves %s to %v", h, ips)
				}
			}
			return ""
		})
		seen := map[string]string{}
		for i := range dubbo {
			ip := v.Resolve(dubbo[i].host())[0]
			if addr, err := netip.ParseAddr(ip); err != nil || !netip.MustParsePrefix("240.0.0.0/4").Contains(addr) ||
				netip.MustParsePrefix("240.240.0.0/16").Contains(addr) {
				t.Fatalf("%s has the address %s, want one from 240.0.0.0/4 outside istiod's 240.240.0.0/16", dubbo[i].host(), ip)
			}
			if other, dup := seen[ip]; dup {
				t.Fatalf("%s and %s share the address %s", dubbo[i].host(), other, ip)
			}
			seen[ip] = dubbo[i].host()
			dubbo[i].vip = ip
			t.Logf("%s: allocated %s", dubbo[i].host(), ip)
		}
	}

	v := waitForView(t, ctx, ist, "a listener per VIP", func(v *sidecar.View) string {
		for _, s := range dubbo {
			if _, ok := v.Listeners[s.vip+"_20880"]; !ok {
				return "no listener " + s.vip + "_20880"
			}
		}
		return ""
	})
	t.Logf("LDS: %d listeners %v; with filter_chain_matcher: %v", len(v.Listeners), sidecar.Names(v.Listeners), v.UnifiedMatcherListeners())
	t.Logf("LDS shape, VIP listener:\n%s", v.DescribeListener(dubbo[0].vip+"_20880"))
	t.Logf("LDS shape, 0.0.0.0_20880 (absent when every TCP service has an address):\n%s", v.DescribeListener("0.0.0.0_20880"))
	t.Logf("LDS shape, 0.0.0.0_8080:\n%s", v.DescribeListener("0.0.0.0_8080"))
	t.Logf("LDS shape, virtual outbound:\n%s", v.DescribeListener("virtualOutbound"))

	// Each VIP reaches its service's own cluster, whose endpoints are its providers; a
	// provider's own IP never lands in another service's cluster; DNS capture answers the host
	// with its VIP.
	routes := make([]meshRoute, 0, len(dubbo))
	for _, s := range dubbo {
		routes = append(routes, meshRoute{host: s.host(), port: 20880, endpoints: s.endpoints(), address: s.vip})
	}
	wrong, _, seen := routeMismatches(v, routes)
	for _, w := range wrong {
		t.Error(w)
	}
	for _, s := range seen {
		t.Log(s)
	}
	// HTTP services share 0.0.0.0_8080, with addresses or without, and are told apart by Host.
	for h, instance := range httpHosts() {
		want := "outbound|8080||" + h
		for _, hostHeader := range []string{h, h + ":8080"} {
			d, err := v.HTTP("192.0.2.10", 8080, hostHeader)
			if err != nil {
				t.Errorf("HTTP to 192.0.2.10:8080 Host %s: %v", hostHeader, err)
			} else if !d.HTTP || d.Cluster != want {
				t.Errorf("HTTP to 192.0.2.10:8080 Host %s goes to %s, want cluster %s", hostHeader, d, want)
			} else if eps, err := v.Endpoints(d.Cluster); err != nil || !slices.Equal(eps, []string{instance + ":8080"}) {
				t.Errorf("cluster %s endpoints %v (%v), want [%s:8080]", d.Cluster, eps, err, instance)
			}
		}
		if allocated && len(v.Resolve(h)) != 1 {
			t.Errorf("NDS resolves %s to %v, want its one allocated address", h, v.Resolve(h))
		}
		t.Logf("NDS answers %s with %v", h, v.Resolve(h))
	}
	// An endpoint-only change of one TCP service is EDS-only, and the sidecar then sees it.
	before := counters
	dubbo[0].providers = []string{"10.20.1.1", "10.20.1.3"}
	reg.Services[slices.IndexFunc(reg.Services, func(s fileService) bool { return s.Name == dubbo[0].name })] = dubbo[0].fileService(!allocated)
	writeRegistryFile(t, dir, "services.yaml", reg)
	waitForServiceEntries(t, ctx, ist, "endpoint-only change of "+dubbo[0].host(), hasServiceEntries(reg))
	after, err := ist.WaitPushed(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	lastPush := time.Now() // the last push: 1.31 builds a new push context for EDS-only ones too
	t.Logf("endpoint-only change: full pushes +%v, EDS updates +%v", after.FullPushes-before.FullPushes, after.EDSUpdates-before.EDSUpdates)
	if after.FullPushes != before.FullPushes {
		t.Errorf("an endpoint-only change caused %v full pushes, want 0", after.FullPushes-before.FullPushes)
	}
	if after.EDSUpdates <= before.EDSUpdates {
		t.Errorf("an endpoint-only change caused no EDS update")
	}
	v = waitForView(t, ctx, ist, "the new endpoint", func(v *sidecar.View) string {
		if eps, err := v.Endpoints(dubbo[0].cluster()); err != nil || !slices.Equal(eps, dubbo[0].endpoints()) {
			return fmt.Sprintf("cluster %s endpoints %v (%v), want %v", dubbo[0].cluster(), eps, err, dubbo[0].endpoints())
		}
		return ""
	})
	if d := dial(t, v, dubbo[0].vip, 20880); d.Cluster != dubbo[0].cluster() {
		t.Errorf("after the endpoint change %s:20880 goes to %s, want %s", dubbo[0].vip, d, dubbo[0].cluster())
	}

	// No listener conflict. Checked last: istiod publishes its push status up to 10 s late.
	if c := listenerConflicts(t, ctx, ist, lastPush, "current push context", func(map[string]map[string]string) bool { return true }); len(c) > 0 {
		t.Errorf("istiod reports listener conflicts: %v", c)
	}
}

// testSidecarWithoutAddresses documents what istiod does with TCP services that share a port and
// have no address: one 0.0.0.0_20880 listener keeps one service's match-all chain, every
// connection on the port goes there, the others are reported as conflicts, and DNS capture
// answers none of them. It shows the checks of testSidecarWithAddresses can fail.
func testSidecarWithoutAddresses(t *testing.T, rel istiod.Release, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dubbo := dubboServices()
	dir := t.TempDir()
	var reg fileRegistry
	for _, s := range dubbo {
		reg.Services = append(reg.Services, s.fileService(false))
	}
	writeRegistryFile(t, dir, "services.yaml", reg)
	g := startGalleon(t, bin, "--file-dir", dir, "--vip-allocate=false")
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: []string{g.Addr}})
	waitForServiceEntries(t, ctx, ist, "initial state", hasServiceEntries(reg))
	if _, err := ist.WaitPushed(ctx, istiod.PushCounters{}); err != nil {
		t.Fatal(err)
	}
	lastPush := time.Now()
	v := waitForView(t, ctx, ist, "a cluster per service", func(v *sidecar.View) string {
		for _, s := range dubbo {
			if _, ok := v.Clusters[s.cluster()]; !ok {
				return "no cluster " + s.cluster()
			}
		}
		return ""
	})
	if _, ok := v.Listeners["0.0.0.0_20880"]; !ok {
		t.Fatalf("no listener 0.0.0.0_20880 (listeners %v): were the services given addresses?", sidecar.Names(v.Listeners))
	}
	t.Logf("LDS shape, 0.0.0.0_20880 without addresses:\n%s", v.DescribeListener("0.0.0.0_20880"))

	var reachable []string
	survivor := ""
	for _, s := range dubbo {
		for _, p := range s.providers {
			d := dial(t, v, p, 20880)
			if d.Listener != "0.0.0.0_20880" {
				t.Errorf("%s:20880 handled by %s, want listener 0.0.0.0_20880", p, d)
			}
			if survivor == "" {
				survivor = d.Cluster
			} else if d.Cluster != survivor {
				t.Errorf("%s:20880 goes to %s, want the one surviving cluster %s", p, d.Cluster, survivor)
			}
			if d.Cluster == s.cluster() && !slices.Contains(reachable, s.host()) {
				reachable = append(reachable, s.host())
			}
		}
		if ips := v.Resolve(s.host()); len(ips) != 0 {
			t.Errorf("NDS resolves %s to %v, want nothing (a ServiceEntry without address is 0.0.0.0)", s.host(), ips)
		}
	}
	if len(reachable) != 1 {
		t.Errorf("services reachable through 0.0.0.0_20880: %v, want exactly one", reachable)
	}
	t.Logf("0.0.0.0_20880 goes to %s for every destination; reachable: %v", survivor, reachable)
	listenerConflicts(t, ctx, ist, lastPush, "TCP-over-TCP conflict on 0.0.0.0_20880", func(c map[string]map[string]string) bool {
		_, ok := c["pilot_conflict_outbound_listener_tcp_over_current_tcp"]["0.0.0.0_20880"]
		return ok
	})
}

// hasServiceEntries is a waitForServiceEntries condition: istiod holds every service of reg with
// its endpoints.
func hasServiceEntries(reg fileRegistry) func(map[string]serviceEntry) string {
	return func(ses map[string]serviceEntry) string {
		for _, s := range reg.Services {
			key := s.Namespace + "/" + s.Name
			var want []string
			for _, i := range s.Instances {
				want = append(want, i.Address)
			}
			sort.Strings(want)
			if msg := endpointsAre(key, want...)(ses); msg != "" {
				return msg
			}
		}
		return ""
	}
}

// waitForView fetches the sidecar's view from istiod until ok returns "" (ok says what is still
// wrong otherwise).
func waitForView(t *testing.T, ctx context.Context, ist *istiod.Istiod, what string, ok func(*sidecar.View) string) *sidecar.View {
	t.Helper()
	var v *sidecar.View
	missing := "nothing fetched yet"
	start := time.Now()
	err := ist.WaitFor(ctx, func() (bool, error) {
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		var err error
		if v, err = sidecar.Fetch(fctx, ist.GRPCAddr, sidecarPod()); err != nil {
			return false, err
		}
		missing = ok(v)
		return missing == "", nil
	})
	if err != nil {
		names := []string{}
		if v != nil {
			names = sidecar.Names(v.Listeners)
		}
		t.Fatalf("sidecar view, %s: %v; still wrong: %s; listeners %v", what, err, missing, names)
	}
	t.Logf("sidecar view, %s: after %v (versions %v)", what, time.Since(start).Round(time.Millisecond), v.Versions)
	return v
}

func dial(t *testing.T, v *sidecar.View, ip string, port uint32) sidecar.Destination {
	t.Helper()
	d, err := v.Dial(ip, port)
	if err != nil {
		t.Fatalf("Dial %s:%d: %v", ip, port, err)
	}
	return d
}

// pushStatusRefresh is how often istiod publishes its current push context on
// /debug/push_status when no full push does (pilot/pkg/xds/discovery.go periodicRefreshMetrics,
// 10 s in 1.29 and 1.31), plus a margin.
const pushStatusRefresh = 12 * time.Second

// listenerConflicts waits until istiod's /debug/push_status shows the push context of its last
// push (made at lastPush, and before the views were fetched) and ok accepts its pilot_conflict_*
// entries (metric -> listener -> message), and returns them. A sidecar's listener conflicts are
// recorded in the push context its listeners were built from; istiod publishes a push context
// there only when a full push replaces it, or on a 10 s tick: before that the page shows an
// older one (or nothing), which would hide every conflict. (1.31 builds a push context for every
// push, EDS-only ones included, hence "last push".)
func listenerConflicts(t *testing.T, ctx context.Context, ist *istiod.Istiod, lastPush time.Time, what string, ok func(map[string]map[string]string) bool) map[string]map[string]string {
	t.Helper()
	var out map[string]map[string]string
	ctx, cancel := context.WithTimeout(ctx, pushStatusRefresh+30*time.Second)
	defer cancel()
	start := time.Now()
	err := ist.WaitFor(ctx, func() (bool, error) {
		if wait := time.Until(lastPush.Add(pushStatusRefresh)); wait > 0 {
			return false, fmt.Errorf("push status may still show an older push context for %v", wait.Round(time.Millisecond))
		}
		b, err := ist.Get(ctx, "/debug/push_status")
		if err != nil {
			return false, err
		}
		if len(b) == 0 {
			return false, fmt.Errorf("/debug/push_status is empty: no push context published yet")
		}
		var status map[string]map[string]struct {
			Proxy   string `json:"proxy"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(b, &status); err != nil {
			return false, fmt.Errorf("/debug/push_status: %v: %s", err, b)
		}
		out = map[string]map[string]string{}
		for metric, byKey := range status {
			if !strings.HasPrefix(metric, "pilot_conflict") {
				continue
			}
			out[metric] = map[string]string{}
			for k, e := range byKey {
				out[metric][k] = e.Message
			}
		}
		if !ok(out) {
			return false, fmt.Errorf("conflicts %v", out)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("push status, %s: %v", what, err)
	}
	t.Logf("push status, %s: after %v: conflicts %v", what, time.Since(start).Round(time.Millisecond), out)
	return out
}
