package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/model"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// TestLayoutsAndRoots: --zk-layout lists layouts, --zk-root gives each its root (one path, or
// layout=path entries), the layouts of one root are one tree, and every wrong combination is
// refused naming the flag and what to fix (no server).
func TestLayoutsAndRoots(t *testing.T) {
	for _, tc := range []struct {
		layout, root string
		want         string // trees as root=kinds;... or the error's substring
		wantErr      bool
	}{
		{"", "", "/services=curator", false},
		{"dubbo", "", "/dubbo=dubbo", false},
		{"dubbo3", "/apps", "/apps=dubbo3", false},
		{"curator,dubbo,dubbo3", "", "/services=curator+dubbo3;/dubbo=dubbo", false},
		{"all", "", "/services=curator+dubbo3;/dubbo=dubbo", false},
		{" dubbo3 , curator ", "", "/services=dubbo3+curator", false},
		{"curator,dubbo3", "/apps", "/apps=curator+dubbo3", false},
		{"curator,dubbo,dubbo3", "dubbo=/reg,dubbo3=/apps", "/services=curator;/reg=dubbo;/apps=dubbo3", false},
		{"curator,dubbo", "curator=/a, dubbo=/b", "/a=curator;/b=dubbo", false},
		{"curator,dubbo", "/services", "a Dubbo 2 registry needs a root of its own", true},
		{"curator,dubbo", "dubbo=/services", "a Dubbo 2 registry needs a root of its own", true},
		{"curator", "dubbo3=/apps", "--zk-layout does not list dubbo3", true},
		{"curator,dubbo", "curator=/a,curator=/b", "curator is given two roots", true},
		{"curator,dubbo", "curator=/a,dubbo=/a/dubbo", "lie inside one another", true},
		{"curator,dubbo", "curator=/a,etcd=/b", "want one path for every layout", true},
		{"curator,dubbo3", "dubbo3=apps", "want an absolute znode path", true},
		{"curator,curator", "", "curator is listed twice", true},
		{"curator,etcd", "", `--zk-layout "etcd"`, true},
	} {
		r, err := New(Config{Servers: []string{"127.0.0.1:2181"}, Layout: tc.layout, Root: tc.root})
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("--zk-layout %q --zk-root %q: err = %v, want one saying %q", tc.layout, tc.root, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("--zk-layout %q --zk-root %q: %v", tc.layout, tc.root, err)
			continue
		}
		var got []string
		for _, tr := range r.trees {
			got = append(got, tr.root+"="+kindsString(tr.kinds))
		}
		if g := strings.Join(got, ";"); g != tc.want {
			t.Errorf("--zk-layout %q --zk-root %q: trees %s, want %s", tc.layout, tc.root, g, tc.want)
		}
	}
}

// TestSharedRootTellsNodesApart: in a root Curator and Dubbo 3 share, each node is read by the
// rules of what it is, exactly as its own layout reads it; a node that is neither is rejected as
// in the Curator layout; Dubbo 2's categories are no instances (no server).
func TestSharedRootTellsNodesApart(t *testing.T) {
	sh := newTree(treeConf{root: "/services", kinds: []layoutKind{kindCurator, kindDubbo3}}, nil).layout
	d3 := newDubbo3(nil)
	for _, tc := range []struct {
		name, id string
		data     []byte
		as       layout
		kind     layoutKind
	}{
		{"spring", "a1", curatorJSON("orders", "a1", "10.0.0.1", 8080, 8443, map[string]string{"protocol": "grpc", "zone": "z1"}), curator{}, kindCurator},
		{"spring, out of service", "a2", curatorJSON("orders", "a2", "10.0.0.2", 8080, 0, map[string]string{statusKey: statusOutOfService}), curator{}, kindCurator},
		{"spring, a dubbo.version label", "a3", curatorJSON("orders", "a3", "10.0.0.3", 8080, 0, map[string]string{"dubbo.version": "2"}), curator{}, kindCurator},
		{"java dubbo 3", "10.0.0.1:20880", dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(dubboTri, map[string]any{"region": "eu"})), d3, kindDubbo3},
		{"dubbo 3 without endpoints", "10.0.0.2:20880", dubbo3JSON("demo-provider", "10.0.0.2", 20880, dubbo3Meta("", nil)), d3, kindDubbo3},
	} {
		want, werr := tc.as.parseInstance(tc.name, tc.id, tc.data)
		got, err := sh.parseInstance(tc.name, tc.id, tc.data)
		if werr != nil || err != nil {
			t.Errorf("%s: shared root: %v; own layout: %v", tc.name, err, werr)
			continue
		}
		if got.kind != tc.kind {
			t.Errorf("%s: read as %s, want %s", tc.name, got.kind, tc.kind)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: shared root reads\n%+v\nits own layout\n%+v", tc.name, got, want)
		}
	}
	for _, tc := range []struct {
		name, id string
		data     []byte
		reason   string
	}{
		{"not JSON", "x", []byte(`{"name": "orders", "address": `), reasonJSON},
		{"no data", "x", nil, reasonJSON},
		{"no address", "x", []byte(`{"name":"orders","port":8080}`), reasonAddress},
		{"dubbo 3, endpoints not JSON", "10.0.0.1:20880", dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(`[{"port":`, nil)), reasonParameter},
		{"spring, unknown protocol", "a1", curatorJSON("orders", "a1", "10.0.0.1", 8080, 0, map[string]string{"protocol": "carrier-pigeon"}), reasonProtocol},
	} {
		_, err := sh.parseInstance("orders", tc.id, tc.data)
		if err == nil || errors.Is(err, errNotInstance) || reasonOf(err) != tc.reason {
			t.Errorf("%s: err = %v (reason %s), want a rejection with reason %s", tc.name, err, reasonOf(err), tc.reason)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(dubboCategories)) {
		if _, err := sh.parseInstance("org.apache.demo.DemoService", id, nil); !errors.Is(err, errNotInstance) {
			t.Errorf("%s: err = %v, want no instance (Dubbo 3 with register-mode all)", id, err)
		}
	}
}

