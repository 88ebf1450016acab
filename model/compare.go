package model

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Clone returns a deep copy of s: nothing it holds is shared with s, and nil
// and empty lists and maps stay apart. An adapter that keeps what it reported
// (the Sink owns every value it is passed) clones before changing its own
// copy.
func (s Service) Clone() Service {
	s.Hosts = slices.Clone(s.Hosts)
	s.Addresses = slices.Clone(s.Addresses)
	s.Ports = slices.Clone(s.Ports)
	s.Labels = maps.Clone(s.Labels)
	s.Annotations = maps.Clone(s.Annotations)
	s.ExportTo = slices.Clone(s.ExportTo)
	if s.Instances != nil {
		insts := make([]Instance, len(s.Instances))
		for i, inst := range s.Instances {
			inst.Ports = maps.Clone(inst.Ports)
			inst.Labels = maps.Clone(inst.Labels)
			insts[i] = inst
		}
		s.Instances = insts
	}
	return s
}

// Equal reports whether a and b mean the same service: what Galleon serves
// for one is what it serves for the other. Lists that are sets (Hosts,
// Addresses, ExportTo, Instances by ID, Ports by number) may differ in
// order, nil and empty lists and maps are equal, and so are the defaults
// spelt out or left empty (see Canonical). It costs a field-by-field walk
// when the two are equal in order, which is what an adapter that lists in a
// stable order sees, and sorts copies only otherwise.
func Equal(a, b Service) bool {
	if sameInOrder(a, b) {
		return true
	}
	return sameInOrder(Canonical(a), Canonical(b))
}

// Canonical returns s in the form in which services equal by meaning (Equal)
// are equal field by field, in order: Hosts, Addresses and ExportTo sorted,
// Ports sorted by number with the
// protocol in upper case (TCP for empty) and the default name
// "<protocol>-<number>" spelt out, instances sorted by ID with instance
// ports that map a port to its own number left out, and empty lists and
// maps nil. It does not modify s.
func Canonical(s Service) Service {
	s.Hosts = sortedSet(s.Hosts)
	s.Addresses = sortedSet(s.Addresses)
	s.ExportTo = sortedSet(s.ExportTo)
	if len(s.Ports) == 0 {
		s.Ports = nil
	} else {
		ports := SortedPorts(s.Ports)
		for i, p := range ports {
			p.Protocol = Protocol(strings.ToUpper(string(p.Protocol)))
			if p.Protocol == "" {
				p.Protocol = ProtocolTCP
			}
			if p.Name == "" {
				p.Name = strings.ToLower(string(p.Protocol)) + "-" + strconv.FormatUint(uint64(p.Number), 10)
			}
			ports[i] = p
		}
		s.Ports = ports
	}
	s.Labels = nonEmpty(s.Labels)
	s.Annotations = nonEmpty(s.Annotations)
	if len(s.Instances) == 0 {
		s.Instances = nil
	} else {
		insts := make([]Instance, len(s.Instances))
		for i, inst := range s.Instances {
			var ports map[uint32]uint32
			for svcPort, instPort := range inst.Ports {
				if svcPort != instPort {
					if ports == nil {
						ports = map[uint32]uint32{}
					}
					ports[svcPort] = instPort
				}
			}
			inst.Ports = ports
			inst.Labels = nonEmpty(inst.Labels)
			insts[i] = inst
		}
		slices.SortStableFunc(insts, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })
		s.Instances = insts
	}
	return s
}

// sameInOrder compares field by field, lists in order, nil and empty equal.
func sameInOrder(a, b Service) bool {
	if a.Namespace != b.Namespace || a.Name != b.Name ||
		a.Location != b.Location || a.Resolution != b.Resolution ||
		!slices.Equal(a.Hosts, b.Hosts) || !slices.Equal(a.Addresses, b.Addresses) ||
		!slices.Equal(a.Ports, b.Ports) || !slices.Equal(a.ExportTo, b.ExportTo) ||
		!maps.Equal(a.Labels, b.Labels) || !maps.Equal(a.Annotations, b.Annotations) ||
		len(a.Instances) != len(b.Instances) {
		return false
	}
	for i := range a.Instances {
		x, y := &a.Instances[i], &b.Instances[i]
		if x.ID != y.ID || x.Address != y.Address || x.Locality != y.Locality || x.Network != y.Network ||
			x.Weight != y.Weight || x.Health != y.Health || x.ServiceAccount != y.ServiceAccount ||
			!maps.Equal(x.Ports, y.Ports) || !maps.Equal(x.Labels, y.Labels) {
			return false
		}
	}
	return true
}

func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func nonEmpty[K comparable, V any](m map[K]V) map[K]V {
	if len(m) == 0 {
		return nil
	}
	return m
}
