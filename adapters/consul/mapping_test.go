package consul

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/galleon-mesh/galleon/model"
)

// entry builds one /v1/health/service entry; opts edit it.
func entry(node, nodeAddr, id string, port int, opts ...func(*api.ServiceEntry)) *api.ServiceEntry {
	e := &api.ServiceEntry{
		Node:    &api.Node{Node: node, Address: nodeAddr, Datacenter: "dc1"},
		Service: &api.AgentService{ID: id, Service: "web", Port: port, Weights: api.AgentWeights{Passing: 1, Warning: 1}},
	}
	for _, o := range opts {
		o(e)
	}
	return e
}

func withAddr(a string) func(*api.ServiceEntry) {
	return func(e *api.ServiceEntry) { e.Service.Address = a }
}
func withTags(t ...string) func(*api.ServiceEntry) {
	return func(e *api.ServiceEntry) { e.Service.Tags = t }
}
func withMeta(kv ...string) func(*api.ServiceEntry) {
	return func(e *api.ServiceEntry) {
		e.Service.Meta = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			e.Service.Meta[kv[i]] = kv[i+1]
		}
	}
}
func withCheck(id, status string) func(*api.ServiceEntry) {
	return func(e *api.ServiceEntry) {
		e.Checks = append(e.Checks, &api.HealthCheck{Node: e.Node.Node, CheckID: id, Status: status})
	}
}

func mapOne(t *testing.T, cfg Config, dc, name string, entries ...*api.ServiceEntry) (model.Service, []rejection, bool) {
	t.Helper()
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := newMapper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, rej := m.mapService(dc, name, entries)
	if p == nil {
		return model.Service{}, rej, false
	}
	return merge([]*part{p}), rej, true
}

func TestMapServiceDefaults(t *testing.T) {
	svc, rej, ok := mapOne(t, Config{}, "dc1", "web",
		entry("n1", "10.0.0.1", "web-1", 8080),
		entry("n2", "10.0.0.2", "web-2", 8080, withAddr("10.1.0.2")),
	)
	if !ok || len(rej) != 0 {
		t.Fatalf("ok=%v rejected=%v", ok, rej)
	}
	want := model.Service{
		Namespace: "consul", Name: "web",
		Hosts: []string{"web.service.consul"},
		Ports: []model.Port{{Number: 8080, Protocol: model.ProtocolTCP}},
		Instances: []model.Instance{
			{ID: "dc1/n1/web-1", Address: "10.0.0.1", Locality: "dc1", Health: model.Healthy},
			{ID: "dc1/n2/web-2", Address: "10.1.0.2", Locality: "dc1", Health: model.Healthy},
		},
	}
	if !reflect.DeepEqual(svc, want) {
		t.Fatalf("got  %+v\nwant %+v", svc, want)
	}
}

