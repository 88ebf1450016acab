package snapshot

import (
	"maps"
	"slices"
)

// Holdings is what one incremental client (a Delta xDS stream, an
// incremental legacy MCP sink) holds of one collection: the version of each
// resource it has. CatchUp works out what it lacks.
//
// A client that wants every resource holds, after each CatchUp, exactly the
// collection it was caught up to. Its holdings are then that collection
// itself, not a map with an entry per resource: ten wildcard streams over
// 10,000 resources keep ten pointers, not 100,000 map entries built on their
// first push.
type Holdings struct {
	// Seq is the collection sequence number the holdings reflect; 0 means
	// they were never compared with a collection (a new client, or one
	// resuming from what it says it has), so the next CatchUp compares
	// everything.
	Seq uint64
	// all, when set, is a collection the client holds exactly; versions is
	// then nil.
	all      *Collection
	versions map[string]string
}

// HoldingAll returns the holdings of a client that holds exactly col, such as
// one just sent its full state.
func HoldingAll(col *Collection) Holdings { return Holdings{Seq: col.Seq, all: col} }

// Version returns the version the client holds of the named resource.
func (h *Holdings) Version(name string) (version string, ok bool) {
	if h.all != nil {
		if r := h.all.Get(name); r != nil {
			return r.Version, true
		}
		return "", false
	}
	version, ok = h.versions[name]
	return version, ok
}

// Hold records that the client holds version of the named resource.
func (h *Holdings) Hold(name, version string) {
	h.materialize()
	h.versions[name] = version
}

// Drop records that the client no longer holds the named resource.
func (h *Holdings) Drop(name string) {
	h.materialize()
	delete(h.versions, name)
}

// Retain drops every held resource whose name keep rejects.
func (h *Holdings) Retain(keep func(name string) bool) {
	h.materialize()
	maps.DeleteFunc(h.versions, func(name, _ string) bool { return !keep(name) })
}

// materialize turns holdings of a whole collection into a map, before a
// change that makes them something else.
func (h *Holdings) materialize() {
	if h.all != nil {
		h.versions = make(map[string]string, h.all.Len())
		for _, r := range h.all.Resources() {
			h.versions[r.Name] = r.Version
		}
		h.all = nil
	}
	if h.versions == nil {
		h.versions = map[string]string{}
	}
}

// Scope is which resources a client wants: all of them, or those named.
type Scope struct {
	All   bool
	Names map[string]struct{}
}

// Wants reports whether the client wants the named resource.
func (s Scope) Wants(name string) bool {
	if s.All {
		return true
	}
	_, ok := s.Names[name]
	return ok
}

// CatchUp returns the resources of col in scope that the client does not
// hold at their current version, in name order, and the names it holds that
// are gone, sorted; and records both as done. When the holdings are a few
// versions behind, only the names that changed since (plus extra, such as
// new subscriptions) are looked at; otherwise every resource in scope is.
func (h *Holdings) CatchUp(col *Collection, scope Scope, extra []string) (changed []*Resource, removed []string) {
	defer func() { h.Seq = col.Seq }()
	// A client that wants everything holds exactly col once this returns:
	// compare without recording, then hold col. Anyone else keeps a map.
	record := !scope.All
	if record {
		h.materialize()
	} else {
		defer func() { h.all, h.versions = col, nil }()
	}
	if h.Seq != 0 {
		if names, ok := col.ChangedSince(h.Seq); ok {
			candidates := append(names, extra...)
			slices.Sort(candidates)
			for _, name := range slices.Compact(candidates) {
				changed, removed = h.compare(name, col.Get(name), scope, record, changed, removed)
			}
			return changed, removed
		}
	}
	// Full comparison: the collection is already in name order; what the
	// client holds that is gone follows, sorted.
	if scope.All {
		for _, r := range col.Resources() {
			changed, removed = h.compare(r.Name, r, scope, record, changed, removed)
		}
	} else {
		for _, name := range slices.Sorted(maps.Keys(scope.Names)) {
			changed, removed = h.compare(name, col.Get(name), scope, record, changed, removed)
		}
	}
	var gone []string
	h.eachName(func(name string) {
		if col.Get(name) == nil {
			gone = append(gone, name)
		}
	})
	slices.Sort(gone)
	for _, name := range gone {
		changed, removed = h.compare(name, nil, scope, record, changed, removed)
	}
	return changed, removed
}

// eachName calls f with the name of every held resource.
func (h *Holdings) eachName(f func(name string)) {
	if h.all != nil {
		for _, r := range h.all.Resources() {
			f(r.Name)
		}
		return
	}
	for name := range h.versions {
		f(name)
	}
}

// compare decides what the client needs for one name, r being the resource
// of that name (nil when there is none), and records it as held if record.
func (h *Holdings) compare(name string, r *Resource, scope Scope, record bool, changed []*Resource, removed []string) ([]*Resource, []string) {
	held, has := h.Version(name)
	switch {
	case r != nil && scope.Wants(name) && held != r.Version:
		changed = append(changed, r)
		if record {
			h.versions[name] = r.Version
		}
	case r == nil && has:
		removed = append(removed, name)
		if record {
			delete(h.versions, name)
		}
	}
	return changed, removed
}
