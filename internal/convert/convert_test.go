package convert

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/model"
)

// goodService is a valid service that the error cases below break one
// field at a time.
func goodService() model.Service {
	return model.Service{
		Namespace: "shop",
		Name:      "payments",
		Hosts:     []string{"payments.service.consul"},
		Ports:     []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}},
		Instances: []model.Instance{
			{ID: "p1", Address: "10.0.0.1"},
			{ID: "p2", Address: "10.0.0.2", Ports: map[uint32]uint32{80: 8080}},
		},
	}
}

func TestConvertGoodService(t *testing.T) {
	for _, mode := range []Mode{ModeServiceEntry, ModeWorkloadEntry} {
		rs, err := Convert(goodService(), Options{Mode: mode})
		if err != nil {
			t.Fatalf("mode %v: %v", mode, err)
		}
		want := 1
		if mode == ModeWorkloadEntry {
			want = 3
		}
		if len(rs) != want {
			t.Fatalf("mode %v: got %d resources, want %d", mode, len(rs), want)
		}
		if rs[0].Kind != KindServiceEntry || rs[0].FullName() != "shop/payments" {
			t.Errorf("mode %v: first resource is %v %s, want ServiceEntry shop/payments", mode, rs[0].Kind, rs[0].FullName())
		}
		for _, r := range rs {
			if err := Validate(r); err != nil {
				t.Errorf("mode %v: Validate(%s %s): %v", mode, r.Kind, r.FullName(), err)
			}
		}
	}
}

