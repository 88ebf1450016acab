package zookeeper

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/model"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
)

// servable fails t when the core would refuse svc as a whole (convert.ConvertService's *Error:
// ports, hosts, name), which is what one bad instance must never cause.
func servable(t *testing.T, svc model.Service) {
	t.Helper()
	if _, err := convert.ConvertService(svc, convert.Options{Mode: convert.ModeServiceEntry}); err != nil {
		t.Fatalf("the core refuses the whole service: %v", err)
	}
}

// TestProtocolValidAgreesWithTheCore: model.Protocol.Valid accepts exactly the protocols the
// core's validation accepts on a port (the protocols the adapter takes from instances are
// checked with it).
func TestProtocolValidAgreesWithTheCore(t *testing.T) {
	for _, p := range []string{"", "http", "HTTP", "Https", "http2", "HTTP_PROXY", "grpc", "grpc-web", "GRPC-WEB", "tcp", "tls",
		"udp", "mongo", "mysql", "redis", "dubbo", "tri", "h2c", "HTTP ", "http/1.1", "GRPC_WEB", "thrift", "é"} {
		svc := model.Service{Namespace: "default", Name: "p", Hosts: []string{"p.default.zookeeper"},
			Ports: []model.Port{{Number: 8080, Protocol: model.Protocol(p)}}}
		_, err := convert.ConvertService(svc, convert.Options{Mode: convert.ModeServiceEntry})
		if valid := model.Protocol(p).Valid(); valid != (err == nil) {
			t.Errorf("Protocol(%q).Valid() = %v, but the core says %v", p, valid, err)
		}
	}
}

// TestCuratorProtocolRejectsTheInstance (finding 4): an instance whose metadata "protocol" is
// none Istio knows is rejected itself (reason protocol); before, its port made the whole
// service invalid in the core. A protocol Istio knows in any case and spacing is served.
func TestCuratorProtocolRejectsTheInstance(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		want     model.Protocol // "" for a rejection
	}{
		{"dubbo", ""}, {"h2c", ""}, {strings.Repeat("x", 5000), ""}, {"grpc", model.ProtocolGRPC}, {" grpc-web ", "GRPC-WEB"}, {"http2", model.ProtocolHTTP2},
	} {
		data := curatorJSON("p", "p1", "10.0.0.1", 8080, 0, map[string]string{"protocol": tc.protocol})
		e, err := curator{}.parseInstance("p", "p1", data)
		if tc.want == "" {
			if err == nil || reasonOf(err) != reasonProtocol || len(err.Error()) > 400 {
				t.Errorf("protocol %.20q: err = %v (reason %s), want a short rejection, reason protocol", tc.protocol, err, reasonOf(err))
			}
			continue
		}
		if err != nil || len(e.ports) != 1 || e.ports[0].Protocol != tc.want {
			t.Errorf("protocol %q: %v %v, want one port %s", tc.protocol, e.ports, err, tc.want)
		}
	}
}

