package zookeeper

import (
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"text/template"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/model"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
)

// The provider URLs a dubbo-go 3.3.0 provider registers for one interface it exports over
// triple and dubbo (one URL per protocol, the same host).
const greeter = "greet.GreetService"

func twoProtocolURLs(ip string) []string {
	const q = "?anyhost=true&app.version=1.0.0&application=greet-server&dubbo=2.0.2&environment=dev" +
		"&interface=greet.GreetService&methods=Greet&module=sample&pid=4242&registry.role=3" +
		"&release=dubbo-golang-3.3.0&side=provider&timestamp=1700000000"
	return []string{
		"tri://" + ip + ":50051/" + greeter + q,
		"dubbo://" + ip + ":20880/" + greeter + q,
	}
}

// mergedProviders applies the rules to each provider (as build does) and merges them by host.
func mergedProviders(t *testing.T, urls []string, rules []override) []*endpoint {
	t.Helper()
	d := newDubbo(nil)
	var eps []*endpoint
	for _, u := range urls {
		e, err := d.parseInstance(greeter, url.QueryEscape(u), nil)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		eps = append(eps, withOverrides(&e, rules))
	}
	var ls labelSets
	return d.merge(eps, &ls)
}

func byID(eps []*endpoint) map[string]*endpoint {
	m := map[string]*endpoint{}
	for _, e := range eps {
		m[e.inst.ID] = e
	}
	return m
}

// TestMergeDubboHosts: two provider URLs of one host, two protocols, are one instance serving
// both ports, whatever order the nodes come in; the service has the two ports and one endpoint
// per host, which is what the ServiceEntry istiod receives holds.
func TestMergeDubboHosts(t *testing.T) {
	urls := append(append(twoProtocolURLs("10.0.0.1"), twoProtocolURLs("10.0.0.2")...), "dubbo://10.0.0.3:20880/"+greeter+"?application=greet-server")
	var first []*endpoint
	perms := 0
	permute(urls, func(order []string) {
		perms++
		got := mergedProviders(t, order, nil)
		slices.SortFunc(got, func(a, b *endpoint) int { return strings.Compare(a.inst.ID, b.inst.ID) })
		if first == nil {
			first = got
			return
		}
		if len(got) != len(first) {
			t.Fatalf("order %v: %d endpoints, first order %d", order, len(got), len(first))
		}
		for i := range got {
			if got[i].inst.ID != first[i].inst.ID || !slices.Equal(got[i].ports, first[i].ports) ||
				got[i].inst.Health != first[i].inst.Health || got[i].inst.Weight != first[i].inst.Weight {
				t.Fatalf("order %v: endpoint %d is %+v, with the first order %+v", order, i, *got[i], *first[i])
			}
		}
	})
	if perms != 120 {
		t.Fatalf("%d orders tried, want 120", perms)
	}
	eps := byID(first)
	if ids := slices.Sorted(maps.Keys(eps)); !slices.Equal(ids, []string{"10.0.0.1:20880", "10.0.0.2:20880", "10.0.0.3:20880"}) {
		t.Fatalf("instance IDs %v, want one per host, <ip>:<smallest port>", ids)
	}
	wantPorts := []model.Port{{Number: 20880, Protocol: model.ProtocolTCP, Name: "tcp-dubbo"}, {Number: 50051, Protocol: model.ProtocolGRPC}}
	for _, id := range []string{"10.0.0.1:20880", "10.0.0.2:20880"} {
		e := eps[id]
		if !slices.Equal(e.ports, wantPorts) || e.inst.Ports != nil || e.inst.Health != model.Healthy || e.inst.Address != id[:8] {
			t.Errorf("%s: ports %v, instance ports %v, health %v, address %s; want %v, nil, healthy", id, e.ports, e.inst.Ports, e.inst.Health, e.inst.Address, wantPorts)
		}
		if e.inst.Labels["release"] != "dubbo-golang-3.3.0" || e.inst.Labels["application"] != "greet-server" {
			t.Errorf("%s: labels %v", id, e.inst.Labels)
		}
	}

	// The ServiceEntry: two ports, three endpoints, one per address.
	hd := hostData{Name: dubboreg.ServiceName(greeter, "", ""), Namespace: "default", Interface: greeter}
	svc, ok, err := buildService(hd, template.Must(template.New("h").Parse(DefaultDubboHostTemplate)), first, nil)
	if err != nil || !ok {
		t.Fatalf("buildService: %v %v", ok, err)
	}
	if !slices.Equal(svc.Ports, wantPorts) || len(svc.Instances) != 3 {
		t.Fatalf("service ports %v, %d instances; want %v, 3", svc.Ports, len(svc.Instances), wantPorts)
	}
	res, err := convert.Convert(svc, convert.Options{Mode: convert.ModeServiceEntry})
	if err != nil {
		t.Fatal(err)
	}
	se := res[0].Spec.(*networking.ServiceEntry)
	var addrs []string
	for _, ep := range se.Endpoints {
		addrs = append(addrs, ep.Address)
		if len(ep.Ports) != 0 {
			t.Errorf("endpoint %s has a ports map %v: every port is served on its own number", ep.Address, ep.Ports)
		}
	}
	if !slices.Equal(addrs, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}) || len(se.Ports) != 2 {
		t.Errorf("ServiceEntry endpoints %v, ports %v; want one endpoint per host and two ports", addrs, se.Ports)
	}
}

