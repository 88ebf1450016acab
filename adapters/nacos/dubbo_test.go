package nacos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
	"github.com/galleon-mesh/galleon/registry/dubbo/dubbotest"
)

// testMapper is the mapper of the default Naming (as the flags' defaults set it) changed by
// change.
func testMapper(t *testing.T, change func(*Naming)) *mapper {
	t.Helper()
	n := Naming{Dubbo: true}
	if change != nil {
		change(&n)
	}
	m, errs := n.compile()
	if len(errs) > 0 {
		t.Fatalf("compile: %v", errs)
	}
	return m
}

// dubboProvider is the Nacos instance Dubbo's NacosRegistry registers for a provider URL
// (createInstance): the URL's parameters as metadata, with protocol, path and category.
func dubboProvider(ip string, port int, scheme, iface, group, version string, extra ...string) wire.Instance {
	meta := map[string]string{
		"protocol": scheme, "path": iface, "category": "providers", "interface": iface,
		"side": "provider", "application": "demo-provider", "dubbo": "2.0.2", "release": "3.2.0",
		"methods": "sayHello", "timestamp": "1700000000000", "anyhost": "true",
	}
	if group != "" {
		meta["group"] = group
	}
	if version != "" {
		meta["version"] = version
	}
	for i := 0; i+1 < len(extra); i += 2 {
		meta[extra[i]] = extra[i+1]
	}
	return wire.Instance{IP: ip, Port: port, Weight: 1, Healthy: true, Enabled: true, Ephemeral: true,
		ClusterName: "DEFAULT", Metadata: meta, InstanceID: fmt.Sprintf("%s#%d#DEFAULT#DEFAULT_GROUP@@providers:%s:%s:%s", ip, port, iface, version, group)}
}

// dubbo3Instance is the Nacos instance Dubbo 3's NacosServiceDiscovery registers for an
// application instance (NacosNamingServiceUtils.toInstance).
func dubbo3Instance(ip string, port int, endpoints string) wire.Instance {
	meta := map[string]string{
		"dubbo.metadata.revision":           "5d8a1b0c2f7e4a9630b1c2d3e4f5a6b7",
		"dubbo.metadata.storage-type":       "local",
		"dubbo.metadata-service.url-params": `{"connections":"1","version":"1.0.0","dubbo":"2.0.2","side":"provider","port":"20880","protocol":"dubbo"}`,
		"meta-v":                            "1.0.0",
		"timestamp":                         "1700000000000",
	}
	if endpoints != "" {
		meta[dubboreg.EndpointsKey] = endpoints
	}
	return wire.Instance{IP: ip, Port: port, Weight: 1, Healthy: true, Enabled: true, Ephemeral: true, ClusterName: "DEFAULT", Metadata: meta}
}

// TestDubboEquivalence maps registry/dubbo's equivalence cases as Dubbo registers them in Nacos
// (providers:<interface>:<version>:<group> services, Dubbo 3 application services) and checks
// the ServiceEntry name, host, ports and endpoints against the kit's, which galleon-zookeeper's
// TestDubboEquivalence checks its Dubbo layouts against.
func TestDubboEquivalence(t *testing.T) {
	e, err := dubbotest.EquivalenceCases()
	if err != nil {
		t.Fatal(err)
	}
	m := testMapper(t, func(n *Naming) { n.Namespace = e.Namespace })
	check := func(t *testing.T, out mapped, want dubbotest.Want) {
		t.Helper()
		if out.err != nil || out.skip || len(out.rejected) > 0 {
			t.Fatalf("err %v skip %v rejected %v", out.err, out.skip, out.rejected)
		}
		svc := out.service
		if svc.Name != want.Name || svc.Namespace != e.Namespace || !slices.Equal(svc.Hosts, []string{want.Host}) {
			t.Errorf("service %s/%s hosts %v, want %s/%s host %s", svc.Namespace, svc.Name, svc.Hosts, e.Namespace, want.Name, want.Host)
		}
		var ports []model.Port
		for _, p := range want.Ports {
			ports = append(ports, model.Port{Number: p.Number, Protocol: model.Protocol(p.Protocol), Name: p.Name})
		}
		if !slices.Equal(svc.Ports, ports) {
			t.Errorf("ports %v, want %v", svc.Ports, ports)
		}
		var ids []string
		for _, in := range svc.Instances {
			ids = append(ids, in.ID)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, want.IDs) {
			t.Errorf("endpoints %v, want %v", ids, want.IDs)
		}
	}
	for _, c := range e.Interfaces {
		t.Run(c.Case, func(t *testing.T) {
			info := &wire.ServiceInfo{}
			for _, p := range c.Providers {
				info.Hosts = append(info.Hosts, dubboProvider(p.IP, p.Port, p.Protocol, c.Interface, c.Group, c.Version))
			}
			ref := wire.Ref{Group: "DEFAULT_GROUP", Service: "providers:" + c.Interface + ":" + c.Version + ":" + c.Group}
			check(t, m.mapService(ref, info), c.Want)
		})
	}
	for _, c := range e.Applications {
		t.Run(c.Case, func(t *testing.T) {
			info := &wire.ServiceInfo{}
			for _, in := range c.Instances {
				info.Hosts = append(info.Hosts, dubbo3Instance(in.IP, in.Port, in.Endpoints))
			}
			check(t, m.mapService(wire.Ref{Namespace: "dev", Group: "DUBBO", Service: c.Application}, info), c.Want)
		})
	}
}

