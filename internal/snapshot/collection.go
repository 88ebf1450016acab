package snapshot

import (
	"fmt"
	"sort"
	"sync"

	"github.com/galleon-mesh/galleon/internal/parallel"
)

// historyDepth is how many diffs a collection remembers, so that a Delta
// or incremental sink a few versions behind is brought up to date from the
// names that changed instead of comparing every resource.
const historyDepth = 256

// Diff says what changed in a collection from one version to the next.
type Diff struct {
	// FromSeq and ToSeq are the store sequence numbers of the two versions.
	FromSeq, ToSeq uint64
	Added          []string
	Updated        []string
	Removed        []string
	// EndpointOnly lists the updated resources whose only change is their
	// endpoints: istiod applies those as an EDS update, without a full push.
	EndpointOnly []string
}

// Empty reports whether nothing changed.
func (d *Diff) Empty() bool { return len(d.Added)+len(d.Updated)+len(d.Removed) == 0 }

// Collection is the immutable set of resources of one kind at one version.
type Collection struct {
	Kind Kind
	// Version is a hash of the whole content: two stores holding the same
	// resources report the same version, so HA replicas look identical to a
	// sink.
	Version string
	// Seq is the store sequence number at which this collection last changed.
	Seq uint64

	byName index
	order  *order // by name: the order of full-state responses
	xor    uint64 // XOR of resource hashes, updated per change

	// history holds the diffs that led here, oldest first, at most
	// historyDepth of them. It is shared, never modified, with newer
	// collections' histories.
	history []*Diff

	memoMu sync.Mutex
	memo   map[any]any
	// lineage is shared by this collection and every version made from it
	// (not by a view's collections, which have their own): what MemoFrom
	// hands a newer version to build on.
	lineage *lineage
}

// lineage keeps, per memo key, the newest value built by any version of one
// collection. It holds one value per key, so it stays as small as one
// version's encodings however many versions there were.
type lineage struct {
	mu   sync.Mutex
	last map[any]lineageValue
}

type lineageValue struct {
	seq   uint64
	value any
}

func newCollection(kind Kind) *Collection {
	c := &Collection{Kind: kind, order: newOrder(orderChunk), lineage: &lineage{}}
	c.Version = c.contentVersion()
	return c
}

// Len returns the number of resources.
func (c *Collection) Len() int { return c.order.n }

// Get returns the named resource, or nil.
func (c *Collection) Get(name string) *Resource { return c.byName.get(name) }

// Resources returns every resource ordered by name. The caller must not
// modify the slice. It is built on the first call for each version: a
// change to a collection copies only the part of the order it touches.
func (c *Collection) Resources() []*Resource { return c.order.all() }

// LastDiff returns the change that produced this version, or nil for the
// initial, empty collection.
func (c *Collection) LastDiff() *Diff {
	if len(c.history) == 0 {
		return nil
	}
	return c.history[len(c.history)-1]
}

// ChangedSince returns the names of every resource added, updated or removed
// after the collection at sequence seq, for a sink that holds that version.
// ok is false when the history does not reach back that far; the caller must
// then compare all resources.
func (c *Collection) ChangedSince(seq uint64) (names []string, ok bool) {
	if seq >= c.Seq {
		return nil, true
	}
	i := len(c.history)
	for i > 0 && c.history[i-1].ToSeq > seq {
		i--
	}
	if i == len(c.history) || c.history[i].FromSeq > seq {
		return nil, false
	}
	if i == len(c.history)-1 { // the common case: one step behind
		d := c.history[i]
		names = make([]string, 0, len(d.Added)+len(d.Updated)+len(d.Removed))
		names = append(append(append(names, d.Added...), d.Updated...), d.Removed...)
		return names, true
	}
	seen := map[string]struct{}{}
	for _, d := range c.history[i:] {
		for _, list := range [][]string{d.Added, d.Updated, d.Removed} {
			for _, n := range list {
				if _, dup := seen[n]; !dup {
					seen[n] = struct{}{}
					names = append(names, n)
				}
			}
		}
	}
	return names, true
}

// Memo returns the value memoised under key, building it on first use. The
// server uses it to keep encodings that live exactly as long as this
// version: built once, shared by every stream. build runs under the memo
// lock: it must not call Memo or MemoFrom on the same collection.
func (c *Collection) Memo(key any, build func() any) any {
	c.memoMu.Lock()
	defer c.memoMu.Unlock()
	if v, ok := c.memo[key]; ok {
		return v
	}
	if c.memo == nil {
		c.memo = map[any]any{}
	}
	v := build()
	c.memo[key] = v
	return v
}

