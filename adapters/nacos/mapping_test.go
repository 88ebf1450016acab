package nacos

import (
	"maps"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

func inst(ip string, port int, change ...func(*wire.Instance)) wire.Instance {
	in := wire.Instance{IP: ip, Port: port, Weight: 1, Healthy: true, Enabled: true, Ephemeral: true, ClusterName: "DEFAULT",
		Metadata: map[string]string{"preserved.register.source": "SPRING_CLOUD"}}
	for _, c := range change {
		c(&in)
	}
	return in
}

func byID(svc model.Service) map[string]model.Instance {
	out := map[string]model.Instance{}
	for _, in := range svc.Instances {
		out[in.ID] = in
	}
	return out
}

// valid checks that the core accepts the service as it is.
func valid(t *testing.T, svc model.Service) {
	t.Helper()
	if _, err := convert.ConvertService(svc, convert.Options{Mode: convert.ModeServiceEntry}); err != nil {
		t.Errorf("the core refuses %s: %v", svc.Name, err)
	}
}

// TestNamesAndHosts: one ServiceEntry name and one host per (namespace, group, service), the
// name and the host readable when the parts are DNS labels, and distinct for parts that
// sanitise alike.
func TestNamesAndHosts(t *testing.T) {
	m := testMapper(t, nil)
	one := &wire.ServiceInfo{Hosts: []wire.Instance{inst("10.0.0.1", 8080)}}
	for _, tc := range []struct {
		ref        wire.Ref
		name, host string // name "": starts with prefix, then "--" and a hash
		prefix     string
	}{
		{ref: wire.Ref{Service: "orders"}, name: "orders", host: "orders.default-group.public.nacos"},
		{ref: wire.Ref{Namespace: "public", Group: "DEFAULT_GROUP", Service: "orders"}, name: "orders", host: "orders.default-group.public.nacos"},
		{ref: wire.Ref{Namespace: "dev", Group: "shop", Service: "orders"}, prefix: "orders-shop-dev--", host: "orders.shop.dev.nacos"},
		{ref: wire.Ref{Group: "shop", Service: "orders"}, prefix: "orders-shop--", host: "orders.shop.public.nacos"},
		{ref: wire.Ref{Namespace: "shop", Service: "orders"}, prefix: "orders-shop--", host: "orders.default-group.shop.nacos"},
		{ref: wire.Ref{Group: "default-group", Service: "orders"}, prefix: "orders-default-group--"},
		{ref: wire.Ref{Service: "Orders"}, prefix: "orders--"},
		{ref: wire.Ref{Service: "order.service"}, prefix: "order-service--"},
		{ref: wire.Ref{Service: "a--b"}, prefix: "a-b--"},
		{ref: wire.Ref{Namespace: "e3b1c2d4-5f6a-4b7c-8d9e-0f1a2b3c4d5e", Service: "orders"}, prefix: "orders-e3b1c2d4-5f6a-4b7c-8d9e-0f1a2b3c4d5e--", host: "orders.default-group.e3b1c2d4-5f6a-4b7c-8d9e-0f1a2b3c4d5e.nacos"},
		{ref: wire.Ref{Service: strings.Repeat("x", 300)}, prefix: "xxxx"},
		{ref: wire.Ref{Service: "订单"}, prefix: "nacos--"},
	} {
		out := m.mapService(tc.ref, one)
		if out.err != nil {
			t.Errorf("%v: %v", tc.ref, out.err)
			continue
		}
		name := out.service.Name
		if model.DNSLabel(name) != name {
			t.Errorf("%v: name %q is not a DNS label", tc.ref, name)
		}
		if tc.name != "" && name != tc.name || tc.prefix != "" && (!strings.HasPrefix(name, tc.prefix) || !strings.Contains(name, "--")) {
			t.Errorf("%v: name %q, want %q%q", tc.ref, name, tc.name, tc.prefix)
		}
		if tc.host != "" && out.service.Hosts[0] != tc.host {
			t.Errorf("%v: host %q, want %q", tc.ref, out.service.Hosts[0], tc.host)
		}
		valid(t, out.service)
	}
	// Distinct refs, distinct names and hosts, among refs that sanitise alike.
	names, hosts := map[string]wire.Ref{}, map[string]wire.Ref{}
	for _, ns := range []string{"", "dev", "Dev", "d-ev", "d.ev"} {
		for _, g := range []string{"DEFAULT_GROUP", "default-group", "DEFAULT-GROUP", "shop", "Shop"} {
			for _, s := range []string{"orders", "Orders", "ORDERS", "or.ders", "or-ders", "or--ders"} {
				ref := wire.Ref{Namespace: ns, Group: g, Service: s}
				svc := m.mapService(ref, one).service
				if prev, dup := names[svc.Name]; dup {
					t.Errorf("%v and %v share the name %s", prev, ref, svc.Name)
				}
				if prev, dup := hosts[svc.Hosts[0]]; dup {
					t.Errorf("%v and %v share the host %s", prev, ref, svc.Hosts[0])
				}
				names[svc.Name], hosts[svc.Hosts[0]] = ref, ref
			}
		}
	}
}

// TestInstanceRules: health, weight, cluster, labels, protocol, one instance at a time.
func TestInstanceRules(t *testing.T) {
	m := testMapper(t, nil)
	long := strings.Repeat("v", 64)
	info := &wire.ServiceInfo{Hosts: []wire.Instance{
		inst("10.0.0.1", 8080, func(in *wire.Instance) {
			in.ClusterName = "BJ"
			in.Metadata = map[string]string{"version": "v2", "protocol": "grpc", "preserved.heart.beat.interval": "5000",
				"internal-nacos-cluster": "BJ", "internal-nacos-service": "DEFAULT_GROUP@@orders", "internal-lastheartbeat": "1795766052033", "blob": long}
		}),
		inst("10.0.0.2", 8080, func(in *wire.Instance) { in.Healthy = false }),
		inst("10.0.0.3", 8080, func(in *wire.Instance) { in.Enabled = false }),
		inst("10.0.0.4", 8080, func(in *wire.Instance) { in.Weight = 0 }),
		inst("10.0.0.5", 8080, func(in *wire.Instance) { in.Weight = 0.001 }),
		inst("10.0.0.6", 8080, func(in *wire.Instance) { in.Weight = 2.5; in.Ephemeral = false }),
		inst("10.0.0.7", 8080, func(in *wire.Instance) { in.Weight = 1e9 }),
		inst("Pod-1.Example.COM", 8080),
		inst("fd00::1", 8080),
	}}
	out := m.mapService(wire.Ref{Service: "orders"}, info)
	if out.err != nil || len(out.rejected) > 0 || out.panic {
		t.Fatalf("err %v rejected %v panic %v", out.err, out.rejected, out.panic)
	}
	got := byID(out.service)
	for id, want := range map[string]struct {
		health model.Health
		weight uint32
	}{
		"10.0.0.1:8080": {model.Healthy, 100}, "10.0.0.2:8080": {model.Unhealthy, 100},
		"10.0.0.3:8080": {model.Draining, 100}, "10.0.0.4:8080": {model.Draining, 0},
		"10.0.0.5:8080": {model.Healthy, 1}, "10.0.0.6:8080": {model.Healthy, 250},
		"10.0.0.7:8080": {model.Healthy, maxWeight * weightScale}, "pod-1.example.com:8080": {model.Healthy, 100},
		"[fd00::1]:8080": {model.Healthy, 100},
	} {
		if in, ok := got[id]; !ok || in.Health != want.health || in.Weight != want.weight {
			t.Errorf("%s: %+v, want health %v weight %d", id, in, want.health, want.weight)
		}
	}
	first := got["10.0.0.1:8080"]
	if len(first.Labels) != 2 || first.Labels["version"] != "v2" || first.Labels[clusterLabel] != "BJ" {
		t.Errorf("labels %v, want version and %s only (no protocol, Nacos's or Polaris's keys, long values)", first.Labels, clusterLabel)
	}
	if got["10.0.0.2:8080"].Labels != nil {
		t.Errorf("cluster DEFAULT and preserved metadata only: labels %v, want none", got["10.0.0.2:8080"].Labels)
	}
	// The port's protocol is the first instance's (10.0.0.1 says grpc).
	if len(out.service.Ports) != 1 || out.service.Ports[0] != (model.Port{Number: 8080, Protocol: model.ProtocolGRPC}) {
		t.Errorf("ports %v", out.service.Ports)
	}
	valid(t, out.service)

	loc := testMapper(t, func(n *Naming) { n.Cluster = ClusterAsLocality })
	l := byID(loc.mapService(wire.Ref{Service: "orders"}, info).service)
	if l["10.0.0.1:8080"].Locality != "BJ" || l["10.0.0.2:8080"].Locality != "" || l["10.0.0.1:8080"].Labels[clusterLabel] != "" {
		t.Errorf("locality mode: %+v / %+v", l["10.0.0.1:8080"], l["10.0.0.2:8080"])
	}

	many := map[string]string{}
	for i := range 100 {
		many[strings.Repeat("k", i%7+1)+string(rune('a'+i%26))+strings.Repeat("z", i/26)] = "v"
	}
	big := m.mapService(wire.Ref{Service: "orders"}, &wire.ServiceInfo{Hosts: []wire.Instance{inst("10.0.0.1", 1, func(in *wire.Instance) { in.Metadata = many; in.ClusterName = "C1" })}})
	if n := len(big.service.Instances[0].Labels); n != maxLabels || big.service.Instances[0].Labels[clusterLabel] != "C1" {
		t.Errorf("%d labels (cluster %q), want %d with the cluster's", n, big.service.Instances[0].Labels[clusterLabel], maxLabels)
	}
}

// TestPorts: one service port, the number most instances use; an instance on another number is
// reached on it.
func TestPorts(t *testing.T) {
	m := testMapper(t, nil)
	info := &wire.ServiceInfo{Hosts: []wire.Instance{
		inst("10.0.0.3", 9090), inst("10.0.0.1", 8080), inst("10.0.0.2", 8080),
	}}
	svc := m.mapService(wire.Ref{Service: "orders"}, info).service
	if len(svc.Ports) != 1 || svc.Ports[0] != (model.Port{Number: 8080, Protocol: model.ProtocolHTTP}) {
		t.Fatalf("ports %v", svc.Ports)
	}
	got := byID(svc)
	if p := got["10.0.0.3:9090"].Ports; len(p) != 1 || p[8080] != 9090 || got["10.0.0.1:8080"].Ports != nil {
		t.Errorf("instance ports: %v / %v", p, got["10.0.0.1:8080"].Ports)
	}
	valid(t, svc)
	// A tie: the smaller number.
	tie := m.mapService(wire.Ref{Service: "orders"}, &wire.ServiceInfo{Hosts: []wire.Instance{inst("10.0.0.1", 9090), inst("10.0.0.2", 8080)}}).service
	if tie.Ports[0].Number != 8080 {
		t.Errorf("tie: %v", tie.Ports)
	}
	// No instance: no port, no error (the caller keeps the ports it served).
	empty := m.mapService(wire.Ref{Service: "orders"}, &wire.ServiceInfo{})
	if empty.err != nil || len(empty.service.Ports) != 0 || len(empty.service.Instances) != 0 || empty.service.Name != "orders" {
		t.Errorf("empty: %+v", empty)
	}
}

// TestMalformedInstances: each malformed instance is rejected by its record with its reason, and
// the rest of the service is served.
func TestMalformedInstances(t *testing.T) {
	m := testMapper(t, nil)
	cases := map[string]wire.Instance{
		reasonAddress + "/bad":         inst("not an ip!", 8080),
		reasonAddress + "/unspecified": inst("0.0.0.0", 8080),
		reasonAddress + "/empty":       inst("", 8080),
		reasonPort + "/0":              inst("10.0.0.2", 0),
		reasonPort + "/70000":          inst("10.0.0.3", 70000),
		reasonWeight + "/NaN":          inst("10.0.0.4", 8080, func(in *wire.Instance) { in.Weight = math.NaN() }),
		reasonWeight + "/-1":           inst("10.0.0.5", 8080, func(in *wire.Instance) { in.Weight = -1 }),
		reasonWeight + "/+Inf":         inst("10.0.0.6", 8080, func(in *wire.Instance) { in.Weight = math.Inf(1) }),
		reasonProtocol + "/soap":       inst("10.0.0.7", 8080, func(in *wire.Instance) { in.Metadata = map[string]string{"protocol": "soap"} }),
		reasonDuplicate + "/cluster":   inst("10.0.0.1", 8080, func(in *wire.Instance) { in.ClusterName = "ZZ" }),
	}
	info := &wire.ServiceInfo{Hosts: []wire.Instance{inst("10.0.0.1", 8080)}}
	for _, in := range cases {
		info.Hosts = append(info.Hosts, in)
	}
	ref := wire.Ref{Group: "g", Service: "orders"}
	out := m.mapService(ref, info)
	if out.err != nil || len(out.service.Instances) != 1 || out.service.Instances[0].ID != "10.0.0.1:8080" {
		t.Fatalf("served %+v, err %v", out.service.Instances, out.err)
	}
	for what, in := range cases {
		rec := instanceRecord(ref, in)
		err := out.rejected[rec]
		if want, _, _ := strings.Cut(what, "/"); registry.ReasonOf(err, "") != want {
			t.Errorf("%s: record %q: %v, want reason %s", what, rec, err, want)
		}
	}
	if len(out.rejected) != len(cases) {
		t.Errorf("%d rejected, want %d: %v", len(out.rejected), len(cases), out.rejected)
	}
	valid(t, out.service)
}

// TestProtectThreshold: the server's word, or Naming.ProtectThreshold when the healthy share of
// the enabled instances is at most it, serves every enabled instance.
func TestProtectThreshold(t *testing.T) {
	sick := func(in *wire.Instance) { in.Healthy = false }
	off := func(in *wire.Instance) { in.Enabled = false }
	hosts := []wire.Instance{inst("10.0.0.1", 80), inst("10.0.0.2", 80, sick), inst("10.0.0.3", 80, sick), inst("10.0.0.4", 80, off), inst("10.0.0.5", 80, sick, func(in *wire.Instance) { in.Weight = 0 })}
	served := func(svc model.Service) int {
		n := 0
		for _, in := range svc.Instances {
			if in.Health == model.Healthy {
				n++
			}
		}
		return n
	}
	m := testMapper(t, nil)
	out := m.mapService(wire.Ref{Service: "orders"}, &wire.ServiceInfo{Hosts: hosts})
	if out.panic || served(out.service) != 1 {
		t.Errorf("no threshold: panic %v, %d served", out.panic, served(out.service))
	}
	out = m.mapService(wire.Ref{Service: "orders"}, &wire.ServiceInfo{Hosts: hosts, ReachProtectionThreshold: true})
	if !out.panic || served(out.service) != 3 {
		t.Errorf("the server's: panic %v, %d served, want 3 (not the disabled one, not weight 0)", out.panic, served(out.service))
	}
	// 1 healthy of 4 enabled: 0.25.
	for _, tc := range []struct {
		threshold float64
		panic     bool
	}{{0.2, false}, {0.25, true}, {0.5, true}} {
		m := testMapper(t, func(n *Naming) { n.ProtectThreshold = tc.threshold })
		out := m.mapService(wire.Ref{Service: "orders"}, &wire.ServiceInfo{Hosts: hosts})
		if out.panic != tc.panic || tc.panic && served(out.service) != 3 {
			t.Errorf("threshold %v: panic %v, %d served", tc.threshold, out.panic, served(out.service))
		}
	}
}

func TestNamespaceAndHostTemplate(t *testing.T) {
	m := testMapper(t, func(n *Naming) {
		n.NamespaceMetaKey = "k8s-namespace"
		n.HostTemplate = "{{.Metadata.app}}.{{.Group}}.mesh"
	})
	info := &wire.ServiceInfo{Hosts: []wire.Instance{
		inst("10.0.0.2", 80, func(in *wire.Instance) { in.Metadata = map[string]string{"k8s-namespace": "shop", "app": "other"} }),
		inst("10.0.0.1", 80, func(in *wire.Instance) {
			in.Metadata = map[string]string{"k8s-namespace": "Not_Valid", "app": "Orders"}
		}),
	}}
	svc := m.mapService(wire.Ref{Service: "orders"}, info).service
	if svc.Namespace != "shop" || svc.Hosts[0] != "orders.default-group.mesh" {
		t.Errorf("namespace %q host %q, want shop (the first valid value) and the first instance's metadata", svc.Namespace, svc.Hosts[0])
	}
	if _, ok := byID(svc)["10.0.0.2:80"].Labels["k8s-namespace"]; ok {
		t.Error("the namespace key is a label")
	}
	// A template that renders nothing for a service falls back to the default.
	fb := m.mapService(wire.Ref{Service: "orders"}, &wire.ServiceInfo{Hosts: []wire.Instance{inst("10.0.0.1", 80)}}).service
	if fb.Namespace != "default" || fb.Hosts[0] != "orders.default-group.public.nacos" {
		t.Errorf("fallback: %s %v", fb.Namespace, fb.Hosts)
	}
}

func TestRecords(t *testing.T) {
	ref := wire.Ref{Service: "orders"}
	if got := serviceRecord(ref); got != "public/DEFAULT_GROUP/orders" {
		t.Errorf("serviceRecord = %q", got)
	}
	if got := instanceRecord(wire.Ref{Namespace: "dev", Group: "g", Service: "orders"}, wire.Instance{IP: "10.0.0.1", Port: 8080, ClusterName: "BJ"}); got != "dev/g/orders 10.0.0.1:8080 (cluster BJ)" {
		t.Errorf("instanceRecord = %q", got)
	}
	long := wire.Ref{Service: strings.Repeat("s", 5000)}
	a := instanceRecord(long, wire.Instance{IP: "10.0.0.1", Port: 1})
	b := instanceRecord(long, wire.Instance{IP: "10.0.0.2", Port: 1})
	if len(a) > registry.MaxRecordLen+32 || a == b || !strings.HasSuffix(a, " 10.0.0.1:1") {
		t.Errorf("long records: %d bytes, %q", len(a), a)
	}
}

func TestCompileErrors(t *testing.T) {
	n := Naming{Namespace: "Not_A_Namespace", Cluster: "zone", ProtectThreshold: 2, HostTemplate: "{{.Nope}}",
		DubboHostTemplate: "{{", DubboProtocols: map[string]string{"hessian": "SOAP"}}
	m, errs := n.compile()
	if m != nil {
		t.Fatal("compiled a wrong Naming")
	}
	text := ""
	for _, err := range errs {
		text += err.Error() + "\n"
	}
	for _, flag := range []string{flagNamespace, flagClusterAs, flagProtectThreshold, flagHostTemplate, flagDubboHostTemplate, flagDubboProtocols} {
		if !strings.Contains(text, "--"+flag) {
			t.Errorf("no error names --%s:\n%s", flag, text)
		}
	}
	var d Naming
	if _, errs := d.compile(); len(errs) > 0 || d.HostTemplate != DefaultHostTemplate || d.ProtocolKey != DefaultProtocolKey || d.Namespace != DefaultIstioNamespace || d.Cluster != ClusterAsLabel {
		t.Errorf("defaults: %+v %v", d, errs)
	}
}

// TestShareLabels: instances with equal labels share one map, others keep their own, and no
// two different label sets get one key (a key written without lengths would join
// {"a:1": "b"} and {"a": "1:b"}).
func TestShareLabels(t *testing.T) {
	insts := []model.Instance{
		{ID: "a", Labels: map[string]string{"version": "v1", "zone": "z"}},
		{ID: "b", Labels: map[string]string{"zone": "z", "version": "v1"}},
		{ID: "c", Labels: map[string]string{"version": "v2", "zone": "z"}},
		{ID: "d"},
		{ID: "e", Labels: map[string]string{"a:1": "b"}},
		{ID: "f", Labels: map[string]string{"a": "1:b"}},
		{ID: "g", Labels: map[string]string{"zone": "z", "version": "v1"}},
	}
	want := make([]map[string]string, len(insts))
	for n, in := range insts {
		want[n] = maps.Clone(in.Labels)
	}
	shareLabels(insts)
	same := func(a, b map[string]string) bool { return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer() }
	for n, in := range insts {
		if !maps.Equal(in.Labels, want[n]) {
			t.Errorf("instance %s: labels %v, want %v", in.ID, in.Labels, want[n])
		}
	}
	if !same(insts[0].Labels, insts[1].Labels) || !same(insts[0].Labels, insts[6].Labels) {
		t.Error("instances a, b and g have equal labels and do not share one map")
	}
	for _, pair := range [][2]int{{0, 2}, {4, 5}} {
		if same(insts[pair[0]].Labels, insts[pair[1]].Labels) {
			t.Errorf("instances %s and %s have different labels and share one map", insts[pair[0]].ID, insts[pair[1]].ID)
		}
	}
	if insts[3].Labels != nil {
		t.Errorf("instance d had no labels and has %v", insts[3].Labels)
	}
}
