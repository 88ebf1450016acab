package consul

import "slices"

func (w *watch) onCatalog(ev catalogEvent) {
	d := w.answered(ev.dcGen, "catalog", ev.err)
	if d == nil {
		return
	}
	if ev.filtered && !d.warnedFiltered {
		// Consul answers a token that may not read a service by
		// leaving it out, not with an error: say so once, since
		// those services are not served.
		d.warnedFiltered = true
		w.log.Warn("the ACL token cannot read every service of the catalog: those it cannot read are not served (grant service:read and node:read)",
			"datacenter", dcLabel(d.name))
	}
	if !w.cfg.IncludeConsulService {
		// Not listed, so never fetched, watched or swept: as if the
		// catalog did not hold it.
		delete(ev.names, ConsulService)
	}
	w.handleCatalog(d, ev)
}

// handleCatalog applies a catalog listing: the first of a generation
// fetches every service; a later one, the services added, removed or
// retagged, and a change of index that changed none of them is
// attributed through the checks (see attribute) or left to a sweep, unless
// every service has a watch of its own, which answers for it.
func (w *watch) handleCatalog(d *dcWatch, ev catalogEvent) {
	if ev.reset {
		w.resync(d, "index_reset")
		return
	}
	if !d.catalogSeen {
		d.catalogSeen, d.catalogIndex, d.names = true, ev.index, ev.names
		for name := range d.svcs {
			if _, ok := ev.names[name]; !ok {
				w.forget(d, name)
			}
		}
		for name := range ev.names {
			if d.watching(name) {
				// Watches end with a generation: this one was started
				// by a fetch of this generation, and holds the service.
				continue
			}
			d.awaiting[name] = true
			w.enqueue(d, name, true)
		}
		w.checkListed(d)
		return
	}
	// The listing is diffed even when the index did not move: a server
	// whose state was wiped can come back with an index equal to the one
	// held, and its listing is still the truth.
	moved := ev.index != d.catalogIndex
	changed := false
	for name, tags := range ev.names {
		old, ok := d.names[name]
		if !ok || !sameTags(old, tags) {
			changed = true
			w.enqueue(d, name, true)
		}
	}
	for name := range d.names {
		if _, ok := ev.names[name]; !ok {
			changed = true
			w.forget(d, name)
		}
	}
	d.names, d.catalogIndex = ev.names, ev.index
	if moved && !changed && !d.watchedAll() && !w.attribute(d, ev.index) {
		d.unexplained[ev.index] = true
		if d.checksSeen {
			// A passing check (in neither signal) may have been
			// written or deleted at this index.
			w.startAttribution(d)
		}
	}
}

func sameTags(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
