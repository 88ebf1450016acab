package zookeeper

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// apply records the answer to one read.
func (w *watcher) apply(j *job) {
	switch {
	case j.isRoot():
		w.applyRoot(j)
	case j.ovr:
		w.applyOverrides(j)
	case j.isSvc():
		w.applyInstances(j)
	default:
		w.applyNode(j)
	}
}

// applyRoot records the root's children: the services.
func (w *watcher) applyRoot(j *job) {
	root := w.r.cfg.Root
	if j.err != nil {
		w.failed(laterRead{}, root, j.err)
		return
	}
	w.succeeded(laterRead{})
	w.dirty.root = false
	if !j.exists {
		w.rootGone()
		return
	}
	if w.rootMissing != nil {
		// Back: every watch under it went with it. Read everything again; the Flush
		// after is a Replace (the outage began with rootGone).
		w.r.log.Info("the root znode exists again: listing it", "services_known", len(w.services))
		w.rootMissing = nil
		w.markAll()
		w.dirty.root = false // this is its listing
	}
	w.rootOK = true
	names := map[string]bool{}
	for _, name := range j.children {
		if !w.r.layout.isService(name) {
			continue
		}
		names[name] = true
		w.listed(name)
	}
	for name := range w.services {
		if !names[name] {
			w.removeService(name)
		}
	}
}

// listed records service znode name found in the root's listing: new, its paths are to be read;
// found gone before, it was created anew, without the watches of the old.
func (w *watcher) listed(name string) {
	root := w.r.cfg.Root
	s, ok := w.services[name]
	switch {
	case ok && s.missing:
		s.missing = false
		w.markService(name, s)
	case !ok:
		w.services[name] = &service{nodes: map[string]*node{}, served: map[string]*served{}}
		w.byPath[w.r.layout.instancesPath(root, name)] = name
		w.byPath[root+"/"+name] = name
		w.dirty.svc[name] = true
		if p := w.r.layout.overridesPath(root, name); p != "" {
			w.byOvrPath[p] = name
			w.dirty.ovr[name] = true
		}
	}
}

// applyOverrides records the children of a service's overrides node.
func (w *watcher) applyOverrides(j *job) {
	root := w.r.cfg.Root
	s, ok := w.services[j.name]
	delete(w.dirty.ovr, j.name)
	if !ok {
		return
	}
	if j.err != nil {
		w.failed(laterRead{name: j.name, ovr: true}, w.r.layout.overridesPath(root, j.name), j.err)
		return
	}
	w.succeeded(laterRead{name: j.name, ovr: true})
	w.accept(w.r.layout.overridesPath(root, j.name))
	w.setOverrides(j.name, s, j.children)
}

// applyInstances records the children of a service's instances node: its instance nodes.
func (w *watcher) applyInstances(j *job) {
	root := w.r.cfg.Root
	s, ok := w.services[j.name]
	if !ok {
		delete(w.dirty.svc, j.name)
		return
	}
	if j.err != nil {
		w.failed(laterRead{name: j.name}, w.r.layout.instancesPath(root, j.name), j.err)
		return
	}
	delete(w.dirty.svc, j.name)
	w.succeeded(laterRead{name: j.name})
	w.accept(w.r.layout.instancesPath(root, j.name))
	if !j.exists {
		// Gone, or the root with everything under it: the root's listing decides, so
		// that a deleted root keeps what was served (rootGone). Its children watch
		// fired too, so it is read soon.
		s.missing = true
		w.dirty.root = true
		return
	}
	ids := map[string]bool{}
	for _, id := range j.children {
		if len(id) > maxNodeName {
			w.overlongNode(j.name, s, id, ids)
			continue
		}
		ids[id] = true
		if _, ok := s.nodes[id]; !ok {
			w.newNode(j.name, s, id)
		}
	}
	for id := range s.nodes {
		if !ids[id] {
			w.removeNode(j.name, id)
		}
	}
	w.touch(j.name)
}

// newNode records instance node id of service name, just listed: its data is to be read, or
// (Dubbo 2) its name is its content.
func (w *watcher) newNode(name string, s *service, id string) {
	s.nodes[id] = &node{}
	if w.r.layout.readsData() {
		w.dirty.node[nodeKey{name, id}] = true
	} else {
		w.parse(name, id, s.nodes[id], nil)
	}
}

// applyNode records the data of an instance node.
func (w *watcher) applyNode(j *job) {
	delete(w.dirty.node, nodeKey{j.name, j.id})
	s, ok := w.services[j.name]
	if !ok {
		return
	}
	n, ok := s.nodes[j.id]
	if !ok {
		return
	}
	rec := w.r.layout.instancesPath(w.r.cfg.Root, j.name) + "/" + j.id
	if j.err == nil {
		w.succeeded(laterRead{name: j.name, id: j.id})
	}
	switch {
	case j.err != nil:
		// Not a connection error: an ACL, most likely. Say so on the record, and read it
		// again with a backoff (no watch was set).
		err := w.retryLater(laterRead{name: j.name, id: j.id}, rec, j.err)
		n.err = bad(reasonRead, fmt.Errorf("cannot read the node: %w", err))
	case !j.exists:
		w.removeNode(j.name, j.id)
		w.touch(j.name)
		return
	case len(j.data) > maxNodeData:
		n.err = bad(reasonSize, fmt.Errorf("the node holds %d bytes, more than the %d an instance may hold", len(j.data), maxNodeData))
	default:
		w.parse(j.name, j.id, n, j.data)
		w.touch(j.name)
		return
	}
	w.report(rec, n)
	w.touch(j.name)
}