func TestMapServiceRules(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		entries []*api.ServiceEntry
		check   func(t *testing.T, svc model.Service)
	}{
		{
			name:    "protocol from meta wins over tags",
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 80, withMeta("protocol", "GRPC"), withTags("http"))},
			check:   wantPorts(model.Port{Number: 80, Protocol: model.ProtocolGRPC}),
		},
		{
			name:    "protocol from a protocol=x tag",
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 80, withTags("protocol=http2"))},
			check:   wantPorts(model.Port{Number: 80, Protocol: model.ProtocolHTTP2}),
		},
		{
			name:    "protocol from a protocol|x tag",
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 80, withTags("protocol|https"))},
			check:   wantPorts(model.Port{Number: 80, Protocol: model.ProtocolHTTPS}),
		},
		{
			name:    "protocol from a bare tag",
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 80, withTags("v1", "http"))},
			check:   wantPorts(model.Port{Number: 80, Protocol: model.ProtocolHTTP}),
		},
		{
			name:    "unknown protocol is TCP",
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 80, withMeta("protocol", "thrift"))},
			check:   wantPorts(model.Port{Number: 80, Protocol: model.ProtocolTCP}),
		},
		{
			name: "several ports when instances differ; the smallest ID decides a shared port's protocol",
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "b", 80, withMeta("protocol", "grpc")),
				entry("n1", "10.0.0.1", "a", 80, withMeta("protocol", "http")),
				entry("n2", "10.0.0.2", "c", 9090),
			},
			check: wantPorts(model.Port{Number: 80, Protocol: model.ProtocolHTTP}, model.Port{Number: 9090, Protocol: model.ProtocolTCP}),
		},
		{
			name: "labels from tags (key=value, key|value, bare) and meta, meta winning, sanitised",
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 80,
				withTags("version=v1", "zone|eu west", "canary", "tier=web"), withMeta("tier", "frontend", "owner@", "team a"))},
			check: func(t *testing.T, svc model.Service) {
				want := map[string]string{"version": "v1", "zone": "eu-west", "canary": "", "tier": "frontend", "owner": "team-a"}
				if got := svc.Instances[0].Labels; !reflect.DeepEqual(got, want) {
					t.Errorf("labels %v, want %v", got, want)
				}
			},
		},
		{
			name: "tagged address: service first, then node, then the default",
			cfg:  Config{AddressSource: "wan"},
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "a", 80, func(e *api.ServiceEntry) {
					e.Service.TaggedAddresses = map[string]api.ServiceAddress{"wan": {Address: "198.51.100.1", Port: 8443}}
				}),
				entry("n2", "10.0.0.2", "b", 80, func(e *api.ServiceEntry) { e.Node.TaggedAddresses = map[string]string{"wan": "198.51.100.2"} }),
				entry("n3", "10.0.0.3", "c", 80),
			},
			check: func(t *testing.T, svc model.Service) {
				got := []string{svc.Instances[0].Address, svc.Instances[1].Address, svc.Instances[2].Address}
				if want := []string{"198.51.100.1", "198.51.100.2", "10.0.0.3"}; !reflect.DeepEqual(got, want) {
					t.Errorf("addresses %v, want %v", got, want)
				}
				wantPorts(model.Port{Number: 80, Protocol: model.ProtocolTCP}, model.Port{Number: 8443, Protocol: model.ProtocolTCP})(t, svc)
			},
		},
		{
			name:    "host name addresses are kept",
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 443, withAddr("api.example.com"))},
			check: func(t *testing.T, svc model.Service) {
				if svc.Instances[0].Address != "api.example.com" {
					t.Errorf("address %q", svc.Instances[0].Address)
				}
			},
		},
		{
			name: "weights: passing, warning when warning is served, Consul's default 1 as 0",
			cfg:  Config{IncludeWarning: true},
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "a", 80, func(e *api.ServiceEntry) { e.Service.Weights = api.AgentWeights{Passing: 10, Warning: 2} }),
				entry("n1", "10.0.0.1", "b", 80, withCheck("c", api.HealthWarning), func(e *api.ServiceEntry) { e.Service.Weights = api.AgentWeights{Passing: 10, Warning: 2} }),
				entry("n1", "10.0.0.1", "c", 80),
			},
			check: func(t *testing.T, svc model.Service) {
				got := []uint32{svc.Instances[0].Weight, svc.Instances[1].Weight, svc.Instances[2].Weight}
				if want := []uint32{10, 2, 0}; !reflect.DeepEqual(got, want) {
					t.Errorf("weights %v, want %v", got, want)
				}
			},
		},
		{
			name: "health: passing, warning, critical, maintenance, node check",
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "a", 80, withCheck("serfHealth", api.HealthPassing), withCheck("service:a", api.HealthPassing)),
				entry("n1", "10.0.0.1", "b", 80, withCheck("service:b", api.HealthWarning)),
				entry("n1", "10.0.0.1", "c", 80, withCheck("service:c", api.HealthCritical)),
				entry("n1", "10.0.0.1", "d", 80, withCheck("_service_maintenance:d", api.HealthCritical)),
				entry("n2", "10.0.0.2", "e", 80, withCheck("serfHealth", api.HealthCritical), withCheck("service:e", api.HealthPassing)),
				entry("n3", "10.0.0.3", "f", 80, withCheck("_node_maintenance", api.HealthCritical)),
			},
			check: wantHealth(model.Healthy, model.Unhealthy, model.Unhealthy, model.Draining, model.Unhealthy, model.Draining),
		},
		{
			name: "health: --consul-include-warning serves warning",
			cfg:  Config{IncludeWarning: true},
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "a", 80, withCheck("service:a", api.HealthWarning)),
				entry("n1", "10.0.0.1", "b", 80, withCheck("service:b", api.HealthCritical)),
			},
			check: wantHealth(model.Healthy, model.Unhealthy),
		},
		{
			name:    "external meta makes the service MESH_EXTERNAL",
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 80, withMeta("external", "true"))},
			check: func(t *testing.T, svc model.Service) {
				if svc.Location != model.MeshExternal {
					t.Errorf("location %v", svc.Location)
				}
			},
		},
		{
			name:    "namespace and exportTo fixed",
			cfg:     Config{Namespace: "mesh", ExportTo: []string{".", "istio-system"}},
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 80)},
			check: func(t *testing.T, svc model.Service) {
				if svc.Namespace != "mesh" || !reflect.DeepEqual(svc.ExportTo, []string{".", "istio-system"}) {
					t.Errorf("namespace %q exportTo %v", svc.Namespace, svc.ExportTo)
				}
			},
		},
		{
			name: "namespace and exportTo from meta, smallest instance ID first",
			cfg:  Config{NamespaceMetaKey: "k8s-namespace", ExportToMetaKey: "export-to"},
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "b", 80, withMeta("k8s-namespace", "other", "export-to", "x")),
				entry("n1", "10.0.0.1", "a", 80, withMeta("k8s-namespace", "Payments", "export-to", "., istio-system")),
			},
			check: func(t *testing.T, svc model.Service) {
				if svc.Namespace != "payments" || !reflect.DeepEqual(svc.ExportTo, []string{".", "istio-system"}) {
					t.Errorf("namespace %q exportTo %v", svc.Namespace, svc.ExportTo)
				}
			},
		},
		{
			name:    "host template",
			cfg:     Config{HostTemplate: "{{.Name}}.{{.Namespace}}.mesh"},
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 80, func(e *api.ServiceEntry) { e.Service.Namespace = "team" })},
			check: func(t *testing.T, svc model.Service) {
				if !reflect.DeepEqual(svc.Hosts, []string{"web.team.mesh"}) || svc.Name != "web" {
					t.Errorf("hosts %v name %q", svc.Hosts, svc.Name)
				}
			},
		},
		{
			name:    "a host template naming the datacenter gives one service per datacenter",
			cfg:     Config{HostTemplate: "{{.Service}}.service.{{.Datacenter}}.consul"},
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 80)},
			check: func(t *testing.T, svc model.Service) {
				if !reflect.DeepEqual(svc.Hosts, []string{"web.service.dc1.consul"}) || svc.Name != "web-dc1" {
					t.Errorf("hosts %v name %q", svc.Hosts, svc.Name)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, rej, ok := mapOne(t, tt.cfg, "dc1", "web", tt.entries...)
			if !ok || len(rej) != 0 {
				t.Fatalf("ok=%v rejected=%v", ok, rej)
			}
			tt.check(t, svc)
		})
	}
}