// mixedTrees writes, under root prefix p, a Dubbo 2 registry (p/dubbo) and Curator services and
// Dubbo 3 applications side by side (p/services). solo writes each alone, under p/solo-<layout>,
// for the single-layout runs the mixed one is compared with.
type mixedTrees struct {
	cur, d3 writer
	d2      dubboWriter
}

func newMixedTrees(t *testing.T, addr, services, dubboRoot string) *mixedTrees {
	t.Helper()
	c := client(t, addr)
	m := &mixedTrees{cur: writer{c: c, root: services}, d3: writer{c: c, root: services}, d2: dubboWriter{c: c, root: dubboRoot}}
	m.cur.ensureRoot(t)
	if err := m.d2.ensure(dubboRoot); err != nil {
		t.Fatal(err)
	}
	return m
}

// fill writes the test's registry, for the layouts listed: two Spring services, two Dubbo 3
// applications (one named as no DNS label), two Dubbo 2 interfaces (one with two variants, one
// provider on two protocols).
func (m *mixedTrees) fill(t *testing.T, layouts ...string) {
	t.Helper()
	if slices.Contains(layouts, LayoutCurator) {
		must(t, m.cur.set("orders", map[string][]byte{
			"o1": curatorJSON("orders", "o1", "10.1.0.1", 8080, 0, map[string]string{"version": "v1"}),
			"o2": curatorJSON("orders", "o2", "10.1.0.2", 8080, 8443, map[string]string{"protocol": "http2", statusKey: statusOutOfService}),
		}))
		must(t, m.cur.set("billing", map[string][]byte{"b1": curatorJSON("billing", "b1", "10.1.1.1", 9090, 0, nil)}))
	}
	if slices.Contains(layouts, LayoutDubbo3) {
		must(t, m.d3.set("demo-provider", map[string][]byte{
			"10.2.0.1:20880": dubbo3JSON("demo-provider", "10.2.0.1", 20880, dubbo3Meta(dubboTri, map[string]any{"region": "eu"})),
			"10.2.0.2:20880": dubbo3JSON("demo-provider", "10.2.0.2", 20880, dubbo3Meta(dubboTri, nil)),
		}))
		must(t, m.d3.set("Greet_Server", map[string][]byte{
			"10.2.1.1:20000": dubbo3JSON("Greet_Server", "10.2.1.1", 20000, dubbo3Meta(`[{"port":20000,"protocol":"tri"}]`, nil)),
		}))
	}
	if slices.Contains(layouts, LayoutDubbo) {
		must(t, m.d2.set("org.apache.demo.DemoService",
			"dubbo://10.3.0.1:20880/org.apache.demo.DemoService?application=demo&side=provider&weight=50",
			"tri://10.3.0.1:50051/org.apache.demo.DemoService?application=demo&side=provider",
			"dubbo://10.3.0.2:20880/org.apache.demo.DemoService?application=demo&group=g1&version=1.0.0&side=provider"))
		must(t, m.d2.set("com.example.Echo", "rest://10.3.1.1:8080/com.example.Echo?application=echo&side=provider"))
	}
}