// TestAdmitPorts (finding 4): instances that together would give a service more than 256 ports
// (each valid on its own) are refused one by one, the first 256 ports served; an instance
// serving only ports served already keeps its place, a newcomer with a new port is refused; an
// instance with an invalid port is refused whatever the count. Every service built from what is
// admitted is one the core serves.
func TestAdmitPorts(t *testing.T) {
	tmpl := template.Must(template.New("h").Parse(DefaultHostTemplate))
	hd := hostData{Name: "many", Namespace: "default"}
	var eps []*endpoint
	for i := range 300 {
		eps = append(eps, &endpoint{
			inst:  model.Instance{ID: fmt.Sprintf("i%03d", i), Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)},
			ports: []model.Port{{Number: uint32(10000 + i), Protocol: model.ProtocolTCP}},
		})
	}
	before, _, _, _ := mapService(hd, tmpl, slices.Clone(eps), portMemory{})
	if _, err := convert.ConvertService(before, convert.Options{}); err == nil {
		t.Fatal("300 ports: the core serves them; the test tests nothing")
	}
	kept, refused := admitPorts(eps, nil)
	if len(kept) != 256 || len(refused) != 44 || kept[0].inst.ID != "i000" || refused[0].e.inst.ID != "i256" {
		t.Fatalf("kept %d (first %s), refused %d; want the first 256 kept, 44 refused", len(kept), kept[0].inst.ID, len(refused))
	}
	for _, r := range refused {
		if reasonOf(r.err) != reasonPort || !strings.Contains(r.err.Error(), "more than 256 ports") {
			t.Fatalf("refusal of %s: %v (reason %s)", r.e.inst.ID, r.err, reasonOf(r.err))
		}
	}
	svc, _, ok, err := mapService(hd, tmpl, kept, portMemory{})
	if !ok || err != nil || len(svc.Ports) != 256 {
		t.Fatalf("%v %v, %d ports", ok, err, len(svc.Ports))
	}
	servable(t, svc)

	// Served: the last 256. A newcomer placed first (its node name sorts first) is refused,
	// those serving served ports stay.
	var served []model.Port
	for _, e := range eps[44:] {
		served = append(served, e.ports...)
	}
	newcomer := &endpoint{inst: model.Instance{ID: "a-new", Address: "10.9.9.9"}, ports: []model.Port{{Number: 9999}}}
	kept, refused = admitPorts(append([]*endpoint{newcomer}, eps[44:]...), served)
	if len(kept) != 256 || len(refused) != 1 || refused[0].e != newcomer {
		t.Fatalf("kept %d, refused %d; want the 256 served kept and the newcomer refused", len(kept), len(refused))
	}
	// One more instance on a port served already: admitted.
	again := &endpoint{inst: model.Instance{ID: "a-again", Address: "10.9.9.8"}, ports: eps[100].ports}
	if kept, refused = admitPorts(append([]*endpoint{again}, eps[44:]...), served); len(kept) != 257 || len(refused) != 0 {
		t.Fatalf("kept %d, refused %d; want all 257", len(kept), len(refused))
	}

	// Invalid ports, whatever the count.
	for _, p := range []model.Port{{Number: 0}, {Number: 70000}, {Number: 80, Protocol: "DUBBO"}} {
		bad := &endpoint{inst: model.Instance{ID: "bad", Address: "10.9.9.7"}, ports: []model.Port{p}}
		kept, refused := admitPorts([]*endpoint{eps[0], bad}, nil)
		if len(kept) != 1 || len(refused) != 1 || refused[0].e != bad {
			t.Fatalf("port %+v: kept %d, refused %d", p, len(kept), len(refused))
		}
		svc, _, _, _ := mapService(hd, tmpl, kept, portMemory{})
		servable(t, svc)
	}
	// Within the limits: the same slice, no work.
	if kept, refused := admitPorts(eps[:10], nil); len(refused) != 0 || &kept[0] != &eps[0] {
		t.Fatal("within the limits, admitPorts must return its input")
	}
}

// TestDubbo3TooManyPorts (finding 4): a Dubbo 3 instance listing more than 256 ports is
// rejected itself; 256 are served.
func TestDubbo3TooManyPorts(t *testing.T) {
	list := func(n int) string {
		var eps []map[string]any
		for i := range n {
			eps = append(eps, map[string]any{"port": 10000 + i, "protocol": "tri"})
		}
		b, _ := json.Marshal(eps)
		return string(b)
	}
	d := newDubbo3(nil)
	_, err := d.parseInstance("demo-provider", "10.0.0.1:20880", dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(list(257), nil)))
	if err == nil || reasonOf(err) != reasonPort || !strings.Contains(err.Error(), "more than 256 ports") {
		t.Fatalf("257 ports: err = %v (reason %s)", err, reasonOf(err))
	}
	e, err := d.parseInstance("demo-provider", "10.0.0.1:20880", dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(list(256), nil)))
	if err != nil || len(e.ports) != 256 {
		t.Fatalf("256 ports: %d, %v", len(e.ports), err)
	}
	svc, _, _, _ := mapService(hostData{Name: "demo-provider", Namespace: "default"}, template.Must(template.New("h").Parse(DefaultDubboHostTemplate)), []*endpoint{&e}, portMemory{})
	servable(t, svc)
}

