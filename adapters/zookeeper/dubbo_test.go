package zookeeper

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/model"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

const demoURL = "dubbo://10.0.0.1:20880/org.apache.demo.DemoService?anyhost=true&application=demo-provider&group=g1&version=1.0.0&weight=100&side=provider&methods=sayHello"

// TestParseDubboProvider is a table test of the provider URL parser (no ZooKeeper).
func TestParseDubboProvider(t *testing.T) {
	d := newDubbo(nil)
	for _, tc := range []struct {
		name, id  string
		want      model.Instance
		port      model.Port
		svc       hostData
		err       string // a substring of the error; "-" for errNotInstance
		encodedIn bool
	}{
		{name: "dubbo encoded", id: url.QueryEscape(demoURL),
			want: model.Instance{ID: "10.0.0.1:20880", Address: "10.0.0.1", Weight: 100, Labels: map[string]string{"application": "demo-provider", "group": "g1", "version": "1.0.0", "side": "provider"}},
			port: model.Port{Number: 20880, Protocol: model.ProtocolTCP, Name: "tcp-dubbo"},
			svc:  hostData{Name: dubboreg.ServiceName("org.apache.demo.DemoService", "g1", "1.0.0"), Interface: "org.apache.demo.DemoService", Group: "g1", Version: "1.0.0"}},
		{name: "dubbo decoded", id: demoURL,
			want: model.Instance{ID: "10.0.0.1:20880", Address: "10.0.0.1", Weight: 100, Labels: map[string]string{"application": "demo-provider", "group": "g1", "version": "1.0.0", "side": "provider"}},
			port: model.Port{Number: 20880, Protocol: model.ProtocolTCP, Name: "tcp-dubbo"},
			svc:  hostData{Name: dubboreg.ServiceName("org.apache.demo.DemoService", "g1", "1.0.0"), Interface: "org.apache.demo.DemoService", Group: "g1", Version: "1.0.0"}},
		{name: "tri", id: url.QueryEscape("tri://10.0.0.2:50051/org.apache.demo.DemoService?dubbo=2.0.2&release=3.2.0"),
			want: model.Instance{ID: "10.0.0.2:50051", Address: "10.0.0.2", Labels: map[string]string{"dubbo": "2.0.2", "release": "3.2.0"}},
			port: model.Port{Number: 50051, Protocol: model.ProtocolGRPC},
			svc:  hostData{Name: dubboreg.ServiceName("org.apache.demo.DemoService", "", ""), Interface: "org.apache.demo.DemoService"}},
		{name: "grpc", id: url.QueryEscape("grpc://10.0.0.3:9090/x.Y"),
			want: model.Instance{ID: "10.0.0.3:9090", Address: "10.0.0.3"},
			port: model.Port{Number: 9090, Protocol: model.ProtocolGRPC},
			svc:  hostData{Name: dubboreg.ServiceName("org.apache.demo.DemoService", "", ""), Interface: "org.apache.demo.DemoService"}},
		{name: "rest", id: url.QueryEscape("rest://10.0.0.4:8080/ctx/x.Y?enabled=false"),
			want: model.Instance{ID: "10.0.0.4:8080", Address: "10.0.0.4", Health: model.Draining},
			port: model.Port{Number: 8080, Protocol: model.ProtocolHTTP},
			svc:  hostData{Name: dubboreg.ServiceName("org.apache.demo.DemoService", "", ""), Interface: "org.apache.demo.DemoService"}},
		{name: "http disabled, IPv6", id: url.QueryEscape("http://[fd00::1]:80/x.Y?disabled=true"),
			want: model.Instance{ID: "[fd00::1]:80", Address: "fd00::1", Health: model.Draining},
			port: model.Port{Number: 80, Protocol: model.ProtocolHTTP},
			svc:  hostData{Name: dubboreg.ServiceName("org.apache.demo.DemoService", "", ""), Interface: "org.apache.demo.DemoService"}},
		{name: "unknown scheme is TCP", id: url.QueryEscape("hessian://10.0.0.5:1/x.Y"),
			want: model.Instance{ID: "10.0.0.5:1", Address: "10.0.0.5"},
			port: model.Port{Number: 1, Protocol: model.ProtocolTCP},
			svc:  hostData{Name: dubboreg.ServiceName("org.apache.demo.DemoService", "", ""), Interface: "org.apache.demo.DemoService"}},
		{name: "consumer", id: url.QueryEscape("consumer://10.0.0.6:0/x.Y?side=consumer"), err: "-"},
		{name: "provider side consumer", id: url.QueryEscape("dubbo://10.0.0.6:20880/x.Y?side=consumer"), err: "-"},
		{name: "not a URL", id: "hello", err: "not a provider URL"},
		{name: "bad escape", id: "dubbo%3A%2F%2F10.0.0.1%3A20880%ZZ", err: "not a URL-encoded provider URL"},
		{name: "host name", id: url.QueryEscape("dubbo://provider.local:20880/x.Y"), err: "not an IP address"},
		{name: "anyhost address", id: url.QueryEscape("dubbo://0.0.0.0:20880/x.Y"), err: "unspecified"},
		{name: "no port", id: url.QueryEscape("dubbo://10.0.0.1/x.Y"), err: "port"},
		{name: "port too large", id: url.QueryEscape("dubbo://10.0.0.1:70000/x.Y"), err: "port \"70000\""},
		{name: "port zero", id: url.QueryEscape("dubbo://10.0.0.1:0/x.Y"), err: "port \"0\""},
		{name: "bad weight", id: url.QueryEscape("dubbo://10.0.0.1:20880/x.Y?weight=-1"), err: "weight"},
		{name: "bad parameters", id: url.QueryEscape("dubbo://10.0.0.1:20880/x.Y?a=%zz"), err: "parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := d.parseInstance("org.apache.demo.DemoService", tc.id, nil)
			switch {
			case tc.err == "-":
				if !errors.Is(err, errNotInstance) {
					t.Fatalf("err = %v, want errNotInstance", err)
				}
				return
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if d := registrytest.Diff(model.Service{Instances: []model.Instance{tc.want}}, model.Service{Instances: []model.Instance{e.inst}}); d != "" || e.inst.Weight != tc.want.Weight {
				t.Errorf("instance: %s (weight %d, want %d)", d, e.inst.Weight, tc.want.Weight)
			}
			if len(e.ports) != 1 || e.ports[0] != tc.port {
				t.Errorf("ports = %v, want [%v]", e.ports, tc.port)
			}
			if e.host() != tc.svc {
				t.Errorf("service = %+v, want %+v", e.host(), tc.svc)
			}
		})
	}
	// The override.
	e, err := newDubbo(map[string]string{"dubbo": "http"}).parseInstance("x.Y", url.QueryEscape("dubbo://10.0.0.1:20880/x.Y"), nil)
	if err != nil || e.ports[0] != (model.Port{Number: 20880, Protocol: model.ProtocolHTTP}) {
		t.Errorf("override dubbo=http: %v %v", e.ports, err)
	}
}

