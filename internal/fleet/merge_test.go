package fleet

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/model"
)

// served is an Output that keeps what it was told, as the serving
// pipeline would serve it.
type served struct {
	services map[model.ServiceKey]model.Service
	replaced int
	reports  int
}

func (s *served) Replace(all []model.Service) {
	s.services = map[model.ServiceKey]model.Service{}
	for _, svc := range all {
		s.services[svc.Key()] = svc
	}
	s.replaced++
	s.reports++
}
func (s *served) Update(svc model.Service) { s.services[svc.Key()] = svc; s.reports++ }
func (s *served) Delete(key model.ServiceKey) {
	delete(s.services, key)
	s.reports++
}

// byHost returns the served services by their first host, failing the
// test when two serve one host.
func (s *served) byHost(t *testing.T) map[string]model.Service {
	t.Helper()
	out := map[string]model.Service{}
	for _, svc := range s.services {
		if prev, dup := out[svc.Hosts[0]]; dup {
			t.Fatalf("host %s served twice: %s and %s", svc.Hosts[0], prev.Key(), svc.Key())
		}
		out[svc.Hosts[0]] = svc
	}
	return out
}

func svc(ns, name, host string, port uint32, instances ...string) *model.Service {
	s := &model.Service{Namespace: ns, Name: name, Hosts: []string{host}, Ports: []model.Port{{Number: port, Protocol: model.ProtocolHTTP}}}
	for _, addr := range instances {
		s.Instances = append(s.Instances, model.Instance{ID: addr, Address: addr})
	}
	return s
}

func changes(list ...*model.Service) map[model.ServiceKey]*model.Service {
	out := map[model.ServiceKey]*model.Service{}
	for _, s := range list {
		out[s.Key()] = s
	}
	return out
}

func addresses(s model.Service) []string {
	var out []string
	for _, inst := range s.Instances {
		out = append(out, inst.Address)
	}
	slices.Sort(out)
	return out
}

func TestMergerWaitsForEveryRegistryThenReplaces(t *testing.T) {
	out := &served{}
	m := NewMerger(out, MergerConfig{Registries: []string{"consul", "eureka"}})
	m.Apply("consul", changes(svc("default", "a", "a.mesh", 80, "10.0.0.1")), true)
	if out.reports != 0 {
		t.Fatalf("reported before eureka was listed: %d reports", out.reports)
	}
	if got := m.Unsynced(); !slices.Equal(got, []string{"eureka"}) {
		t.Fatalf("Unsynced = %v, want [eureka]", got)
	}
	m.Apply("eureka", changes(svc("eureka", "b", "b.mesh", 80, "10.0.0.2")), true)
	if out.replaced != 1 || len(out.services) != 2 {
		t.Fatalf("after both listings: %d Replace calls, %d services; want 1 and 2", out.replaced, len(out.services))
	}
	a := out.services[model.ServiceKey{Namespace: "default", Name: "a"}]
	if got := a.Annotations[convert.AnnotationRegistry]; got != "consul" {
		t.Errorf("a's registry annotation = %q, want consul", got)
	}
	m.Apply("eureka", map[model.ServiceKey]*model.Service{{Namespace: "eureka", Name: "b"}: nil}, true)
	if _, ok := out.services[model.ServiceKey{Namespace: "eureka", Name: "b"}]; ok || out.replaced != 1 {
		t.Fatalf("b still served after its removal (or a second Replace: %d)", out.replaced)
	}
}

func TestMergerStartServesWhatIsListed(t *testing.T) {
	out := &served{}
	m := NewMerger(out, MergerConfig{Registries: []string{"consul", "eureka"}})
	m.Apply("consul", changes(svc("default", "a", "a.mesh", 80, "10.0.0.1")), true)
	m.Start()
	if !m.Started() || len(out.services) != 1 {
		t.Fatalf("after Start: started %v, %d services served; want true, 1", m.Started(), len(out.services))
	}
	m.Apply("eureka", changes(svc("eureka", "b", "b.mesh", 80, "10.0.0.2")), true)
	if len(out.services) != 2 || out.replaced != 1 {
		t.Fatalf("eureka's listing after the start: %d services, %d Replace calls; want 2 and 1 (an update)", len(out.services), out.replaced)
	}
}

