package snapshot

import (
	"slices"
	"sort"
	"strings"
	"sync"
)

// orderChunk is the size chunks of a by-name order are cut to. A change
// copies the list of chunks and the chunks it touches, not the whole order:
// one slice of the whole order per change was garbage enough to make the
// collector mark the whole store far more often (the figures:
// docs/benchmarks.md, "Figures behind the code's choices").
const orderChunk = 256

// order is the by-name order of a collection's resources, in sorted,
// non-empty chunks shared between versions. It is immutable once built,
// but for the flat slice, built on first use.
type order struct {
	chunks [][]*Resource
	n      int
	// chunk is the size chunks are cut to (orderChunk; smaller in tests).
	chunk int

	flatOnce sync.Once
	flat     []*Resource
}

func newOrder(chunk int) *order { return &order{chunk: chunk} }

// all returns every resource in name order: built once per version, for
// the callers that walk the whole order (full states, full comparisons).
func (o *order) all() []*Resource {
	o.flatOnce.Do(func() {
		if len(o.chunks) == 1 {
			o.flat = o.chunks[0]
			return
		}
		o.flat = slices.Concat(o.chunks...)
	})
	return o.flat
}

// chunkChanges are the changes that fall in one chunk.
type chunkChanges struct {
	upserts map[string]*Resource
	removes map[string]struct{}
	added   []string // sorted
}

// with returns the order after upserts replace or add resources and
// removes (names held) are gone; added lists the upserted names not held,
// sorted. Only the chunks the changes fall in are copied.
func (o *order) with(upserts map[string]*Resource, removes map[string]struct{}, added []string) *order {
	// A name falls in the last chunk whose first name is not after it (the
	// first chunk for a name before every other).
	in := func(name string) int {
		k := sort.Search(len(o.chunks), func(k int) bool { return o.chunks[k][0].Name > name })
		return max(k-1, 0)
	}
	touched := map[int]*chunkChanges{}
	at := func(name string) *chunkChanges {
		k := in(name)
		cc := touched[k]
		if cc == nil {
			cc = &chunkChanges{upserts: map[string]*Resource{}, removes: map[string]struct{}{}}
			touched[k] = cc
		}
		return cc
	}
	for name, r := range upserts {
		cc := at(name)
		cc.upserts[name] = r
	}
	for name := range removes {
		at(name).removes[name] = struct{}{}
	}
	for _, name := range added { // in order, so each chunk's stay sorted
		cc := at(name)
		cc.added = append(cc.added, name)
	}

	next := &order{chunk: o.chunk, n: o.n + len(added) - len(removes)}
	next.chunks = make([][]*Resource, 0, len(o.chunks)+len(added)/o.chunk+1)
	// A chunk left shorter than half the size goes with the next one, so
	// that removals do not leave the order in ever more, ever smaller
	// chunks (a change copies the list of them).
	var carry []*Resource
	last := max(len(o.chunks), 1) - 1
	for k := range last + 1 {
		var c []*Resource
		if k < len(o.chunks) {
			c = o.chunks[k]
		}
		if cc := touched[k]; cc != nil {
			c = mergeSorted(c, cc.upserts, cc.removes, cc.added, len(c)+len(cc.added)-len(cc.removes))
		}
		if len(carry) > 0 {
			c = slices.Concat(carry, c)
			carry = nil
		}
		if len(c) < o.chunk/2 && k < last {
			carry = c
			continue
		}
		next.chunks = appendCut(next.chunks, c, o.chunk)
	}
	return next
}

// appendCut appends c to chunks, cut into pieces of chunk resources (the
// last one longer, up to twice that) when it is longer than twice that, and
// not at all when empty.
func appendCut(chunks [][]*Resource, c []*Resource, chunk int) [][]*Resource {
	for len(c) >= 2*chunk {
		chunks = append(chunks, c[:chunk:chunk])
		c = c[chunk:]
	}
	if len(c) > 0 {
		chunks = append(chunks, c)
	}
	return chunks
}

// mergeSorted rebuilds one chunk: existing entries are replaced or dropped
// in place, and the added ones (sorted names) merged in. The chunk is copied
// whole and the changed names found by binary search.
func mergeSorted(old []*Resource, upserts map[string]*Resource, removes map[string]struct{}, added []string, size int) []*Resource {
	find := func(name string) (int, bool) {
		return slices.BinarySearchFunc(old, name, func(r *Resource, n string) int { return strings.Compare(r.Name, n) })
	}
	kept := make([]*Resource, len(old), max(size, len(old)))
	copy(kept, old)
	for name, r := range upserts {
		if i, ok := find(name); ok {
			kept[i] = r
		}
	}
	if len(removes) > 0 {
		for name := range removes {
			if i, ok := find(name); ok {
				kept[i] = nil
			}
		}
		kept = slices.DeleteFunc(kept, func(r *Resource) bool { return r == nil })
	}
	if len(added) == 0 {
		return kept
	}
	merged := make([]*Resource, 0, size)
	i, j := 0, 0
	for i < len(kept) && j < len(added) {
		if kept[i].Name < added[j] {
			merged = append(merged, kept[i])
			i++
		} else {
			merged = append(merged, upserts[added[j]])
			j++
		}
	}
	merged = append(merged, kept[i:]...)
	for ; j < len(added); j++ {
		merged = append(merged, upserts[added[j]])
	}
	return merged
}