// dubboWriter writes Dubbo provider znodes under root.
type dubboWriter struct {
	c    *zk.Conn
	root string
}

func (w *dubboWriter) ensure(p string) error {
	_, err := w.c.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

// set makes <root>/<iface>/providers hold exactly urls (decoded; written URL-encoded, with the
// URL as data as Dubbo does), in one transaction.
func (w *dubboWriter) set(iface string, urls ...string) error {
	for _, p := range []string{w.root, w.root + "/" + iface, w.root + "/" + iface + "/providers"} {
		if err := w.ensure(p); err != nil {
			return err
		}
	}
	p := w.root + "/" + iface + "/providers"
	existing, _, err := w.c.Children(p)
	if err != nil {
		return err
	}
	want := map[string]string{}
	for _, u := range urls {
		want[url.QueryEscape(u)] = u
	}
	var ops []any
	for _, id := range existing {
		if _, keep := want[id]; !keep {
			ops = append(ops, &zk.DeleteRequest{Path: p + "/" + id, Version: -1})
		}
	}
	for id, u := range want {
		if !slices.Contains(existing, id) {
			ops = append(ops, &zk.CreateRequest{Path: p + "/" + id, Data: []byte(u), Acl: zk.WorldACL(zk.PermAll)})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	_, err = w.c.Multi(ops...)
	return err
}

// setRaw adds a provider node whose name is id, as it is.
func (w *dubboWriter) setRaw(iface, id string) error {
	if err := w.set(iface); err != nil {
		return err
	}
	return w.ensure(w.root + "/" + iface + "/providers/" + id)
}

// remove deletes the interface znode and everything under it.
func (w *dubboWriter) remove(iface string) error {
	return w.removeAll(w.root + "/" + iface)
}

func (w *dubboWriter) removeAll(p string) error {
	children, _, err := w.c.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, c := range children {
		if err := w.removeAll(p + "/" + c); err != nil {
			return err
		}
	}
	if err := w.c.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}

// dubboKitDriver writes the kit's services as Dubbo providers: service <name> is interface
// <name> without group and version (so its name is <name>), an instance a rest:// provider URL
// on the service's port with application=<name>; Draining instances carry enabled=false;
// Unhealthy ones are not registered (a Dubbo provider that is not up unregisters).
type dubboKitDriver struct {
	*registrytest.Proxy
	w dubboWriter
}

var (
	_ registrytest.Driver    = (*dubboKitDriver)(nil)
	_ registrytest.Corrupter = (*dubboKitDriver)(nil)
	_ registrytest.Breaker   = (*dubboKitDriver)(nil)
)

func (d *dubboKitDriver) Put(_ context.Context, svc model.Service) error {
	var urls []string
	for _, inst := range svc.Instances {
		if inst.Health == model.Unhealthy {
			continue
		}
		u := "rest://" + inst.Address + ":" + itoa(svc.Ports[0].Number) + "/" + svc.Name + "?application=" + svc.Name + "&side=provider"
		if inst.Health == model.Draining {
			u += "&enabled=false"
		}
		urls = append(urls, u)
	}
	return d.w.set(svc.Name, urls...)
}

func (d *dubboKitDriver) Remove(_ context.Context, key model.ServiceKey) error {
	return d.w.remove(key.Name)
}

func (d *dubboKitDriver) Corrupt(_ context.Context, key model.ServiceKey) (string, error) {
	id := url.QueryEscape("dubbo://not-an-ip:20880/" + key.Name)
	return d.w.root + "/" + key.Name + "/providers/" + id, d.w.setRaw(key.Name, id)
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// TestDubboConformance runs the SDK's conformance kit against the Dubbo layout on a real
// ZooKeeper, with a TCP proxy as the Breaker (WithoutRelist: see TestConformance).
func TestDubboConformance(t *testing.T) {
	s := startServer(t)
	proxy := registrytest.NewProxy(t, s.Addr())
	d := &dubboKitDriver{Proxy: proxy, w: dubboWriter{c: client(t, s.Addr()), root: "/galleon-dubbo-kit"}}
	if err := d.w.ensure(d.w.root); err != nil {
		t.Fatal(err)
	}
	runKit(t, proxy, Config{Layout: LayoutDubbo, Root: d.w.root}, d, dubboKitNormalize)
}

// dubboKitNormalize is what the Dubbo 2 layout reports of a service the kit puts.
func dubboKitNormalize(svc model.Service) model.Service {
	// Hosts derive from the name; Dubbo has no service labels; the port name is left
	// to the core (rest:// is HTTP, not tcp-dubbo).
	svc.Hosts = []string{svc.Name + "." + svc.Namespace + ".dubbo"}
	svc.Labels = nil
	for i := range svc.Ports {
		svc.Ports[i].Name = ""
	}
	var insts []model.Instance
	for _, inst := range svc.Instances {
		// Dubbo has no Unhealthy provider: it unregisters (the driver writes none).
		if inst.Health == model.Unhealthy {
			continue
		}
		// The instance ID is <ip>:<port>; labels are the URL's parameters (the kit's
		// "version" label would be Dubbo's service version, another service).
		inst.ID = inst.Address + ":" + itoa(svc.Ports[0].Number)
		inst.Labels = map[string]string{"application": svc.Name, "side": "provider"}
		insts = append(insts, inst)
	}
	svc.Instances = insts
	return svc
}

// TestDubboVariantsAndLastProvider: the group/version variants of an interface are distinct
// services with distinct valid hosts; consumers, routers and configurators are not providers;
// the last provider of a variant leaving empties its instances (the service stays, without
// endpoints), and the interface znode going removes every variant.
func TestDubboVariantsAndLastProvider(t *testing.T) {
	s := startServer(t)
	w := dubboWriter{c: client(t, s.Addr()), root: "/dubbo"}
	const iface = "org.apache.demo.DemoService"
	u := func(ip, q string) string {
		return "dubbo://" + ip + ":20880/" + iface + "?side=provider&application=demo" + q
	}
	if err := w.set(iface, u("10.0.0.1", ""), u("10.0.0.2", "&group=g1"), u("10.0.0.3", "&group=g1&version=1.0.0"), u("10.0.0.4", "&version=1.0.0")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"consumers", "routers", "configurators"} {
		if err := w.ensure(w.root + "/" + iface + "/" + p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.ensure(w.root + "/" + iface + "/consumers/" + url.QueryEscape("consumer://10.0.0.9/"+iface+"?side=consumer")); err != nil {
		t.Fatal(err)
	}
	// Dubbo 3's mapping is not an interface.
	if err := w.ensure(w.root + "/mapping"); err != nil {
		t.Fatal(err)
	}
	// An interface with consumers only: its providers appear later.
	const later = "org.apache.demo.Later"
	if err := w.ensure(w.root + "/" + later); err != nil {
		t.Fatal(err)
	}
	if err := w.ensure(w.root + "/" + later + "/consumers"); err != nil {
		t.Fatal(err)
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: LayoutDubbo})

	names := map[string]string{
		"":      dubboreg.ServiceName(iface, "", ""),
		"g1":    dubboreg.ServiceName(iface, "g1", ""),
		"g1/v1": dubboreg.ServiceName(iface, "g1", "1.0.0"),
		"/v1":   dubboreg.ServiceName(iface, "", "1.0.0"),
	}
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
		return len(state) == 4 && hasInstances(names[""], "10.0.0.1:20880")(state) &&
			hasInstances(names["g1"], "10.0.0.2:20880")(state) && hasInstances(names["g1/v1"], "10.0.0.3:20880")(state) &&
			hasInstances(names["/v1"], "10.0.0.4:20880")(state)
	})
	hosts := map[string]bool{}
	for _, svc := range rec.State() {
		h := svc.Hosts[0]
		if model.HostName(h) != h || hosts[h] {
			t.Errorf("host %q is not a valid, distinct host", h)
		}
		hosts[h] = true
		if model.DNSLabel(svc.Name) != svc.Name {
			t.Errorf("name %q is not a DNS label", svc.Name)
		}
		if len(svc.Ports) != 1 || svc.Ports[0] != (model.Port{Number: 20880, Protocol: model.ProtocolTCP, Name: "tcp-dubbo"}) {
			t.Errorf("%s: ports %v", svc.Name, svc.Ports)
		}
	}

	// Providers of the interface that had none.
	if err := w.set(later, u("10.0.1.1", "")); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, hasInstances(dubboreg.ServiceName(later, "", ""), "10.0.1.1:20880"))

	// The last provider of g1 leaves: g1 stays, empty; the others keep theirs.
	if err := w.set(iface, u("10.0.0.1", ""), u("10.0.0.3", "&group=g1&version=1.0.0"), u("10.0.0.4", "&version=1.0.0")); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
		svc, ok := state[key(names["g1"])]
		return ok && len(svc.Instances) == 0 && len(svc.Ports) == 1 && hasInstances(names[""], "10.0.0.1:20880")(state)
	})
	// Every provider leaves.
	if err := w.set(iface); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
		for _, n := range names {
			if svc, ok := state[key(n)]; !ok || len(svc.Instances) != 0 {
				return false
			}
		}
		return true
	})
	// The interface goes: every variant goes; the other interface stays.
	if err := w.remove(iface); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
		_, ok := state[key(dubboreg.ServiceName(later, "", ""))]
		return len(state) == 1 && ok
	})
}