// soloState runs one layout over a root holding only its services (those fill writes) and
// returns what it serves.
func soloState(t *testing.T, addr, layout string) map[model.ServiceKey]model.Service {
	t.Helper()
	root := "/solo-" + layout
	m := newMixedTrees(t, addr, root, root)
	m.fill(t, layout)
	rec := run(t, Config{Servers: []string{addr}, Layout: layout, Root: root})
	n := map[string]int{LayoutCurator: 2, LayoutDubbo: 3, LayoutDubbo3: 2}[layout]
	rec.WaitFor(t, waitTimeout, func(s map[model.ServiceKey]model.Service) bool { return len(s) == n })
	return rec.State()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestLayoutsSideBySide: one ensemble holds a Dubbo 2 registry under /dubbo and Curator services
// and Dubbo 3 applications side by side under /services; one Registry with every layout serves
// them all, each service exactly as the run of its own layout alone serves it; a node that is
// neither Curator's nor Dubbo 3's is rejected by its path; changes in each tree reach the sink.
func TestLayoutsSideBySide(t *testing.T) {
	s := startServer(t)
	m := newMixedTrees(t, s.Addr(), "/services", "/dubbo")
	m.fill(t, LayoutCurator, LayoutDubbo, LayoutDubbo3)
	must(t, m.cur.set("broken", map[string][]byte{"x1": []byte("not json")}))
	want := map[model.ServiceKey]model.Service{}
	for _, l := range []string{LayoutCurator, LayoutDubbo, LayoutDubbo3} {
		maps.Copy(want, soloState(t, s.Addr(), l))
	}
	if len(want) != 7 {
		t.Fatalf("the single-layout runs serve %d services, want 7: %v", len(want), slices.Collect(maps.Keys(want)))
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: LayoutAll})
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool { return len(st) == len(want) })
	got := rec.State()
	for k, w := range want {
		if !model.Equal(got[k], w) {
			t.Errorf("%s: served side by side\n%+v\nalone\n%+v", k, got[k], w)
		}
	}
	if !rec.Synced() {
		t.Fatal("no Replace")
	}
	rejectedWith(t, rec, 0, "/services/broken/x1", "not a Curator ServiceInstance")
	if r := rejections(rec.Events()); len(r) != 1 {
		t.Errorf("rejected %v, want only /services/broken/x1", r)
	}

	// A change in each tree.
	echo := dubboreg.ServiceName("com.example.Echo", "", "")
	mark := rec.Len()
	must(t, m.cur.set("billing", map[string][]byte{
		"b1": curatorJSON("billing", "b1", "10.1.1.1", 9090, 0, nil),
		"b2": curatorJSON("billing", "b2", "10.1.1.2", 9090, 0, nil),
	}))
	must(t, m.d3.set("demo-provider", map[string][]byte{
		"10.2.0.1:20880": dubbo3JSON("demo-provider", "10.2.0.1", 20880, dubbo3Meta(dubboTri, map[string]any{"region": "eu"})),
	}))
	must(t, m.d2.set("com.example.Echo", "rest://10.3.1.1:8080/com.example.Echo?application=echo&side=provider",
		"rest://10.3.1.2:8080/com.example.Echo?application=echo&side=provider"))
	must(t, m.cur.remove("broken"))
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool {
		return slices.Equal(instanceIDs(st[key("billing")]), []string{"b1", "b2"}) &&
			slices.Equal(instanceIDs(st[key("demo-provider")]), []string{"10.2.0.1:20880"}) &&
			slices.Equal(instanceIDs(st[key(echo)]), []string{"10.3.1.1:8080", "10.3.1.2:8080"})
	})
	rec.WaitForEvents(t, waitTimeout, func(ev []registrytest.Event) bool {
		for _, e := range ev[mark:] {
			if e.Op == registrytest.OpRejected && e.Record == "/services/broken/x1" && e.Err == nil {
				return true
			}
		}
		return false
	})
	for _, e := range rec.Events()[mark:] {
		if e.Op == registrytest.OpReplace {
			t.Errorf("a Replace after the first: changes are Updates")
		}
	}
	// Removing a Dubbo 2 interface and a Dubbo 3 application: Deletes, the rest unchanged.
	must(t, m.d2.remove("com.example.Echo"))
	must(t, m.d3.remove("Greet_Server"))
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool {
		_, e := st[key(echo)]
		_, g := st[key(dubboreg.ServiceName("Greet_Server", "", ""))]
		return !e && !g && len(st) == 5
	})
}