func TestMergerUnplannedCollisionServesTheRegistryListedFirst(t *testing.T) {
	reg := prometheus.NewRegistry()
	out := &served{}
	m := NewMerger(out, MergerConfig{Registries: []string{"consul", "eureka"}, Registerer: reg})
	m.Apply("eureka", changes(svc("eureka", "orders", "orders.mesh", 80, "10.0.0.2")), true)
	m.Apply("consul", changes(svc("default", "orders", "orders.mesh", 80, "10.0.0.1")), true)
	got := out.byHost(t)["orders.mesh"]
	if got.Key() != (model.ServiceKey{Namespace: "default", Name: "orders"}) || !slices.Equal(addresses(got), []string{"10.0.0.1"}) {
		t.Fatalf("served %s with %v; want default/orders (consul's, listed first) with [10.0.0.1]", got.Key(), addresses(got))
	}
	cs, n := m.Collisions(10)
	if n != 1 || cs[0].Outcome != OutcomeUnplanned || !slices.Equal(cs[0].Served, []string{"consul"}) ||
		!slices.Equal(cs[0].Services, []string{"consul:default/orders", "eureka:eureka/orders"}) {
		t.Fatalf("collisions = %+v (%d), want one unplanned, served from consul", cs, n)
	}
	if v := gauge(t, m.metrics.collisions.WithLabelValues(OutcomeUnplanned)); v != 1 {
		t.Errorf("galleon_fleet_host_collisions{outcome=unplanned} = %v, want 1", v)
	}
	// consul's service leaves: eureka's is served alone, under its own key.
	m.Apply("consul", map[model.ServiceKey]*model.Service{{Namespace: "default", Name: "orders"}: nil}, true)
	got = out.byHost(t)["orders.mesh"]
	if got.Key() != (model.ServiceKey{Namespace: "eureka", Name: "orders"}) || !slices.Equal(addresses(got), []string{"10.0.0.2"}) {
		t.Fatalf("after consul's left: served %s with %v; want eureka/orders with [10.0.0.2]", got.Key(), addresses(got))
	}
	if _, n := m.Collisions(10); n != 0 {
		t.Errorf("%d collisions after consul's service left, want 0", n)
	}
	if v := gauge(t, m.metrics.collisions.WithLabelValues(OutcomeUnplanned)); v != 0 {
		t.Errorf("galleon_fleet_host_collisions{outcome=unplanned} = %v after the collision ended, want 0", v)
	}
}

func TestMergerMergeUnitesInstances(t *testing.T) {
	out := &served{}
	m := NewMerger(out, MergerConfig{Registries: []string{"eureka", "consul"}, Rules: []HostRule{{Host: "*.mesh", Action: Merge}}})
	m.Apply("eureka", changes(svc("eureka", "orders", "orders.mesh", 80, "10.0.0.1", "10.0.0.2")), true)
	m.Apply("consul", changes(svc("default", "orders", "orders.mesh", 80, "10.0.0.2", "10.0.0.3")), true)
	got := out.byHost(t)["orders.mesh"]
	if want := []string{"10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.3"}; !slices.Equal(addresses(got), want) {
		t.Fatalf("merged instances %v, want %v", addresses(got), want)
	}
	ids := map[string]bool{}
	for _, inst := range got.Instances {
		if ids[inst.ID] {
			t.Fatalf("instance ID %q twice in the merged service", inst.ID)
		}
		ids[inst.ID] = true
	}
	if !ids["consul/10.0.0.2"] {
		t.Errorf("consul's instance with eureka's ID is not named consul/10.0.0.2: %v", slices.Sorted(maps.Keys(ids)))
	}
	if got.Key() != (model.ServiceKey{Namespace: "eureka", Name: "orders"}) || got.Annotations[convert.AnnotationRegistry] != "eureka,consul" {
		t.Errorf("merged service %s, registries %q; want eureka/orders, \"eureka,consul\"", got.Key(), got.Annotations[convert.AnnotationRegistry])
	}
	// One registry's instance leaving changes the endpoints only.
	m.Apply("consul", changes(svc("default", "orders", "orders.mesh", 80, "10.0.0.3")), true)
	got = out.byHost(t)["orders.mesh"]
	if want := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}; !slices.Equal(addresses(got), want) {
		t.Fatalf("after consul's 10.0.0.2 left: %v, want %v", addresses(got), want)
	}
	// Ports that differ cannot merge: reported, and served as unplanned.
	m.Apply("consul", changes(svc("default", "orders", "orders.mesh", 8080, "10.0.0.3")), true)
	got = out.byHost(t)["orders.mesh"]
	cs, _ := m.Collisions(1)
	if cs[0].Outcome != OutcomeConflict || !strings.Contains(cs[0].Detail, "[80/HTTP]") || !strings.Contains(cs[0].Detail, "[8080/HTTP]") {
		t.Fatalf("collision %+v, want a conflict naming both port lists", cs[0])
	}
	if !slices.Equal(addresses(got), []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("a conflict serves %v, want eureka's alone", addresses(got))
	}
}