// TestDubboBadProvider: an unparsable provider is rejected with its znode path; the rest of
// the interface is served; removing it clears the rejection.
func TestDubboBadProvider(t *testing.T) {
	s := startServer(t)
	w := dubboWriter{c: client(t, s.Addr()), root: "/dubbo"}
	const iface = "x.Y"
	good := "dubbo://10.0.0.1:20880/x.Y"
	bad := url.QueryEscape("dubbo://10.0.0.2:99999/x.Y")
	if err := w.set(iface, good); err != nil {
		t.Fatal(err)
	}
	if err := w.ensure(w.root + "/" + iface + "/providers/" + bad); err != nil {
		t.Fatal(err)
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: LayoutDubbo})
	rec.WaitFor(t, waitTimeout, hasInstances(dubboreg.ServiceName(iface, "", ""), "10.0.0.1:20880"))
	record := w.root + "/" + iface + "/providers/" + bad
	rejected := func(want bool) func([]registrytest.Event) bool {
		return func(events []registrytest.Event) bool {
			last := false
			for _, e := range events {
				if e.Op == registrytest.OpRejected && e.Record == record {
					last = e.Err != nil
				}
			}
			return last == want
		}
	}
	rec.WaitForEvents(t, waitTimeout, rejected(true))
	if err := w.c.Delete(record, -1); err != nil {
		t.Fatal(err)
	}
	rec.WaitForEvents(t, waitTimeout, rejected(false))
}

