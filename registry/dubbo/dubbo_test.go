package dubbo

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/dubbo/dubbotest"
)

// TestServiceName checks that service names are DNS labels, distinct for distinct triples,
// including those that sanitise alike, and stable: the names below are what ServiceEntries are
// called in users' meshes (galleon-zookeeper's since its Dubbo layouts, galleon-nacos's).
func TestServiceName(t *testing.T) {
	triples := [][3]string{
		{"orders", "", ""}, {"orders", "g", ""}, {"orders", "", "g"}, {"Orders", "", ""},
		{"org.apache.demo.DemoService", "", ""}, {"org.apache.demo.DemoService", "g1", "1.0.0"},
		{"org.apache.demo.demoservice", "g1", "1.0.0"}, {"org.apache.demo.DemoService", "g1", "1.0"},
		{"org.apache.demo.DemoService", "g1.1", "0"}, {"a.b-c", "", ""}, {"a-b.c", "", ""},
		{"a--b", "", ""}, {"a-b", "", ""}, {strings.Repeat("com.example.verylongpackage.", 5) + "Svc", strings.Repeat("group", 20), "1.0.0"},
		{"", "", ""}, {"...", "", ""},
	}
	seen := map[string][3]string{}
	for _, tr := range triples {
		n := ServiceName(tr[0], tr[1], tr[2])
		if model.DNSLabel(n) != n || n == "" {
			t.Errorf("%q: name %q is not a DNS-1123 label", tr, n)
		}
		if prev, dup := seen[n]; dup {
			t.Errorf("%q and %q share the name %q", prev, tr, n)
		}
		seen[n] = tr
	}
	for _, tc := range []struct{ iface, group, version, want string }{
		{"orders", "", "", "orders"},
		{"org.apache.demo.DemoService", "g1", "1.0.0", "org-apache-demo-demoservice-g1-1-0-0--b805551c2d"},
		{"Demo_Provider", "", "", "demo-provider--"},
		{"", "", "", "dubbo--"},
	} {
		if got := ServiceName(tc.iface, tc.group, tc.version); !strings.HasPrefix(got, tc.want) || strings.HasSuffix(tc.want, "--") && len(got) != len(tc.want)+10 {
			t.Errorf("ServiceName(%q, %q, %q) = %q, want %q[hash]", tc.iface, tc.group, tc.version, got, tc.want)
		}
	}
}

func TestProtocols(t *testing.T) {
	p, err := NewProtocols(map[string]string{"Hessian": "http2", "tri": "TCP", "bad": "SOAP", "": "HTTP"})
	if err == nil || !strings.Contains(err.Error(), "bad=SOAP") || !strings.Contains(err.Error(), "=HTTP") {
		t.Errorf("NewProtocols: err %v, want both bad entries named", err)
	}
	for name, want := range map[string]model.Protocol{
		"dubbo": model.ProtocolTCP, "DUBBO": model.ProtocolTCP, "tri": model.ProtocolTCP, "grpc": model.ProtocolGRPC,
		"rest": model.ProtocolHTTP, "http": model.ProtocolHTTP, "https": model.ProtocolHTTPS,
		"hessian": model.ProtocolHTTP2, "bad": model.ProtocolTCP, "thrift": model.ProtocolTCP,
	} {
		if got := p.Of(name); got != want {
			t.Errorf("Of(%q) = %s, want %s", name, got, want)
		}
	}
	var zero Protocols
	for _, tc := range []struct {
		names []string
		want  model.Port
	}{
		{[]string{"dubbo"}, model.Port{Number: 20880, Protocol: model.ProtocolTCP, Name: PortName}},
		{[]string{"tri"}, model.Port{Number: 20880, Protocol: model.ProtocolGRPC}},
		{[]string{"tri", "grpc"}, model.Port{Number: 20880, Protocol: model.ProtocolGRPC}},
		{[]string{"dubbo", "tri"}, model.Port{Number: 20880, Protocol: model.ProtocolTCP, Name: PortName}},
		{[]string{"rest", "tri"}, model.Port{Number: 20880, Protocol: model.ProtocolTCP}},
	} {
		if got := zero.Port(20880, tc.names...); got != tc.want {
			t.Errorf("Port(20880, %q) = %+v, want %+v", tc.names, got, tc.want)
		}
	}
	// An override of dubbo to another protocol loses the tcp-dubbo name (not TCP any more).
	h, _ := NewProtocols(map[string]string{"dubbo": "http"})
	if got := h.Port(20880, "dubbo"); got != (model.Port{Number: 20880, Protocol: model.ProtocolHTTP}) {
		t.Errorf("dubbo=http: %+v", got)
	}
}