// TestConvertErrors feeds services that cannot be served and checks that
// Convert names the service and gives the expected reasons, and no
// resources.
func TestConvertErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*model.Service)
		opts   Options
		want   []string // substrings of the error, all required
	}{
		{"name empty after sanitising", func(s *model.Service) { s.Name = "___" },
			Options{}, []string{`name "___" has nothing left`}},
		{"namespace empty after sanitising", func(s *model.Service) { s.Namespace = "" },
			Options{}, []string{`namespace "" has nothing left`}},
		{"no hosts", func(s *model.Service) { s.Hosts = nil },
			Options{}, []string{"hosts: at least one host is required"}},
		{"hosts that sanitise to nothing", func(s *model.Service) { s.Hosts = []string{"*", "*.*", "..."} },
			Options{}, []string{`hosts: ["*" "*.*" "..."] left no host name after sanitising`, `a bare "*" (every host) cannot be served`}},
		{"IP address as host", func(s *model.Service) { s.Hosts = []string{"10.0.0.1"} },
			Options{}, []string{`hosts[0]: "10.0.0.1" is not a valid host name: the top-level label "1" is all digits`}},
		{"host too long", func(s *model.Service) { s.Hosts = []string{strings.Repeat("abcdefgh.", 30) + "com"} },
			Options{}, []string{"is longer than 255 bytes"}},
		{"no ports", func(s *model.Service) { s.Ports = nil },
			Options{}, []string{"ports: at least one port is required"}},
		{"port name used twice", func(s *model.Service) {
			s.Ports = []model.Port{{Number: 80, Name: "web"}, {Number: 8080, Name: "WEB"}}
		}, Options{}, []string{`ports[1]: name "web" is used twice`}},
		{"port number used twice", func(s *model.Service) {
			s.Ports = []model.Port{{Number: 80, Protocol: "TCP"}, {Number: 80, Protocol: "HTTP"}}
		}, Options{}, []string{"ports[1]: number 80 is used twice"}},
		{"port number 0", func(s *model.Service) { s.Ports = []model.Port{{Number: 0, Protocol: "HTTP"}} },
			Options{}, []string{"ports[0]: number 0 is not in 1..65535"}},
		{"port number too big", func(s *model.Service) { s.Ports = []model.Port{{Number: 70000, Protocol: "HTTP"}} },
			Options{}, []string{"ports[0]: number 70000 is not in 1..65535"}},
		{"unknown protocol", func(s *model.Service) { s.Ports = []model.Port{{Number: 80, Protocol: "SOAP"}} },
			Options{}, []string{`ports[0]: protocol "SOAP" is not one of Istio's`}},
		{"several hosts with a TCP port", func(s *model.Service) {
			s.Hosts = []string{"a.example.com", "b.example.com"}
			s.Ports = []model.Port{{Number: 5432}}
		}, Options{}, []string{`ports[0]: protocol "TCP" cannot serve 2 hosts`}},
		{"CIDR address with DNS", func(s *model.Service) {
			s.Addresses = []string{"10.0.0.0/8"}
			s.Resolution = model.ResolutionDNS
		}, Options{}, []string{"CIDR addresses are allowed only with resolution NONE or STATIC, not DNS"}},
		{"bad address", func(s *model.Service) { s.Addresses = []string{"10.0.0.300"} },
			Options{}, []string{`addresses[0]: "10.0.0.300" is not a valid IP address`}},
		{"bad CIDR", func(s *model.Service) { s.Addresses = []string{"10.0.0.0/33"} },
			Options{}, []string{`addresses[0]: "10.0.0.0/33" is not a valid CIDR block`}},
		{"exportTo everyone and more", func(s *model.Service) { s.ExportTo = []string{"*", "shop"} },
			Options{}, []string{`exportTo: "*" (everyone) cannot be combined`}},
		{"exportTo no one and more", func(s *model.Service) { s.ExportTo = []string{"~", "."} },
			Options{}, []string{`exportTo: "~" (no one) cannot be combined`}},
		{"exportTo bad namespace", func(s *model.Service) { s.ExportTo = []string{"Bad_NS"} },
			Options{}, []string{`exportTo[0]: "Bad_NS" is not ".", "*", "~" or a namespace name`}},
		{"wildcard host resolved by DNS without endpoints", func(s *model.Service) {
			s.Hosts = []string{"*.example.com"}
			s.Resolution = model.ResolutionDNS
			s.Instances = nil
		}, Options{}, []string{"hosts[0]: resolution DNS without endpoints resolves the hosts"}},
		{"unknown resolution", func(s *model.Service) { s.Resolution = 9 },
			Options{}, []string{"resolution: unknown model value 9"}},
		{"unknown mode", func(*model.Service) {}, Options{Mode: 7}, []string{"options: unknown mode 7"}},
		{"bad annotation key", func(s *model.Service) { s.Annotations = map[string]string{"bad key": "x"} },
			Options{}, []string{`metadata: annotation "bad key": key name is not valid`}},
		{"every reason is reported", func(s *model.Service) {
			s.Hosts = nil
			s.Ports = nil
			s.Name = "!"
		}, Options{}, []string{`name "!" has nothing left`, "at least one host", "at least one port"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := goodService()
			tc.mutate(&svc)
			tc.opts.Registry = "consul"
			rs, err := Convert(svc, tc.opts)
			if err == nil {
				t.Fatalf("Convert succeeded, want an error containing %q", tc.want)
			}
			if rs != nil {
				t.Errorf("Convert returned %d resources with its error, want none", len(rs))
			}
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("error is %T, want *convert.Error", err)
			}
			if cerr.Service != svc.Key() || cerr.Registry != "consul" {
				t.Errorf("error names %q from %q, want %q from consul", cerr.Service, cerr.Registry, svc.Key())
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, fmt.Sprintf("service %q from registry \"consul\" cannot be served: ", svc.Key().String())) {
				t.Errorf("error does not start by naming the service: %s", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%s", w, msg)
				}
			}
		})
	}
}

