package consul

import "github.com/hashicorp/consul/api"

// statusLeft marks a held check that left a failing set: passing now, or
// deleted.
const statusLeft = "(left)"

type checkInfo struct {
	service, node, status string
	createIndex, modify   uint64
}

func checkMap(list api.HealthChecks) map[string]checkInfo {
	checks := make(map[string]checkInfo, len(list))
	for _, c := range list {
		checks[c.Node+"/"+c.CheckID] = checkInfo{service: c.ServiceName, node: c.Node, status: c.Status,
			createIndex: c.CreateIndex, modify: c.ModifyIndex}
	}
	return checks
}

func (w *watch) onChecks(ev checksEvent) {
	d := w.answered(ev.dcGen, "checks/"+ev.state, ev.err)
	if d == nil {
		return
	}
	w.handleChecks(d, ev)
}

// handleChecks applies a checks listing: the baseline of every check, or
// the failing checks in one state, whose changes name the services to
// fetch.
func (w *watch) handleChecks(d *dcWatch, ev checksEvent) {
	if ev.reset {
		w.resync(d, "index_reset")
		return
	}
	dirtyNodes := map[string]bool{}
	if ev.state == api.HealthAny {
		// The first listing of this generation: every check.
		checks := checkMap(ev.checks)
		d.unhealthy = map[string]map[string]checkInfo{api.HealthCritical: {}, api.HealthWarning: {}}
		for k, c := range checks {
			// Fetches of this listing may have raced the check: a
			// service's index is at least that of its checks' writes.
			if s := d.svcs[c.service]; s != nil && s.index > 0 && s.index < c.modify {
				w.touch(d, c, dirtyNodes)
			}
			if set := d.unhealthy[c.status]; set != nil {
				set[k] = c
			}
		}
		d.checks, d.checksSeen = checks, true
	} else {
		// The checks in one failing state: one that enters or leaves
		// the set is a health flip (or a failing check created or
		// deleted). A check rewritten in the same state (its output
		// changed) changes nothing served.
		set, prev := checkMap(ev.checks), d.unhealthy[ev.state]
		for k, c := range set {
			if old, ok := prev[k]; !ok || old.service != c.service {
				w.touch(d, c, dirtyNodes)
			}
			d.checks[k] = c
		}
		for k, old := range prev {
			if _, ok := set[k]; !ok {
				w.touch(d, old, dirtyNodes)
				// Passing now, or deleted (its service is fetched
				// either way): which, and when, is not known.
				if held, ok := d.checks[k]; ok && held.status == ev.state {
					held.status = statusLeft
					d.checks[k] = held
				}
			}
		}
		d.unhealthy[ev.state] = set
	}
	w.fetchOnNodes(d, dirtyNodes)
	for index := range d.unexplained {
		if w.attribute(d, index) {
			delete(d.unexplained, index)
		}
	}
	if ev.state == api.HealthAny && len(d.unexplained) > 0 {
		w.startAttribution(d) // catalog changes seen before this baseline
	}
	w.checkListed(d)
}

// touch fetches the service of a check, or for a node check marks its node
// (every service on it is fetched).
func (w *watch) touch(d *dcWatch, c checkInfo, dirtyNodes map[string]bool) {
	if c.service == "" {
		dirtyNodes[c.node] = true
	} else if _, ok := d.names[c.service]; ok {
		w.enqueue(d, c.service, true)
	}
}

// fetchOnNodes fetches every service with an instance on one of nodes.
func (w *watch) fetchOnNodes(d *dcWatch, nodes map[string]bool) {
	if len(nodes) == 0 {
		return
	}
	for name, s := range d.svcs {
		for _, n := range s.nodes {
			if nodes[n] {
				w.enqueue(d, name, true)
				break
			}
		}
	}
}
