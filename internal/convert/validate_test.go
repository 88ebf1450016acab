package convert

import (
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
)

// validSE is a valid ServiceEntry that the cases below change one field at
// a time.
func validSE() *networking.ServiceEntry {
	return &networking.ServiceEntry{
		Hosts:      []string{"payments.example.com"},
		Ports:      []*networking.ServicePort{{Number: 80, Name: "http-80", Protocol: "HTTP"}},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: networking.ServiceEntry_STATIC,
		Endpoints: []*networking.WorkloadEntry{
			{Address: "10.0.0.1", Ports: map[string]uint32{"http-80": 8080}, Labels: map[string]string{"version": "v1"}},
		},
	}
}

func TestValidateServiceEntry(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*networking.ServiceEntry)
		want   string // "" = valid; otherwise a substring of the error
	}{
		{"valid", func(*networking.ServiceEntry) {}, ""},
		{"valid wildcard host under STATIC", func(se *networking.ServiceEntry) { se.Hosts = []string{"*.example.com"} }, ""},
		{"valid trailing dot", func(se *networking.ServiceEntry) { se.Hosts = []string{"example.com."} }, ""},
		{"valid short name", func(se *networking.ServiceEntry) { se.Hosts = []string{"payments"} }, ""},
		{"valid unix endpoint", func(se *networking.ServiceEntry) {
			se.Endpoints = []*networking.WorkloadEntry{{Address: "unix:///var/run/app.sock"}}
		}, ""},
		{"valid empty address with network", func(se *networking.ServiceEntry) {
			se.Endpoints = []*networking.WorkloadEntry{{Network: "net-b"}}
		}, ""},
		{"valid external DNS without endpoints", func(se *networking.ServiceEntry) {
			se.Location = networking.ServiceEntry_MESH_EXTERNAL
			se.Resolution = networking.ServiceEntry_DNS
			se.Endpoints = nil
		}, ""},
		{"valid selector", func(se *networking.ServiceEntry) {
			se.Endpoints = nil
			se.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{"app": "payments"}}
		}, ""},
		{"valid several HTTP/TLS hosts", func(se *networking.ServiceEntry) {
			se.Hosts = []string{"a.example.com", "b.example.com"}
			se.Ports = append(se.Ports, &networking.ServicePort{Number: 443, Name: "tls", Protocol: "tls"})
		}, ""},
		{"valid CIDR with NONE", func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_NONE
			se.Addresses = []string{"10.0.0.0/8", "2001:db8::/32"}
			se.Endpoints = nil
		}, ""},
		{"valid exportTo", func(se *networking.ServiceEntry) { se.ExportTo = []string{".", "istio-system"} }, ""},
		{"valid DNS endpoint host name", func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_DNS
			se.Endpoints[0].Address = "db-1.example.com"
		}, ""},

		{"no hosts", func(se *networking.ServiceEntry) { se.Hosts = nil }, "hosts: at least one host is required"},
		{"full wildcard", func(se *networking.ServiceEntry) { se.Hosts = []string{"*"} }, `hosts[0]: "*": the full wildcard is not allowed`},
		{"colon in host", func(se *networking.ServiceEntry) { se.Hosts = []string{"providers:com.foo.Bar:1.0:"} },
			`hosts[0]: "providers:com.foo.Bar:1.0:" is not a valid host name: label "providers:com" is not a DNS-1123 label`},
		{"partial wildcard", func(se *networking.ServiceEntry) { se.Hosts = []string{"*foo.example.com"} },
			`hosts[0]: partial wildcard "*foo.example.com" is not allowed`},
		{"wildcard not first", func(se *networking.ServiceEntry) { se.Hosts = []string{"foo.*.example.com"} },
			`label "*" is not a DNS-1123 label`},
		{"empty label", func(se *networking.ServiceEntry) { se.Hosts = []string{"a..b"} }, `label "" is not a DNS-1123 label`},
		{"label too long", func(se *networking.ServiceEntry) { se.Hosts = []string{strings.Repeat("a", 64) + ".com"} }, "is not a DNS-1123 label"},
		{"too many hosts", func(se *networking.ServiceEntry) {
			se.Hosts = nil
			for i := 0; i < 257; i++ {
				se.Hosts = append(se.Hosts, "h"+strings.Repeat("x", i%50)+".example.com")
			}
			se.Resolution = networking.ServiceEntry_NONE
			se.Endpoints = nil
		}, "hosts: 257 hosts, at most 256 are allowed"},
		{"bad IP", func(se *networking.ServiceEntry) { se.Addresses = []string{"1.2.3"} }, `addresses[0]: "1.2.3" is not a valid IP address`},
		{"bad CIDR", func(se *networking.ServiceEntry) { se.Addresses = []string{"1.2.3.4/40"} }, `addresses[0]: "1.2.3.4/40" is not a valid CIDR block`},
		{"CIDR with DNS", func(se *networking.ServiceEntry) {
			se.Addresses = []string{"10.0.0.0/8"}
			se.Resolution = networking.ServiceEntry_DNS
		}, "CIDR addresses are allowed only with resolution NONE or STATIC"},
		{"no ports", func(se *networking.ServiceEntry) { se.Ports = nil; se.Endpoints[0].Ports = nil }, "ports: at least one port is required"},
		{"null port", func(se *networking.ServiceEntry) { se.Ports = append(se.Ports, nil) }, "ports[1]: is null"},
		{"port name twice", func(se *networking.ServiceEntry) {
			se.Ports = append(se.Ports, &networking.ServicePort{Number: 81, Name: "http-80", Protocol: "HTTP"})
		}, `ports[1]: name "http-80" is used twice`},
		{"port number twice", func(se *networking.ServiceEntry) {
			se.Ports = append(se.Ports, &networking.ServicePort{Number: 80, Name: "other", Protocol: "HTTP"})
		}, "ports[1]: number 80 is used twice"},
		{"port name invalid", func(se *networking.ServiceEntry) { se.Ports[0].Name = "http_80"; se.Endpoints[0].Ports = nil },
			`ports[0]: name "http_80" is not a valid port name`},
		{"port name empty", func(se *networking.ServiceEntry) { se.Ports[0].Name = ""; se.Endpoints[0].Ports = nil },
			`ports[0]: name "" is not a valid port name`},
		{"unknown protocol", func(se *networking.ServiceEntry) { se.Ports[0].Protocol = "FTP" }, `ports[0]: protocol "FTP" is not one of Istio's`},
		{"port 0", func(se *networking.ServiceEntry) { se.Ports[0].Number = 0 }, "ports[0]: number 0 is not in 1..65535"},
		{"port 65536", func(se *networking.ServiceEntry) { se.Ports[0].Number = 65536 }, "ports[0]: number 65536 is not in 1..65535"},
		{"target port", func(se *networking.ServiceEntry) { se.Ports[0].TargetPort = 70000 }, "ports[0]: targetPort 70000 is not in 1..65535"},
		{"endpoints and selector", func(se *networking.ServiceEntry) {
			se.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{"app": "x"}}
		}, "endpoints and workloadSelector are both set"},
		{"empty non-nil endpoints and selector", func(se *networking.ServiceEntry) {
			se.Endpoints = []*networking.WorkloadEntry{}
			se.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{"app": "x"}}
		}, "endpoints and workloadSelector are both set"},
		{"selector without labels", func(se *networking.ServiceEntry) {
			se.Endpoints = nil
			se.WorkloadSelector = &networking.WorkloadSelector{}
		}, "workloadSelector: no labels"},
		{"selector wildcard", func(se *networking.ServiceEntry) {
			se.Endpoints = nil
			se.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{"app": "*"}}
		}, `workloadSelector: label "app"="*": wildcards are not supported`},
		{"NONE with endpoints", func(se *networking.ServiceEntry) { se.Resolution = networking.ServiceEntry_NONE },
			"endpoints: resolution NONE passes traffic to the original destination, so no endpoints may be given (got 1)"},
		{"STATIC with host name endpoint", func(se *networking.ServiceEntry) { se.Endpoints[0].Address = "db.example.com" },
			`endpoints[0] (address "db.example.com"): address "db.example.com" is not an IP address or unix:// path (resolution STATIC)`},
		{"null endpoint", func(se *networking.ServiceEntry) { se.Endpoints = append(se.Endpoints, nil) }, "endpoints[1]: is null"},
		{"endpoint port not in service", func(se *networking.ServiceEntry) { se.Endpoints[0].Ports = map[string]uint32{"grpc": 9090} },
			`endpoints[0] (address "10.0.0.1"): port "grpc" is not a port of the service entry`},
		{"endpoint port 0", func(se *networking.ServiceEntry) { se.Endpoints[0].Ports["http-80"] = 0 },
			`port "http-80": target port 0 is not in 1..65535`},
		{"endpoint label key", func(se *networking.ServiceEntry) { se.Endpoints[0].Labels = map[string]string{"bad key": "v"} },
			`label "bad key": key name is not valid`},
		{"endpoint label prefix", func(se *networking.ServiceEntry) { se.Endpoints[0].Labels = map[string]string{"a_b.com/k": "v"} },
			`label "a_b.com/k": key prefix is not a DNS subdomain`},
		{"endpoint label value", func(se *networking.ServiceEntry) { se.Endpoints[0].Labels = map[string]string{"k": "-v"} },
			`label "k": value "-v" is not valid`},
		{"endpoint label value too long", func(se *networking.ServiceEntry) {
			se.Endpoints[0].Labels = map[string]string{"k": strings.Repeat("v", 64)}
		}, "is longer than 63 bytes"},
		{"unix endpoint with ports", func(se *networking.ServiceEntry) {
			se.Endpoints = []*networking.WorkloadEntry{{Address: "unix:///run/a.sock", Ports: map[string]uint32{"http-80": 1}}}
		}, "is a unix socket, which must not have ports"},
		{"unix endpoint relative", func(se *networking.ServiceEntry) {
			se.Endpoints = []*networking.WorkloadEntry{{Address: "unix://run/a.sock"}}
		}, `"run/a.sock" is not an absolute path to a file`},
		{"unix endpoint two service ports", func(se *networking.ServiceEntry) {
			se.Ports = append(se.Ports, &networking.ServicePort{Number: 81, Name: "http-81", Protocol: "HTTP"})
			se.Endpoints = []*networking.WorkloadEntry{{Address: "unix:///run/a.sock"}}
		}, "needs exactly 1 service port, not 2"},
		{"empty address no network", func(se *networking.ServiceEntry) { se.Endpoints[0].Address = "" }, "address is required"},
		{"DNS without endpoints and wildcard", func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_DNS
			se.Hosts = []string{"*.example.com"}
			se.Endpoints = nil
		}, "hosts[0]: resolution DNS without endpoints resolves the hosts, so they must be plain host names"},
		{"DNS endpoint bad", func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_DNS
			se.Endpoints[0].Address = "bad_host"
		}, `address "bad_host" is not an IP address or a valid host name (resolution DNS)`},
		{"DNS_ROUND_ROBIN two endpoints", func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_DNS_ROUND_ROBIN
			se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{Address: "10.0.0.2"})
		}, "endpoints: resolution DNS_ROUND_ROBIN allows at most 1 endpoint, got 2"},
		{"DYNAMIC_DNS rules", func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_DYNAMIC_DNS
		}, `hosts[0]: "payments.example.com" must be a wildcard for resolution DYNAMIC_DNS`},
		{"DYNAMIC_DNS internal", func(se *networking.ServiceEntry) {
			se.Resolution = networking.ServiceEntry_DYNAMIC_DNS
			se.Hosts = []string{"*.example.com"}
			se.Endpoints = nil
		}, "location: must be MESH_EXTERNAL for resolution DYNAMIC_DNS"},
		{"unknown resolution", func(se *networking.ServiceEntry) { se.Resolution = 42 }, "resolution: unsupported value 42"},
		{"several hosts TCP", func(se *networking.ServiceEntry) {
			se.Hosts = []string{"a.example.com", "b.example.com"}
			se.Ports[0].Protocol = ""
		}, "ports[0]: protocol \"\" cannot serve 2 hosts"},
		{"exportTo duplicate", func(se *networking.ServiceEntry) { se.ExportTo = []string{"a", "a"} }, `exportTo[1]: "a" is listed twice`},
		{"exportTo invalid", func(se *networking.ServiceEntry) { se.ExportTo = []string{"a/b"} }, `exportTo[0]: "a/b" is not`},
		{"exportTo * and more", func(se *networking.ServiceEntry) { se.ExportTo = []string{"*", "."} }, `"*" (everyone) cannot be combined`},
		{"exportTo ~ and more", func(se *networking.ServiceEntry) { se.ExportTo = []string{"~", "a"} }, `"~" (no one) cannot be combined`},
		{"weights", func(se *networking.ServiceEntry) {
			se.Endpoints[0].Weight = math.MaxUint32
			se.Endpoints = append(se.Endpoints, &networking.WorkloadEntry{Address: "10.0.0.2", Locality: "r/z"},
				&networking.WorkloadEntry{Address: "10.0.0.3"})
		}, `weights in locality "" add up to 4294967296`},
		{"subject alt name not UTF-8", func(se *networking.ServiceEntry) { se.SubjectAltNames = []string{"\xff"} }, "subjectAltNames[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			se := validSE()
			tc.mutate(se)
			err := ValidateServiceEntry(se)
			check(t, err, tc.want)
		})
	}
	if err := ValidateServiceEntry(nil); err == nil {
		t.Error("nil ServiceEntry is valid")
	}
}

