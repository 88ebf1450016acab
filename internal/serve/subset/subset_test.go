package subset

import (
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

const example = `
subsets:
- name: payments
  sinks:
    ids: ["sidecar~*~*.istio-payments~*"]
  services:
    namespaces: [payments, shared]
- name: canary
  sinks:
    metadata: {ISTIO_REVISION: "canary*"}
  services:
    registries: [consul]
    hosts: ["*.service.consul"]
    labels: {tier: "front*"}
`

func TestParseAndSelect(t *testing.T) {
	rules, err := Parse([]byte(example), "subsets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	payments, canary := &rules.Subsets[0], &rules.Subsets[1]
	sinks := []struct {
		sink          snapshot.Client
		payments, can bool
	}{
		{snapshot.Client{ID: "sidecar~10.0.0.1~istiod-abc.istio-payments~istio-payments.svc.cluster.local"}, true, false},
		{snapshot.Client{ID: "sidecar~10.0.0.1~istiod-abc.istio-system~istio-system.svc.cluster.local"}, false, false},
		{snapshot.Client{ID: "x", Labels: map[string]string{"ISTIO_REVISION": "canary-1-29"}}, false, true},
		{snapshot.Client{ID: "x", Labels: map[string]string{"ISTIO_REVISION": "stable"}}, false, false},
		{snapshot.Client{ID: "x", Labels: map[string]string{"OTHER": "canary"}}, false, false},
	}
	for _, c := range sinks {
		if got := payments.Sinks.Selects(c.sink); got != c.payments {
			t.Errorf("payments selects %+v = %v", c.sink, got)
		}
		if got := canary.Sinks.Selects(c.sink); got != c.can {
			t.Errorf("canary selects %+v = %v", c.sink, got)
		}
	}

	origins := []struct {
		o             *snapshot.Origin
		payments, can bool
	}{
		{&snapshot.Origin{Registry: "file", Namespace: "payments", Hosts: []string{"pay.example"}}, true, false},
		{&snapshot.Origin{Registry: "consul", Namespace: "shared", Hosts: []string{"web.service.consul"},
			Labels: map[string]string{"tier": "frontend"}}, true, true},
		{&snapshot.Origin{Registry: "consul", Namespace: "x", Hosts: []string{"web.dc1.service.consul"},
			Labels: map[string]string{"tier": "frontend"}}, false, true}, // "*." spans labels, as in Istio
		{&snapshot.Origin{Registry: "consul", Namespace: "x", Hosts: []string{"web.example"},
			Labels: map[string]string{"tier": "frontend"}}, false, false},
		{&snapshot.Origin{Registry: "consul", Namespace: "x", Hosts: []string{"web.service.consul"},
			Labels: map[string]string{"tier": "back"}}, false, false},
		{&snapshot.Origin{Registry: "consul", Namespace: "x", Hosts: []string{"web.service.consul"}}, false, false},
		{nil, false, false},
	}
	for _, c := range origins {
		if got := payments.Services.Keeps(c.o); got != c.payments {
			t.Errorf("payments keeps %+v = %v", c.o, got)
		}
		if got := canary.Services.Keeps(c.o); got != c.can {
			t.Errorf("canary keeps %+v = %v", c.o, got)
		}
	}
	if !(&ServiceSelector{}).Keeps(nil) {
		t.Error("an empty service selector must keep everything")
	}
}

func TestMatchHost(t *testing.T) {
	cases := []struct {
		pattern, host string
		want          bool
	}{
		{"*.consul", "web.service.consul", true},
		{"*.consul", "consul", false},
		{"*.consul", ".consul", false},
		{"web-*.service.consul", "web-1.service.consul", true},
		{"web-*.service.consul", "web-1.x.service.consul", false},
		{"*.*.consul", "a.b.consul", true},
		{"*.*.consul", "a.b.c.consul", false},
		{"exact.example", "exact.example", true},
	}
	for _, c := range cases {
		if got := matchHost(c.pattern, c.host); got != c.want {
			t.Errorf("matchHost(%q, %q) = %v, want %v", c.pattern, c.host, got, c.want)
		}
	}
}

func TestParseErrorsSayWhatToFix(t *testing.T) {
	cases := map[string]struct{ yaml, want string }{
		"unknown key":     {"subsets:\n- name: a\n  sinks: {ids: [x]}\n  service: {}\n", "line 4: field service not found"},
		"misspelt":        {"subsets:\n- name: a\n  sinks: {id: [x]}\n", "line 3: field id not found"},
		"no name":         {"subsets:\n- sinks: {ids: [x]}\n", "subsets[0]: name is required"},
		"duplicate":       {"subsets:\n- name: a\n  sinks: {ids: [x]}\n- name: a\n  sinks: {ids: [y]}\n", `subset "a": name used twice`},
		"selects nobody":  {"subsets:\n- name: a\n  services: {namespaces: [x]}\n", `subset "a": sinks selects nobody`},
		"bad pattern":     {"subsets:\n- name: a\n  sinks: {ids: [x]}\n  services: {hosts: ['[']}\n", `services.hosts: pattern "["`},
		"empty label key": {"subsets:\n- name: a\n  sinks: {metadata: {'': x}}\n", "sinks.metadata: empty key"},
		"empty file":      {"\n", "empty"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml), "subsets.yaml")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "subsets.yaml: ") {
				t.Fatalf("error = %v, want it to name the file and contain %q", err, c.want)
			}
		})
	}
}

func TestRouterRoutesToViews(t *testing.T) {
	store := snapshot.NewStore()
	rules, err := Parse([]byte(example), "x")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRouter(store, rules)
	if err != nil {
		t.Fatal(err)
	}
	obj := func(name, ns string) snapshot.Change {
		return snapshot.Change{Kind: snapshot.ServiceEntry, Name: ns + "/" + name, Object: &snapshot.Object{
			Kind: snapshot.ServiceEntry, Name: ns + "/" + name, Body: []byte(name),
			Origin: &snapshot.Origin{Registry: "file", Namespace: ns},
		}}
	}
	if _, _, err := store.Apply([]snapshot.Change{obj("a", "payments"), obj("b", "other")}, true); err != nil {
		t.Fatal(err)
	}
	name, src := r.Route(snapshot.Client{ID: "sidecar~1~i.istio-payments~x"})
	if name != "payments" || src.Current().Collection(snapshot.ServiceEntry).Len() != 1 {
		t.Fatalf("payments sink routed to %q with %d resources", name, src.Current().Collection(snapshot.ServiceEntry).Len())
	}
	name, src = r.Route(snapshot.Client{ID: "unknown"})
	if name != DefaultName || src != snapshot.Source(store) {
		t.Fatalf("unselected sink routed to %q", name)
	}
	if v := r.Views(); len(v) != 2 || v["payments"].Collection(snapshot.ServiceEntry).Len() != 1 || v["canary"].Collection(snapshot.ServiceEntry).Len() != 0 {
		t.Fatalf("views: %v", v)
	}
	var nilRouter *Router
	if v := nilRouter.Views(); v != nil {
		t.Fatalf("a nil router (no --subsets) lists views %v", v)
	}
}
