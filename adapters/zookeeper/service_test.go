package zookeeper

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/galleon-mesh/galleon/model"
)

// TestSharedParts: providers with equal host data and port share one copy of each, different
// ones do not, and a prune keeps exactly what a node still uses.
func TestSharedParts(t *testing.T) {
	provider := func(version string, port uint32) *endpoint {
		return &endpoint{
			svc:   &hostData{Name: "providers:demo:" + version, Interface: "demo", Version: version},
			ports: append(make([]model.Port, 0, 4), model.Port{Number: port, Protocol: "dubbo"}),
		}
	}
	var sp sharedParts
	a, b, c := provider("1.0", 20880), provider("1.0", 20880), provider("2.0", 20881)
	for _, e := range []*endpoint{a, b, c} {
		sp.share(e)
	}
	if a.svc != b.svc || &a.ports[0] != &b.ports[0] {
		t.Errorf("equal host data and port not shared: %p %p, %p %p", a.svc, b.svc, &a.ports[0], &b.ports[0])
	}
	if cap(a.ports) != 1 {
		t.Errorf("a shared port list has spare capacity %d: an append would write into it", cap(a.ports))
	}
	if a.svc == c.svc || &a.ports[0] == &c.ports[0] || c.svc.Version != "2.0" || c.ports[0].Number != 20881 {
		t.Errorf("different host data or port shared: %+v %v", *c.svc, c.ports)
	}
	// Entries of nodes gone: pruned once the tables have doubled, never those in use.
	for i := range 100 {
		sp.share(provider(fmt.Sprint("gone-", i), uint32(30000+i)))
	}
	services := map[string]*service{"/dubbo/demo": {nodes: map[nodeHash]*node{{1, 1}: {good: a}, {2, 2}: {good: c}, {3, 3}: {}}}}
	sp.prune(services)
	if len(sp.hosts) != 2 || len(sp.ports) != 2 || sp.hosts[*a.svc] != a.svc || sp.hosts[*c.svc] != c.svc {
		t.Errorf("after the prune: %d host data, %d ports, want the 2 and 2 in use", len(sp.hosts), len(sp.ports))
	}
	d := provider("1.0", 20880)
	sp.share(d)
	if d.svc != a.svc || &d.ports[0] != &a.ports[0] {
		t.Error("an entry in use was not kept by the prune")
	}
	// Below twice what the last prune kept (plus its margin), no prune: its cost is amortised.
	sp.share(provider("gone-again", 40000))
	sp.prune(services)
	if _, ok := sp.hosts[hostData{Name: "providers:demo:gone-again", Interface: "demo", Version: "gone-again"}]; !ok {
		t.Error("pruned before the tables doubled")
	}
}

// TestMarkDuplicates: of the nameless providers of a service, those that share their service
// and instance ID with another get their names from the listing; the others stay nameless.
func TestMarkDuplicates(t *testing.T) {
	w := &watcher{hash: newNodeHasher()}
	d := newDubbo(nil)
	s := &service{nodes: map[nodeHash]*node{}}
	urls := []string{
		"dubbo://10.0.0.1:20880/x.Dup?application=a",
		"dubbo://10.0.0.1:20880/x.Dup?application=b",             // the same instance as a
		"dubbo://10.0.0.1:20880/x.Dup?application=c&version=2.0", // another service: no duplicate
		"dubbo://10.0.0.2:20880/x.Dup?application=a",             // another instance
	}
	var children []string
	for _, u := range urls {
		name := url.QueryEscape(u)
		e, err := d.parseInstance("x.Dup", name, nil)
		if err != nil {
			t.Fatal(err)
		}
		children = append(children, name)
		s.nodes[w.hash.of(name)] = &node{good: &e}
	}
	w.markDuplicates(s, children)
	for i, name := range children {
		n := s.nodes[w.hash.of(name)]
		if want := i < 2; (n.name == name) != want || (n.name != "" && n.name != name) || n.wantName {
			t.Errorf("%s: name %q (wantName %v), want it kept: %v", urls[i], n.name, n.wantName, want)
		}
	}
}
