package snapshot

import (
	"maps"

	"github.com/cespare/xxhash/v2"
)

// indexShards is how many maps the name index is split into. A new
// collection version shares every shard with the previous one except those
// its changes touch, so a one-resource change copies one shard (about 40
// names at 10,000 resources) instead of the whole index: the work and the
// garbage per change follow the change, not the collection's size.
const indexShards = 256

// index maps resource names to resources, copy-on-write by shard. The array
// itself is copied with each version (256 map headers); a shard is never
// modified once a collection holding it is published.
type index [indexShards]map[string]*Resource

func shardOf(name string) int { return int(xxhash.Sum64String(name) & (indexShards - 1)) }

func (x *index) get(name string) *Resource { return x[shardOf(name)][name] }

// cloneFor returns a copy of x in which the shards holding any of the
// names in upserts or removes are private copies, safe to modify.
func (x *index) cloneFor(upserts map[string]*Resource, removes map[string]struct{}) index {
	next := *x
	var cloned [indexShards]bool
	own := func(name string) {
		i := shardOf(name)
		if !cloned[i] {
			cloned[i] = true
			if next[i] == nil {
				next[i] = map[string]*Resource{}
			} else {
				next[i] = maps.Clone(next[i])
			}
		}
	}
	for n := range upserts {
		own(n)
	}
	for n := range removes {
		own(n)
	}
	return next
}

// put and delete modify a shard made private by cloneFor.
func (x *index) put(name string, r *Resource) { x[shardOf(name)][name] = r }
func (x *index) delete(name string)           { delete(x[shardOf(name)], name) }