// rejections are the records rejected now.
func rejections(events []registrytest.Event) []string {
	now := map[string]bool{}
	for _, e := range events {
		if e.Op == registrytest.OpRejected {
			now[e.Record] = e.Err != nil
		}
	}
	var out []string
	for r, on := range now {
		if on {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// TestLayoutsNameCollision: a Spring service, a Dubbo 2 interface and a Dubbo 3 application all
// named "orders" (the Curator and Dubbo 3 instances under the same znode) are one name: the
// layout listed first in --zk-layout is served, the others rejected naming it, whatever the
// order they were read in; when the served one goes, the next in line is served, and when
// only one is left nothing is rejected.
func TestLayoutsNameCollision(t *testing.T) {
	s := startServer(t)
	m := newMixedTrees(t, s.Addr(), "/services", "/dubbo")
	springNode := curatorJSON("orders", "o1", "10.1.0.1", 8080, 0, nil)
	d3Node := dubbo3JSON("orders", "10.2.0.1", 20880, dubbo3Meta(dubboTri, nil))
	must(t, m.cur.set("orders", map[string][]byte{"o1": springNode, "10.2.0.1:20880": d3Node}))
	must(t, m.d2.set("orders", "dubbo://10.3.0.1:20880/orders?application=orders&side=provider"))

	const (
		curRec = "/services/orders (curator service orders)"
		d2Rec  = "/dubbo/orders/providers (dubbo service orders)"
		d3Rec  = "/services/orders (dubbo3 service orders)"
	)
	addrOf := func(st map[model.ServiceKey]model.Service) string {
		svc, ok := st[key("orders")]
		if !ok || len(svc.Instances) != 1 {
			return ""
		}
		return svc.Instances[0].Address
	}
	for _, order := range []string{"curator,dubbo,dubbo3", "dubbo3,dubbo,curator"} {
		rec := run(t, Config{Servers: []string{s.Addr()}, Layout: order})
		first := map[string]string{"curator": "10.1.0.1", "dubbo3": "10.2.0.1"}[strings.Split(order, ",")[0]]
		rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool { return addrOf(st) == first })
		losers := []string{d2Rec, d3Rec}
		if first == "10.2.0.1" {
			losers = []string{d2Rec, curRec} // in record order
		}
		rec.WaitForEvents(t, waitTimeout, func(ev []registrytest.Event) bool { return slices.Equal(rejections(ev), losers) })
		for _, e := range rec.Events() {
			if e.Op == registrytest.OpRejected && e.Err != nil && (reasonOf(e.Err) != reasonDuplicate || !strings.Contains(e.Err.Error(), "which is served")) {
				t.Errorf("%s: %s rejected with %v (reason %s), want reason duplicate naming the service served", order, e.Record, e.Err, reasonOf(e.Err))
			}
		}
	}
	// curator first: the Spring instance goes, and once its empty service is retired Dubbo 2
	// is next; then Dubbo 2's interface goes, Dubbo 3 is served and nothing is rejected.
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: "curator,dubbo,dubbo3", RetireEmptyAfter: time.Second})
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool { return addrOf(st) == "10.1.0.1" })
	must(t, m.cur.set("orders", map[string][]byte{"10.2.0.1:20880": d3Node}))
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool {
		return addrOf(st) == "10.3.0.1" && st[key("orders")].Hosts[0] == "orders.default.dubbo"
	})
	rec.WaitForEvents(t, waitTimeout, func(ev []registrytest.Event) bool { return slices.Equal(rejections(ev), []string{d3Rec}) })
	must(t, m.d2.remove("orders"))
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool { return addrOf(st) == "10.2.0.1" })
	rec.WaitForEvents(t, waitTimeout, func(ev []registrytest.Event) bool { return len(rejections(ev)) == 0 })
}