func wantPorts(want ...model.Port) func(*testing.T, model.Service) {
	return func(t *testing.T, svc model.Service) {
		t.Helper()
		if !reflect.DeepEqual(svc.Ports, want) {
			t.Errorf("ports %v, want %v", svc.Ports, want)
		}
	}
}

func wantHealth(want ...model.Health) func(*testing.T, model.Service) {
	return func(t *testing.T, svc model.Service) {
		t.Helper()
		var got []model.Health
		for _, inst := range svc.Instances {
			got = append(got, inst.Health)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("health %v, want %v", got, want)
		}
	}
}

func TestMapServiceMalformed(t *testing.T) {
	tests := []struct {
		name    string
		svc     string
		entries []*api.ServiceEntry
		records []string // rejected, in order
		kept    int      // instances still served
	}{
		{
			name: "address that is neither an IP nor a host name",
			svc:  "web",
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "good", 80),
				entry("n2", "10.0.0.2", "bad", 80, withAddr("not an address!")),
			},
			records: []string{"consul service dc1/web instance bad on node n2"},
			kept:    1,
		},
		{
			name: "port 0 and port above 65535",
			svc:  "web",
			entries: []*api.ServiceEntry{
				entry("n1", "10.0.0.1", "zero", 0),
				entry("n1", "10.0.0.1", "big", 70000),
				entry("n1", "10.0.0.1", "good", 80),
			},
			records: []string{"consul service dc1/web instance zero on node n1", "consul service dc1/web instance big on node n1"},
			kept:    1,
		},
		{
			name:    "no address at all",
			svc:     "web",
			entries: []*api.ServiceEntry{entry("n1", "", "a", 80)},
			records: []string{"consul service dc1/web instance a on node n1"},
		},
		{
			name:    "service name with nothing left after sanitising",
			svc:     "___",
			entries: []*api.ServiceEntry{entry("n1", "10.0.0.1", "a", 80)},
			records: []string{"consul service dc1/___"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, rej, ok := mapOne(t, Config{}, "dc1", tt.svc, tt.entries...)
			var got []string
			for _, r := range rej {
				got = append(got, r.record)
				if r.err == nil || r.err.Error() == "" {
					t.Errorf("%s: no reason", r.record)
				}
			}
			if !reflect.DeepEqual(got, tt.records) {
				t.Errorf("rejected %q, want %q", got, tt.records)
			}
			if n := len(svc.Instances); ok != (tt.kept > 0) || n != tt.kept {
				t.Errorf("served=%v with %d instances, want %d", ok, n, tt.kept)
			}
		})
	}
}