func TestMergerPreferAndReject(t *testing.T) {
	out := &served{}
	rules := []HostRule{{Host: "orders.mesh", Action: Prefer, Prefer: []string{"consul"}}, {Host: "*.mesh", Action: Reject}}
	m := NewMerger(out, MergerConfig{Registries: []string{"eureka", "consul"}, Rules: rules})
	m.Apply("eureka", changes(svc("eureka", "orders", "orders.mesh", 80, "10.0.0.1"), svc("eureka", "pay", "pay.mesh", 80, "10.0.0.5")), true)
	m.Apply("consul", changes(svc("default", "orders", "orders.mesh", 80, "10.0.0.2"), svc("default", "pay", "pay.mesh", 80, "10.0.0.6")), true)
	hosts := out.byHost(t)
	if _, ok := hosts["pay.mesh"]; ok {
		t.Fatalf("pay.mesh served although its rule rejects it")
	}
	got := hosts["orders.mesh"]
	if !slices.Equal(addresses(got), []string{"10.0.0.2"}) || got.Key() != (model.ServiceKey{Namespace: "eureka", Name: "orders"}) {
		t.Fatalf("orders.mesh served %s with %v; want consul's instances under eureka/orders (the key stays when the winner changes)", got.Key(), addresses(got))
	}
	// The preferred registry has no instance left: the next serves.
	m.Apply("consul", changes(svc("default", "orders", "orders.mesh", 80)), true)
	if got := out.byHost(t)["orders.mesh"]; !slices.Equal(addresses(got), []string{"10.0.0.1"}) {
		t.Fatalf("consul empty: served %v, want eureka's [10.0.0.1]", addresses(got))
	}
	// The rule switched live: eureka preferred.
	m.Apply("consul", changes(svc("default", "orders", "orders.mesh", 80, "10.0.0.2")), true)
	m.SetRules([]HostRule{{Host: "orders.mesh", Action: Prefer, Prefer: []string{"eureka", "consul"}}})
	hosts = out.byHost(t)
	if got := hosts["orders.mesh"]; !slices.Equal(addresses(got), []string{"10.0.0.1"}) {
		t.Fatalf("eureka preferred: served %v, want [10.0.0.1]", addresses(got))
	}
	if got := hosts["pay.mesh"]; !slices.Equal(addresses(got), []string{"10.0.0.5"}) {
		t.Fatalf("pay.mesh without its reject rule: served %v, want eureka's [10.0.0.5] (listed first)", addresses(got))
	}
}

// Two registries' services with one key and different hosts: the one
// listed first keeps the key, whatever order they came in, so that every
// replica serves the same.
func TestMergerKeyClaimsAreDeterministic(t *testing.T) {
	a := svc("default", "orders", "orders.service.consul", 80, "10.0.0.1")
	b := svc("default", "orders", "orders.eureka", 80, "10.0.0.2")
	for _, first := range []string{"consul", "eureka"} {
		out := &served{}
		m := NewMerger(out, MergerConfig{Registries: []string{"consul", "eureka"}})
		m.Start()
		if first == "consul" {
			m.Apply("consul", changes(a), true)
			m.Apply("eureka", changes(b), true)
		} else {
			m.Apply("eureka", changes(b), true)
			m.Apply("consul", changes(a), true)
		}
		hosts := out.byHost(t)
		consulOrders, eurekaOrders := hosts["orders.service.consul"], hosts["orders.eureka"]
		if k := consulOrders.Key(); k.Name != "orders" {
			t.Errorf("%s first: consul's orders served as %s, want default/orders", first, k)
		}
		if k := eurekaOrders.Key(); k.Name != "orders-eureka" {
			t.Errorf("%s first: eureka's orders served as %s, want default/orders-eureka", first, k)
		}
		if len(out.services) != 2 {
			t.Errorf("%s first: %d services served, want 2", first, len(out.services))
		}
		// consul's leaves: eureka's takes the plain key.
		m.Apply("consul", map[model.ServiceKey]*model.Service{a.Key(): nil}, true)
		eurekaOrders = out.byHost(t)["orders.eureka"]
		if k := eurekaOrders.Key(); k.Name != "orders" || len(out.services) != 1 {
			t.Errorf("%s first, consul's gone: eureka's served as %s (%d services), want default/orders alone", first, k, len(out.services))
		}
	}
}