// TestLayoutsConformance runs the SDK's conformance kit against one Registry serving every
// layout: each of the kit's services is written by the driver of one layout (Curator and Dubbo
// 3 under one root, Dubbo 2 under another), so that every subtest's services span the three.
// The driver expires the adapter's session as TestConformance's does (EventLoser).
func TestLayoutsConformance(t *testing.T) {
	s := startServer(t)
	proxy := registrytest.NewProxy(t, s.Addr())
	c := client(t, s.Addr())
	var sessions zktest.Sessions
	d := &mixedKitDriver{
		Proxy: proxy, server: s, sessions: &sessions,
		cur: &zktest.CuratorDriver{Proxy: proxy, W: &zktest.Writer{Conn: c, Root: "/kit-shared", Timeout: waitTimeout}},
		d3:  &dubbo3KitDriver{Proxy: proxy, w: writer{c: c, root: "/kit-shared"}},
		d2:  &dubboKitDriver{Proxy: proxy, w: dubboWriter{c: c, root: "/kit-dubbo"}},
	}
	d.d3.w.ensureRoot(t)
	must(t, d.d2.w.ensure("/kit-dubbo"))
	runKit(t, proxy, Config{Layout: LayoutAll, Root: "curator=/kit-shared,dubbo3=/kit-shared,dubbo=/kit-dubbo", dial: sessions.Dial}, d,
		func(svc model.Service) model.Service {
			switch d.layoutOf(svc.Name) {
			case kindDubbo:
				return dubboKitNormalize(svc)
			case kindDubbo3:
				return dubbo3KitNormalize(svc)
			}
			return curatorKitNormalize(svc)
		})
}

// mixedKitDriver writes each of the kit's services with the driver of one layout: the kit names
// a subtest's services <prefix>-a, -b, -c, and the three go to three layouts, in an order that
// turns with the prefix.
type mixedKitDriver struct {
	*registrytest.Proxy
	server   *zktest.Server
	sessions *zktest.Sessions
	cur      *zktest.CuratorDriver
	d3       *dubbo3KitDriver
	d2       *dubboKitDriver
}

var (
	_ registrytest.Driver     = (*mixedKitDriver)(nil)
	_ registrytest.Corrupter  = (*mixedKitDriver)(nil)
	_ registrytest.Breaker    = (*mixedKitDriver)(nil)
	_ registrytest.EventLoser = (*mixedKitDriver)(nil)
	_ registrytest.Staller    = (*mixedKitDriver)(nil)
)

// Stall makes the server accept the adapter's connections and never answer.
func (d *mixedKitDriver) Stall(ctx context.Context) error { return d.Proxy.Silence(ctx) }

func (d *mixedKitDriver) layoutOf(name string) layoutKind {
	prefix, last := name[:len(name)-1], name[len(name)-1]
	h := fnv.New32a()
	h.Write([]byte(prefix))
	return layoutKind((h.Sum32() + uint32(last)) % uint32(nKinds))
}

type kitDriver interface {
	registrytest.Driver
	registrytest.Corrupter
}

func (d *mixedKitDriver) driver(name string) kitDriver {
	switch d.layoutOf(name) {
	case kindDubbo:
		return d.d2
	case kindDubbo3:
		return d.d3
	}
	return d.cur
}

func (d *mixedKitDriver) Put(ctx context.Context, svc model.Service) error {
	return d.driver(svc.Name).Put(ctx, svc)
}

func (d *mixedKitDriver) Remove(ctx context.Context, key model.ServiceKey) error {
	return d.driver(key.Name).Remove(ctx, key)
}

func (d *mixedKitDriver) Corrupt(ctx context.Context, key model.ServiceKey) (string, error) {
	return d.driver(key.Name).Corrupt(ctx, key)
}

// LoseEvents cuts the adapter off, expires its session, runs change, and lets it reconnect.
func (d *mixedKitDriver) LoseEvents(ctx context.Context, change func(context.Context) error) error {
	e := expiringDriver{CuratorDriver: d.cur, server: d.server, sessions: d.sessions}
	return e.LoseEvents(ctx, change)
}

