package file

import (
	"strconv"

	"go.yaml.in/yaml/v3"
)

// decodeService fills spec from a service's node the way yaml.v3's Node.Decode does, for nodes
// whose every value has the type its field wants: strings tagged !!str, whole numbers written in
// decimal, no nulls, no repeated keys. It returns false for anything else, and parseService then
// lets Node.Decode read the node, errors and all. Node.Decode was a large part of a start's parse
// (reflection per field, a resolve per scalar; docs/benchmarks.md, BenchmarkParseGenerated); TestDecodeServiceMatchesYAMLv3 and
// FuzzDecodeService compare the two.
//
// Label and annotation maps come from in (see interner.strMapOf): most instances of a service
// carry the same labels, and a map decoded only to be dropped for an equal one was a fifth of
// what a parse allocated.
func decodeService(n *yaml.Node, spec *serviceSpec, in *interner) bool {
	return decodeFields(n, func(key string, v *yaml.Node) (int, bool) {
		switch key {
		case "name":
			return 0, decodeString(v, &spec.Name)
		case "namespace":
			return 1, decodeString(v, &spec.Namespace)
		case "hosts":
			return 2, decodeStrings(v, &spec.Hosts)
		case "addresses":
			return 3, decodeStrings(v, &spec.Addresses)
		case "ports":
			return 4, decodeSlice(v, &spec.Ports, decodePort)
		case "labels":
			return 5, decodeStringMap(v, &spec.Labels, in)
		case "annotations":
			return 6, decodeStringMap(v, &spec.Annotations, in)
		case "location":
			return 7, decodeString(v, &spec.Location)
		case "resolution":
			return 8, decodeString(v, &spec.Resolution)
		case "exportTo":
			return 9, decodeStrings(v, &spec.ExportTo)
		case "instances":
			return 10, decodeSlice(v, &spec.Instances, func(n *yaml.Node, inst *instanceSpec) bool { return decodeInstance(n, inst, in) })
		}
		return 0, false
	})
}

func decodePort(n *yaml.Node, p *portSpec) bool {
	return decodeFields(n, func(key string, v *yaml.Node) (int, bool) {
		switch key {
		case "number":
			return 0, decodeUint32(v, &p.Number)
		case "protocol":
			return 1, decodeString(v, &p.Protocol)
		case "name":
			return 2, decodeString(v, &p.Name)
		}
		return 0, false
	})
}

func decodeInstance(n *yaml.Node, inst *instanceSpec, in *interner) bool {
	return decodeFields(n, func(key string, v *yaml.Node) (int, bool) {
		switch key {
		case "id":
			return 0, decodeString(v, &inst.ID)
		case "address":
			return 1, decodeString(v, &inst.Address)
		case "ports":
			return 2, decodePortMap(v, &inst.Ports)
		case "labels":
			return 3, decodeStringMap(v, &inst.Labels, in)
		case "locality":
			return 4, decodeString(v, &inst.Locality)
		case "network":
			return 5, decodeString(v, &inst.Network)
		case "weight":
			return 6, decodeUint32(v, &inst.Weight)
		case "health":
			return 7, decodeString(v, &inst.Health)
		case "serviceAccount":
			return 8, decodeString(v, &inst.ServiceAccount)
		}
		return 0, false
	})
}

// decodeFields walks a mapping node's key/value pairs; field decodes one value and returns its
// field's number (below 32) and whether it could. Any other key, a value field cannot take, or a
// key given twice (an error Node.Decode words) makes it return false.
func decodeFields(n *yaml.Node, field func(key string, v *yaml.Node) (int, bool)) bool {
	if n.Kind != yaml.MappingNode {
		return false
	}
	var seen uint32
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i]
		if !isStr(key) {
			return false
		}
		f, ok := field(key.Value, n.Content[i+1])
		if !ok || seen&(1<<f) != 0 {
			return false
		}
		seen |= 1 << f
	}
	return true
}

// isStr says whether n is a scalar yaml.v3 decodes into a string as its text.
func isStr(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!str" && n.Alias == nil
}

func decodeString(n *yaml.Node, out *string) bool {
	if !isStr(n) {
		return false
	}
	*out = n.Value
	return true
}

// decodeUint32 takes a plain decimal integer without a leading zero (yaml.v3 reads "010" as
// octal) that fits.
func decodeUint32(n *yaml.Node, out *uint32) bool {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Style != 0 || n.Value == "" ||
		(n.Value[0] == '0' && len(n.Value) > 1) {
		return false
	}
	for i := 0; i < len(n.Value); i++ {
		if c := n.Value[i]; c < '0' || c > '9' {
			return false
		}
	}
	v, err := strconv.ParseUint(n.Value, 10, 32)
	if err != nil {
		return false
	}
	*out = uint32(v)
	return true
}

// decodeSlice decodes a sequence; like Node.Decode, an empty one is an empty slice, not nil.
func decodeSlice[T any](n *yaml.Node, out *[]T, item func(*yaml.Node, *T) bool) bool {
	if n.Kind != yaml.SequenceNode {
		return false
	}
	s := make([]T, len(n.Content))
	for i, c := range n.Content {
		if !item(c, &s[i]) {
			return false
		}
	}
	*out = s
	return true
}

func decodeStrings(n *yaml.Node, out *[]string) bool {
	return decodeSlice(n, out, decodeString)
}

// decodeStringMap decodes a mapping of strings, shared through in with every equal one; like
// Node.Decode, an empty one is an empty map, not nil. The result must not be modified.
func decodeStringMap(n *yaml.Node, out *map[string]string, in *interner) bool {
	if n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !isStr(n.Content[i]) || !isStr(n.Content[i+1]) {
			return false
		}
	}
	m, ok := in.strMapOf(n.Content)
	if !ok {
		return false // a repeated key
	}
	*out = m
	return true
}

func decodePortMap(n *yaml.Node, out *map[uint32]uint32) bool {
	if n.Kind != yaml.MappingNode {
		return false
	}
	m := make(map[uint32]uint32, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		var k, v uint32
		if !decodeUint32(n.Content[i], &k) || !decodeUint32(n.Content[i+1], &v) {
			return false
		}
		if _, dup := m[k]; dup {
			return false
		}
		m[k] = v
	}
	*out = m
	return true
}