func TestMergerSetRegistries(t *testing.T) {
	out := &served{}
	m := NewMerger(out, MergerConfig{Registries: []string{"consul", "eureka"}})
	m.Apply("consul", changes(svc("default", "orders", "orders.mesh", 80, "10.0.0.1")), true)
	m.Apply("eureka", changes(svc("eureka", "orders", "orders.mesh", 80, "10.0.0.2"), svc("eureka", "pay", "pay.mesh", 80, "10.0.0.3")), true)
	// Eureka listed first now: it wins the unplanned collision.
	m.SetRegistries([]string{"eureka", "consul", "zookeeper"})
	if got := out.byHost(t)["orders.mesh"]; !slices.Equal(addresses(got), []string{"10.0.0.2"}) {
		t.Fatalf("eureka listed first: served %v, want [10.0.0.2]", addresses(got))
	}
	m.Apply("zookeeper", changes(svc("dubbo", "x", "x.dubbo", 20880, "10.0.0.9")), true)
	if _, ok := out.byHost(t)["x.dubbo"]; !ok {
		t.Fatalf("zookeeper's service not served after the registry was added")
	}
	m.SetRegistries([]string{"consul", "zookeeper"})
	hosts := out.byHost(t)
	if _, ok := hosts["pay.mesh"]; ok {
		t.Fatalf("eureka's pay.mesh still served after eureka left the list")
	}
	if got := hosts["orders.mesh"]; !slices.Equal(addresses(got), []string{"10.0.0.1"}) || got.Namespace != "default" {
		t.Fatalf("orders.mesh after eureka left: %s %v, want consul's default/orders [10.0.0.1]", got.Key(), addresses(got))
	}
	// A late report of a registry no longer listed changes nothing.
	before := out.reports
	m.Apply("eureka", changes(svc("eureka", "late", "late.mesh", 80, "10.0.0.4")), true)
	if out.reports != before {
		t.Fatalf("a removed registry's report was served")
	}
}

