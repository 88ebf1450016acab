package consul

import (
	"context"

	"github.com/hashicorp/consul/api"
)

// startAttribution reads the checks table's index, then if needed every
// check, to attribute the unexplained catalog indexes (see
// handleAttribution).
func (w *watch) startAttribution(d *dcWatch) {
	if d.attributing {
		d.attributeAgain = true
		return
	}
	d.attributing = true
	at, ctx := dcGen{d.name, d.gen}, d.ctx
	w.goFunc(func() { w.listChecks(ctx, at, false) })
}

// listChecks reads, once (non-blocking), every check of a datacenter with
// full, else only the checks table's index (with the critical checks,
// which Consul lists from an index), retrying until it succeeds or the
// datacenter's context ends.
func (w *watch) listChecks(ctx context.Context, at dcGen, full bool) {
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	state := api.HealthCritical
	if full {
		state = api.HealthAny
	}
	for {
		checks, idx, err := w.c.checks(ctx, at.dc, 0, state)
		if ctx.Err() != nil {
			return
		}
		if !w.send(attributionEvent{dcGen: at, full: full, checks: checks, index: idx, err: err}) || (err != nil && !sleep(ctx, bo.next())) {
			return
		}
		if err == nil {
			return
		}
	}
}

// attribute fetches the services whose checks, as known, were created or
// written in the raft transaction at index (an agent syncs a service
// together with its checks, and a catalog registration carries them in the
// same write), and reports whether there were any.
func (w *watch) attribute(d *dcWatch, index uint64) bool {
	if !d.checksSeen {
		return false
	}
	found := false
	nodes := map[string]bool{}
	for _, c := range d.checks {
		if c.createIndex != index && c.modify != index {
			continue
		}
		found = true
		if c.service == "" {
			nodes[c.node] = true
		} else if _, ok := d.names[c.service]; ok {
			w.enqueue(d, c.service, true)
		}
	}
	w.fetchOnNodes(d, nodes)
	return found
}

func (w *watch) onAttribution(ev attributionEvent) {
	d := w.answered(ev.dcGen, "fetch", ev.err)
	if d == nil {
		return
	}
	w.handleAttribution(d, ev)
}

// handleAttribution settles the unexplained catalog indexes. First from the
// checks table's index: a catalog index above it wrote no check, and is
// left to a sweep. Then, if any is at or below it, from a full listing
// diffed against the last one: the services whose checks were created,
// changed or removed since are fetched; an index a check was created or
// written at is attributed, and so is the table's own index if a check was
// deleted (the table's index is that of its last write); the others are
// left to a sweep.
func (w *watch) handleAttribution(d *dcWatch, ev attributionEvent) {
	w.log.Debug("consul attribution", "datacenter", dcLabel(d.name), "full", ev.full, "checks_index", ev.index, "unexplained", len(d.unexplained))
	sweep := false
	if !ev.full {
		list := false
		for index := range d.unexplained {
			if index > ev.index {
				delete(d.unexplained, index)
				sweep = true
			} else {
				list = true
			}
		}
		if sweep {
			w.sweep(d, "unattributed")
		}
		if list {
			w.m.listings.Inc()
			at, ctx := dcGen{d.name, d.gen}, d.ctx
			w.goFunc(func() { w.listChecks(ctx, at, true) })
			return
		}
		w.attributionDone(d)
		return
	}
	checks := checkMap(ev.checks)
	dirtyNodes := map[string]bool{}
	deleted := false
	for k, c := range checks {
		old, ok := d.checks[k]
		if ok && old.status == statusLeft && c.status == api.HealthPassing {
			continue // its service was fetched when it left the failing set
		}
		if !ok || old.status != c.status || old.service != c.service {
			w.touch(d, c, dirtyNodes)
		}
	}
	for k, old := range d.checks {
		if _, ok := checks[k]; !ok && old.status != statusLeft {
			// (A check that left a failing set and is gone now was
			// deleted then or since: its service was fetched, but the
			// index it went at is not known.)
			deleted = true
			w.touch(d, old, dirtyNodes)
		}
	}
	w.fetchOnNodes(d, dirtyNodes)
	d.checks = checks
	for index := range d.unexplained {
		switch {
		case w.attribute(d, index), deleted && index == ev.index:
			delete(d.unexplained, index)
		case index > ev.index && d.attributeAgain:
			// Seen after this listing was read: the next one decides.
		default:
			delete(d.unexplained, index)
			sweep = true
		}
	}
	if sweep {
		w.sweep(d, "unattributed")
	}
	w.attributionDone(d)
}

// attributionDone ends an attribution, and starts the next if one was
// asked for meanwhile.
func (w *watch) attributionDone(d *dcWatch) {
	d.attributing = false
	if d.attributeAgain {
		d.attributeAgain = false
		if len(d.unexplained) > 0 {
			w.startAttribution(d)
		}
	}
}
