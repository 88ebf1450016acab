package shard

import (
	"fmt"
	"testing"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

func resource(name, service string) *snapshot.Resource {
	return &snapshot.Resource{Name: name, Origin: &snapshot.Origin{Service: service}}
}

// A service's shard depends on its ServiceEntry's name only: its WorkloadEntries go with it,
// its hosts do not move it, and every replica agrees (the hash is fixed: FNV-1a).
func TestOfFollowsTheServiceEntryName(t *testing.T) {
	const n = 7
	se := resource("ns/orders", "ns/orders")
	we := resource("ns/orders-10.0.0.1", "ns/orders")
	rehosted := &snapshot.Resource{Name: "ns/orders", Origin: &snapshot.Origin{Service: "ns/orders", Hosts: []string{"orders.other.internal"}}}
	if Of(se, n) != Of(we, n) || Of(se, n) != Of(rehosted, n) {
		t.Errorf("one service in shards %d, %d, %d: want one", Of(se, n), Of(we, n), Of(rehosted, n))
	}
	// FNV-1a 64 of "ns/orders" mod 7, computed apart from Go's hash/fnv, so that a change of
	// the hash, which would move every service of every running deployment, fails here.
	if got, want := Of(se, n), 3; got != want {
		t.Errorf("Of(ns/orders, 7) = %d, want %d", got, want)
	}
	// No Origin service: the resource's name decides.
	if Of(&snapshot.Resource{Name: "ns/x"}, n) != Of(&snapshot.Resource{Name: "ns/x", Origin: &snapshot.Origin{}}, n) {
		t.Error("a resource without an Origin service is placed by something other than its name")
	}
}

func TestOfSpreads(t *testing.T) {
	const n, services = 8, 8000
	counts := make([]int, n)
	for i := range services {
		counts[Of(resource("", fmt.Sprintf("load/svc-%05d", i)), n)]++
	}
	for s, c := range counts {
		if c < services/n*8/10 || c > services/n*12/10 {
			t.Errorf("shard %d holds %d of %d services, want within 20%% of %d: %v", s, c, services, services/n, counts)
		}
	}
}

func TestNewRouterRefuses(t *testing.T) {
	store := snapshot.NewStore()
	fallback := snapshot.Everyone(store)
	if _, err := NewRouter(store, nil, fallback); err == nil {
		t.Error("no shard: accepted")
	}
	if _, err := NewRouter(store, make([]int, Max+1), fallback); err == nil {
		t.Errorf("%d shards: accepted", Max+1)
	}
	if _, err := NewRouter(store, []int{16020, 16020}, fallback); err == nil {
		t.Error("two shards on one port: accepted")
	}
	r, err := NewRouter(store, []int{16020, 16021}, fallback)
	if err != nil {
		t.Fatal(err)
	}
	if name, src := r.Route(snapshot.Client{LocalPort: 16021}); name != "shard-1" || src != r.views[1] {
		t.Errorf("a stream on shard 1's port is routed to %q", name)
	}
	if name, src := r.Route(snapshot.Client{LocalPort: 16010}); name != "" || src != snapshot.Source(store) {
		t.Errorf("a stream on another port is routed to %q, want the fallback's store", name)
	}
}
