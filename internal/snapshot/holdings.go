package snapshot

import (
	"maps"
	"slices"
)

// Holdings is what one incremental client (a Delta xDS stream, an
// incremental legacy MCP sink) holds of one collection: the version of each
// resource it has. CatchUp works out what it lacks.
type Holdings struct {
	// Versions maps each held resource to its version.
	Versions map[string]string
	// Seq is the collection sequence number Versions reflects; 0 means they
	// were never compared with a collection (a new client, or one resuming
	// from what it says it has), so the next CatchUp compares everything.
	Seq uint64
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
	if h.Versions == nil {
		h.Versions = map[string]string{}
	}
	defer func() { h.Seq = col.Seq }()
	if h.Seq != 0 {
		if names, ok := col.ChangedSince(h.Seq); ok {
			candidates := append(names, extra...)
			slices.Sort(candidates)
			for _, name := range slices.Compact(candidates) {
				changed, removed = h.compare(name, col.Get(name), scope, changed, removed)
			}
			return changed, removed
		}
	}
	// Full comparison: the collection is already in name order; what the
	// client holds that is gone follows, sorted.
	if scope.All {
		for _, r := range col.Resources() {
			changed, removed = h.compare(r.Name, r, scope, changed, removed)
		}
	} else {
		for _, name := range slices.Sorted(maps.Keys(scope.Names)) {
			changed, removed = h.compare(name, col.Get(name), scope, changed, removed)
		}
	}
	var gone []string
	for name := range h.Versions {
		if col.Get(name) == nil {
			gone = append(gone, name)
		}
	}
	slices.Sort(gone)
	for _, name := range gone {
		changed, removed = h.compare(name, nil, scope, changed, removed)
	}
	return changed, removed
}

// compare decides what the client needs for one name, r being the resource
// of that name (nil when there is none), and records it as held.
func (h *Holdings) compare(name string, r *Resource, scope Scope, changed []*Resource, removed []string) ([]*Resource, []string) {
	held, has := h.Versions[name]
	switch {
	case r != nil && scope.Wants(name) && held != r.Version:
		changed = append(changed, r)
		h.Versions[name] = r.Version
	case r == nil && has:
		removed = append(removed, name)
		delete(h.Versions, name)
	}
	return changed, removed
}