// TestDeterminism converts the same service given in different orders
// (instances, hosts, ports, addresses; maps built in different insertion
// orders) and compares the marshalled bytes of every resource.
func TestDeterminism(t *testing.T) {
	build := func(reverse bool) model.Service {
		svc := model.Service{
			Namespace: "shop",
			Name:      "Orders",
			Hosts:     []string{"orders.service.consul", "Orders.shop.global", "orders.service.consul"},
			Addresses: []string{"240.0.0.2", "240.0.0.1"},
			Ports: []model.Port{
				{Number: 9090, Protocol: model.ProtocolGRPC},
				{Number: 80, Protocol: model.ProtocolHTTP},
				{Number: 443, Protocol: model.ProtocolHTTPS},
			},
			Labels: map[string]string{},
		}
		for i := 0; i < 12; i++ {
			inst := model.Instance{
				ID:      fmt.Sprintf("Orders_%d", i),
				Address: fmt.Sprintf("10.0.0.%d", 12-i),
				Ports:   map[uint32]uint32{},
				Labels:  map[string]string{},
				Weight:  uint32(i),
			}
			switch i {
			case 4:
				inst.ID = "orders-4"
			case 5:
				inst.ID = "ORDERS_4" // sanitises to "orders-4" too: WorkloadEntry names collide
			}
			keys := []string{"version", "zone name", "zone-name", "zone_name!", "app"} // "zone name" repairs to "zone-name", which exists
			vals := []string{"v1", "a", "b", "c", "orders"}
			if reverse {
				for k := len(keys) - 1; k >= 0; k-- {
					inst.Labels[keys[k]] = vals[k]
				}
				inst.Ports[443] = 8443
				inst.Ports[80] = 8080 + uint32(i%2)
			} else {
				for k := range keys {
					inst.Labels[keys[k]] = vals[k]
				}
				inst.Ports[80] = 8080 + uint32(i%2)
				inst.Ports[443] = 8443
			}
			if i == 7 {
				inst.Health = model.Draining
			}
			svc.Instances = append(svc.Instances, inst)
		}
		// Two instances with the same address: only the ID orders them.
		svc.Instances[3].Address = svc.Instances[8].Address
		if reverse {
			for i, j := 0, len(svc.Instances)-1; i < j; i, j = i+1, j-1 {
				svc.Instances[i], svc.Instances[j] = svc.Instances[j], svc.Instances[i]
			}
			for i, j := 0, len(svc.Ports)-1; i < j; i, j = i+1, j-1 {
				svc.Ports[i], svc.Ports[j] = svc.Ports[j], svc.Ports[i]
			}
			svc.Hosts[0], svc.Hosts[1] = svc.Hosts[1], svc.Hosts[0]
			svc.Addresses[0], svc.Addresses[1] = svc.Addresses[1], svc.Addresses[0]
		}
		return svc
	}
	for _, mode := range []Mode{ModeServiceEntry, ModeWorkloadEntry} {
		t.Run(mode.String(), func(t *testing.T) {
			a, err := Convert(build(false), Options{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			b, err := Convert(build(true), Options{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			if len(a) != len(b) {
				t.Fatalf("got %d and %d resources", len(a), len(b))
			}
			if mode == ModeWorkloadEntry && len(a) != 12 { // SE + 11 served
				t.Fatalf("got %d resources, want 12", len(a))
			}
			for i := range a {
				if a[i].Kind != b[i].Kind || a[i].FullName() != b[i].FullName() ||
					fmt.Sprint(a[i].Labels) != fmt.Sprint(b[i].Labels) ||
					fmt.Sprint(a[i].Annotations) != fmt.Sprint(b[i].Annotations) {
					t.Errorf("resource %d metadata differs: %+v vs %+v", i, a[i], b[i])
				}
				ba, bb := marshal(a[i].Spec), marshal(b[i].Spec)
				if len(ba) == 0 || !bytes.Equal(ba, bb) {
					t.Errorf("resource %d (%s) marshals differently:\n%v\n%v", i, a[i].FullName(), a[i].Spec, b[i].Spec)
				}
			}
		})
	}
}

// TestConvertLeavesInputAlone checks that Convert never writes to the service it converts:
// the model is the Sink's and stays served (the pipeline compares the next report with it).
// Resources may share its maps (model.Labels returns labels that need no repair as they
// are), so a label Convert adds must go to a copy: a service without endpoints gets one.
func TestConvertLeavesInputAlone(t *testing.T) {
	for _, mode := range []Mode{ModeServiceEntry, ModeWorkloadEntry} {
		for _, instances := range []int{2, 0} {
			svc := goodService()
			svc.Instances = svc.Instances[:instances]
			svc.Annotations = map[string]string{"a": "1"}
			svc.Labels = map[string]string{"app": "payments"}
			for i := range svc.Instances {
				svc.Instances[i].Labels = map[string]string{"version": "v1"}
			}
			want := svc.Clone()
			rs, err := Convert(svc, Options{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			if !model.Equal(svc, want) || !maps.Equal(svc.Labels, want.Labels) {
				t.Errorf("mode %v, %d instances: Convert changed its input: %+v, was %+v", mode, instances, svc, want)
			}
			if mode == ModeServiceEntry && instances == 0 && rs[0].Labels[LabelNoEndpoints] != "none" {
				t.Errorf("mode %v: no %s label on a service without endpoints: %v", mode, LabelNoEndpoints, rs[0].Labels)
			}
		}
	}
}

func TestPanicThreshold(t *testing.T) {
	svc := model.Service{
		Namespace: "ns", Name: "svc", Hosts: []string{"svc.example"},
		Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}},
		Instances: []model.Instance{
			{ID: "a", Address: "10.0.0.1"},
			{ID: "b", Address: "10.0.0.2", Health: model.Unhealthy},
			{ID: "c", Address: "10.0.0.3", Health: model.Unhealthy},
			{ID: "d", Address: "10.0.0.4", Health: model.Draining},
		},
	}
	// 1 of 4 healthy = 25%.
	cases := []struct {
		threshold int
		want      []string
	}{
		{0, []string{"10.0.0.1"}},
		{-5, []string{"10.0.0.1"}},
		{25, []string{"10.0.0.1"}}, // 25% is not fewer than 25%
		{26, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
		{100, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
	}
	for _, tc := range cases {
		rs, err := Convert(svc, Options{PanicThresholdPercent: tc.threshold})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ep := range rs[0].Spec.(*networking.ServiceEntry).Endpoints {
			got = append(got, ep.Address)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("threshold %d: endpoints %v, want %v", tc.threshold, got, tc.want)
		}
	}

	// Nothing healthy and nothing else but draining: nothing served, and
	// the empty ServiceEntry is still valid.
	svc.Instances = []model.Instance{{ID: "d", Address: "10.0.0.4", Health: model.Draining}}
	rs, err := Convert(svc, Options{PanicThresholdPercent: 50})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rs[0].Spec.(*networking.ServiceEntry).Endpoints); n != 0 {
		t.Errorf("draining-only service has %d endpoints, want 0", n)
	}
}

func TestWorkloadNames(t *testing.T) {
	names := func(ids ...string) []string {
		ws := make([]served, len(ids))
		for i, id := range ids {
			ws[i] = served{inst: &model.Instance{ID: id}}
		}
		return workloadNames("svc", ws)
	}
	got := names("a", "B", "c_d", "c-d", "", "!!!")
	if got[0] != "svc-a" || got[1] != "svc-b" {
		t.Errorf("plain IDs: %v", got[:2])
	}
	if got[2] == got[3] || !strings.HasPrefix(got[2], "svc-c-d-") || !strings.HasPrefix(got[3], "svc-c-d-") {
		t.Errorf("colliding IDs must get distinct hashed names: %q %q", got[2], got[3])
	}
	if got[4] == got[5] || len(got[4]) != len("svc-")+len(model.ShortHash("")) {
		t.Errorf("IDs that sanitise to nothing: %q %q", got[4], got[5])
	}
	// Order does not matter.
	again := names("c-d", "c_d")
	if again[0] != got[3] || again[1] != got[2] {
		t.Errorf("names depend on order: %v vs %v", again, got[2:4])
	}
	for _, n := range append(got, names(strings.Repeat("x.", 200))...) {
		if !model.IsDNSSubdomain(n) {
			t.Errorf("%q is not a DNS-1123 subdomain", n)
		}
	}
}

// BenchmarkConvert converts a service with 10 instances, 2 ports and a few
// labels per instance.
func BenchmarkConvert(b *testing.B) {
	svc := model.Service{
		Namespace: "shop", Name: "payments",
		Hosts: []string{"payments.service.consul"},
		Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}, {Number: 9090, Protocol: model.ProtocolGRPC}},
	}
	for i := 0; i < 10; i++ {
		svc.Instances = append(svc.Instances, model.Instance{
			ID:       fmt.Sprintf("payments-%d", i),
			Address:  fmt.Sprintf("10.0.0.%d", i+1),
			Ports:    map[uint32]uint32{80: 8080},
			Labels:   map[string]string{"version": "v1", "zone": "eu-west-1a", "team": "payments"},
			Locality: "eu-west/eu-west-1a",
		})
	}
	for _, mode := range []Mode{ModeServiceEntry, ModeWorkloadEntry} {
		b.Run(mode.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Convert(svc, Options{Mode: mode}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A health flip must never move a service between STATIC and DNS: istiod
// can apply that only with a full push.
func TestResolutionDoesNotFollowHealth(t *testing.T) {
	svc := model.Service{
		Namespace: "ns", Name: "mixed", Hosts: []string{"mixed.ns.internal"},
		Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}},
		Instances: []model.Instance{
			{ID: "ip", Address: "10.0.0.1"},
			{ID: "dns", Address: "vm1.example.internal", Health: model.Unhealthy},
		},
	}
	resolutionOf := func(s model.Service) networking.ServiceEntry_Resolution {
		t.Helper()
		res, err := Convert(s, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Spec.(*networking.ServiceEntry).Resolution
	}
	before := resolutionOf(svc)
	svc.Instances[1].Health = model.Healthy
	if after := resolutionOf(svc); before != after || after != networking.ServiceEntry_DNS {
		t.Fatalf("resolution %v with the host-name instance unhealthy, %v with it healthy; want DNS both times", before, after)
	}
}

// TestNoEndpointsLabel: a STATIC ServiceEntry served inline with no endpoint carries
// LabelNoEndpoints (so that istiod clears the last endpoint, see convert), and only then: not
// with an endpoint, not for DNS resolution (whose endpoint changes are full pushes already),
// not in WorkloadEntry mode (a WorkloadEntry's deletion clears its endpoint).
func TestNoEndpointsLabel(t *testing.T) {
	unhealthy := func(svc model.Service) model.Service {
		for i := range svc.Instances {
			svc.Instances[i].Health = model.Unhealthy
		}
		return svc
	}
	none := goodService()
	none.Instances = nil
	dns := goodService()
	dns.Instances = []model.Instance{{ID: "d1", Address: "payments.example.com", Health: model.Unhealthy}}
	labelled := goodService()
	labelled.Labels = map[string]string{"team": "pay"}
	for _, tc := range []struct {
		name string
		svc  model.Service
		mode Mode
		omit bool
		want bool
	}{
		{"endpoints", goodService(), ModeServiceEntry, false, false},
		{"every instance unhealthy", unhealthy(goodService()), ModeServiceEntry, false, true},
		{"no instance", none, ModeServiceEntry, false, true},
		{"own labels kept", unhealthy(labelled), ModeServiceEntry, false, true},
		{"DNS", dns, ModeServiceEntry, false, false},
		{"WorkloadEntry mode", unhealthy(goodService()), ModeWorkloadEntry, false, false},
		{"omitted for istiod 1.30+", none, ModeServiceEntry, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Convert(tc.svc, Options{Mode: tc.mode, OmitNoEndpointsLabel: tc.omit})
			if err != nil {
				t.Fatal(err)
			}
			se := rs[0]
			if got := se.Labels[LabelNoEndpoints] == "none"; got != tc.want {
				t.Fatalf("labels %v: %s=none is %v, want %v", se.Labels, LabelNoEndpoints, got, tc.want)
			}
			for k, v := range tc.svc.Labels {
				if se.Labels[k] != v {
					t.Errorf("label %s=%s lost: %v", k, v, se.Labels)
				}
			}
		})
	}
}

// TestConvertDropsBadInstances feeds services with one instance that fails
// istiod's rules on its own and checks that Convert serves the service
// without that instance, naming it and the reason in Dropped (issue 27: one
// bad instance must not freeze its service).
func TestConvertDropsBadInstances(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*model.Service)
		opts   Options
		drop   string // the instance dropped
		want   string // substring of its reason
	}{
		{"instance target port 0", func(s *model.Service) { s.Instances[0].Ports = map[uint32]uint32{80: 0} },
			Options{}, "p1", `port "http-80": target port 0 is not in 1..65535`},
		{"instance target port too big", func(s *model.Service) { s.Instances[0].Ports = map[uint32]uint32{80: 65536} },
			Options{}, "p1", `port "http-80": target port 65536 is not in 1..65535`},
		{"host name under STATIC", func(s *model.Service) {
			s.Resolution = model.ResolutionStatic
			s.Instances[0].Address = "db.example.com"
		}, Options{}, "p1", `address "db.example.com" is not an IP address or unix:// path (resolution STATIC)`},
		{"bad address under DNS", func(s *model.Service) { s.Instances[1].Address = "not a host!" },
			Options{}, "p2", `address "not a host!" is not an IP address or a valid host name (resolution DNS)`},
		{"host name with an empty label", func(s *model.Service) { s.Instances[1].Address = "a..b" },
			Options{}, "p2", `address "a..b" is not an IP address or a valid host name`},
		{"empty address without network", func(s *model.Service) { s.Instances[0].Address = "" },
			Options{}, "p1", "address is required"},
		{"unix socket with two service ports", func(s *model.Service) {
			s.Ports = append(s.Ports, model.Port{Number: 81, Protocol: "HTTP"})
			s.Instances[0].Address = "unix:///var/run/app.sock"
		}, Options{}, "p1", "needs exactly 1 service port, not 2"},
		{"locality not UTF-8", func(s *model.Service) { s.Instances[0].Locality = "eu\xff" },
			Options{}, "p1", `locality "eu\xff" is not valid UTF-8`},
		{"locality too long", func(s *model.Service) { s.Instances[0].Locality = strings.Repeat("z", 3000) },
			Options{}, "p1", "locality: longer than 2048 bytes"},
		{"too many labels", func(s *model.Service) {
			s.Instances[1].Labels = map[string]string{}
			for i := range 257 {
				s.Instances[1].Labels[fmt.Sprintf("k%d", i)] = "v"
			}
		}, Options{}, "p2", "labels: 257 labels, at most 256 are allowed"},
		{"a label too many for the WorkloadEntry", func(s *model.Service) {
			s.Instances[1].Labels = map[string]string{}
			for i := range 256 {
				s.Instances[1].Labels[fmt.Sprintf("k%d", i)] = "v"
			}
		}, Options{Mode: ModeWorkloadEntry}, "p2", "its WorkloadEntry needs one more"},
		{"duplicate instance IDs in WorkloadEntry mode", func(s *model.Service) { s.Instances[1].ID = "p1" },
			Options{Mode: ModeWorkloadEntry}, "p1", `also becomes WorkloadEntry "payments-p1-`},
		{"host name under STATIC in WorkloadEntry mode", func(s *model.Service) {
			s.Resolution = model.ResolutionStatic
			s.Instances[1].Address = "p2.example.com"
		}, Options{Mode: ModeWorkloadEntry}, "p2", `address "p2.example.com" is not an IP address or unix:// path`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := goodService()
			tc.mutate(&svc)
			c, err := ConvertService(svc, tc.opts)
			if err != nil {
				t.Fatalf("ConvertService: %v; want the service served without instance %q", err, tc.drop)
			}
			if len(c.Dropped) != 1 || c.Dropped[0].ID != tc.drop || !strings.Contains(c.Dropped[0].Reason.Error(), tc.want) {
				t.Fatalf("dropped %+v, want instance %q only, for %q", c.Dropped, tc.drop, tc.want)
			}
			served := 0
			for _, r := range c.Resources {
				if err := Validate(r); err != nil {
					t.Errorf("Validate(%s %s): %v", r.Kind, r.FullName(), err)
				}
				switch spec := r.Spec.(type) {
				case *networking.ServiceEntry:
					served += len(spec.Endpoints)
				case *networking.WorkloadEntry:
					served++
				}
			}
			if served != 1 {
				t.Errorf("%d instances served, want the other one", served)
			}
		})
	}
}

// TestConvertRescalesWeights checks that weights adding up past Envoy's
// limit in a locality are scaled down in proportion, not refused.
func TestConvertRescalesWeights(t *testing.T) {
	for _, mode := range []Mode{ModeServiceEntry, ModeWorkloadEntry} {
		svc := goodService()
		svc.Instances[0].Weight = math.MaxUint32
		svc.Instances[1].Weight = math.MaxUint32 / 3
		svc.Instances = append(svc.Instances, model.Instance{ID: "p3", Address: "10.0.0.3"}) // weight 0: counts as 1
		c, err := ConvertService(svc, Options{Mode: mode})
		if err != nil {
			t.Fatalf("mode %v: %v", mode, err)
		}
		if !slices.Equal(c.Rescaled, []string{""}) {
			t.Errorf("mode %v: rescaled %q, want the default locality", mode, c.Rescaled)
		}
		weights := map[string]uint64{}
		var sum uint64
		for _, r := range c.Resources {
			if err := Validate(r); err != nil {
				t.Errorf("mode %v: Validate(%s): %v", mode, r.FullName(), err)
			}
			collect := func(we *networking.WorkloadEntry) { weights[we.Address] = uint64(we.Weight); sum += uint64(we.Weight) }
			switch spec := r.Spec.(type) {
			case *networking.ServiceEntry:
				for _, ep := range spec.Endpoints {
					collect(ep)
				}
			case *networking.WorkloadEntry:
				collect(spec)
			}
		}
		if sum > math.MaxUint32 {
			t.Errorf("mode %v: weights add up to %d after rescaling", mode, sum)
		}
		if ratio := float64(weights["10.0.0.1"]) / float64(weights["10.0.0.2"]); ratio < 2.99 || ratio > 3.01 {
			t.Errorf("mode %v: weights %v: the 3:1 ratio became %.3f", mode, weights, ratio)
		}
		if weights["10.0.0.3"] != 1 {
			t.Errorf("mode %v: the instance of weight 0 got %d, want 1", mode, weights["10.0.0.3"])
		}
	}
}
