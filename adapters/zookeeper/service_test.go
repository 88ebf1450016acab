package zookeeper

import (
	"fmt"
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
	services := map[string]*service{"/dubbo/demo": {nodes: map[string]*node{"a": {good: a}, "c": {good: c}, "bad": {}}}}
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