// TestLayoutsRequestsPerChange: serving every layout costs the reads each layout costs alone
// (TestRequestsPerChange): listing is the sum of the layouts' listings; a Dubbo 2 provider
// leaving and another joining is one read, a Curator or Dubbo 3 instance's data changing one, a
// Dubbo 3 instance joining two and leaving one, among 100 services of each layout.
func TestLayoutsRequestsPerChange(t *testing.T) {
	const n = 100
	s := startServer(t)
	m := newMixedTrees(t, s.Addr(), "/services", "/dubbo")
	iface := func(i int) string { return "org.apache.demo.Service" + strconv.Itoa(i) }
	for i := range n {
		addr := fmt.Sprintf("10.1.%d.%d", i/250, i%250)
		must(t, m.d2.set(iface(i), "dubbo://"+addr+":20880/"+iface(i)))
		must(t, m.cur.set(fmt.Sprintf("svc-%03d", i), map[string][]byte{"a": goodNode("svc", "a", addr)}))
		must(t, m.d3.set(fmt.Sprintf("app-%03d", i), map[string][]byte{addr + ":20880": dubbo3JSON("app", addr, 20880, dubbo3Meta(dubboTri, nil))}))
	}
	reg := prometheus.NewRegistry()
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: LayoutAll, Registerer: reg})
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool { return len(st) == 3*n })
	reads := func() float64 { return counterSum(t, reg, "galleon_zookeeper_requests_total", nil) }
	// Two roots; per interface its providers, its configurators (missing) and the interface's
	// children; per Curator service and Dubbo 3 application its children and its node.
	if got, want := reads(), float64(2+3*n+2*n+2*n); got != want {
		t.Errorf("listing took %v reads, want %v", got, want)
	}
	step := func(what string, want float64, change func() error, done func(map[model.ServiceKey]model.Service) bool) {
		t.Helper()
		before := reads()
		must(t, change())
		rec.WaitFor(t, waitTimeout, done)
		if got := reads() - before; got != want {
			t.Errorf("%s took %v reads, want %v", what, got, want)
		}
	}
	d2 := dubboreg.ServiceName(iface(50), "", "")
	step("a Dubbo 2 provider leaving and another joining", 1,
		func() error { return m.d2.set(iface(50), "dubbo://10.9.0.1:20880/"+iface(50)) },
		hasInstances(d2, "10.9.0.1:20880"))
	step("a Curator instance's data changing", 1,
		func() error { return m.cur.set("svc-050", map[string][]byte{"a": goodNode("svc", "a", "10.9.0.2")}) },
		func(st map[model.ServiceKey]model.Service) bool {
			return len(st[key("svc-050")].Instances) == 1 && st[key("svc-050")].Instances[0].Address == "10.9.0.2"
		})
	old := "10.1.0.50:20880"
	step("a Dubbo 3 instance's data changing", 1,
		func() error {
			return m.d3.set("app-050", map[string][]byte{old: dubbo3JSON("app", "10.1.0.50", 20880, dubbo3Meta(dubboTri, map[string]any{"zone": "z2"}))})
		},
		func(st map[model.ServiceKey]model.Service) bool {
			return len(st[key("app-050")].Instances) == 1 && st[key("app-050")].Instances[0].Labels["zone"] == "z2"
		})
	// Created and deleted alone: the writer's set would rewrite the nodes it keeps.
	node := "/services/app-050/10.9.0.3:20880"
	step("a Dubbo 3 instance joining", 2,
		func() error {
			_, err := m.d3.c.Create(node, dubbo3JSON("app", "10.9.0.3", 20880, dubbo3Meta(dubboTri, nil)), 0, zk.WorldACL(zk.PermAll))
			return err
		},
		hasInstances("app-050", old, "10.9.0.3:20880"))
	step("a Dubbo 3 instance leaving", 1, func() error { return m.d3.c.Delete("/services/app-050/"+old, -1) },
		hasInstances("app-050", "10.9.0.3:20880"))
}

// TestLayoutsRootMissing: with several roots, one missing is reported unreachable naming it and
// its layout, and nothing is reported before it exists; once created, every root is served.
func TestLayoutsRootMissing(t *testing.T) {
	s := startServer(t)
	c := client(t, s.Addr())
	w := writer{c: c, root: "/services"}
	w.ensureRoot(t)
	must(t, w.set("orders", map[string][]byte{"o1": goodNode("orders", "o1", "10.1.0.1")}))
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: "curator,dubbo"})
	waitUnreachable(t, rec, `root znode "/dubbo" does not exist: check --zk-root (the root of layout dubbo)`)
	if rec.Synced() {
		t.Fatal("a Replace while a root is missing")
	}
	d := dubboWriter{c: c, root: "/dubbo"}
	must(t, d.set("com.example.Echo", "rest://10.3.1.1:8080/com.example.Echo?side=provider"))
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool { return len(st) == 2 })
	if err := rec.UnreachableError(); err != nil {
		t.Errorf("still unreachable: %v", err)
	}
}