// overlongNode records an instance znode whose name is longer than maxNodeName: rejected, under
// its name Cut (the same every listing, so that its deletion is seen), never read or parsed.
func (w *watcher) overlongNode(name string, s *service, id string, ids map[string]bool) {
	key := registry.Cut(id, registry.MaxRecordLen)
	ids[key] = true
	if _, ok := s.nodes[key]; ok {
		return
	}
	n := &node{err: bad(reasonSize, fmt.Errorf("the node's name is %d bytes, more than the %d an instance's may be", len(id), maxNodeName))}
	s.nodes[key] = n
	w.report(w.r.layout.instancesPath(w.r.cfg.Root, name)+"/"+key, n)
}

// setOverrides parses the children of a service's overrides node, reporting each malformed one
// (and clearing the reports of those gone), and makes the service's instances built again.
func (w *watcher) setOverrides(name string, s *service, ids []string) {
	p := w.r.layout.overridesPath(w.r.cfg.Root, name)
	slices.Sort(ids)
	for _, id := range s.overrideIDs {
		if _, found := slices.BinarySearch(ids, id); !found {
			w.accept(p + "/" + id)
		}
	}
	var rules []override
	for _, id := range ids {
		o, err := parseOverride(id)
		switch {
		case err == nil:
			rules = append(rules, o)
			w.accept(p + "/" + id)
		case errors.Is(err, errNotInstance):
			w.accept(p + "/" + id)
		default:
			w.reject(p+"/"+id, bad(reasonOverride, fmt.Errorf("override left out: %w", err)))
		}
	}
	s.overrideIDs = ids
	if !slices.Equal(rules, s.overrides) {
		s.overrides = rules
		w.touch(name)
	}
	w.changed = true
}

// parse reads instance node id of service name into n, and reports it accepted or rejected.
func (w *watcher) parse(name, id string, n *node, data []byte) {
	e, err := w.r.layout.parseInstance(name, id, data)
	switch {
	case err == nil:
		e.inst.Labels = w.services[name].labels.intern(e.inst.Labels)
		n.good, n.err = &e, nil
	case errors.Is(err, errNotInstance):
		n.good, n.err = nil, nil
	default:
		n.err = err
	}
	w.report(w.r.layout.instancesPath(w.r.cfg.Root, name)+"/"+id, n)
}

// reject reports record malformed (the core counts it by err's reason). The record is a znode's
// path with the secrets of a Dubbo URL in it redacted (redactRecord), as accept's.
func (w *watcher) reject(record string, err error) {
	w.rec.Reject(redactRecord(record), err)
}

// accept reports record well-formed (again).
func (w *watcher) accept(record string) { w.rec.Accept(redactRecord(record)) }

func (w *watcher) report(rec string, n *node) {
	if n.err != nil {
		err := n.err
		if n.good != nil {
			err = fmt.Errorf("%w (its previous version is still served)", err)
		}
		w.reject(rec, err)
	} else {
		w.accept(rec)
	}
	w.changed = true
}

func (w *watcher) touch(name string) {
	if w.touched == nil {
		w.touched = map[string]bool{}
	}
	w.touched[name] = true
	w.changed = true
}

func (w *watcher) removeNode(name, id string) {
	s := w.services[name]
	delete(s.nodes, id)
	delete(w.dirty.node, nodeKey{name, id})
	w.accept(w.r.layout.instancesPath(w.r.cfg.Root, name) + "/" + id)
	w.accept(w.r.layout.instancesPath(w.r.cfg.Root, name) + "/" + id + " (duplicate)")
	w.changed = true
}

func (w *watcher) removeService(name string) {
	s := w.services[name]
	for id := range s.nodes {
		w.removeNode(name, id)
	}
	if p := w.r.layout.overridesPath(w.r.cfg.Root, name); p != "" {
		w.accept(p)
		for _, id := range s.overrideIDs {
			w.accept(p + "/" + id)
		}
		delete(w.byOvrPath, p)
	}
	delete(w.services, name)
	delete(w.byPath, w.r.layout.instancesPath(w.r.cfg.Root, name))
	delete(w.byPath, w.r.cfg.Root+"/"+name)
	delete(w.dirty.svc, name)
	delete(w.dirty.ovr, name)
	delete(w.touched, name)
	delete(w.retiring.due, name)
	if w.r.layout.readsData() { // Curator: the znode's name is the service's
		w.rec.Remove(model.ServiceKey{Namespace: w.r.cfg.Namespace, Name: name})
	}
	for _, sn := range slices.Sorted(maps.Keys(s.served)) {
		if sn != name || !w.r.layout.readsData() {
			w.rec.Remove(model.ServiceKey{Namespace: w.r.cfg.Namespace, Name: sn})
		}
	}
	w.changed = true
}
