package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/model"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// demoRevision is a dubbo.metadata.revision as Dubbo writes it (MetadataInfo.calAndGetRevision:
// the hex MD5 of the application's exported services).
const demoRevision = "5d8a1b0c2f7e4a9630b1c2d3e4f5a6b7"

// dubbo3JSON is what Dubbo 3's ZookeeperServiceDiscovery writes for an instance of app at
// address:port (CuratorFrameworkUtils.build through Curator's JsonInstanceSerializer). meta is
// the payload's metadata: Dubbo's are strings; other values test what Dubbo never writes.
func dubbo3JSON(app, address string, port any, meta map[string]any) []byte {
	id := fmt.Sprintf("%s:%v", address, port)
	b, err := json.Marshal(map[string]any{
		"name": app, "id": id, "address": address, "port": port, "sslPort": nil,
		"payload": map[string]any{
			"@class":   "org.apache.dubbo.registry.zookeeper.ZookeeperInstance",
			"id":       id,
			"name":     app,
			"metadata": meta,
		},
		"registrationTimeUTC": 1700000000000,
		"serviceType":         "DYNAMIC",
		"uriSpec":             nil,
		"enabled":             true,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// dubbo3Meta is the metadata Dubbo 3 writes for an instance: endpoints (left out when ""), the
// revision and the bookkeeping every instance carries, then extra (which may replace or, with
// a nil value, remove any of them).
func dubbo3Meta(endpoints string, extra map[string]any) map[string]any {
	m := map[string]any{
		"dubbo.metadata-service.url-params": `{"connections":"1","version":"1.0.0","dubbo":"2.0.2","side":"provider","port":"20880","protocol":"dubbo"}`,
		"dubbo.metadata.revision":           demoRevision,
		"dubbo.metadata.storage-type":       "local",
		"meta-v":                            "1.0.0",
		"timestamp":                         "1700000000000",
	}
	if endpoints != "" {
		m["dubbo.endpoints"] = endpoints
	}
	for k, v := range extra {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return m
}

const dubboTri = `[{"port":20880,"protocol":"dubbo"},{"port":50051,"protocol":"tri"}]`

var (
	tcpDubbo = model.Port{Number: 20880, Protocol: model.ProtocolTCP, Name: "tcp-dubbo"}
	grpcTri  = model.Port{Number: 50051, Protocol: model.ProtocolGRPC}
)

// TestParseDubbo3Instance is a table test of the Dubbo 3 instance parser (no ZooKeeper): every
// rule of the mapping, and every rejection with the reason it is counted under.
func TestParseDubbo3Instance(t *testing.T) {
	rev := map[string]string{"dubbo-revision": demoRevision}
	withRev := func(kv ...string) map[string]string {
		m := maps.Clone(rev)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	many := map[string]any{}
	manyWant := withRev()
	for i := range 40 {
		k := fmt.Sprintf("k%02d", i)
		many[k] = "v"
		if i < dubboreg.MaxLabels-1 {
			manyWant[k] = "v"
		}
	}
	long, longest := strings.Repeat("a", 64), strings.Repeat("a", 63)
	runes := strings.Repeat("é", 63) // 126 bytes, 63 characters: the core makes it 63 '-'... kept

	type tc struct {
		name      string
		app, id   string // default demo-provider, 10.0.0.1:20880
		data      []byte
		overrides map[string]string
		want      model.Instance // ID and Address default to id's
		ports     []model.Port
		svc       string // default app
		reason    string // the rejection's reason; "-" for errNotInstance
		err       string // a substring of the rejection
	}
	node := func(endpoints string, extra map[string]any) []byte {
		return dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(endpoints, extra))
	}
	badEndpoints := func(name, endpoints, reason, err string) tc {
		return tc{name: name, data: node(endpoints, nil), reason: reason, err: err}
	}
	for _, tc := range []tc{
		{name: "dubbo and tri", data: node(dubboTri, map[string]any{"region": "eu-west-1", "zone": "eu-west-1a"}),
			want:  model.Instance{Labels: withRev("region", "eu-west-1", "zone", "eu-west-1a")},
			ports: []model.Port{tcpDubbo, grpcTri}},
		{name: "protocols as in the Dubbo 2 layout",
			data: node(`[{"port":8080,"protocol":"rest"},{"port":8081,"protocol":"http"},{"port":8443,"protocol":"https"},{"port":9000,"protocol":"hessian"},{"port":50052,"protocol":"grpc"},{"port":20880,"protocol":"DUBBO"}]`, nil),
			want: model.Instance{Labels: rev},
			ports: []model.Port{{Number: 8080, Protocol: model.ProtocolHTTP}, {Number: 8081, Protocol: model.ProtocolHTTP},
				{Number: 8443, Protocol: model.ProtocolHTTPS}, {Number: 9000, Protocol: model.ProtocolTCP}, tcpDubbo,
				{Number: 50052, Protocol: model.ProtocolGRPC}}},
		{name: "one port, several protocols", data: node(`[{"port":20880,"protocol":"dubbo"},{"port":20880,"protocol":"tri"},{"port":8080,"protocol":"rest"},{"port":8080,"protocol":"http"},{"port":8080,"protocol":"rest"}]`, nil),
			want:  model.Instance{Labels: rev},
			ports: []model.Port{{Number: 8080, Protocol: model.ProtocolHTTP}, tcpDubbo}},
		{name: "tri and grpc on one port", data: node(`[{"port":50051,"protocol":"tri"},{"port":50051,"protocol":"grpc"}]`, nil),
			want: model.Instance{Labels: rev}, ports: []model.Port{grpcTri}},
		{name: "overrides", data: node(dubboTri, nil), overrides: map[string]string{"tri": "TCP", "dubbo": "http2"},
			want:  model.Instance{Labels: rev},
			ports: []model.Port{{Number: 20880, Protocol: model.ProtocolHTTP2}, {Number: 50051, Protocol: model.ProtocolTCP}}},
		{name: "no endpoints: the instance's port as dubbo", data: node("", nil),
			want: model.Instance{Labels: rev}, ports: []model.Port{tcpDubbo}},
		{name: "empty endpoints", data: node("[]", nil), want: model.Instance{Labels: rev}, ports: []model.Port{tcpDubbo}},
		{name: "blank endpoints", data: node(" ", nil), want: model.Instance{Labels: rev}, ports: []model.Port{tcpDubbo}},
		{name: "null endpoints", data: dubbo3JSON("demo-provider", "10.0.0.1", 20880, map[string]any{"dubbo.endpoints": nil}),
			ports: []model.Port{tcpDubbo}},
		{name: "endpoints without the instance's port", data: node(`[{"port":50051,"protocol":"tri"}]`, nil),
			want: model.Instance{Labels: rev}, ports: []model.Port{grpcTri}},
		{name: "no metadata", data: dubbo3JSON("demo-provider", "10.0.0.1", 20880, nil), ports: []model.Port{tcpDubbo}},
		{name: "out of service", data: node(dubboTri, map[string]any{"instance_status": "OUT_OF_SERVICE"}),
			want: model.Instance{Labels: rev, Health: model.Draining}, ports: []model.Port{tcpDubbo, grpcTri}},
		{name: "down", data: node(dubboTri, map[string]any{"instance_status": "DOWN"}),
			want: model.Instance{Labels: rev, Health: model.Unhealthy}, ports: []model.Port{tcpDubbo, grpcTri}},
		{name: "up", data: node(dubboTri, map[string]any{"instance_status": "up"}),
			want: model.Instance{Labels: rev}, ports: []model.Port{tcpDubbo, grpcTri}},
		{name: "bookkeeping is no label",
			data: node(dubboTri, map[string]any{"dubbo.metadata.cluster": "c1", "dubbo.metadata-service.urls": "[\"dubbo://...\"]", "dubbo.anything": "x",
				"ipv6": "fd00::1", "protocol": "tri", "heartbeat.timeout": "60000", "weight": 7, "canary": true}),
			want:  model.Instance{Labels: withRev("ipv6", "fd00::1", "protocol", "tri", "heartbeat.timeout", "60000", "weight", "7", "canary", "true")},
			ports: []model.Port{tcpDubbo, grpcTri}},
		{name: "no revision", data: node(dubboTri, map[string]any{"dubbo.metadata.revision": nil, "dubbo-revision": "mine"}),
			want: model.Instance{Labels: map[string]string{"dubbo-revision": "mine"}}, ports: []model.Port{tcpDubbo, grpcTri}},
		{name: "the revision wins", data: node(dubboTri, map[string]any{"dubbo-revision": "mine"}),
			want: model.Instance{Labels: rev}, ports: []model.Port{tcpDubbo, grpcTri}},
		{name: "long values", data: node(dubboTri, map[string]any{"long": long, "longest": longest, "runes": runes, "empty": ""}),
			want: model.Instance{Labels: withRev("longest", longest, "runes", runes, "empty", "")}, ports: []model.Port{tcpDubbo, grpcTri}},
		{name: "at most 32 labels", data: node(dubboTri, many), want: model.Instance{Labels: manyWant}, ports: []model.Port{tcpDubbo, grpcTri}},
		{name: "application not a DNS label", app: "Demo_Provider", data: node(dubboTri, nil),
			want: model.Instance{Labels: rev}, ports: []model.Port{tcpDubbo, grpcTri}, svc: dubboreg.ServiceName("Demo_Provider", "", "")},
		{name: "host name address", id: "provider.local:20880", data: dubbo3JSON("demo-provider", "provider.local", 20880, dubbo3Meta(dubboTri, nil)),
			want: model.Instance{Labels: rev}, ports: []model.Port{tcpDubbo, grpcTri}},
		{name: "IPv6 address", id: "fd00::1:20880", data: dubbo3JSON("demo-provider", "fd00::1", 20880, dubbo3Meta(dubboTri, nil)),
			want: model.Instance{Labels: rev}, ports: []model.Port{tcpDubbo, grpcTri}},
		{name: "interface category", id: "providers", reason: "-"},
		{name: "interface category with data", id: "configurators", data: []byte("10.0.0.1"), reason: "-"},

		badEndpoints("malformed endpoints", `[{"port":20880,"protocol":"dubbo"}`, reasonParameter, `metadata "dubbo.endpoints"`),
		badEndpoints("endpoints an object", `{"port":20880,"protocol":"dubbo"}`, reasonParameter, `metadata "dubbo.endpoints"`),
		badEndpoints("entry not an object", `[20880]`, reasonParameter, `metadata "dubbo.endpoints"`),
		badEndpoints("port zero", `[{"port":0,"protocol":"dubbo"}]`, reasonPort, `entry 1 (dubbo): "port" 0: want a whole number from 1 to 65535`),
		badEndpoints("port too large", `[{"port":20880,"protocol":"dubbo"},{"port":70000,"protocol":"tri"}]`, reasonPort, `entry 2 (tri): "port" 70000`),
		badEndpoints("negative port", `[{"port":-1,"protocol":"tri"}]`, reasonPort, `"port" -1`),
		badEndpoints("fractional port", `[{"port":20880.5,"protocol":"tri"}]`, reasonPort, `"port" 20880.5`),
		badEndpoints("port as a string", `[{"port":"20880","protocol":"dubbo"}]`, reasonPort, `"port" "20880"`),
		badEndpoints("huge port", `[{"port":1e30,"protocol":"dubbo"}]`, reasonPort, `"port" 1e30`),
		badEndpoints("no port", `[{"protocol":"tri"}]`, reasonPort, `entry 1 (tri) has no "port"`),
		badEndpoints("null port", `[{"port":null,"protocol":"tri"}]`, reasonPort, `has no "port"`),
		badEndpoints("no protocol", `[{"port":50051}]`, reasonParameter, `entry 1 has no "protocol"`),
		badEndpoints("empty protocol", `[{"port":50051,"protocol":" "}]`, reasonParameter, `has no "protocol"`),
		badEndpoints("protocol not a string", `[{"port":50051,"protocol":5}]`, reasonParameter, `metadata "dubbo.endpoints"`),
		{name: "endpoints not a string", data: node("", map[string]any{"dubbo.endpoints": []any{map[string]any{"port": 20880, "protocol": "dubbo"}}}),
			reason: reasonParameter, err: `metadata "dubbo.endpoints" is [{"port":20880,"protocol":"dubbo"}], not a string`},
		{name: "endpoints a number", data: node("", map[string]any{"dubbo.endpoints": 5}), reason: reasonParameter, err: "not a string"},
		{name: "no data", data: nil, reason: reasonJSON, err: "holds no data"},
		{name: "not JSON", data: []byte("dubbo://10.0.0.1:20880"), reason: reasonJSON, err: "not a Curator ServiceInstance"},
		{name: "no address", data: dubbo3JSON("demo-provider", "", 20880, dubbo3Meta(dubboTri, nil)), reason: reasonAddress, err: `no "address"`},
		{name: "address not a host", data: dubbo3JSON("demo-provider", "10.0.0.1/24", 20880, dubbo3Meta(dubboTri, nil)), reason: reasonAddress, err: "neither an IP address nor a host name"},
		{name: "instance port out of range", data: dubbo3JSON("demo-provider", "10.0.0.1", 70000, dubbo3Meta(dubboTri, nil)), reason: reasonPort, err: `"port" 70000`},
		{name: "no port, no endpoints", data: dubbo3JSON("demo-provider", "10.0.0.1", nil, dubbo3Meta("", nil)), reason: reasonPort, err: `no "port"`},
		{name: "an sslPort only, no endpoints", data: []byte(`{"name":"demo-provider","address":"10.0.0.1","sslPort":8443,"payload":{"metadata":{}}}`),
			reason: reasonPort, err: `no "port" and no metadata "dubbo.endpoints"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, id := cmpOr(tc.app, "demo-provider"), cmpOr(tc.id, "10.0.0.1:20880")
			e, err := newDubbo3(tc.overrides).parseInstance(app, id, tc.data)
			switch {
			case tc.reason == "-":
				if !errors.Is(err, errNotInstance) {
					t.Fatalf("err = %v, want errNotInstance", err)
				}
				return
			case tc.reason != "":
				if err == nil || reasonOf(err) != tc.reason || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v (reason %s), want reason %s and an error containing %q", err, reasonOf(err), tc.reason, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			want := tc.want
			want.ID = id
			want.Address = id[:strings.LastIndex(id, ":")]
			if d := registrytest.Diff(model.Service{Instances: []model.Instance{want}}, model.Service{Instances: []model.Instance{e.inst}}); d != "" {
				t.Errorf("instance: %s", d)
			}
			if len(want.Labels) == 0 && e.inst.Labels != nil {
				t.Errorf("labels = %v, want nil", e.inst.Labels)
			}
			if !slices.Equal(e.ports, tc.ports) {
				t.Errorf("ports = %v, want %v", e.ports, tc.ports)
			}
			if svc := cmpOr(tc.svc, app); e.host() != (hostData{Name: svc}) {
				t.Errorf("service = %+v, want name %q", e.host(), svc)
			}
		})
	}
	if n := dubboreg.ServiceName("Demo_Provider", "", ""); !strings.HasPrefix(n, "demo-provider--") {
		t.Errorf("dubboreg.ServiceName(Demo_Provider) = %q, want demo-provider--<hash>", n)
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestDubbo3Applications runs the Dubbo 3 layout against a real ZooKeeper at Dubbo's default
// root: two applications serving dubbo and tri become two ServiceEntries with both ports and
// the instances' labels; an instance leaves and one joins; a node whose dubbo.endpoints is
// malformed is rejected by its path while its application's other instances are served, and
// served once fixed; an application whose znode goes is deleted.
func TestDubbo3Applications(t *testing.T) {
	s := startServer(t)
	w := writer{c: client(t, s.Addr()), root: DefaultRoot}
	w.ensureRoot(t)
	const demo, orders = "demo-provider", "Order_Service" // the second is no DNS label
	ordersName := dubboreg.ServiceName(orders, "", "")
	inst := func(app, ip string, extra map[string]any) []byte {
		return dubbo3JSON(app, ip, 20880, dubbo3Meta(dubboTri, extra))
	}
	zone := func(z string) map[string]any { return map[string]any{"zone": z} }
	const badID = "10.0.0.9:20880"
	bad := dubbo3JSON(demo, "10.0.0.9", 20880, dubbo3Meta(`[{"port":20880,"protocol":"dubbo"},{"port":50051,`, nil))
	if err := w.set(demo, map[string][]byte{
		"10.0.0.1:20880": inst(demo, "10.0.0.1", zone("a")),
		"10.0.0.2:20880": inst(demo, "10.0.0.2", zone("b")),
		badID:            bad,
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.set(orders, map[string][]byte{"10.0.1.1:20880": inst(orders, "10.0.1.1", map[string]any{"instance_status": "OUT_OF_SERVICE"})}); err != nil {
		t.Fatal(err)
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: LayoutDubbo3})
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
		return len(state) == 2 && hasInstances(demo, "10.0.0.1:20880", "10.0.0.2:20880")(state) && hasInstances(ordersName, "10.0.1.1:20880")(state)
	})
	labels := func(z string) map[string]string { return map[string]string{"dubbo-revision": demoRevision, "zone": z} }
	want := model.Service{
		Namespace: DefaultNamespace, Name: demo, Hosts: []string{demo + ".default.dubbo"},
		Ports: []model.Port{tcpDubbo, grpcTri},
		Instances: []model.Instance{
			{ID: "10.0.0.1:20880", Address: "10.0.0.1", Labels: labels("a")},
			{ID: "10.0.0.2:20880", Address: "10.0.0.2", Labels: labels("b")},
		},
	}
	checkService(t, rec.State()[key(demo)], want)
	checkService(t, rec.State()[key(ordersName)], model.Service{
		Namespace: DefaultNamespace, Name: ordersName, Hosts: []string{ordersName + ".default.dubbo"},
		Ports: []model.Port{tcpDubbo, grpcTri},
		Instances: []model.Instance{
			{ID: "10.0.1.1:20880", Address: "10.0.1.1", Labels: map[string]string{"dubbo-revision": demoRevision}, Health: model.Draining},
		},
	})
	record := DefaultRoot + "/" + demo + "/" + badID
	rejected := func(want bool) func([]registrytest.Event) bool {
		return func(events []registrytest.Event) bool {
			last := false
			for _, e := range events {
				if e.Op == registrytest.OpRejected && e.Record == record {
					last = e.Err != nil && strings.Contains(e.Err.Error(), `metadata "dubbo.endpoints"`)
				}
			}
			return last == want
		}
	}
	rec.WaitForEvents(t, waitTimeout, rejected(true))

	// 10.0.0.1 leaves, 10.0.0.3 joins, in one transaction: one Update.
	mark := rec.Len()
	if err := w.set(demo, map[string][]byte{
		"10.0.0.2:20880": inst(demo, "10.0.0.2", zone("b")),
		"10.0.0.3:20880": inst(demo, "10.0.0.3", zone("c")),
		badID:            bad,
	}); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, hasInstances(demo, "10.0.0.2:20880", "10.0.0.3:20880"))
	want.Instances = []model.Instance{
		{ID: "10.0.0.2:20880", Address: "10.0.0.2", Labels: labels("b")},
		{ID: "10.0.0.3:20880", Address: "10.0.0.3", Labels: labels("c")},
	}
	checkService(t, rec.State()[key(demo)], want)

	// The malformed node fixed: served, its rejection cleared.
	if err := w.set(demo, map[string][]byte{
		"10.0.0.2:20880": inst(demo, "10.0.0.2", zone("b")),
		"10.0.0.3:20880": inst(demo, "10.0.0.3", zone("c")),
		badID:            inst(demo, "10.0.0.9", zone("c")),
	}); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, hasInstances(demo, "10.0.0.2:20880", "10.0.0.3:20880", badID))
	rec.WaitForEvents(t, waitTimeout, rejected(false))

	// The application's znode goes: its ServiceEntry is deleted.
	if err := w.remove(orders); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
		_, ok := state[key(ordersName)]
		return !ok && len(state) == 1
	})
	var got []string
	for _, e := range rec.Events()[mark:] {
		if e.Op != registrytest.OpRejected {
			got = append(got, e.String())
		}
	}
	if wantEvents := []string{"Update(default/demo-provider)", "Update(default/demo-provider)", "Delete(default/" + ordersName + ")"}; !slices.Equal(got, wantEvents) {
		t.Errorf("events: %q, want %q\n%s", got, wantEvents, rec.Dump())
	}
}

// checkService compares got with want by meaning, and their port names exactly (Diff takes ""
// for the core's default name).
func checkService(t *testing.T, got, want model.Service) {
	t.Helper()
	if d := registrytest.Diff(want, got); d != "" {
		t.Errorf("%s: %s", want.Name, d)
	}
	names := func(ports []model.Port) map[uint32]string {
		m := map[uint32]string{}
		for _, p := range ports {
			m[p.Number] = p.Name
		}
		return m
	}
	if g, w := names(got.Ports), names(want.Ports); !maps.Equal(g, w) {
		t.Errorf("%s: port names %v, want %v", want.Name, g, w)
	}
}

// TestDubbo3SharedRoot: with a registry group, Dubbo 3 (register-mode all) writes its
// interfaces, the interface-to-application mapping, the metadata report and the config center
// under the same root as its applications. Only the applications are served, and nothing else
// is rejected.
func TestDubbo3SharedRoot(t *testing.T) {
	s := startServer(t)
	c := client(t, s.Addr())
	const root, iface, app = "/demo-group", "org.apache.demo.DemoService", "demo-provider"
	provider := url.QueryEscape("dubbo://10.0.0.1:20880/" + iface + "?application=" + app + "&side=provider")
	nodes := []struct {
		path string
		data string
	}{
		{root, ""},
		{root + "/" + iface, ""},
		{root + "/" + iface + "/providers", "10.0.0.1"},
		{root + "/" + iface + "/providers/" + provider, ""},
		{root + "/" + iface + "/consumers", ""},
		{root + "/" + iface + "/configurators", ""},
		{root + "/" + iface + "/routers", ""},
		{root + "/mapping", ""},
		{root + "/mapping/" + iface, app},
		{root + "/metadata", ""},
		{root + "/metadata/" + app, ""},
		{root + "/metadata/" + app + "/" + demoRevision, `{"app":"demo-provider","revision":"` + demoRevision + `","services":{}}`},
		{root + "/config", ""},
		{root + "/config/dubbo", ""},
		{root + "/config/dubbo/" + app + ".configurators", "configVersion: v3.0"},
		{root + "/" + app, ""},
		{root + "/" + app + "/10.0.0.1:20880", string(dubbo3JSON(app, "10.0.0.1", 20880, dubbo3Meta(dubboTri, nil)))},
	}
	for _, n := range nodes {
		if _, err := c.Create(n.path, []byte(n.data), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("%s: %v", n.path, err)
		}
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Layout: LayoutDubbo3, Root: root})
	rec.WaitFor(t, waitTimeout, hasInstances(app, "10.0.0.1:20880"))
	// A barrier: once a later change is reported, every report of the listing has come.
	w := writer{c: c, root: root}
	if err := w.set(app, map[string][]byte{
		"10.0.0.1:20880": dubbo3JSON(app, "10.0.0.1", 20880, dubbo3Meta(dubboTri, nil)),
		"10.0.0.2:20880": dubbo3JSON(app, "10.0.0.2", 20880, dubbo3Meta(dubboTri, nil)),
	}); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, hasInstances(app, "10.0.0.1:20880", "10.0.0.2:20880"))
	if state := rec.State(); len(state) != 1 {
		t.Errorf("served %d services, want only %s\n%s", len(state), app, rec.Dump())
	}
	for _, e := range rec.Events() {
		if e.Op == registrytest.OpRejected {
			t.Errorf("%s: Dubbo's other nodes are not instances, nothing is malformed", e)
		}
	}
}

// TestDubbo3Conformance runs the SDK's conformance kit against the Dubbo 3 layout on a real
// ZooKeeper, with a TCP proxy as the Breaker (WithoutRelist: see TestConformance).
func TestDubbo3Conformance(t *testing.T) {
	s := startServer(t)
	proxy := registrytest.NewProxy(t, s.Addr())
	d := &dubbo3KitDriver{Proxy: proxy, w: writer{c: client(t, s.Addr()), root: "/galleon-dubbo3-kit"}}
	d.w.ensureRoot(t)
	runKit(t, proxy, Config{Layout: LayoutDubbo3, Root: d.w.root}, d, dubbo3KitNormalize)
}

// dubbo3KitNormalize is what the Dubbo 3 layout reports of a service the kit puts.
func dubbo3KitNormalize(svc model.Service) model.Service {
	// Hosts derive from the name (the kit's names are DNS labels: the name is the
	// application's); Dubbo has no service labels; the kit's HTTP port is Dubbo's rest
	// protocol, whose port the core names.
	svc.Hosts = []string{svc.Name + "." + svc.Namespace + ".dubbo"}
	svc.Labels = nil
	for i := range svc.Ports {
		svc.Ports[i].Name = ""
	}
	for i, inst := range svc.Instances {
		// Dubbo names the node <ip>:<port>; the revision is a label.
		svc.Instances[i].ID = inst.Address + ":" + itoa(svc.Ports[0].Number)
		labels := maps.Clone(inst.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels["dubbo-revision"] = kitRevision(svc.Name)
		svc.Instances[i].Labels = labels
	}
	return svc
}

// kitRevision is the revision the kit driver gives an application.
func kitRevision(app string) string { return fmt.Sprintf("%x", app)[:min(16, 2*len(app))] }

// dubbo3KitDriver writes the kit's services as Dubbo 3 application instances: a node
// <ip>:<port> per instance, the kit's HTTP port as Dubbo's rest protocol in dubbo.endpoints, the
// instance's labels as metadata beside Dubbo's own, Unhealthy and Draining as Spring's
// instance_status DOWN and OUT_OF_SERVICE (the rule the layout shares with Curator's).
type dubbo3KitDriver struct {
	*registrytest.Proxy
	w writer
}

var (
	_ registrytest.Driver    = (*dubbo3KitDriver)(nil)
	_ registrytest.Corrupter = (*dubbo3KitDriver)(nil)
	_ registrytest.Breaker   = (*dubbo3KitDriver)(nil)
)

func (d *dubbo3KitDriver) Put(_ context.Context, svc model.Service) error {
	port := svc.Ports[0].Number
	endpoints := fmt.Sprintf(`[{"port":%d,"protocol":"rest"}]`, port)
	nodes := map[string][]byte{}
	for _, inst := range svc.Instances {
		meta := dubbo3Meta(endpoints, map[string]any{"dubbo.metadata.revision": kitRevision(svc.Name)})
		for k, v := range inst.Labels {
			meta[k] = v
		}
		switch inst.Health {
		case model.Unhealthy:
			meta[statusKey] = "DOWN"
		case model.Draining:
			meta[statusKey] = statusOutOfService
		}
		nodes[inst.Address+":"+itoa(port)] = dubbo3JSON(svc.Name, inst.Address, port, meta)
	}
	return d.w.set(svc.Name, nodes)
}

func (d *dubbo3KitDriver) Remove(_ context.Context, key model.ServiceKey) error {
	return d.w.remove(key.Name)
}

// Corrupt writes an instance whose dubbo.endpoints is not JSON.
func (d *dubbo3KitDriver) Corrupt(_ context.Context, key model.ServiceKey) (string, error) {
	const id = "10.255.255.254:8080"
	data := dubbo3JSON(key.Name, "10.255.255.254", 8080, dubbo3Meta(`[{"port":8080,"protocol":`, nil))
	return d.w.root + "/" + key.Name + "/" + id, d.w.set(key.Name, map[string][]byte{id: data})
}