// TestEmptyServiceKeepsItsPorts (the dubbo-go finding): when the last host's provider URLs
// leave one at a time, the empty service keeps every port it had, whatever order they left in
// (before: only the ports of the last URL to leave). A port no instance has served since an
// instance arrived is not kept.
func TestEmptyServiceKeepsItsPorts(t *testing.T) {
	tmpl := template.Must(template.New("h").Parse(DefaultDubboHostTemplate))
	hd := hostData{Name: dubboreg.ServiceName(greeter, "", ""), Namespace: "default", Interface: greeter}
	urls := append(twoProtocolURLs("10.0.0.1"), "rest://10.0.0.1:8080/"+greeter+"?application=greet-server")
	want := []model.Port{{Number: 8080, Protocol: model.ProtocolHTTP}, {Number: 20880, Protocol: model.ProtocolTCP, Name: "tcp-dubbo"}, {Number: 50051, Protocol: model.ProtocolGRPC}}
	perms := 0
	permute(urls, func(order []string) {
		perms++
		var mem portMemory
		for n := len(order); n >= 0; n-- { // all registered, then one URL fewer each time
			svc, next, ok, err := mapService(hd, tmpl, mergedProviders(t, order[:n], nil), mem)
			if !ok || err != nil {
				t.Fatalf("%v: %d URLs: %v %v", order, n, ok, err)
			}
			servable(t, svc)
			mem = next
			if n == 0 && !slices.Equal(svc.Ports, want) {
				t.Errorf("the URLs left in the order %v: the empty service keeps %v, want %v", order, svc.Ports, want)
			}
		}
	})
	if perms != 6 {
		t.Fatalf("%d orders tried, want 6", perms)
	}

	// An instance arriving starts again from the ports served then: 8080 went for good (the
	// host re-registered without it), so an empty service does not keep it.
	var mem portMemory
	var empties [][]model.Port
	for _, n := range []int{3, 2, 0, 2, 1, 0} { // urls[2] (rest, 8080) leaves first
		svc, next, _, _ := mapService(hd, tmpl, mergedProviders(t, urls[:n], nil), mem)
		mem = next
		if n == 0 {
			empties = append(empties, svc.Ports)
		}
	}
	if len(empties[0]) != 3 {
		t.Errorf("first empty state: ports %v, want the 3 the host had", empties[0])
	}
	if got := mem.ports; len(got) != 2 || got[0].Number != 20880 {
		t.Errorf("after the host came back without 8080 and left: keeps %v, want 20880 and 50051", got)
	}
}

// TestLayoutMismatch (the dubbo-go finding): read with the Curator layout, a Dubbo 3
// application instance (Java Dubbo's or dubbo-go's JSON) and a Dubbo 2 interface's providers
// node are rejected with reason layout and the --zk-layout to use, instead of served as HTTP
// ports with Dubbo's bookkeeping as labels. Spring's instances are not affected.
func TestLayoutMismatch(t *testing.T) {
	dubbogo := func(meta map[string]any) []byte {
		b, _ := json.Marshal(map[string]any{"name": "greet-server", "id": "10.0.0.1:20000", "address": "10.0.0.1", "port": 20000,
			"payload": map[string]any{"@class": dubboInstanceClass, "id": "10.0.0.1:20000", "name": "greet-server", "metadata": meta}})
		return b
	}
	noClass := func(meta map[string]any) []byte {
		b, _ := json.Marshal(map[string]any{"name": "greet-server", "id": "x", "address": "10.0.0.1", "port": 20000,
			"payload": map[string]any{"metadata": meta}})
		return b
	}
	for _, tc := range []struct {
		name, id string
		data     []byte
		want     string
	}{
		{"dubbo-go", "10.0.0.1:20000", dubbogo(dubbo3Meta(`[{"port":20000,"protocol":"tri"}]`, nil)), "--zk-layout=dubbo3"},
		{"dubbo-go, no metadata", "10.0.0.1:20000", dubbogo(nil), "--zk-layout=dubbo3"},
		{"Java Dubbo 3", "10.0.0.1:20880", dubbo3JSON("demo-provider", "10.0.0.1", 20880, dubbo3Meta(dubboTri, nil)), "--zk-layout=dubbo3"},
		{"metadata only", "x", noClass(map[string]any{"dubbo.metadata.revision": "abc"}), "--zk-layout=dubbo3"},
		{"Dubbo 2 providers", "providers", nil, "--zk-layout=dubbo"},
	} {
		_, err := curator{}.parseInstance("greet-server", tc.id, tc.data)
		if err == nil || reasonOf(err) != reasonLayout || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v (reason %s), want reason layout naming %s", tc.name, err, reasonOf(err), tc.want)
		}
	}
	// Spring's, with a metadata key that merely starts with dubbo: served.
	if _, err := (curator{}).parseInstance("a", "a1", curatorJSON("a", "a1", "10.0.0.1", 8080, 0, map[string]string{"dubbo.version": "2"})); err != nil {
		t.Errorf("a Spring instance: %v", err)
	}
	// The Dubbo 3 layout reads Dubbo 3's JSON as before.
	if _, err := newDubbo3(nil).parseInstance("greet-server", "10.0.0.1:20000", dubbogo(dubbo3Meta(`[{"port":20000,"protocol":"tri"}]`, nil))); err != nil {
		t.Errorf("dubbo3 layout: %v", err)
	}
}