// TestMergeDubboLabelsAndWeight: labels are the union, the smallest port's value winning a
// conflict; the weight is the smallest one given, a port without one not counting.
func TestMergeDubboLabelsAndWeight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		urls   []string
		labels map[string]string
		weight uint32
	}{
		{name: "conflict and union",
			urls: []string{"tri://10.0.0.1:50051/" + greeter + "?application=a&release=3.3.1&dubbo=2.0.2&weight=80",
				"dubbo://10.0.0.1:20880/" + greeter + "?application=a&release=3.3.0&weight=120"},
			labels: map[string]string{"application": "a", "release": "3.3.0", "dubbo": "2.0.2"}, weight: 80},
		{name: "one weight",
			urls:   []string{"tri://10.0.0.1:50051/" + greeter + "?weight=300", "dubbo://10.0.0.1:20880/" + greeter},
			weight: 300},
		{name: "no weight",
			urls:   []string{"tri://10.0.0.1:50051/" + greeter, "dubbo://10.0.0.1:20880/" + greeter},
			weight: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, order := range [][]string{tc.urls, {tc.urls[1], tc.urls[0]}} {
				got := mergedProviders(t, order, nil)
				if len(got) != 1 {
					t.Fatalf("%d endpoints, want 1", len(got))
				}
				e := got[0]
				if e.inst.ID != "10.0.0.1:20880" || e.inst.Weight != tc.weight || !maps.Equal(e.inst.Labels, tc.labels) {
					t.Errorf("order %v: ID %s weight %d labels %v; want 10.0.0.1:20880, %d, %v", order, e.inst.ID, e.inst.Weight, e.inst.Labels, tc.weight, tc.labels)
				}
			}
		})
	}
}

