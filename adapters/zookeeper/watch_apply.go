package zookeeper

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

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

// applyRoot records a root's children: the services.
func (w *watcher) applyRoot(j *job) {
	root := j.t.root
	rs := w.roots[root]
	if j.err != nil {
		w.failed(laterRead{root: root}, root, j.err)
		return
	}
	w.succeeded(laterRead{root: root})
	rs.dirty = false
	if !j.exists {
		w.rootGone(rs)
		return
	}
	if rs.missing != nil {
		// Back: every watch under it went with it. Read everything again; the Flush
		// after is a Replace (the outage began with rootGone).
		w.r.log.Info("the root znode exists again: listing it", "root", root, "services_known", len(w.services))
		rs.missing = nil
		w.markAll()
		rs.dirty = false // this is its listing
	}
	rs.ok = true
	names := map[string]bool{}
	for _, name := range j.children {
		if !j.t.layout.isService(name) {
			continue
		}
		names[name] = true
		w.listed(root + "/" + name)
	}
	for sp := range w.services {
		if path.Dir(sp) == root && !names[path.Base(sp)] {
			w.removeService(sp)
		}
	}
}

// listed records service znode sp found in its root's listing: new, its paths are to be read;
// found gone before, it was created anew, without the watches of the old.
func (w *watcher) listed(sp string) {
	s, ok := w.services[sp]
	switch {
	case ok && s.missing:
		s.missing = false
		w.markService(sp, s)
	case !ok:
		t, name := w.split(sp)
		w.services[sp] = &service{nodes: map[nodeHash]*node{}, served: map[servedKey]*served{}}
		w.byPath[t.ins(name)] = sp
		w.byPath[sp] = sp
		w.dirty.svc[sp] = true
		if p := t.ovr(name); p != "" {
			w.byOvrPath[p] = sp
			w.dirty.ovr[sp] = true
		}
	}
}

// applyOverrides records the children of a service's overrides node.
func (w *watcher) applyOverrides(j *job) {
	t, name := w.split(j.name)
	s, ok := w.services[j.name]
	delete(w.dirty.ovr, j.name)
	if !ok {
		return
	}
	if j.err != nil {
		w.failed(laterRead{name: j.name, ovr: true}, t.ovr(name), j.err)
		return
	}
	w.succeeded(laterRead{name: j.name, ovr: true})
	w.accept(t.ovr(name))
	w.setOverrides(j.name, s, j.children)
}

// applyInstances records the children of a service's instances node: its instance nodes.
func (w *watcher) applyInstances(j *job) {
	t, name := w.split(j.name)
	s, ok := w.services[j.name]
	if !ok {
		delete(w.dirty.svc, j.name)
		return
	}
	if j.err != nil {
		w.failed(laterRead{name: j.name}, t.ins(name), j.err)
		return
	}
	delete(w.dirty.svc, j.name)
	w.succeeded(laterRead{name: j.name})
	w.accept(t.ins(name))
	if !j.exists {
		// Gone, or the root with everything under it: the root's listing decides, so
		// that a deleted root keeps what was served (rootGone). Its children watch
		// fired too, so it is read soon.
		s.missing = true
		w.roots[t.root].dirty = true
		return
	}
	seen := make(map[nodeHash]bool, len(j.children))
	added := false
	for _, id := range j.children {
		if len(id) > maxNodeName {
			w.overlongNode(j.name, s, id, seen)
			continue
		}
		k := w.hash.of(id)
		seen[k] = true
		switch n, ok := s.nodes[k]; {
		case !ok:
			w.newNode(j.name, s, k, id)
			added = true
		case n.wantName:
			n.name, n.wantName = id, false
		}
	}
	for k, n := range s.nodes {
		if !seen[k] {
			w.removeNode(j.name, k, n)
		}
	}
	if added && !t.layout.readsData() {
		w.markDuplicates(s, j.children)
	}
	w.touch(j.name)
}

// newNode records instance node id (key k) of service znode sp, just listed: its data is to be
// read, or (Dubbo 2) its name is its content.
func (w *watcher) newNode(sp string, s *service, k nodeHash, id string) {
	n := &node{}
	s.nodes[k] = n
	if t, _ := w.split(sp); t.layout.readsData() {
		n.name = id
		w.dirty.node[nodeKey{sp, id}] = true
	} else {
		w.parse(sp, id, n, nil)
	}
}

// markDuplicates keeps the names of the well-formed nodes of s that share their service and
// instance ID with another (endpoints serves the first of them in name order, and names the
// others' records), from the listing (children) that just added nodes to s: a duplicate can
// only appear with a new node, since a Dubbo 2 node's content is its name.
func (w *watcher) markDuplicates(s *service, children []string) {
	var good []*node
	for _, n := range s.nodes {
		if n.good != nil {
			good = append(good, n)
		}
	}
	slices.SortFunc(good, func(a, b *node) int { return compareInstance(a.good, b.good) })
	missing := false
	for i := 1; i < len(good); i++ {
		if compareInstance(good[i-1].good, good[i].good) != 0 {
			continue
		}
		for _, n := range good[i-1 : i+1] {
			if n.name == "" {
				n.wantName, missing = true, true
			}
		}
	}
	if !missing {
		return
	}
	for _, id := range children {
		if n := s.nodes[w.hash.of(id)]; n != nil && n.wantName {
			n.name, n.wantName = id, false
		}
	}
}

