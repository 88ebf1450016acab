package zookeeper

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/galleon-mesh/galleon/model"
)

// build tells the Reconciler the new state of every service touched since the last build.
func (w *watcher) build() {
	now := time.Now()
	for _, name := range slices.Sorted(maps.Keys(w.touched)) {
		if s, ok := w.services[name]; ok {
			w.buildService(name, s, now)
		}
	}
	clear(w.touched)
}

// buildService tells the Reconciler the services built from service znode name.
func (w *watcher) buildService(name string, s *service, now time.Time) {
	s.labels.prune(s.nodes)
	eps, hds, ids := w.endpoints(name, s)
	// Each instance's contribution to its service's ports, in node name order: an
	// instance that would make its service invalid is left out, its node rejected.
	for sn, list := range eps {
		var served []model.Port
		if sv := s.served[sn]; sv != nil {
			served = sv.ports.ports
		}
		kept, refused := admitPorts(list, served)
		for _, r := range refused {
			w.reject(w.dupRecord(name, ids[sn][r.e.inst.ID]), r.err)
		}
		eps[sn] = kept
	}
	// Dubbo 2: the providers of one host (one URL per protocol) become one endpoint.
	if m, ok := w.r.layout.(merger); ok {
		for sn, list := range eps {
			eps[sn] = m.merge(list, &s.labels)
		}
	}
	if len(hds) == 0 && w.r.layout.readsData() {
		hds[name] = hostData{Name: name, Namespace: w.r.cfg.Namespace} // Curator: report the removal
	}
	delete(w.retiring.due, name)
	for _, sn := range slices.Sorted(maps.Keys(hds)) {
		w.buildServed(name, s, sn, hds[sn], eps[sn], now)
	}
}

// dupRecord is the record under which instance node id of service znode name is rejected as a
// duplicate (or its ports refused).
func (w *watcher) dupRecord(name, id string) string {
	return w.r.layout.instancesPath(w.r.cfg.Root, name) + "/" + id + " (duplicate)"
}

// endpoints sorts the well-formed instances of service znode name, with its overrides applied,
// by the service they belong to (eps), with the host data of each service: those built before
// (each stays, without instances, until the service znode goes) and those of the instances
// (hds). ids names the node of each instance ID served, by service.
func (w *watcher) endpoints(name string, s *service) (eps map[string][]*endpoint, hds map[string]hostData, ids map[string]map[string]string) {
	eps = map[string][]*endpoint{}
	hds = map[string]hostData{}
	for sn, sv := range s.served {
		hds[sn] = sv.hd
	}
	// Nodes in name order, so that of two nodes for the same instance ID (Dubbo: two
	// provider URLs with the same ip:port that differ in parameters) the same one is served
	// every time; the other is rejected until it is the only one.
	ids = map[string]map[string]string{} // service name -> instance ID -> node
	for _, id := range slices.Sorted(maps.Keys(s.nodes)) {
		n := s.nodes[id]
		dupRecord := w.dupRecord(name, id)
		if n.good == nil {
			w.accept(dupRecord)
			continue
		}
		good := withOverrides(n.good, s.overrides)
		hd := good.svc
		if hd.Name == "" {
			hd.Name = name
		}
		hd.Namespace = w.r.cfg.Namespace
		if ids[hd.Name] == nil {
			ids[hd.Name] = map[string]string{}
		}
		if first, dup := ids[hd.Name][good.inst.ID]; dup {
			w.reject(dupRecord, bad(reasonDuplicate, fmt.Errorf("instance %s of service %s is also registered by node %s, which is served", good.inst.ID, hd.Name, redactURL(first))))
			continue
		}
		w.accept(dupRecord)
		ids[hd.Name][good.inst.ID] = id
		eps[hd.Name] = append(eps[hd.Name], good)
		hds[hd.Name] = hd
	}
	return eps, hds, ids
}

// buildServed tells the Reconciler served name sn of service znode name: set with its
// instances, removed, or retired when it has been without instances for RetireEmptyAfter.
func (w *watcher) buildServed(name string, s *service, sn string, hd hostData, eps []*endpoint, now time.Time) {
	ns := w.r.cfg.Namespace
	var last portMemory
	var emptySince time.Time
	if sv := s.served[sn]; sv != nil {
		last = sv.ports
		if len(eps) == 0 {
			emptySince = cmp.Or(sv.emptySince, now)
		}
	}
	if !emptySince.IsZero() && w.retire(name, sn, emptySince, now) {
		delete(s.served, sn)
		w.rec.Remove(model.ServiceKey{Namespace: ns, Name: sn})
		return
	}
	svc, kept, ok, err := mapService(hd, w.r.host, eps, last)
	switch {
	case err != nil:
		w.reject(w.r.layout.instancesPath(w.r.cfg.Root, name), err)
	case ok:
		w.rec.Set(svc)
		s.served[sn] = &served{hd: hd, ports: kept, emptySince: emptySince}
	default:
		w.rec.Remove(model.ServiceKey{Namespace: ns, Name: sn})
	}
}