func TestMapServiceSkipsConnectPlumbing(t *testing.T) {
	_, rej, ok := mapOne(t, Config{}, "dc1", "web-sidecar-proxy",
		entry("n1", "10.0.0.1", "p", 21000, func(e *api.ServiceEntry) { e.Service.Kind = api.ServiceKindConnectProxy }))
	if ok || len(rej) != 0 {
		t.Fatalf("a connect proxy was mapped (ok=%v, rejected=%v)", ok, rej)
	}
}

func TestMergeDatacenters(t *testing.T) {
	cfg := Config{}.withDefaults()
	m, err := newMapper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e2 := entry("m1", "10.2.0.1", "web-1", 9090, withMeta("protocol", "http"))
	e2.Node.Datacenter = "dc2"
	p1, _ := m.mapService("dc1", "web", []*api.ServiceEntry{entry("n1", "10.1.0.1", "web-1", 8080, withMeta("protocol", "http"))})
	p2, _ := m.mapService("dc2", "web", []*api.ServiceEntry{e2})
	svc := merge([]*part{p2, p1})
	if !reflect.DeepEqual(svc.Hosts, []string{"web.service.consul"}) {
		t.Errorf("hosts %v", svc.Hosts)
	}
	var ids, localities []string
	for _, inst := range svc.Instances {
		ids = append(ids, inst.ID)
		localities = append(localities, inst.Locality)
	}
	if want := []string{"dc1/n1/web-1", "dc2/m1/web-1"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("instances %v, want %v", ids, want)
	}
	if want := []string{"dc1", "dc2"}; !reflect.DeepEqual(localities, want) {
		t.Errorf("localities %v, want %v", localities, want)
	}
	wantPorts(model.Port{Number: 8080, Protocol: model.ProtocolHTTP}, model.Port{Number: 9090, Protocol: model.ProtocolHTTP})(t, svc)
}

func TestConfigValidateNamesTheFlag(t *testing.T) {
	tests := []struct {
		cfg  Config
		flag string
	}{
		{Config{Consistency: "eventual"}, "--consul-consistency"},
		{Config{Wait: 11 * 60e9}, "--consul-wait"},
		{Config{HostTemplate: "{{.Nope}}"}, "--consul-host-template"},
		{Config{HostTemplate: "{{"}, "--consul-host-template"},
		{Config{Namespace: "Not_A_Label"}, "--namespace"},
		{Config{AddressSource: "public"}, "--consul-address-source"},
		{Config{FetchConcurrency: 500}, "--consul-fetch-concurrency"},
		{Config{Datacenters: []string{"all", "dc1"}}, "--consul-datacenters"},
		{Config{ExportTo: []string{"Bad NS"}}, "--consul-export-to"},
		{Config{TokenFile: "/nonexistent/token"}, "--consul-token-file"},
		{Config{CertFile: "/x"}, "--consul-tls-cert and --consul-tls-key"},
		{Config{CAFile: "/nonexistent/ca.pem"}, "--consul-tls-ca"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.flag) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tt.cfg, err, tt.flag)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the zero Config is invalid: %v", err)
	}
}

func TestTokenFileIsReadAgainWhenItChanges(t *testing.T) {
	path := t.TempDir() + "/token"
	write := func(s string) {
		if err := osWriteFile(path, s); err != nil {
			t.Fatal(err)
		}
	}
	write("first\n")
	ts := newTokenSource("flag-token", path, "env-token", "")
	if got := ts.token(); got != "first" {
		t.Fatalf("token %q, want first (the file wins over --consul-token)", got)
	}
	write("second-longer\n")
	if got := ts.token(); got != "second-longer" {
		t.Fatalf("token %q after the file changed, want second-longer", got)
	}
	if got := newTokenSource("", "", "env-token", "").token(); got != "env-token" {
		t.Fatalf("token %q, want the environment's", got)
	}
}

func TestIndexHandlingBackoff(t *testing.T) {
	b := newBackoff(100e6, 1e9)
	var last int64
	for range 10 {
		d := b.next()
		if d < 50e6 || d > 1e9 {
			t.Fatalf("backoff %v out of [min/2, max]", d)
		}
		last = int64(d)
	}
	if last < 5e8 {
		t.Errorf("backoff did not grow to its cap: %v", last)
	}
}

func osWriteFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