func TestCheckRules(t *testing.T) {
	registries := []string{"consul", "eureka"}
	good := []HostRule{{Host: "orders.mesh", Action: Merge}, {Host: "*.mesh", Action: Prefer, Prefer: []string{"consul"}}, {Host: "x.y", Action: Reject}}
	if err := CheckRules(good, registries); err != nil {
		t.Fatalf("good rules refused: %v", err)
	}
	for _, tc := range []struct {
		rule HostRule
		want string
	}{
		{HostRule{Host: "", Action: Merge}, "want a host name"},
		{HostRule{Host: "a.*.mesh", Action: Merge}, "want a host name"},
		{HostRule{Host: "a.mesh", Action: "union"}, `action "union"`},
		{HostRule{Host: "a.mesh", Action: Prefer}, "prefer needs the registries"},
		{HostRule{Host: "a.mesh", Action: Prefer, Prefer: []string{"nacos"}}, `registry "nacos", which the list does not have`},
		{HostRule{Host: "a.mesh", Action: Merge, Prefer: []string{"consul"}}, "only the prefer action reads"},
	} {
		err := CheckRules([]HostRule{tc.rule}, registries)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rule %+v: error %v, want one saying %q", tc.rule, err, tc.want)
		}
	}
	dup := []HostRule{{Host: "a.mesh", Action: Merge}, {Host: "A.mesh", Action: Reject}}
	if err := CheckRules(dup, registries); err == nil || !strings.Contains(err.Error(), "has a rule already") {
		t.Errorf("two rules for one host: error %v", err)
	}
	// An exact rule wins over a pattern listed before it.
	rules := []HostRule{{Host: "*.mesh", Action: Reject}, {Host: "orders.mesh", Action: Merge}}
	if r := ruleFor(rules, "orders.mesh"); r == nil || r.Action != Merge {
		t.Errorf("ruleFor(orders.mesh) = %+v, want the exact merge rule", r)
	}
	if r := ruleFor(rules, "mesh"); r != nil {
		t.Errorf("ruleFor(mesh) = %+v, want none (*.mesh needs a label before .mesh)", r)
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

// A further host (after the first) is served by one ServiceEntry only: the group whose first host
// it is, else the group listed first that lists it.
func TestMergerFurtherHosts(t *testing.T) {
	out := &served{}
	m := NewMerger(out, MergerConfig{Registries: []string{"file", "consul"}})
	m.Start()
	// consul's orders lists orders.mesh and the per-datacenter orders.dc1.mesh.
	orders := svc("default", "orders", "orders.mesh", 80, "10.0.0.1")
	orders.Hosts = append(orders.Hosts, "orders.dc1.mesh")
	m.Apply("consul", changes(orders), true)
	if got := out.services[orders.Key()].Hosts; !slices.Equal(got, []string{"orders.mesh", "orders.dc1.mesh"}) {
		t.Fatalf("hosts %v, want both while no other service has them", got)
	}
	// file gets a service whose first host is orders.dc1.mesh: it takes it.
	dc1 := svc("files", "dc1", "orders.dc1.mesh", 80, "10.0.0.9")
	m.Apply("file", changes(dc1), true)
	if got := out.services[orders.Key()].Hosts; !slices.Equal(got, []string{"orders.mesh"}) {
		t.Fatalf("consul's orders serves %v, want orders.mesh alone (orders.dc1.mesh is file's first host)", got)
	}
	hosts := map[string]int{}
	for _, s := range out.services {
		for _, h := range s.Hosts {
			hosts[h]++
		}
	}
	if hosts["orders.dc1.mesh"] != 1 {
		t.Fatalf("orders.dc1.mesh served %d times, want once", hosts["orders.dc1.mesh"])
	}
	cs, _ := m.Collisions(10)
	if len(cs) != 1 || cs[0].Host != "orders.dc1.mesh" || cs[0].Outcome != OutcomeUnplanned || !slices.Equal(cs[0].Served, []string{"file"}) {
		t.Fatalf("collisions %+v, want orders.dc1.mesh unplanned, served by file", cs)
	}
	// file's service goes: consul's orders has its further host back, and no collision is left.
	m.Apply("file", map[model.ServiceKey]*model.Service{dc1.Key(): nil}, true)
	if got := out.services[orders.Key()].Hosts; !slices.Equal(got, []string{"orders.mesh", "orders.dc1.mesh"}) {
		t.Fatalf("after file's service left: hosts %v, want both again", got)
	}
	if _, n := m.Collisions(10); n != 0 {
		t.Fatalf("%d collisions left", n)
	}
	// Two services list one further host: the registry listed first keeps it.
	pay := svc("files", "pay", "pay.mesh", 80, "10.0.0.3")
	pay.Hosts = append(pay.Hosts, "orders.dc1.mesh")
	m.Apply("file", changes(pay), true)
	if got := out.services[orders.Key()].Hosts; !slices.Equal(got, []string{"orders.mesh"}) {
		t.Fatalf("consul's orders serves %v, want orders.mesh alone (file is listed first)", got)
	}
	if got := out.services[pay.Key()].Hosts; !slices.Equal(got, []string{"pay.mesh", "orders.dc1.mesh"}) {
		t.Fatalf("file's pay serves %v, want both its hosts", got)
	}
}

// timed is an Output that also records Backdate.
type timed struct {
	served
	backdated []time.Time
}

func (o *timed) Backdate(t time.Time) { o.backdated = append(o.backdated, t) }

// TestMergerBackdatesWhatItReports: a change an intake hands on with the time its registry
// reported it is backdated to that time in the Output, once the merged state is served.
func TestMergerBackdatesWhatItReports(t *testing.T) {
	out := &timed{}
	m := NewMerger(out, MergerConfig{Registries: []string{"a"}})
	at := time.Now().Add(-time.Second)
	m.Forward("a")(changes(svc("ns", "x", "x.mesh", 80, "10.0.0.1")), true, at)
	if len(out.backdated) != 0 {
		t.Fatalf("the first listing (a Replace) was backdated: %v", out.backdated)
	}
	later := time.Now().Add(-500 * time.Millisecond)
	m.Forward("a")(changes(svc("ns", "x", "x.mesh", 80, "10.0.0.2")), true, later)
	if len(out.backdated) != 1 || !out.backdated[0].Equal(later) {
		t.Fatalf("backdated %v, want [%v]", out.backdated, later)
	}
}