// TestMergeDubboOverridePerPort: an override is decided on the port it names. Disabling
// dubbo://host:20880 drains that host (a host's endpoint serves every port of the
// ServiceEntry, so the disabled port cannot be left out alone: the host goes, its tri port
// too), and no other host; a rule for another port of the same host or for another host
// changes nothing of it; a rule for the host's tri port lowers the weight of the host.
func TestMergeDubboOverridePerPort(t *testing.T) {
	urls := append(twoProtocolURLs("10.0.0.1"), twoProtocolURLs("10.0.0.2")...)
	rule := func(raw string) override {
		o, err := parseOverride(url.QueryEscape(raw))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	health := func(eps []*endpoint) map[string]model.Health {
		m := map[string]model.Health{}
		for _, e := range eps {
			m[e.inst.ID] = e.inst.Health
		}
		return m
	}
	// Without rules: both hosts served.
	if h := health(mergedProviders(t, urls, nil)); h["10.0.0.1:20880"] != model.Healthy || h["10.0.0.2:20880"] != model.Healthy {
		t.Fatalf("health without rules %v", h)
	}
	// dubbo://10.0.0.2:20880 disabled: host 10.0.0.2 drained, 10.0.0.1 untouched.
	disable2 := rule("override://10.0.0.2:20880/" + greeter + "?category=configurators&dynamic=false&disabled=true")
	got := mergedProviders(t, urls, []override{disable2})
	if h := health(got); len(h) != 2 || h["10.0.0.1:20880"] != model.Healthy || h["10.0.0.2:20880"] != model.Draining {
		t.Fatalf("dubbo://10.0.0.2:20880 disabled: health %v, want 10.0.0.1 healthy and 10.0.0.2 draining", h)
	}
	// The drained host still lists both its ports (it exists, and shows in /debug/status).
	if e := byID(got)["10.0.0.2:20880"]; len(e.ports) != 2 {
		t.Errorf("drained host ports %v", e.ports)
	}
	// The same rule on a port the host does not serve: nothing changes.
	if h := health(mergedProviders(t, urls, []override{rule("override://10.0.0.2:20881/" + greeter + "?disabled=true")})); h["10.0.0.2:20880"] != model.Healthy {
		t.Errorf("a rule for port 20881 drained the host: %v", h)
	}
	// Disabled on its dubbo port and enabled again on it by a more specific rule: served.
	if h := health(mergedProviders(t, urls, []override{rule("override://0.0.0.0/" + greeter + "?disabled=true"),
		rule("override://10.0.0.1:20880/" + greeter + "?disabled=false"), rule("override://10.0.0.1:50051/" + greeter + "?disabled=false")})); h["10.0.0.1:20880"] != model.Healthy || h["10.0.0.2:20880"] != model.Draining {
		t.Errorf("disabled everywhere, enabled on both ports of 10.0.0.1: %v", h)
	}
	// Enabled on one port only: the other port is still disabled, so the host stays drained.
	if h := health(mergedProviders(t, urls, []override{rule("override://0.0.0.0/" + greeter + "?disabled=true"),
		rule("override://10.0.0.1:50051/" + greeter + "?disabled=false")})); h["10.0.0.1:20880"] != model.Draining {
		t.Errorf("disabled everywhere, enabled on 10.0.0.1's tri port only: %v", h)
	}
	// A weight for the tri port of 10.0.0.1: that host's weight; 10.0.0.2 keeps none.
	eps := byID(mergedProviders(t, urls, []override{rule("override://10.0.0.1:50051/" + greeter + "?weight=10")}))
	if eps["10.0.0.1:20880"].inst.Weight != 10 || eps["10.0.0.2:20880"].inst.Weight != 0 {
		t.Errorf("weights %d, %d; want 10, 0", eps["10.0.0.1:20880"].inst.Weight, eps["10.0.0.2:20880"].inst.Weight)
	}
	// A provider disabled by its own URL (dubbo-go's enabled=false on one protocol): the host is
	// drained.
	own := []string{"tri://10.0.0.1:50051/" + greeter, "dubbo://10.0.0.1:20880/" + greeter + "?disabled=true"}
	if h := health(mergedProviders(t, own, nil)); h["10.0.0.1:20880"] != model.Draining {
		t.Errorf("one URL disabled by itself: %v", h)
	}
}

// permute calls f with every order of list.
func permute(list []string, f func([]string)) {
	var rec func(int)
	a := slices.Clone(list)
	rec = func(k int) {
		if k == len(a) {
			f(slices.Clone(a))
			return
		}
		for i := k; i < len(a); i++ {
			a[k], a[i] = a[i], a[k]
			rec(k + 1)
			a[k], a[i] = a[i], a[k]
		}
	}
	rec(0)
}

// TestDubboTwoProtocolHosts, against a real ZooKeeper: three hosts each register the interface
// over tri and dubbo, as dubbo-go 3.3.0 and Java Dubbo 3 do (six provider URLs): one service
// with both ports and three instances, one per host. An operator's override disabling
// dubbo://10.0.0.2:20880 drains that host only; a host dropping one protocol keeps its
// instance (its ID moving to the smallest port it still serves); removing the override serves
// every host again. The run's Sink calls keep the contract (no instance ID twice).
func TestDubboTwoProtocolHosts(t *testing.T) {
	s := startServer(t)
	w := dubboWriter{c: client(t, s.Addr()), root: "/dubbo"}
	var urls []string
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		urls = append(urls, twoProtocolURLs(ip)...)
	}
	if err := w.set(greeter, urls...); err != nil {
		t.Fatal(err)
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: LayoutDubbo})
	name := dubboreg.ServiceName(greeter, "", "")
	wantPorts := []model.Port{{Number: 20880, Protocol: model.ProtocolTCP, Name: "tcp-dubbo"}, {Number: 50051, Protocol: model.ProtocolGRPC}}
	state := func(want map[string]model.Health) func(map[model.ServiceKey]model.Service) bool {
		return func(st map[model.ServiceKey]model.Service) bool {
			svc, ok := st[key(name)]
			if !ok || len(st) != 1 || !slices.Equal(svc.Ports, wantPorts) || len(svc.Instances) != len(want) {
				return false
			}
			for _, inst := range svc.Instances {
				if h, ok := want[inst.ID]; !ok || h != inst.Health || inst.Ports != nil || inst.Labels["application"] != "greet-server" {
					return false
				}
			}
			return true
		}
	}
	healthy := model.Healthy
	rec.WaitFor(t, waitTimeout, state(map[string]model.Health{"10.0.0.1:20880": healthy, "10.0.0.2:20880": healthy, "10.0.0.3:20880": healthy}))
	svc := rec.State()[key(name)]
	t.Logf("six provider URLs served as: ports %v, instances %v", svc.Ports, instanceIDs(svc))

	// The operator disables dubbo://10.0.0.2:20880 (Dubbo Admin's override).
	cfgs := w.root + "/" + greeter + "/configurators"
	disable := cfgs + "/" + url.QueryEscape("override://10.0.0.2:20880/"+greeter+"?category=configurators&dynamic=false&disabled=true")
	for _, p := range []string{cfgs, disable} {
		if err := w.ensure(p); err != nil {
			t.Fatal(err)
		}
	}
	rec.WaitFor(t, waitTimeout, state(map[string]model.Health{"10.0.0.1:20880": healthy, "10.0.0.2:20880": model.Draining, "10.0.0.3:20880": healthy}))

	// 10.0.0.1 stops exporting dubbo, 10.0.0.3 stops exporting tri: both stay, one instance each.
	var rest []string
	for _, u := range urls {
		if !strings.HasPrefix(u, "dubbo://10.0.0.1:") && !strings.HasPrefix(u, "tri://10.0.0.3:") {
			rest = append(rest, u)
		}
	}
	if err := w.set(greeter, rest...); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, state(map[string]model.Health{"10.0.0.1:50051": healthy, "10.0.0.2:20880": model.Draining, "10.0.0.3:20880": healthy}))

	// The override goes: every host served again.
	if err := w.c.Delete(disable, -1); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, state(map[string]model.Health{"10.0.0.1:50051": healthy, "10.0.0.2:20880": healthy, "10.0.0.3:20880": healthy}))
	if err := rec.Check(); err != nil {
		t.Fatal(err)
	}
}