// compareInstance orders endpoints by the service they belong to (layout, then name: "" the
// service znode's own), then instance ID; 0 for the same instance of one service.
func compareInstance(a, b *endpoint) int {
	return cmp.Or(cmp.Compare(a.kind, b.kind), strings.Compare(a.host().Name, b.host().Name), strings.Compare(a.inst.ID, b.inst.ID))
}

// needName asks for the name of node n of service znode sp (a nameless Dubbo 2 provider
// whose record must be reported): the next listing of sp keeps it (applyInstances).
func (w *watcher) needName(sp string, n *node) {
	n.wantName = true
	w.dirty.svc[sp] = true
}

// applyNode records the data of an instance node.
func (w *watcher) applyNode(j *job) {
	delete(w.dirty.node, nodeKey{j.name, j.id})
	s, ok := w.services[j.name]
	if !ok {
		return
	}
	n := w.nodeOf(s, j.id)
	if n == nil {
		return
	}
	t, name := w.split(j.name)
	rec := t.ins(name) + "/" + j.id
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
		w.removeNode(j.name, w.hash.of(j.id), n)
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
func (w *watcher) overlongNode(sp string, s *service, id string, seen map[nodeHash]bool) {
	key := registry.Cut(id, registry.MaxRecordLen)
	k := w.hash.of(key)
	seen[k] = true
	if _, ok := s.nodes[k]; ok {
		return
	}
	n := &node{err: bad(reasonSize, fmt.Errorf("the node's name is %d bytes, more than the %d an instance's may be", len(id), maxNodeName)), name: key}
	s.nodes[k] = n
	t, name := w.split(sp)
	w.report(t.ins(name)+"/"+key, n)
}

// setOverrides parses the children of a service's overrides node, reporting each malformed one
// (and clearing the reports of those gone), and makes the service's instances built again.
func (w *watcher) setOverrides(sp string, s *service, ids []string) {
	t, name := w.split(sp)
	p := t.ovr(name)
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
		w.touch(sp)
	}
	w.changed = true
}

// parse reads instance node id of service znode sp into n, and reports it accepted or rejected.
func (w *watcher) parse(sp, id string, n *node, data []byte) {
	t, name := w.split(sp)
	e, err := t.layout.parseInstance(name, id, data)
	switch {
	case err == nil:
		e.inst.Labels = w.services[sp].labels.intern(e.inst.Labels)
		w.parts.share(&e)
		n.good, n.err = &e, nil
	case errors.Is(err, errNotInstance):
		n.good, n.err = nil, nil
	default:
		n.err = err
	}
	if n.good == nil {
		n.name = id // its record is reported (node.name)
	}
	if n.err == nil && w.rec.Rejected() == 0 {
		w.changed = true // report's accept, without building the record (accept)
		return
	}
	w.report(t.ins(name)+"/"+id, n)
}

// reject reports record malformed (the core counts it by err's reason). The record is a znode's
// path with the secrets of a Dubbo URL in it redacted (redactRecord), as accept's.
func (w *watcher) reject(record string, err error) {
	w.rec.Reject(redactRecord(record), err)
}

// accept reports record well-formed (again). Every node read is accepted, so with nothing
// rejected the record is not even redacted: at 100,000 providers the redaction was a quarter
// of the listing's CPU (docs/benchmarks.md, galleon-bench zookeeper).
func (w *watcher) accept(record string) {
	if w.rec.Rejected() == 0 {
		return
	}
	w.rec.Accept(redactRecord(record))
}

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

// removeNode forgets node n (key k) of service znode sp, and clears its records.
func (w *watcher) removeNode(sp string, k nodeHash, n *node) {
	delete(w.services[sp].nodes, k)
	w.changed = true
	if n.name == "" {
		return // a node without its name kept was never reported rejected (node.name)
	}
	delete(w.dirty.node, nodeKey{sp, n.name})
	t, name := w.split(sp)
	rec := t.ins(name) + "/" + n.name
	w.accept(rec)
	w.accept(rec + " (duplicate)")
}

// nodeOf is instance node id of service s, nil when s has none by that name.
func (w *watcher) nodeOf(s *service, id string) *node { return s.nodes[w.hash.of(id)] }

func (w *watcher) removeService(sp string) {
	s := w.services[sp]
	t, name := w.split(sp)
	for k, n := range s.nodes {
		w.removeNode(sp, k, n)
	}
	if p := t.ovr(name); p != "" {
		w.accept(p)
		for _, id := range s.overrideIDs {
			w.accept(p + "/" + id)
		}
		delete(w.byOvrPath, p)
	}
	delete(w.services, sp)
	delete(w.byPath, t.ins(name))
	delete(w.byPath, sp)
	delete(w.dirty.svc, sp)
	delete(w.dirty.ovr, sp)
	delete(w.touched, sp)
	delete(w.retiring.due, sp)
	reported := false
	for _, sn := range slices.SortedFunc(maps.Keys(s.served), compareServed) {
		w.unclaim(sn.name, w.claimantOf(sp, sn.kind))
		reported = reported || sn.name == name
	}
	if t.layout.readsData() && !reported { // Curator: the znode's name is the service's
		w.unclaim(name, w.claimantOf(sp, t.kinds[0]))
	}
	w.changed = true
}