// TestNoSecretInErrors (Dubbo errors quoted the whole URL): no rejection of a provider or
// override URL carrying a token, password or secret quotes its value, whatever is wrong with
// the URL; and none is longer than a few hundred bytes, whatever the input.
func TestNoSecretInErrors(t *testing.T) {
	const secret = "S3cr3tValue"
	params := "token=" + secret + "&Password=" + secret + "&accessKey=" + secret + "&x.secret-key=" + secret
	raws := []string{
		"dubbo://[::1:20880/demo?" + params,
		"dubbo://10.0.0.1:20880/demo?" + params + "&weight=abc",
		"dubbo://10.0.0.1:99999/demo?" + params,
		"dubbo://host.example:20880/demo?" + params,
		"dubbo://10.0.0.1:20880/demo?" + params + "&a=%zz",
		"dubbo:///demo?" + params,
		"://10.0.0.1:20880/demo?" + params,
		"10.0.0.1:20880/demo?" + params,
		"dubbo://10.0.0.1:20880/demo?" + params + "&" + strings.Repeat("x", 100000) + "=%",
		"dubbo://" + strings.Repeat("h", 100000) + ":1/?" + params,
		"override://host.example/demo?" + params + "&disabled=true",
		"override://10.0.0.1:0x1/demo?" + params + "&disabled=true",
		"override://10.0.0.1/demo?" + params + "&disabled=maybe",
		"override://10.0.0.1/demo?" + params + "&weight=-1",
		"dubbo://10.0.0.1/demo?" + params,
	}
	d := newDubbo(nil)
	for _, raw := range raws {
		for _, in := range []string{raw, url.QueryEscape(raw)} {
			errs := []error{}
			if _, err := d.parseInstance("demo", in, nil); err != nil {
				errs = append(errs, err)
			}
			if _, err := parseOverride(url.QueryEscape(raw)); err != nil {
				errs = append(errs, err)
			}
			for _, err := range errs {
				if strings.Contains(err.Error(), secret) || len(err.Error()) > 600 {
					t.Errorf("%.60s...: the error quotes the secret or is %d bytes: %.300s", raw, len(err.Error()), err)
				}
			}
		}
	}
	// The "/?" of the report: the message says what is wrong.
	_, err := parseProviderURL("%2F%3F")
	if err == nil || !strings.Contains(err.Error(), `"/?" has no "://"`) {
		t.Errorf("%%2F%%3F: %v", err)
	}
}

// TestRedact: the record names and texts the adapter reports keep no secret value, encoded or
// not, and are otherwise unchanged.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"dubbo://10.0.0.1:20880/x?token=abc&weight=1":                 "dubbo://10.0.0.1:20880/x?token=REDACTED&weight=1",
		"dubbo://10.0.0.1:20880/x?weight=1;ACCESS_KEY=abc;b=2":        "dubbo://10.0.0.1:20880/x?weight=1;ACCESS_KEY=REDACTED;b=2",
		url.QueryEscape("dubbo://10.0.0.1:20880/x?a=1&token=abc&b=2"): url.QueryEscape("dubbo://10.0.0.1:20880/x?a=1&token=") + redacted + "%26b%3D2",
		"dubbo%3a%2f%2f10.0.0.1%3a1%2fx%3fpassword%3dabc":             "dubbo%3a%2f%2f10.0.0.1%3a1%2fx%3fpassword%3d" + redacted,
		"dubbo://10.0.0.1:20880/x?token=":                             "dubbo://10.0.0.1:20880/x?token=",
		"dubbo://10.0.0.1:20880/x?tok%65n=abc":                        "dubbo://10.0.0.1:20880/x?tok%65n=REDACTED",
		"no query":                                                    "no query",
		"a?":                                                          "a?",
		"a?&&=&secret":                                                "a?&&=&secret",
		"x?Pass-Word=1&app.Secret.Key=2&x=3":                          "x?Pass-Word=REDACTED&app.Secret.Key=REDACTED&x=3",
		"x?TO\u212aEN=1&a=2":                                          "x?TO\u212aEN=REDACTED&a=2", // the Kelvin sign folds to k
		"x?tok%2Den=1":                                                "x?tok%2Den=REDACTED",
		"x?a=1%26token%3d2":                                           "x?a=1%26token%3dREDACTED",
		"x?a=1%2G6token%3d2":                                          "x?a=1%2G6token%3d2", // %2G is no separator
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
	if got, p := redactRecord("/dubbo/x/providers/a%3Fb%3D1"), "/dubbo/x/providers/a%3Fb%3D1"; got != p {
		t.Errorf("redactRecord(%q) = %q, want it unchanged", p, got)
	}
	if got := redactRecord("/dubbo/x/providers/" + url.QueryEscape("dubbo://10.0.0.1:1/x?token=abc")); strings.Contains(got, "abc") || !strings.HasPrefix(got, "/dubbo/x/providers/dubbo%3A") {
		t.Errorf("redactRecord: %s", got)
	}
}
