package importfilter

import (
	"slices"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/model"
)

func svc(ns, name string, labels map[string]string, insts ...model.Instance) model.Service {
	return model.Service{Namespace: ns, Name: name, Labels: labels, Instances: insts}
}

func inst(id, addr string, labels map[string]string) model.Instance {
	return model.Instance{ID: id, Address: addr, Labels: labels}
}

func ids(s model.Service) []string {
	var out []string
	for _, i := range s.Instances {
		out = append(out, i.ID)
	}
	return out
}

// TestApply: each rule keeps and leaves out what it says, exclude winning over include, and a
// service left with no instance is left out whole.
func TestApply(t *testing.T) {
	canary := map[string]string{"canary": ""}
	prod := map[string]string{"env": "prod"}
	three := svc("consul", "orders", nil,
		inst("a", "10.0.0.1", prod), inst("b", "192.168.1.1", canary), inst("c", "orders-3.internal", nil))
	for _, tc := range []struct {
		name     string
		settings Settings
		in       model.Service
		kept     bool
		ids      []string
		dropped  int
	}{
		{"include services matches", Settings{IncludeServices: []string{"ord*"}}, three, true, []string{"a", "b", "c"}, 0},
		{"include services misses", Settings{IncludeServices: []string{"pay*", "x?"}}, three, false, nil, 0},
		{"exclude services", Settings{ExcludeServices: []string{"orders"}}, three, false, nil, 0},
		{"exclude wins over include", Settings{IncludeServices: []string{"*"}, ExcludeServices: []string{"o*"}}, three, false, nil, 0},
		{"class pattern", Settings{IncludeServices: []string{"[n-p]rders"}}, three, true, []string{"a", "b", "c"}, 0},
		{"include namespace", Settings{IncludeNamespaces: []string{"consul"}}, three, true, []string{"a", "b", "c"}, 0},
		{"include namespace misses", Settings{IncludeNamespaces: []string{"team-*"}}, three, false, nil, 0},
		{"exclude namespace", Settings{ExcludeNamespaces: []string{"cons*"}}, three, false, nil, 0},
		{"exclude label by presence (a Consul tag)", Settings{ExcludeLabels: []string{"canary"}}, three, true, []string{"a", "c"}, 1},
		{"exclude label by value", Settings{ExcludeLabels: []string{"env=prod"}}, three, true, []string{"b", "c"}, 1},
		{"exclude label of another value", Settings{ExcludeLabels: []string{"env=dev"}}, three, true, []string{"a", "b", "c"}, 0},
		{"include label", Settings{IncludeLabels: []string{"env=prod"}}, three, true, []string{"a"}, 2},
		{"include either label", Settings{IncludeLabels: []string{"env=prod", "canary"}}, three, true, []string{"a", "b"}, 1},
		{"exclude label wins", Settings{IncludeLabels: []string{"env"}, ExcludeLabels: []string{"env=prod"}}, three, false, nil, 3},
		{"service labels count under instance labels",
			Settings{IncludeLabels: []string{"team=a"}},
			svc("ns", "s", map[string]string{"team": "a"}, inst("x", "10.0.0.1", nil), inst("y", "10.0.0.2", map[string]string{"team": "b"})),
			true, []string{"x"}, 1},
		{"labels are matched as served (sanitised)",
			Settings{ExcludeLabels: []string{"my-tag=a-b"}},
			svc("ns", "s", nil, inst("x", "10.0.0.1", map[string]string{"my tag": "a b"}), inst("y", "10.0.0.2", nil)),
			true, []string{"y"}, 1},
		{"a service of no instance is judged by its own labels",
			Settings{ExcludeLabels: []string{"team"}}, svc("ns", "s", map[string]string{"team": "a"}), false, nil, 0},
		{"a service of no instance without the label is kept",
			Settings{IncludeInstanceCIDRs: []string{"10.0.0.0/8"}}, svc("ns", "s", nil), true, nil, 0},
		{"include CIDR keeps host names", Settings{IncludeInstanceCIDRs: []string{"10.0.0.0/8"}}, three, true, []string{"a", "c"}, 1},
		{"exclude CIDR", Settings{ExcludeInstanceCIDRs: []string{"192.168.0.0/16"}}, three, true, []string{"a", "c"}, 1},
		{"exclude CIDR wins", Settings{IncludeInstanceCIDRs: []string{"10.0.0.0/8"}, ExcludeInstanceCIDRs: []string{"10.0.0.1/32"}}, three, true, []string{"c"}, 2},
		{"every instance left out: the service too",
			Settings{IncludeInstanceCIDRs: []string{"172.16.0.0/12"}},
			svc("ns", "s", nil, inst("x", "10.0.0.1", nil)), false, nil, 1},
		{"IPv6 and a mapped IPv4",
			Settings{IncludeInstanceCIDRs: []string{"fd00::/8", "10.0.0.0/8"}},
			svc("ns", "s", nil, inst("x", "fd00::1", nil), inst("y", "::ffff:10.1.2.3", nil), inst("z", "2001:db8::1", nil)),
			true, []string{"x", "y"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := New(tc.settings, "--")
			if err != nil {
				t.Fatal(err)
			}
			s := tc.in
			before := slices.Clone(tc.in.Instances)
			kept, dropped := f.Apply(&s)
			if kept != tc.kept || dropped != tc.dropped {
				t.Fatalf("kept %v, %d instances left out; want %v, %d", kept, dropped, tc.kept, tc.dropped)
			}
			if kept && !slices.Equal(ids(s), tc.ids) {
				t.Errorf("instances %v, want %v", ids(s), tc.ids)
			}
			// The adapter's slice is not written to: it may share it.
			if !slices.EqualFunc(before, tc.in.Instances, func(a, b model.Instance) bool { return a.ID == b.ID }) {
				t.Errorf("the reported instances were modified: %v", ids(tc.in))
			}
		})
	}
}