// TestDubboDuplicateProvider: two provider URLs with the same ip:port (they
// differ only in parameters) are one instance: the node whose name sorts
// first is served, the other rejected as a duplicate until it is the only
// one; the run's Sink calls keep the contract (no instance ID twice).
func TestDubboDuplicateProvider(t *testing.T) {
	s := startServer(t)
	w := dubboWriter{c: client(t, s.Addr()), root: "/dubbo"}
	const iface = "x.Dup"
	first := "dubbo://10.0.0.1:20880/x.Dup?application=a"
	second := "dubbo://10.0.0.1:20880/x.Dup?application=b"
	if err := w.set(iface, first, second); err != nil {
		t.Fatal(err)
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: LayoutDubbo})
	name := dubboreg.ServiceName(iface, "", "")
	rec.WaitFor(t, waitTimeout, hasInstances(name, "10.0.0.1:20880"))
	providers := w.root + "/" + iface + "/providers/"
	dup := providers + url.QueryEscape(second) + " (duplicate)"
	lastErr := func(events []registrytest.Event) (error, bool) {
		var err error
		seen := false
		for _, e := range events {
			if e.Op == registrytest.OpRejected && e.Record == dup {
				err, seen = e.Err, true
			}
		}
		return err, seen
	}
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		err, seen := lastErr(events)
		return seen && err != nil
	})
	if got := rec.State()[key(name)].Instances[0].Labels["application"]; got != "a" {
		t.Fatalf("served the provider with application=%q, want the node that sorts first (a)", got)
	}
	// The first leaves: the second is served, and no longer rejected.
	if err := w.set(iface, second); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool {
		svc, ok := st[key(name)]
		return ok && len(svc.Instances) == 1 && svc.Instances[0].Labels["application"] == "b"
	})
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		err, seen := lastErr(events)
		return seen && err == nil
	})
	// The first comes back while the second is served alone, its name not kept (node.name):
	// the listing that adds the first names both, the first is served again and the second
	// rejected under its own name again.
	if err := w.set(iface, first, second); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool {
		svc, ok := st[key(name)]
		return ok && len(svc.Instances) == 1 && svc.Instances[0].Labels["application"] == "a"
	})
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		err, _ := lastErr(events)
		return err != nil
	})
	if err, _ := lastErr(rec.Events()); !strings.Contains(err.Error(), "also registered by node "+url.QueryEscape(first)) {
		t.Errorf("the duplicate's rejection does not name the node served (%s): %v", url.QueryEscape(first), err)
	}
	if err := rec.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestParseDubboOverride is a table test of the configurators rule parser and of which providers