func TestDubboServiceNames(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		ok                        bool
		category, iface, ver, grp string
	}{
		{"providers:org.x.Foo::", true, "providers", "org.x.Foo", "", ""},
		{"providers:org.x.Foo:1.0.0:g1", true, "providers", "org.x.Foo", "1.0.0", "g1"},
		{"consumers:org.x.Foo::", true, "consumers", "org.x.Foo", "", ""},
		{"configurators:org.x.Foo::", true, "configurators", "org.x.Foo", "", ""},
		{"routers:org.x.Foo::", true, "routers", "org.x.Foo", "", ""},
		{"providers:org.x.Foo", false, "", "", "", ""},       // Dubbo <= 2.7.3's subscription name, never registered
		{"providers:org.x.Foo:1:g:x", false, "", "", "", ""}, // five segments: not Dubbo's (isConformRules)
		{"orders:a:b:c", false, "", "", "", ""},
		{"orders", false, "", "", "", ""},
	} {
		c, i, v, g, ok := dubboInterface(tc.name)
		if ok != tc.ok || c != tc.category || i != tc.iface || v != tc.ver || g != tc.grp {
			t.Errorf("dubboInterface(%q) = %q %q %q %q %v", tc.name, c, i, v, g, ok)
		}
	}
}

func TestDubboOnNacos(t *testing.T) {
	m := testMapper(t, nil)
	const iface = "org.apache.dubbo.demo.DemoService"
	ref := wire.Ref{Group: "DEFAULT_GROUP", Service: "providers:" + iface + ":1.0.0:g1"}

	// Consumers, configurators, routers: no service, no rejection.
	for _, cat := range []string{"consumers", "configurators", "routers"} {
		out := m.mapService(wire.Ref{Service: cat + ":" + iface + "::"}, &wire.ServiceInfo{Hosts: []wire.Instance{dubboProvider("10.0.0.1", 0, "consumer", iface, "", "")}})
		if !out.skip || out.err != nil || len(out.rejected) > 0 {
			t.Errorf("%s: skip %v err %v rejected %v, want skipped silently", cat, out.skip, out.err, out.rejected)
		}
	}
	if out := m.mapService(wire.Ref{Service: "providers:::"}, &wire.ServiceInfo{}); registry.ReasonOf(out.err, "") != reasonName {
		t.Errorf("providers::: err %v, want a %s error", out.err, reasonName)
	}

	info := &wire.ServiceInfo{Hosts: []wire.Instance{
		dubboProvider("10.0.0.1", 20880, "dubbo", iface, "g1", "1.0.0", "weight", "200"),
		dubboProvider("10.0.0.1", 50051, "tri", iface, "g1", "1.0.0", "token", "s3cret"),
		dubboProvider("10.0.0.2", 20880, "dubbo", iface, "g1", "1.0.0", "disabled", "true"),
		dubboProvider("10.0.0.3", 20880, "dubbo", iface, "g1", "1.0.0", "side", "consumer"),
		dubboProvider("10.0.0.4", 20880, "dubbo", iface, "g1", "1.0.0", "weight", "heavy"),
		dubboProvider("10.0.0.5", 20880, "", iface, "g1", "1.0.0"),
	}}
	info.Hosts[5].Healthy = false
	out := m.mapService(ref, info)
	if out.err != nil || out.service.Name != dubboreg.ServiceName(iface, "g1", "1.0.0") {
		t.Fatalf("mapped %+v", out)
	}
	byID := map[string]model.Instance{}
	for _, in := range out.service.Instances {
		byID[in.ID] = in
	}
	if len(byID) != 3 {
		t.Errorf("instances %v: want 10.0.0.1 (merged), .2 and .5; .3 is a consumer, .4 rejected", out.service.Instances)
	}
	merged := byID["10.0.0.1:20880"]
	if merged.Health != model.Healthy || merged.Weight != 100 || merged.Labels["application"] != "demo-provider" || merged.Labels["token"] != "" {
		t.Errorf("10.0.0.1: %+v, want healthy, weight 100 (tri's Nacos weight, smaller than dubbo's 200), Dubbo's labels only", merged)
	}
	if byID["10.0.0.2:20880"].Health != model.Draining {
		t.Errorf("disabled=true: %v, want draining", byID["10.0.0.2:20880"].Health)
	}
	if byID["10.0.0.5:20880"].Health != model.Unhealthy {
		t.Errorf("unhealthy: %v", byID["10.0.0.5:20880"].Health)
	}
	if !slices.Equal(out.service.Ports, []model.Port{{Number: 20880, Protocol: model.ProtocolTCP, Name: "tcp-dubbo"}, {Number: 50051, Protocol: model.ProtocolGRPC}}) {
		t.Errorf("ports %v", out.service.Ports)
	}
	rec := instanceRecord(ref, info.Hosts[4])
	if err := out.rejected[rec]; registry.ReasonOf(err, "") != reasonWeight || len(out.rejected) != 1 {
		t.Errorf("rejected %v, want %s for weight=heavy", out.rejected, rec)
	}

	// A plain service whose instances carry Dubbo 3's metadata is an application; without, not.
	app := m.mapService(wire.Ref{Service: "Greet_Server"}, &wire.ServiceInfo{Hosts: []wire.Instance{dubbo3Instance("10.0.1.1", 20880, "[bad")}})
	if len(app.rejected) != 1 || app.service.Name != dubboreg.ServiceName("Greet_Server", "", "") || app.service.Hosts[0] != app.service.Name+".default.dubbo" {
		t.Errorf("Dubbo 3 application with bad endpoints: %+v", app)
	}
	plain := m.mapService(wire.Ref{Service: "Greet_Server"}, &wire.ServiceInfo{Hosts: []wire.Instance{{IP: "10.0.1.1", Port: 8080, Weight: 1, Healthy: true, Enabled: true}}})
	if strings.HasSuffix(plain.service.Hosts[0], ".dubbo") {
		t.Errorf("a plain service mapped as Dubbo's: %v", plain.service.Hosts)
	}
	// --nacos-dubbo=false: Dubbo's names are plain services (their "protocol" metadata, dubbo, is
	// no Istio protocol: rejected).
	off := testMapper(t, func(n *Naming) { n.Dubbo = false })
	if out := off.mapService(ref, info); out.skip || strings.HasSuffix(out.service.Hosts[0], ".dubbo") || len(out.rejected) == 0 {
		t.Errorf("Dubbo off: %+v", out)
	}
}

// TestDubboUnwatched: with the Dubbo mapping on, discovery subscribes to no consumers:,
// configurators: or routers: service (nothing of them is served: D2), and to providers: and
// plain services as before; with it off, every listed service is a plain one, watched.
func TestDubboUnwatched(t *testing.T) {
	listed := []string{"orders", "consumers:org.x.Foo::", "providers:org.x.Foo::", "routers:org.x.Foo::", "configurators:org.x.Foo:1.0:g"}
	for _, tc := range []struct {
		dubbo bool
		want  []string
	}{
		{true, []string{"orders", "providers:org.x.Foo::"}},
		{false, listed},
	} {
		w, sess, _, _ := refreshWatcher(t, Config{Naming: Naming{Dubbo: tc.dubbo}}, 0)
		sess.listed = listed
		refs, err := w.discover(context.Background(), sess)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ref := range refs {
			got = append(got, ref.Service)
		}
		if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(tc.want))) {
			t.Errorf("--nacos-dubbo=%v: discovery watches %q, want %q", tc.dubbo, got, tc.want)
		}
	}
}