// TestNoFilter: no setting is no filter, and a nil Filter keeps everything untouched.
func TestNoFilter(t *testing.T) {
	f, err := New(Settings{}, "--")
	if err != nil || f != nil {
		t.Fatalf("New(zero) = %v, %v; want nil, nil", f, err)
	}
	s := svc("ns", "s", nil, inst("x", "10.0.0.1", nil))
	if kept, dropped := f.Apply(&s); !kept || dropped != 0 || len(s.Instances) != 1 {
		t.Fatalf("a nil filter left out something: %v %d %v", kept, dropped, ids(s))
	}
	if f.Describe() != nil || !f.Settings().IsZero() {
		t.Fatal("a nil filter describes filters")
	}
}

// TestBadSettings: each bad value is refused, naming its setting and what to write.
func TestBadSettings(t *testing.T) {
	for _, tc := range []struct {
		settings Settings
		want     string
	}{
		{Settings{IncludeServices: []string{"orders-["}}, `--include-services "orders-[": not a glob pattern`},
		{Settings{ExcludeNamespaces: []string{" "}}, `--exclude-namespaces " ": empty`},
		{Settings{ExcludeLabels: []string{"=prod"}}, `--exclude-labels "=prod": want key=value, or key alone`},
		{Settings{IncludeLabels: []string{"my tag"}}, `--include-labels "my tag": no label can be served as that`},
		{Settings{IncludeLabels: []string{"env=a b"}}, `write the label as it is served, env=a-b`},
		{Settings{IncludeInstanceCIDRs: []string{"10.0.0.0/33"}}, `--include-instance-cidrs "10.0.0.0/33": not a CIDR block`},
		{Settings{ExcludeInstanceCIDRs: []string{"10.1.2.3"}}, `an address, not a CIDR block: write 10.1.2.3/32`},
		{Settings{ExcludeInstanceCIDRs: []string{"10.1.2.3/8"}}, `has host bits set: write 10.0.0.0/8`},
	} {
		_, err := New(tc.settings, "--")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one holding %q", tc.settings, err, tc.want)
		}
	}
	_, err := New(Settings{IncludeServices: []string{"["}, ExcludeInstanceCIDRs: []string{"x"}}, "filters: ")
	if err == nil || !strings.Contains(err.Error(), "filters: include-services") || !strings.Contains(err.Error(), "filters: exclude-instance-cidrs") {
		t.Errorf("two problems: %v, want both, each under the prefix", err)
	}
}

// TestDescribe names the filters set, for the start log line.
func TestDescribe(t *testing.T) {
	f, err := New(Settings{ExcludeServices: []string{"consul", "vault"}, IncludeInstanceCIDRs: []string{"10.0.0.0/8"}}, "--")
	if err != nil {
		t.Fatal(err)
	}
	got := f.Describe()
	want := []any{"exclude_services", "consul,vault", "include_instance_cidrs", "10.0.0.0/8"}
	if !slices.Equal(got, want) {
		t.Errorf("Describe() = %v, want %v", got, want)
	}
	if names := f.Settings().Names(); !slices.Equal(names, []string{ExcludeServices, IncludeInstanceCIDRs}) {
		t.Errorf("Names() = %v", names)
	}
}