func TestEndpoints(t *testing.T) {
	var p Protocols
	tcpDubbo := model.Port{Number: 20880, Protocol: model.ProtocolTCP, Name: PortName}
	grpcTri := model.Port{Number: 50051, Protocol: model.ProtocolGRPC}
	many := make([]string, 0, MaxPorts+1)
	for i := range MaxPorts + 1 {
		many = append(many, fmt.Sprintf(`{"port":%d,"protocol":"tri"}`, 1000+i))
	}
	for _, tc := range []struct {
		name, text string
		want       []model.Port
		reason     string
	}{
		{"empty", "", nil, ""},
		{"blank", "  ", nil, ""},
		{"none", "[]", []model.Port{}, ""},
		{"dubbo and tri, out of order", `[{"port":50051,"protocol":"tri"},{"port":20880,"protocol":"DUBBO"}]`, []model.Port{tcpDubbo, grpcTri}, ""},
		{"duplicates", `[{"port":20880,"protocol":"dubbo"},{"port":20880,"protocol":"dubbo"}]`, []model.Port{tcpDubbo}, ""},
		{"not JSON", `[{"port":`, nil, ReasonParameter},
		{"not an array", `{"port":1}`, nil, ReasonParameter},
		{"no protocol", `[{"port":20880}]`, nil, ReasonParameter},
		{"no port", `[{"protocol":"dubbo"}]`, nil, ReasonPort},
		{"port 0", `[{"port":0,"protocol":"dubbo"}]`, nil, ReasonPort},
		{"port too large", `[{"port":65536,"protocol":"dubbo"}]`, nil, ReasonPort},
		{"port a string", `[{"port":"20880","protocol":"dubbo"}]`, nil, ReasonPort},
		{"too many ports", "[" + strings.Join(many, ",") + "]", nil, ReasonPort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.Endpoints(tc.text)
			if tc.reason != "" {
				if err == nil || registry.ReasonOf(err, "") != tc.reason {
					t.Fatalf("Endpoints(%q) = %v, %v; want an error of reason %s", tc.text, got, err, tc.reason)
				}
				if len(err.Error()) > 400 {
					t.Errorf("the error quotes too much: %d bytes", len(err.Error()))
				}
				return
			}
			if err != nil || len(got) != len(tc.want) || len(got) > 0 && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Endpoints(%q) = %v, %v; want %v", tc.text, got, err, tc.want)
			}
		})
	}
}

func TestLabels(t *testing.T) {
	long := strings.Repeat("a", MaxLabelValue+1)
	meta := map[string]string{
		RevisionKey: "abc", EndpointsKey: "[]", "dubbo.metadata.storage-type": "local",
		"timestamp": "1", "meta-v": "1.0.0", "region": "eu", "blob": long, "internal-x": "y",
	}
	got := Labels(meta, func(k string) bool { return strings.HasPrefix(k, "internal-") })
	want := map[string]string{RevisionLabel: "abc", "region": "eu"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Labels = %v, want %v", got, want)
	}
	big := map[string]string{RevisionKey: "r"}
	for i := range 2 * MaxLabels {
		big[fmt.Sprintf("k%03d", i)] = "v"
	}
	got = Labels(big, nil)
	if len(got) != MaxLabels || got[RevisionLabel] != "r" || got["k000"] != "v" || got[fmt.Sprintf("k%03d", MaxLabels-1)] != "" {
		t.Errorf("Labels of %d keys: %d labels, want %d: the revision and the first keys", len(big), len(got), MaxLabels)
	}
	if Labels(map[string]string{EndpointsKey: "[]"}, nil) != nil {
		t.Error("Labels of bookkeeping only: want nil")
	}
	if k := ApplicationKey(map[string]string{RevisionKey: "x"}); k != RevisionKey {
		t.Errorf("ApplicationKey = %q", k)
	}
	if k := ApplicationKey(map[string]string{"protocol": "dubbo"}); k != "" {
		t.Errorf("ApplicationKey of a provider's metadata = %q, want none", k)
	}
	params := map[string]string{"application": "demo", "version": "1.0.0", "token": "secret", "timeout": "3000"}
	if got := ProviderLabels(func(k string) string { return params[k] }); !reflect.DeepEqual(got, map[string]string{"application": "demo", "version": "1.0.0"}) {
		t.Errorf("ProviderLabels = %v", got)
	}
}

// TestEquivalenceNames checks the kit's expected names against ServiceName: a case that does not
// hold here would hold in no adapter.
func TestEquivalenceNames(t *testing.T) {
	e, err := dubbotest.EquivalenceCases()
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Interfaces) == 0 || len(e.Applications) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range e.Interfaces {
		if got := ServiceName(c.Interface, c.Group, c.Version); got != c.Want.Name || c.Want.Host != got+"."+e.Namespace+".dubbo" {
			t.Errorf("%s: ServiceName = %q, want name %q host %q", c.Case, got, c.Want.Name, c.Want.Host)
		}
	}
	for _, c := range e.Applications {
		if got := ServiceName(c.Application, "", ""); got != c.Want.Name {
			t.Errorf("%s: ServiceName = %q, want %q", c.Case, got, c.Want.Name)
		}
	}
}
