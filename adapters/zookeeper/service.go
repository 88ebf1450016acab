package zookeeper

import (
	"maps"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/registry"
)

// service is what the adapter knows of one service znode.
type service struct {
	nodes map[string]*node // by instance id
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
func (ls *labelSets) prune(nodes map[string]*node) {
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
}