// MemoFrom is Memo for encodings that can build on an older one: build
// also gets the newest value built under key by an earlier (or, when streams
// lag, a later) version of this collection, or nil. Whatever build reuses
// from it must be checked against this version's resources: it may come
// from any version.
func (c *Collection) MemoFrom(key any, build func(prev any) any) any {
	return c.Memo(key, func() any {
		l := c.lineage
		l.mu.Lock()
		prev := l.last[key]
		l.mu.Unlock()
		v := build(prev.value)
		l.mu.Lock()
		defer l.mu.Unlock()
		if cur, ok := l.last[key]; !ok || cur.seq <= c.Seq {
			if l.last == nil {
				l.last = map[any]lineageValue{}
			}
			l.last[key] = lineageValue{seq: c.Seq, value: v}
		}
		return v
	})
}

func (c *Collection) contentVersion() string {
	// The count is folded in so that the empty set and a set whose hashes
	// cancel out cannot share a version.
	return fmt.Sprintf("%016x", c.xor^(uint64(c.order.n)*0x9e3779b97f4a7c15))
}

// encodeParallelMin is the smallest batch that apply encodes on every core.
const encodeParallelMin = 256

// apply returns a new collection with the changes applied, or c itself when
// nothing changed. The work is proportional to the changes, plus the index
// shards and order chunks they touch; unchanged resources are shared, never
// re-encoded.
func (c *Collection) apply(seq uint64, changes []Change) *Collection {
	// Encoding is most of the work and needs only the object: a large batch (a start, a
	// relisting) encodes on every core.
	encoded := make([]*Resource, len(changes))
	parallel.For(len(changes), encodeParallelMin, func(i int) {
		if obj := changes[i].Object; obj != nil {
			encoded[i] = newResource(obj, FixedCreateTime())
		}
	})
	upserts := map[string]*Resource{}
	removes := map[string]struct{}{}
	// Later changes of the same name win, so process them in order.
	for i := range changes {
		ch := &changes[i]
		if ch.Object == nil {
			delete(upserts, ch.Name)
			if c.Get(ch.Name) != nil {
				removes[ch.Name] = struct{}{}
			}
			continue
		}
		delete(removes, ch.Name)
		old := c.Get(ch.Name)
		r := encoded[i]
		if old != nil && old.hash == r.hash && old.Origin.Equal(r.Origin) {
			delete(upserts, ch.Name) // back to what is served
			continue
		}
		upserts[ch.Name] = r
	}
	return c.with(seq, upserts, removes)
}

// with returns a new collection in which upserts replace or add resources
// and removes (names c holds) are gone, or c itself when both are empty.
// Views use it directly, with resources their store already built.
func (c *Collection) with(seq uint64, upserts map[string]*Resource, removes map[string]struct{}) *Collection {
	if len(upserts) == 0 && len(removes) == 0 {
		return c
	}
	diff := &Diff{FromSeq: c.Seq, ToSeq: seq}
	next := &Collection{Kind: c.Kind, Seq: seq, byName: c.byName.cloneFor(upserts, removes), xor: c.xor, lineage: c.lineage}
	for n := range removes {
		next.xor ^= c.Get(n).hash
		next.byName.delete(n)
		diff.Removed = append(diff.Removed, n)
	}
	for n, r := range upserts {
		if old := c.Get(n); old != nil {
			next.xor ^= old.hash
			diff.Updated = append(diff.Updated, n)
			if old.shape == r.shape {
				diff.EndpointOnly = append(diff.EndpointOnly, n)
			}
		} else {
			diff.Added = append(diff.Added, n)
		}
		next.xor ^= r.hash
		next.byName.put(n, r)
	}
	sort.Strings(diff.Added)
	sort.Strings(diff.Updated)
	sort.Strings(diff.Removed)
	sort.Strings(diff.EndpointOnly)
	next.order = c.order.with(upserts, removes, diff.Added)
	next.Version = next.contentVersion()

	keep := c.history
	if len(keep) >= historyDepth {
		keep = keep[len(keep)-historyDepth+1:]
	}
	next.history = append(append(make([]*Diff, 0, len(keep)+1), keep...), diff)
	return next
}
