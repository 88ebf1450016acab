package zookeeper

import (
	"hash/maphash"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// service is what the adapter knows of one service znode.
type service struct {
	// nodes are its instance nodes, by a hash of their name (nodeHasher): a Dubbo 2 provider's
	// name is its whole URL, ~420 bytes, and the names were a quarter of the adapter's live
	// heap at 100,000 providers (docs/benchmarks.md, galleon-bench zookeeper). A node keeps its
	// name (node.name) only where it is needed: see node.
	nodes map[nodeHash]*node
	// served are the services built from this znode, by layout and name, with the ports
	// reported last (kept when the last instance leaves): one in the Curator layout, one per
	// group and version in the Dubbo layout, one per layout in a root Curator and Dubbo 3
	// share whose znode holds instances of both.
	served map[servedKey]*served
	// overrides are the well-formed rules under overridesPath, in node name order.
	overrides []override
	// overrideIDs are the children of overridesPath last read, to clear the rejections of
	// those that go.
	overrideIDs []string
	// labels holds one copy of each distinct label set of the service's instances.
	labels labelSets
	// missing: its znode was found gone; the root's listing decides whether it is (so that a
	// root deleted with everything under it removes nothing: see apply).
	missing bool
}

// labelSets keeps one map per distinct label set. The instances of one service mostly carry the
// same labels (a Dubbo interface's providers: application, version, dubbo, release), and a map
// per instance was the adapter's largest cost in a large registry (see docs/benchmarks.md,
// galleon-bench zookeeper: the live heap before and after). The maps are never modified
// once stored, so instances, and the services handed to the Sink, share them: the Sink treats
// what it is given as read-only (registry.Sink).
type labelSets struct {
	sets map[string]map[string]string
}

// intern returns the stored map equal to m (m itself the first time it is seen).
func (ls *labelSets) intern(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	k := labelKey(m)
	if have, ok := ls.sets[k]; ok {
		return have
	}
	if ls.sets == nil {
		ls.sets = map[string]map[string]string{}
	}
	// The values may be substrings of a large input (a decoded provider URL): keep copies,
	// so that the input can go.
	own := make(map[string]string, len(m))
	for k, v := range m {
		own[strings.Clone(k)] = strings.Clone(v)
	}
	ls.sets[k] = own
	return own
}

// prune drops the sets no node uses any more, once the table holds more sets than nodes: the
// cost is amortised over the interns that grew it.
func (ls *labelSets) prune(nodes map[nodeHash]*node) {
	if len(ls.sets) <= len(nodes)+8 {
		return
	}
	used := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if n.good != nil && len(n.good.inst.Labels) > 0 {
			used[labelKey(n.good.inst.Labels)] = true
		}
	}
	maps.DeleteFunc(ls.sets, func(k string, _ map[string]string) bool { return !used[k] })
}

// sharedParts keeps one copy of each distinct host data and single port of the instances of
// every service, for the reason labelSets keeps label sets: the providers of one Dubbo
// interface name the same service and, mostly, all use one port, and a copy of each per provider
// was a fifth of the adapter's own live heap at 100,000 providers (docs/benchmarks.md,
// galleon-bench zookeeper). One table for all services, not one each: a map per service cost
// more than the copies it saved. What it hands out is never modified.
type sharedParts struct {
	hosts map[hostData]*hostData
	ports map[model.Port][]model.Port
	// live is how many entries the last prune kept: the next prunes once the tables hold
	// twice as many, so that its cost (every node) is amortised over the shares that grew them.
	live int
}

// share makes e's host data and (single) port list the stored copies equal to them.
func (sp *sharedParts) share(e *endpoint) {
	if e.svc != nil {
		if have, ok := sp.hosts[*e.svc]; ok {
			e.svc = have
		} else {
			if sp.hosts == nil {
				sp.hosts = map[hostData]*hostData{}
			}
			sp.hosts[*e.svc] = e.svc
		}
	}
	if len(e.ports) == 1 {
		if have, ok := sp.ports[e.ports[0]]; ok {
			e.ports = have
		} else {
			if sp.ports == nil {
				sp.ports = map[model.Port][]model.Port{}
			}
			e.ports = slices.Clip(e.ports)
			sp.ports[e.ports[0]] = e.ports
		}
	}
}

// prune drops the entries no node uses any more, once the tables have doubled since the last
// prune.
func (sp *sharedParts) prune(services map[string]*service) {
	if len(sp.hosts)+len(sp.ports) <= 2*sp.live+64 {
		return
	}
	hosts := make(map[*hostData]bool, len(sp.hosts))
	ports := make(map[model.Port]bool, len(sp.ports))
	for _, s := range services {
		for _, n := range s.nodes {
			if n.good == nil {
				continue
			}
			if n.good.svc != nil {
				hosts[n.good.svc] = true
			}
			if len(n.good.ports) == 1 {
				ports[n.good.ports[0]] = true
			}
		}
	}
	maps.DeleteFunc(sp.hosts, func(_ hostData, v *hostData) bool { return !hosts[v] })
	maps.DeleteFunc(sp.ports, func(k model.Port, _ []model.Port) bool { return !ports[k] })
	sp.live = len(sp.hosts) + len(sp.ports)
}

// labelKey is a canonical form of a label set (registry.AppendLabelKey).
func labelKey(m map[string]string) string { return string(registry.AppendLabelKey(nil, m)) }

type served struct {
	hd hostData
	// ports are what it keeps of its ports for the time it has no instance (portMemory).
	ports portMemory
	// emptySince is when it last lost its last instance (zero while it has some): after
	// RetireEmptyAfter it is deleted.
	emptySince time.Time
}

// node is one instance znode: its last well-formed content, and why it is rejected now.
type node struct {
	good *endpoint
	err  error
	// name is the node's name, kept where it is needed: in a layout that reads the nodes' data
	// (their reads and watches are by name); for a node not well-formed (its record names it);
	// and for a Dubbo 2 provider that shares its instance ID with another of its service (the
	// first in name order is served: markDuplicates) or was refused a port (its record names
	// it: wantName). Once kept it stays. Elsewhere "": the name is the content, parsed.
	name string
	// wantName: the node was refused a port before its name was kept; the next listing of its
	// service keeps it, and the build after reports the refusal under it.
	wantName bool
}

// nodeHash is a node's key: 128 bits of two hashes of its name, seeded per process, so that
// two names of one service never share a key in practice and nobody can make them.
type nodeHash struct{ a, b uint64 }

// nodeHasher hashes node names; its seeds are chosen when the watcher is made.
type nodeHasher struct{ a, b maphash.Seed }

func newNodeHasher() nodeHasher { return nodeHasher{maphash.MakeSeed(), maphash.MakeSeed()} }

func (h nodeHasher) of(name string) nodeHash {
	return nodeHash{maphash.String(h.a, name), maphash.String(h.b, name)}
}
