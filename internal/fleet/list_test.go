package fleet

import (
	"slices"
	"strings"
	"testing"
)

var testKinds = []string{"consul", "eureka", "file", "nacos", "zookeeper"}

func TestParseList(t *testing.T) {
	l, err := ParseList([]byte(`
registries:
- name: dc1
  kind: consul
  settings:
    consul-address: 127.0.0.1:8500
    consul-datacenters: [dc1, dc2]
  filters:
    exclude-services: [vault, "nomad*"]
    exclude-labels: [canary, env=dev]
    include-instance-cidrs: [10.0.0.0/8]
- name: legacy
  kind: eureka
hosts:
- host: orders.mesh
  merge: true
- host: "*.mesh"
  prefer: [dc1, legacy]
- host: old.mesh
  reject: true
`), testKinds)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.Names(), []string{"dc1", "legacy"}) || l.Entry("dc1").Settings["consul-address"] != "127.0.0.1:8500" {
		t.Fatalf("registries %+v", l.Registries)
	}
	if f := l.Entry("dc1").Filters; !slices.Equal(f.ExcludeServices, []string{"vault", "nomad*"}) || !slices.Equal(f.IncludeInstanceCIDRs, []string{"10.0.0.0/8"}) ||
		!slices.Equal(f.ExcludeLabels, []string{"canary", "env=dev"}) || !l.Entry("legacy").Filters.IsZero() {
		t.Fatalf("filters %+v, %+v", f, l.Entry("legacy").Filters)
	}
	want := []HostRule{{Host: "orders.mesh", Action: Merge}, {Host: "*.mesh", Action: Prefer, Prefer: []string{"dc1", "legacy"}}, {Host: "old.mesh", Action: Reject}}
	if !slices.EqualFunc(l.Rules, want, func(a, b HostRule) bool {
		return a.Host == b.Host && a.Action == b.Action && slices.Equal(a.Prefer, b.Prefer)
	}) {
		t.Fatalf("rules %+v, want %+v", l.Rules, want)
	}
}

func TestParseListRefusesWithReasons(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{``, "the list is empty"},
		{`registries: []`, "none listed"},
		{`registries: [{name: a, kind: consul, setings: {}}]`, "field setings not found"},
		{`registries: [{name: A_b, kind: consul}]`, `name "A_b": want lower-case letters`},
		{`registries: [{name: fleet, kind: consul}]`, "reserved"},
		{`registries: [{name: a, kind: consul}, {name: a, kind: file}]`, `name "a" is listed twice`},
		{`registries: [{name: a, kind: etcd}]`, `kind "etcd": want one of consul, eureka`},
		{"registries: [{name: a, kind: consul}]\nhosts: [{host: x.mesh}]", "want exactly one of merge"},
		{"registries: [{name: a, kind: consul}]\nhosts: [{host: x.mesh, merge: true, reject: true}]", "want exactly one of merge"},
		{"registries: [{name: a, kind: consul}]\nhosts: [{host: x.mesh, prefer: [b]}]", `registry "b", which the list does not have`},
		{"registries: [{name: a, kind: consul}]\nhosts: [{host: x.mesh, prefer: []}]", "prefer needs the registries"},
		{`registries: [{name: a, kind: consul, filters: {exclude-service: [x]}}]`, "field exclude-service not found"},
		{`registries: [{name: a, kind: consul, filters: {include-services: ["orders-["]}}]`, `registries[0] (a): filters: include-services "orders-[": not a glob pattern`},
		{`registries: [{name: a, kind: consul, filters: {exclude-instance-cidrs: [10.0.0.1]}}]`, `filters: exclude-instance-cidrs "10.0.0.1": an address, not a CIDR block: write 10.0.0.1/32`},
		{`registries: [{name: a, kind: consul, filters: {include-labels: ["=x"]}}]`, `filters: include-labels "=x": want key=value`},
	} {
		_, err := ParseList([]byte(tc.yaml), testKinds)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one saying %q", tc.yaml, err, tc.want)
		}
	}
}
