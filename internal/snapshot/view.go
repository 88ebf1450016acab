package snapshot

// View is the part of a store's content that a filter keeps: what one group
// of sinks (a config subset) is served. It has the store's Current and
// Subscribe, so a server serves a view exactly as it serves the store.
//
// A view holds the store's own Resource values: nothing is copied or
// encoded again. Its snapshots carry the store's sequence numbers, so a
// view's collection changes only when something it keeps changes, and the
// sinks of one subset are not woken by changes to another's services.
type View struct {
	publisher
	keep func(*Resource) bool
}

// NewView returns a view of the resources keep accepts. keep must be a pure
// function of the resource (its Origin, usually): Apply calls it for each
// resource that changes, and the result must not change afterwards.
func (s *Store) NewView(keep func(*Resource) bool) *View {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	v := &View{keep: keep}
	cur := s.Current()
	snap := &Snapshot{Seq: cur.Seq, Ready: cur.Ready, Time: cur.Time}
	for _, k := range Kinds() {
		kept := map[string]*Resource{}
		for _, r := range cur.Collection(k).Resources() {
			if keep(r) {
				kept[r.Name] = r
			}
		}
		snap.collections[k] = newCollection(k).with(cur.Collection(k).Seq, kept, nil)
	}
	s.views = append(s.views, v)
	v.current.Store(snap)
	return v
}

// follow brings the view up to the store's snapshot next, made from the
// previous one by diffs. It runs under the store's apply lock.
func (v *View) follow(next *Snapshot, diffs map[Kind]*Diff) {
	cur := v.Current()
	snap := &Snapshot{Seq: next.Seq, Ready: next.Ready, Time: next.Time, collections: cur.collections}
	changed := next.Ready != cur.Ready
	for k, d := range diffs {
		col := cur.collections[k]
		source := next.Collection(k)
		upserts := map[string]*Resource{}
		removes := map[string]struct{}{}
		for _, names := range [][]string{d.Added, d.Updated} {
			for _, n := range names {
				switch r := source.Get(n); {
				case v.keep(r):
					upserts[n] = r
				case col.Get(n) != nil: // no longer selected
					removes[n] = struct{}{}
				}
			}
		}
		for _, n := range d.Removed {
			if col.Get(n) != nil {
				removes[n] = struct{}{}
			}
		}
		if c := col.with(next.Seq, upserts, removes); c != col {
			snap.collections[k] = c
			changed = true
		}
	}
	if changed {
		v.publish(snap)
	}
}
