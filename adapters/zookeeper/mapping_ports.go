package zookeeper

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// Reasons of the rejections of this file's checks and of the layouts' (beside metrics.go's).
const (
	// reasonProtocol: an instance names a port protocol Istio does not know.
	reasonProtocol = "protocol"
	// reasonLayout: the node is of another layout than --zk-layout (a Dubbo 3 application
	// instance read as Spring's, a Dubbo 2 interface read as a Curator service).
	reasonLayout = "layout"
)

// maxServicePorts is the most ports a ServiceEntry may have (the CRD's limit, which the core's
// validation applies to the whole service).
const maxServicePorts = 256

// A service's ports are the union of its instances' ports, so one instance can make the whole
// service invalid: a port with a protocol Istio does not know, or the one port too many. The
// core would then refuse the service, keeping its previous version (departed instances keep
// traffic, new ones never arrive). admitPorts leaves such an instance out instead, and the
// caller rejects its node with the reason.

// refusal is an instance left out of its service, and why.
type refusal struct {
	e   *endpoint
	err error
}

// admitPorts returns the instances of one service whose ports may join the service's, in the
// order given, and those refused with why: an instance with a port Istio cannot serve (number
// out of range, unknown protocol), and one whose new ports would give the service more than
// maxServicePorts. The ports served already (served) go first, so that instances serving them
// keep being served while a newcomer with yet another port is refused; then the instances in
// the order given, which the caller makes independent of the order the nodes were read in
// (instance ID order). A service within the limits costs one pass over its ports.
func admitPorts(eps []*endpoint, served []model.Port) (kept []*endpoint, refused []refusal) {
	numbers := map[uint32]bool{}
	valid := true
	for _, e := range eps {
		for _, p := range e.ports {
			numbers[p.Number] = true
			valid = valid && portError(p) == ""
		}
	}
	if valid && len(numbers) <= maxServicePorts {
		return eps, nil
	}
	old := make(map[uint32]bool, len(served))
	for _, p := range served {
		old[p.Number] = true
	}
	admitted := map[uint32]bool{}
	decided := make([]bool, len(eps))
	keep := make([]bool, len(eps))
	for pass := range 2 {
		for i, e := range eps {
			if decided[i] {
				continue
			}
			if err := portsError(e.ports); err != nil {
				decided[i] = true
				refused = append(refused, refusal{e, err})
				continue
			}
			var added []uint32
			inServed := true
			for _, p := range e.ports {
				if !admitted[p.Number] && !slices.Contains(added, p.Number) {
					added = append(added, p.Number)
				}
				inServed = inServed && old[p.Number]
			}
			if pass == 0 && !inServed {
				continue // a new port: after every instance serving only ports served already
			}
			decided[i] = true
			if len(admitted)+len(added) > maxServicePorts {
				refused = append(refused, refusal{e, bad(reasonPort, fmt.Errorf(
					"left out of its service: its ports %s would give the service more than %d ports, the most a ServiceEntry may have (the service's %d ports stay served)",
					portList(added), maxServicePorts, len(admitted)))})
				continue
			}
			for _, n := range added {
				admitted[n] = true
			}
			keep[i] = true
		}
	}
	for i, e := range eps {
		if keep[i] {
			kept = append(kept, e)
		}
	}
	return kept, refused
}

// portsError is why ports cannot be served in a ServiceEntry, tagged with its reason; nil when
// they can.
func portsError(ports []model.Port) error {
	if len(ports) > maxServicePorts {
		return bad(reasonPort, fmt.Errorf("left out of its service: %d ports, more than the %d a ServiceEntry may have", len(ports), maxServicePorts))
	}
	for _, p := range ports {
		if why := portError(p); why != "" {
			reason := reasonPort
			if !p.Protocol.Valid() {
				reason = reasonProtocol
			}
			return bad(reason, fmt.Errorf("left out of its service: port %d: %s", p.Number, why))
		}
	}
	return nil
}

// portError is why p cannot be a port of a ServiceEntry, "" when it can. Names are the
// layouts' own (tcp-dubbo) or the core's default, valid by construction.
func portError(p model.Port) string {
	switch {
	case p.Number < 1 || p.Number > 65535:
		return "the number is not in 1..65535"
	case !p.Protocol.Valid():
		return fmt.Sprintf("protocol %s is not one Istio serves", registry.Quote(string(p.Protocol)))
	}
	return ""
}

// portList is a few port numbers, for a message.
func portList(ns []uint32) string {
	slices.Sort(ns)
	var b strings.Builder
	for i, n := range ns {
		if i == 8 {
			fmt.Fprintf(&b, " and %d more", len(ns)-i)
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(n), 10))
	}
	return b.String()
}

// portMemory is what a service keeps of its ports for the time it has no instance. A ServiceEntry
// needs a port, and its ports changing is a full push in istiod, so an empty service keeps the
// ports it had, as a set: those of its instances when it last gained an instance or a new port,
// with the protocol and name each was served with last. Instances leaving one at a time leave it
// unchanged (a Dubbo 2 host's provider URLs, one per protocol, going in any order), so what an
// empty service keeps does not depend on the order its last instances left in; an instance or a
// port arriving starts it again from the ports served then, so a port no instance has served
// since is not kept for ever. It never holds more ports than a state that was served.
type portMemory struct {
	ports []model.Port // sorted by number, names as the instances give them
	// instances is how many instances the last state had (0 when it had none): more of them
	// than before means one arrived.
	instances int
}

// after is the memory after a state with ports (sorted by number) and that many instances.
func (m portMemory) after(ports []model.Port, instances int) portMemory {
	if instances == 0 {
		return portMemory{ports: m.ports}
	}
	grew := instances > m.instances
	for _, p := range ports {
		if grew {
			break
		}
		_, found := slices.BinarySearchFunc(m.ports, p.Number, func(q model.Port, n uint32) int { return cmp.Compare(q.Number, n) })
		grew = !found
	}
	if grew {
		return portMemory{ports: slices.Clone(ports), instances: instances}
	}
	// Fewer instances or as many, every port kept already: the ports served now, as they are
	// served, and those of the instances that left.
	byNumber := make(map[uint32]model.Port, len(m.ports))
	for _, p := range m.ports {
		byNumber[p.Number] = p
	}
	for _, p := range ports {
		byNumber[p.Number] = p
	}
	out := slices.Collect(maps.Values(byNumber))
	slices.SortFunc(out, func(a, b model.Port) int { return cmp.Compare(a.Number, b.Number) })
	return portMemory{ports: out, instances: instances}
}