func TestValidateWorkloadEntry(t *testing.T) {
	cases := []struct {
		name string
		we   *networking.WorkloadEntry
		want string
	}{
		{"IP", &networking.WorkloadEntry{Address: "10.0.0.1", Ports: map[string]uint32{"http": 8080}, Labels: map[string]string{"app": "x"}}, ""},
		{"IPv6", &networking.WorkloadEntry{Address: "2001:db8::1"}, ""},
		{"host name", &networking.WorkloadEntry{Address: "vm-1.example.com"}, ""},
		{"unix", &networking.WorkloadEntry{Address: "unix:///var/run/a.sock"}, ""},
		{"abstract unix", &networking.WorkloadEntry{Address: "unix://@abstract"}, ""},
		{"network only", &networking.WorkloadEntry{Network: "net-b"}, ""},
		{"nil", nil, "workload entry is nil"},
		{"no address", &networking.WorkloadEntry{}, "address is required"},
		{"bad host name", &networking.WorkloadEntry{Address: "vm_1.example.com"}, `address "vm_1.example.com" is not an IP address, a valid host name or a unix:// path`},
		{"host with port", &networking.WorkloadEntry{Address: "10.0.0.1:80"}, `address "10.0.0.1:80" is not`},
		{"unix with ports", &networking.WorkloadEntry{Address: "unix:///a.sock", Ports: map[string]uint32{"http": 80}}, "must not have ports"},
		{"unix dir", &networking.WorkloadEntry{Address: "unix:///var/run/"}, "is not an absolute path to a file"},
		{"unix empty", &networking.WorkloadEntry{Address: "unix://"}, "unix socket path is empty"},
		{"port name", &networking.WorkloadEntry{Address: "10.0.0.1", Ports: map[string]uint32{"HTTP_1": 80}}, `port "HTTP_1": the name is not a valid port name`},
		{"port number", &networking.WorkloadEntry{Address: "10.0.0.1", Ports: map[string]uint32{"http": 0}}, `port "http": target port 0 is not in 1..65535`},
		{"label", &networking.WorkloadEntry{Address: "10.0.0.1", Labels: map[string]string{"k": "a b"}}, `label "k": value "a b" is not valid`},
		{"label key too long", &networking.WorkloadEntry{Address: "10.0.0.1", Labels: map[string]string{strings.Repeat("k", 64): ""}}, "key name is longer than 63 bytes"},
		{"address too long", &networking.WorkloadEntry{Address: strings.Repeat("a.", 128) + "com"}, "is longer than 256 bytes"},
		{"service account too long", &networking.WorkloadEntry{Address: "10.0.0.1", ServiceAccount: strings.Repeat("s", 254)}, "longer than 253 bytes"},
		{"network not UTF-8", &networking.WorkloadEntry{Address: "10.0.0.1", Network: "\xff"}, `network "\xff" is not valid UTF-8`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check(t, ValidateWorkloadEntry(tc.we), tc.want)
		})
	}
}