// a rule applies to (no ZooKeeper).
func TestParseDubboOverride(t *testing.T) {
	enc := url.QueryEscape
	for _, tc := range []struct {
		name, id string
		want     override
		err      string // a substring of the error; "-" for errNotInstance
	}{
		{name: "disable one address", id: enc("override://10.0.0.2:20880/x.Y?category=configurators&dynamic=false&disabled=true"),
			want: override{ip: "10.0.0.2", port: 20880, disabled: disable}},
		{name: "every host, weight", id: enc("override://0.0.0.0/x.Y?category=configurators&weight=50&application=*"),
			want: override{weight: 50, hasWeight: true}},
		{name: "enable, restricted", id: enc("override://10.0.0.2/x.Y?disabled=false&application=shop&group=g1&version=1.0.0"),
			want: override{ip: "10.0.0.2", disabled: enable, application: "shop", group: "g1", version: "1.0.0"}},
		{name: "anyhost parameter", id: enc("override://10.9.9.9/x.Y?anyhost=true&disabled=true"), want: override{disabled: disable}},
		{name: "empty marker", id: enc("empty://10.0.0.1/x.Y?category=configurators"), err: "-"},
		{name: "consumer side", id: enc("override://0.0.0.0/x.Y?side=consumer&disabled=true"), err: "-"},
		{name: "rule switched off", id: enc("override://0.0.0.0/x.Y?enabled=false&disabled=true"), err: "-"},
		{name: "nothing the mesh serves", id: enc("override://0.0.0.0/x.Y?timeout=5000"), err: "-"},
		{name: "not an override", id: enc("dubbo://10.0.0.1:20880/x.Y"), err: "not an override URL"},
		{name: "bad escape", id: "override%3A%2F%2F%ZZ", err: "URL-encoded"},
		{name: "host name", id: enc("override://provider.local/x.Y?disabled=true"), err: "not an IP address"},
		{name: "bad disabled", id: enc("override://0.0.0.0/x.Y?disabled=maybe"), err: "disabled="},
		{name: "bad weight", id: enc("override://0.0.0.0/x.Y?weight=-3"), err: "weight="},
		{name: "bad port", id: enc("override://10.0.0.1:70000/x.Y?disabled=true"), err: "port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseOverride(tc.id)
			switch {
			case tc.err == "-":
				if !errors.Is(err, errNotInstance) {
					t.Fatalf("err = %v, want errNotInstance", err)
				}
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case got != tc.want:
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}

	d := newDubbo(nil)
	provider := func(raw string) *endpoint {
		e, err := d.parseInstance("x.Y", url.QueryEscape(raw), nil)
		if err != nil {
			t.Fatal(err)
		}
		return &e
	}
	a := provider("dubbo://10.0.0.1:20880/x.Y?application=shop&weight=100")
	b := provider("dubbo://10.0.0.2:20880/x.Y?application=shop&weight=100")
	c := provider("dubbo://10.0.0.2:20881/x.Y?application=other&enabled=false")
	rule := func(raw string) override {
		o, err := parseOverride(url.QueryEscape(raw))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	rules := []override{
		rule("override://10.0.0.2:20880/x.Y?disabled=false"), // specific: applies after the broad one
		rule("override://0.0.0.0/x.Y?disabled=true&application=shop"),
		rule("override://0.0.0.0/x.Y?weight=7"),
		rule("override://10.0.0.2/x.Y?disabled=false&application=other"),
	}
	for _, tc := range []struct {
		e      *endpoint
		health model.Health
		weight uint32
	}{
		{a, model.Draining, 7}, // the shop-wide disable
		{b, model.Healthy, 7},  // disabled shop-wide, enabled for its address and port
		{c, model.Healthy, 7},  // disabled by its own URL, enabled by a rule for its host and application
	} {
		got := withOverrides(tc.e, rules)
		if got.inst.Health != tc.health || got.inst.Weight != tc.weight {
			t.Errorf("%s: health %v weight %d, want %v %d", tc.e.inst.ID, got.inst.Health, got.inst.Weight, tc.health, tc.weight)
		}
	}
	if a.inst.Health != model.Healthy || a.inst.Weight != 100 {
		t.Errorf("withOverrides changed its argument: %+v", a.inst)
	}
	if got := withOverrides(a, nil); got != a {
		t.Errorf("withOverrides without rules copied the endpoint")
	}
}

// TestDubboConfigurators: an operator's override under <interface>/configurators, against a real
// ZooKeeper: disabling one address leaves it out (the configurators node created after the
// adapter started, so it is found through the interface znode's watch), a weight rule for every
// host applies to all, a malformed rule is rejected by its path and the rest still applies,
// and deleting the rules serves the providers as registered again.
func TestDubboConfigurators(t *testing.T) {
	s := startServer(t)
	w := dubboWriter{c: client(t, s.Addr()), root: "/dubbo"}
	const iface = "org.apache.demo.OrderService"
	if err := w.set(iface, "dubbo://10.0.0.1:20880/"+iface+"?weight=100", "dubbo://10.0.0.2:20880/"+iface+"?weight=100"); err != nil {
		t.Fatal(err)
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: LayoutDubbo})
	name := dubboreg.ServiceName(iface, "", "")
	rec.WaitFor(t, waitTimeout, hasInstances(name, "10.0.0.1:20880", "10.0.0.2:20880"))

	type want struct {
		health model.Health
		weight uint32
	}
	served := func(wants map[string]want) func(map[model.ServiceKey]model.Service) bool {
		return func(st map[model.ServiceKey]model.Service) bool {
			svc, ok := st[key(name)]
			if !ok || len(svc.Instances) != len(wants) {
				return false
			}
			for _, inst := range svc.Instances {
				if w, ok := wants[inst.ID]; !ok || inst.Health != w.health || inst.Weight != w.weight {
					return false
				}
			}
			return true
		}
	}
	cfgs := w.root + "/" + iface + "/configurators"
	disableB := url.QueryEscape("override://10.0.0.2:20880/" + iface + "?category=configurators&dynamic=false&disabled=true")
	if err := w.ensure(cfgs); err != nil {
		t.Fatal(err)
	}
	if err := w.ensure(cfgs + "/" + disableB); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, served(map[string]want{"10.0.0.1:20880": {model.Healthy, 100}, "10.0.0.2:20880": {model.Draining, 100}}))

	weight := url.QueryEscape("override://0.0.0.0/" + iface + "?category=configurators&weight=25")
	bad := url.QueryEscape("override://10.0.0.1/" + iface + "?disabled=perhaps")
	for _, id := range []string{weight, bad} {
		if err := w.ensure(cfgs + "/" + id); err != nil {
			t.Fatal(err)
		}
	}
	rec.WaitFor(t, waitTimeout, served(map[string]want{"10.0.0.1:20880": {model.Healthy, 25}, "10.0.0.2:20880": {model.Draining, 25}}))
	record := cfgs + "/" + bad
	lastRejection := func(events []registrytest.Event) (err error, seen bool) {
		for _, e := range events {
			if e.Op == registrytest.OpRejected && e.Record == record {
				err, seen = e.Err, true
			}
		}
		return err, seen
	}
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		err, seen := lastRejection(events)
		return seen && err != nil && strings.Contains(err.Error(), "disabled=")
	})

	// Every rule removed, the configurators node too: as registered, the rejection cleared.
	if err := w.removeAll(cfgs); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, served(map[string]want{"10.0.0.1:20880": {model.Healthy, 100}, "10.0.0.2:20880": {model.Healthy, 100}}))
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		err, seen := lastRejection(events)
		return seen && err == nil
	})
	// The configurators node comes back with a rule: it is found again.
	if err := w.ensure(cfgs); err != nil {
		t.Fatal(err)
	}
	if err := w.ensure(cfgs + "/" + disableB); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, served(map[string]want{"10.0.0.1:20880": {model.Healthy, 100}, "10.0.0.2:20880": {model.Draining, 100}}))
	if err := rec.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestDubboRemovedInterfacesReleaseWatches: every interface costs two or three children watches
