package zookeeper

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/model"
)

// build tells the Reconciler the new state of every service touched since the last build (and
// of those a build touched: the next in line for a name whose service went, claims.go).
func (w *watcher) build() {
	now := time.Now()
	defer w.parts.prune(w.services)
	for len(w.touched) > 0 {
		sps := slices.Sorted(maps.Keys(w.touched))
		clear(w.touched)
		for _, sp := range sps {
			if s, ok := w.services[sp]; ok {
				w.buildService(sp, s, now)
			}
		}
	}
}

// servedKey is a service built from a service znode: its name, and the layout its instances
// were read as (a root Curator and Dubbo 3 share may hold both under one znode).
type servedKey struct {
	kind layoutKind
	name string
}

func compareServed(a, b servedKey) int {
	return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.name, b.name))
}

// buildService tells the Reconciler the services built from service znode sp.
func (w *watcher) buildService(sp string, s *service, now time.Time) {
	t, name := w.split(sp)
	s.labels.prune(s.nodes)
	eps, hds, ids := w.endpoints(sp, s)
	// Each instance's contribution to its service's ports, in instance ID order: an
	// instance that would make its service invalid is left out, its node rejected (once its
	// name is known: a Dubbo 2 provider's is read again, needName).
	for sn, list := range eps {
		var served []model.Port
		if sv := s.served[sn]; sv != nil {
			served = sv.ports.ports
		}
		kept, refused := admitPorts(list, served)
		for _, r := range refused {
			if n := ids[sn][r.e.inst.ID]; n.name != "" {
				w.reject(w.dupRecord(sp, n.name), r.err)
			} else {
				w.needName(sp, n)
			}
		}
		eps[sn] = kept
	}
	// Dubbo 2: the providers of one host (one URL per protocol) become one endpoint.
	if m, ok := t.layout.(merger); ok {
		for sn, list := range eps {
			eps[sn] = m.merge(list, &s.labels)
		}
	}
	if len(hds) == 0 && t.layout.readsData() {
		// Curator: report the removal.
		hds[servedKey{t.kinds[0], name}] = hostData{Name: name, Namespace: w.r.cfg.Namespace}
	}
	delete(w.retiring.due, sp)
	for _, sn := range slices.SortedFunc(maps.Keys(hds), compareServed) {
		w.buildServed(sp, s, sn, hds[sn], eps[sn], now)
	}
}

// dupRecord is the record under which instance node id of service znode sp is rejected as a
// duplicate (or its ports refused).
func (w *watcher) dupRecord(sp, id string) string {
	t, name := w.split(sp)
	return t.ins(name) + "/" + id + " (duplicate)"
}

// acceptDup accepts instance node id of service znode sp as no duplicate; its record is built
// only when something is rejected (accept: every node of every service built passes here).
func (w *watcher) acceptDup(sp, id string) {
	if w.rec.Rejected() > 0 {
		w.accept(w.dupRecord(sp, id))
	}
}

// endpoints sorts the well-formed instances of service znode sp, with its overrides applied,
// by the service they belong to (eps, each in instance ID order), with the host data of each
// service: those built before (each stays, without instances, until the service znode goes)
// and those of the instances (hds). ids names the node of each instance ID served, by service.
func (w *watcher) endpoints(sp string, s *service) (eps map[servedKey][]*endpoint, hds map[servedKey]hostData, ids map[servedKey]map[string]*node) {
	name := path.Base(sp)
	eps = map[servedKey][]*endpoint{}
	hds = map[servedKey]hostData{}
	for sn, sv := range s.served {
		hds[sn] = sv.hd
	}
	// Nodes in instance ID order and, of two nodes for the same instance ID (Dubbo: two
	// provider URLs with the same ip:port that differ in parameters), in name order, so that
	// the same one is served every time; the other is rejected until it is the only one. Both
	// have their names (markDuplicates; a layout that reads data keeps every name).
	nodes := make([]*node, 0, len(s.nodes))
	for _, n := range s.nodes {
		if n.good == nil {
			w.acceptDup(sp, n.name)
			continue
		}
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b *node) int {
		return cmp.Or(strings.Compare(a.good.inst.ID, b.good.inst.ID), strings.Compare(a.name, b.name))
	})
	ids = map[servedKey]map[string]*node{} // service -> instance ID -> node
	for _, n := range nodes {
		good := withOverrides(n.good, s.overrides)
		hd := good.host()
		if hd.Name == "" {
			hd.Name = name
		}
		hd.Namespace = w.r.cfg.Namespace
		k := servedKey{good.kind, hd.Name}
		if ids[k] == nil {
			ids[k] = map[string]*node{}
		}
		if first, dup := ids[k][good.inst.ID]; dup {
			if n.name == "" || first.name == "" { // not expected (markDuplicates): read them
				w.needName(sp, n)
				w.needName(sp, first)
				continue
			}
			w.reject(w.dupRecord(sp, n.name), bad(reasonDuplicate, fmt.Errorf("instance %s of service %s is also registered by node %s, which is served", good.inst.ID, hd.Name, redactURL(first.name))))
			continue
		}
		if n.name != "" {
			w.acceptDup(sp, n.name)
		}
		ids[k][good.inst.ID] = n
		eps[k] = append(eps[k], good)
		hds[k] = hd
	}
	return eps, hds, ids
}

// buildServed tells the Reconciler served service sn of service znode sp: set with its
// instances (when no service ranked before it has its name: claims.go), removed, or retired
// when it has been without instances for RetireEmptyAfter.
func (w *watcher) buildServed(sp string, s *service, sn servedKey, hd hostData, eps []*endpoint, now time.Time) {
	c := w.claimantOf(sp, sn.kind)
	var last portMemory
	var emptySince time.Time
	if sv := s.served[sn]; sv != nil {
		last = sv.ports
		if len(eps) == 0 {
			emptySince = cmp.Or(sv.emptySince, now)
		}
	}
	if !emptySince.IsZero() && w.retire(sp, sn.name, emptySince, now) {
		delete(s.served, sn)
		w.unclaim(sn.name, c)
		return
	}
	svc, kept, ok, err := mapService(hd, w.r.hosts[sn.kind], eps, last)
	switch {
	case err != nil:
		t, name := w.split(sp)
		w.reject(t.ins(name), err)
	case ok:
		s.served[sn] = &served{hd: hd, ports: kept, emptySince: emptySince}
		w.claim(sn.name, c, svc)
	default:
		w.unclaim(sn.name, c)
	}
}
