// Package shard serves one registry as several config sources: each of a
// process's shard listeners serves a stable part of the ServiceEntries (and
// their WorkloadEntries), and istiod lists every shard as a configSource.
//
// Why: istiod reads a config source over SotW only, so every change re-sends
// the source's whole collection, and istiod decodes and compares all of it
// (pkg/adsc/adsc.go, handleMCP; see docs/istiod-releases.md). Its cost per
// change grows with the collection. With N shards a change re-sends one
// shard, about 1/N of the collection, while istiod keeps one store per
// source and lists them together (pilot/pkg/bootstrap/configcontroller.go;
// pilot/pkg/config/aggregate/config.go). docs/benchmarks.md has the figures.
//
// A service's shard is a hash of its ServiceEntry's namespace/name, the
// same in every replica and across restarts, so a sink reconnecting to the
// same shard address is served the same part, and a name never moves from
// one shard to another: istiod 1.29 keys ServiceEntries by name across
// sources, and a name deleted from one source while added to another could
// be lost there (docs/istiod-releases.md). Shards are views of the store (snapshot.View): they
// share its encoded resources, and a change wakes only the sinks of the
// shard that holds the changed service.
package shard

import (
	"fmt"
	"hash/fnv"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// Max is the most shards a process serves. Each is a config source istiod
// dials and keeps a store for; past a few dozen the per-source overhead
// outweighs what a smaller share saves.
const Max = 64

// Of returns the shard, in [0, n), of the service a resource was made from:
// a hash (FNV-1a) of its ServiceEntry's namespace/name, or of the
// resource's own name when its Origin does not say. Every resource of one
// service is in one shard.
func Of(r *snapshot.Resource, n int) int {
	key := r.Name
	if r.Origin != nil && r.Origin.Service != "" {
		key = r.Origin.Service
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return int(h.Sum64() % uint64(n))
}

// Router serves a stream arriving on shard i's listener (by local port)
// shard i's view of the store, and any other stream what fallback routes it
// to. It is a snapshot.Router.
type Router struct {
	ports    map[int]int // local port -> shard
	views    []*snapshot.View
	fallback snapshot.Router
}

// NewRouter makes one view of store per shard; ports[i] is the local port
// of shard i's listener. Ports must be distinct, and at most Max.
func NewRouter(store *snapshot.Store, ports []int, fallback snapshot.Router) (*Router, error) {
	if len(ports) == 0 || len(ports) > Max {
		return nil, fmt.Errorf("%d shards: give 1 to %d", len(ports), Max)
	}
	r := &Router{ports: make(map[int]int, len(ports)), fallback: fallback}
	for i, p := range ports {
		if _, dup := r.ports[p]; dup {
			return nil, fmt.Errorf("shard %d: port %d serves another shard already", i, p)
		}
		r.ports[p] = i
	}
	n := len(ports)
	for i := range n {
		r.views = append(r.views, store.NewView(func(res *snapshot.Resource) bool { return Of(res, n) == i }))
	}
	return r, nil
}

// Route returns shard i's view for a stream that arrived on its listener.
func (r *Router) Route(c snapshot.Client) (string, snapshot.Source) {
	if i, ok := r.ports[c.LocalPort]; ok {
		return Name(i), r.views[i]
	}
	return r.fallback.Route(c)
}

// Name is shard i's name in logs and /debug/status.
func Name(i int) string { return fmt.Sprintf("shard-%d", i) }

// Len is the number of shards.
func (r *Router) Len() int { return len(r.views) }

// Current is shard i's current snapshot.
func (r *Router) Current(i int) *snapshot.Snapshot { return r.views[i].Current() }