// (its providers, and its configurators or, while those are missing, the interface znode), and
// a removed interface leaves none behind on the server.
func TestDubboRemovedInterfacesReleaseWatches(t *testing.T) {
	s := startServer(t)
	w := dubboWriter{c: client(t, s.Addr()), root: "/dubbo"}
	if err := w.ensure(w.root); err != nil {
		t.Fatal(err)
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: LayoutDubbo})
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		return slices.ContainsFunc(events, func(e registrytest.Event) bool { return e.Op == registrytest.OpReplace })
	})
	base := waitWatches(t, s, func(int) bool { return true })
	const interfaces = 20
	for i := range interfaces {
		iface := "org.apache.demo.Service" + strconv.Itoa(i)
		if err := w.set(iface, "dubbo://10.0.0."+strconv.Itoa(i+1)+":20880/"+iface); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // half with a configurators node and a rule in it
			cfgs := w.root + "/" + iface + "/configurators"
			if err := w.ensure(cfgs); err != nil {
				t.Fatal(err)
			}
			if err := w.ensure(cfgs + "/" + url.QueryEscape("override://0.0.0.0/"+iface+"?weight=5")); err != nil {
				t.Fatal(err)
			}
		}
	}
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool {
		if len(st) != interfaces {
			return false
		}
		for i := range interfaces {
			svc := st[key(dubboreg.ServiceName("org.apache.demo.Service"+strconv.Itoa(i), "", ""))]
			if len(svc.Instances) != 1 || (i%2 == 0) != (svc.Instances[0].Weight == 5) {
				return false
			}
		}
		return true
	})
	// A third, on the interface znode, may be left from a read that raced with the creation of
	// configurators: it fires at the interface's next change of children, or its removal.
	waitWatches(t, s, func(n int) bool { return n >= base+2*interfaces && n <= base+3*interfaces })
	for i := range interfaces {
		if err := w.remove("org.apache.demo.Service" + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool { return len(st) == 0 })
	waitWatches(t, s, func(n int) bool { return n == base })
}
