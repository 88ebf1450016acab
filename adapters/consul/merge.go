package consul

import (
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/galleon-mesh/galleon/model"
)

// partRef names one datacenter's part of a service.
type partRef struct{ dc, name string }

// collision is the rejection of a part whose Consul name sanitises to the
// key of a service with a smaller name.
type collision struct {
	key    model.ServiceKey
	record string
}

// setPart replaces the part one datacenter contributes for a service and
// hands the services it affects, merged again, to the reconciler.
func (w *watch) setPart(d *dcWatch, name string, p *part) {
	s := d.svcs[name]
	if s == nil {
		if p == nil {
			return
		}
		s = &dcService{}
		d.svcs[name] = s
	}
	old := s.part
	// A service fetched again unchanged (a probe's index moved by a write
	// that changed nothing served, a relisting) is not merged again: the
	// mapping is deterministic, so an equal part makes an equal service.
	if reflect.DeepEqual(old, p) {
		return
	}
	s.part = p
	ref := partRef{d.name, name}
	if old != nil {
		if refs := w.byKey[old.key]; refs != nil {
			delete(refs, ref)
			if len(refs) == 0 {
				delete(w.byKey, old.key)
			}
		}
	}
	if p != nil {
		refs := w.byKey[p.key]
		if refs == nil {
			refs = map[partRef]bool{}
			w.byKey[p.key] = refs
		}
		refs[ref] = true
	}
	if old != nil {
		w.remerge(old.key)
	}
	if p != nil && (old == nil || old.key != p.key) {
		w.remerge(p.key)
	}
}

// forget drops what a datacenter holds of a service gone from it: its
// part, and its rejected records.
func (w *watch) forget(d *dcWatch, name string) {
	w.setPart(d, name, nil)
	if s := d.svcs[name]; s != nil {
		w.stopWatch(d, s)
		for record := range s.rejected {
			w.report.Accept(record)
		}
	}
	delete(d.svcs, name)
}

// remerge hands the reconciler the service of key as its parts make it
// now, or its removal when none is left.
func (w *watch) remerge(key model.ServiceKey) {
	if svc, ok := w.service(key); ok {
		w.report.Set(svc)
	} else {
		w.report.Remove(key)
	}
}

// service merges the parts of key from every datacenter. Two Consul
// services whose names sanitise to the same key do not merge: the smaller
// name wins and the other is rejected, until it no longer collides.
func (w *watch) service(key model.ServiceKey) (model.Service, bool) {
	refs := w.byKey[key]
	winner := ""
	for ref := range refs {
		if winner == "" || ref.name < winner {
			winner = ref.name
		}
	}
	var parts []*part
	for ref := range refs {
		d := w.dcs[ref.dc]
		if d == nil || d.svcs[ref.name] == nil || d.svcs[ref.name].part == nil {
			continue
		}
		p := d.svcs[ref.name].part
		if ref.name != winner {
			c := collision{key: key, record: recordName(p.dc, ref.name, "", "")}
			w.collided[ref] = c
			w.report.Reject(c.record, errNameTaken(key, winner))
			continue
		}
		parts = append(parts, p)
	}
	for ref, c := range w.collided {
		if c.key == key && (!refs[ref] || ref.name == winner) {
			delete(w.collided, ref)
			w.acceptCollision(ref, c.record)
		}
	}
	if len(parts) == 0 {
		return model.Service{}, false
	}
	return merge(parts), true
}

// acceptCollision accepts the record of a part that no longer collides,
// unless the mapping rejects that record now: a service rejected as a
// whole shares its record name with its collision (and has no part).
func (w *watch) acceptCollision(ref partRef, record string) {
	if d := w.dcs[ref.dc]; d != nil {
		if s := d.svcs[ref.name]; s != nil && s.rejected[record] {
			return
		}
	}
	w.report.Accept(record)
}

// merge builds the service of one key from the parts every datacenter
// contributes (sorted by datacenter). Hosts, ports and instances are the
// union; a port number two parts disagree on takes the protocol of the
// first datacenter's part. The result is fresh: nothing is shared with the
// parts, so the Sink may keep it.
func merge(parts []*part) model.Service {
	sort.Slice(parts, func(i, j int) bool { return parts[i].dc < parts[j].dc })
	first := parts[0]
	svc := model.Service{
		Namespace: first.key.Namespace,
		Name:      first.key.Name,
		ExportTo:  slices.Clone(first.exportTo),
	}
	seenHost := map[string]bool{}
	ports := map[uint32]model.Port{}
	for _, p := range parts {
		if !seenHost[p.host] {
			seenHost[p.host] = true
			svc.Hosts = append(svc.Hosts, p.host)
		}
		if p.external {
			svc.Location = model.MeshExternal
		}
		for _, port := range p.ports {
			if _, ok := ports[port.Number]; !ok {
				ports[port.Number] = port
			}
		}
		for _, inst := range p.instances {
			inst.Labels = maps.Clone(inst.Labels)
			svc.Instances = append(svc.Instances, inst)
		}
	}
	sort.Strings(svc.Hosts)
	for _, port := range ports {
		svc.Ports = append(svc.Ports, port)
	}
	svc.Ports = model.SortedPorts(svc.Ports)
	slices.SortFunc(svc.Instances, func(a, b model.Instance) int { return strings.Compare(a.ID, b.ID) })
	return svc
}
