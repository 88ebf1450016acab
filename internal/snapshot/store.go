package snapshot

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Snapshot is the immutable state of every collection at one moment.
type Snapshot struct {
	// Seq increases by one with every change to any collection.
	Seq uint64
	// Ready is false until the registry has been listed once. A server must
	// not send a sink the collections of a snapshot that is not ready: an
	// empty answer would make istiod delete everything it holds from this
	// source, for instance while a restarted adapter is still listing.
	Ready bool
	// Time is when the snapshot was made.
	Time        time.Time
	collections [numKinds]*Collection
}

// Collection returns the collection of one kind.
func (s *Snapshot) Collection(k Kind) *Collection { return s.collections[k] }

// publisher holds a current snapshot and tells subscribers when it changes.
// Readers never lock: they load the current snapshot and read it at
// leisure, since snapshots are never modified.
type publisher struct {
	current atomic.Pointer[Snapshot]

	subsMu sync.Mutex
	subs   map[chan struct{}]struct{}
}

// Current returns the current snapshot.
func (p *publisher) Current() *Snapshot { return p.current.Load() }

// Subscribe returns a channel that receives a value whenever a new snapshot
// is current. Notifications coalesce: a slow reader sees one signal for
// several snapshots and reads Current, which is always the newest. cancel
// releases the subscription.
func (p *publisher) Subscribe() (changed <-chan struct{}, cancel func()) {
	ch := make(chan struct{}, 1)
	p.subsMu.Lock()
	if p.subs == nil {
		p.subs = map[chan struct{}]struct{}{}
	}
	p.subs[ch] = struct{}{}
	p.subsMu.Unlock()
	return ch, func() {
		p.subsMu.Lock()
		delete(p.subs, ch)
		p.subsMu.Unlock()
	}
}

// publish makes snap current and wakes the subscribers.
func (p *publisher) publish(snap *Snapshot) {
	p.current.Store(snap)
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	for ch := range p.subs {
		select {
		case ch <- struct{}{}:
		default: // already signalled; the reader will load the newest
		}
	}
}

// Store holds the current snapshot and tells subscribers when it changes.
// Apply is serialised and also brings every View of the store up to date,
// in the same call, so a view is never behind its store.
type Store struct {
	publisher
	applyMu sync.Mutex
	now     func() time.Time
	views   []*View // guarded by applyMu
}

// StoreOption configures a Store.
type StoreOption func(*Store)

// WithClock sets the clock used for create times and snapshot times (tests).
func WithClock(now func() time.Time) StoreOption { return func(s *Store) { s.now = now } }

// NewStore returns a store holding an empty, not yet ready snapshot.
func NewStore(opts ...StoreOption) *Store {
	s := &Store{now: time.Now}
	for _, o := range opts {
		o(s)
	}
	snap := &Snapshot{Time: s.now()}
	for _, k := range Kinds() {
		snap.collections[k] = newCollection(k)
	}
	s.current.Store(snap)
	return s
}

// Apply applies changes and, once ready is true, marks the snapshot ready
// (readiness never goes back). It returns the new snapshot and the diff of
// each kind that changed; when nothing changed it returns the current
// snapshot and no diffs, and subscribers are not woken.
func (s *Store) Apply(changes []Change, ready bool) (*Snapshot, map[Kind]*Diff, error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	cur := s.current.Load()
	seq := cur.Seq + 1

	byKind := make([][]Change, numKinds)
	for _, ch := range changes {
		if ch.Kind < 0 || ch.Kind >= numKinds {
			return cur, nil, fmt.Errorf("change to %q: unknown kind %d", ch.Name, ch.Kind)
		}
		if ch.Object != nil && (ch.Object.Kind != ch.Kind || ch.Object.Name != ch.Name) {
			return cur, nil, fmt.Errorf("change to %s %q carries object %s %q", ch.Kind, ch.Name, ch.Object.Kind, ch.Object.Name)
		}
		byKind[ch.Kind] = append(byKind[ch.Kind], ch)
	}

	next := &Snapshot{Seq: seq, Ready: cur.Ready || ready, collections: cur.collections}
	diffs := map[Kind]*Diff{}
	for _, k := range Kinds() {
		if len(byKind[k]) == 0 {
			continue
		}
		c := cur.collections[k].apply(seq, byKind[k])
		if c != cur.collections[k] {
			next.collections[k] = c
			diffs[k] = c.LastDiff()
		}
	}
	if len(diffs) == 0 && next.Ready == cur.Ready {
		return cur, nil, nil
	}
	next.Time = s.now()
	s.publish(next)
	for _, v := range s.views {
		v.follow(next, diffs)
	}
	return next, diffs, nil
}