func TestValidateResource(t *testing.T) {
	good := Resource{Kind: KindServiceEntry, Namespace: "shop", Name: "payments", Spec: validSE()}
	cases := []struct {
		name   string
		mutate func(*Resource)
		want   string
	}{
		{"valid", func(*Resource) {}, ""},
		{"valid WorkloadEntry", func(r *Resource) {
			r.Kind, r.Name, r.Spec = KindWorkloadEntry, "payments-10.0.0.1", &networking.WorkloadEntry{Address: "10.0.0.1"}
		}, ""},
		{"namespace upper case", func(r *Resource) { r.Namespace = "Shop" }, `namespace "Shop" is not a DNS-1123 label`},
		{"name empty", func(r *Resource) { r.Name = "" }, `name "" is not a DNS-1123 subdomain`},
		{"name with underscore", func(r *Resource) { r.Name = "a_b" }, `name "a_b" is not a DNS-1123 subdomain`},
		{"label", func(r *Resource) { r.Labels = map[string]string{"a": "b c"} }, `metadata: label "a": value "b c" is not valid`},
		{"annotation key", func(r *Resource) { r.Annotations = map[string]string{"-x": ""} }, `metadata: annotation "-x"`},
		{"spec mismatch", func(r *Resource) { r.Kind = KindWorkloadEntry }, "spec is *v1alpha3.ServiceEntry, not a WorkloadEntry"},
		{"spec nil", func(r *Resource) { r.Spec = nil }, "spec is <nil>, not a ServiceEntry"},
		{"unknown kind", func(r *Resource) { r.Kind = 5 }, "unknown kind 5"},
		{"spec invalid", func(r *Resource) { r.Spec.(*networking.ServiceEntry).Hosts = nil }, "at least one host"},
		{"exportTo . and own namespace", func(r *Resource) { r.Spec.(*networking.ServiceEntry).ExportTo = []string{"shop", "."} },
			`exportTo[1]: "." is listed twice ("." stands for the resource's namespace "shop")`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			r.Spec = proto.Clone(good.Spec)
			tc.mutate(&r)
			check(t, Validate(r), tc.want)
		})
	}
}

// check fails unless err matches want: nil for "", else containing want.
func check(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Errorf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("error does not contain %q:\n%v", want, err)
	}
}

// TestValidationMessagesAreStable checks that a resource with several bad
// map entries gives the same message every time (maps are checked in
// sorted order).
func TestValidationMessagesAreStable(t *testing.T) {
	se := validSE()
	se.Endpoints[0].Labels = map[string]string{}
	se.Endpoints[0].Ports = map[string]uint32{}
	for _, k := range []string{"a b", "c d", "e f", "g h", "i j"} {
		se.Endpoints[0].Labels[k] = k
		se.Endpoints[0].Ports[k] = 0
	}
	first := ValidateServiceEntry(se).Error()
	for i := 0; i < 20; i++ {
		if again := ValidateServiceEntry(se).Error(); again != first {
			t.Fatalf("message changed:\n%s\n---\n%s", first, again)
		}
	}
}
