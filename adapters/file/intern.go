package file

import (
	"encoding/binary"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// interner shares equal values among the services of one parse.
//
// A large registry repeats a few strings (namespaces, localities, label
// keys and values) and label sets (the instances of a service usually
// carry the same labels) many times over, and the YAML decoder allocates
// every occurrence anew: for the instances' label maps alone that is a few
// hundred bytes per instance. The models outlive the parse (they are
// served, and kept for carry-forward and change detection), so sharing
// equal values makes the adapter's steady-state memory scale with what is
// distinct rather than with what is written.
//
// Sharing is safe because a model is never modified once built: the
// adapter does not touch what it passed to the Sink (the registry.Sink
// contract), and the core only reads the maps (it copies them to build its
// resources). An interner is dropped with the parse, so it holds nothing
// between scans.
type interner struct {
	strs   map[string]string
	maps   map[string]map[string]string // by canonical encoding
	fields map[reflect.Type]*structFields
	// Scratch space for the canonical encoding of a map.
	key  []byte
	keys []string
	idx  []int
}

// newInterner returns an interner for a file of size bytes. Its string table starts at the size
// a file of the load tool's layout fills (a distinct string, an address mostly, per 100 bytes,
// at most 64k): growing it step by step was a measurable share of a start's CPU (see
// docs/benchmarks.md, "galleon-file start", BenchmarkParseGenerated).
func newInterner(size int) *interner {
	return &interner{
		strs:   make(map[string]string, min(size/100, 1<<16)),
		maps:   map[string]map[string]string{},
		fields: map[reflect.Type]*structFields{},
	}
}

// str returns s, or the equal string seen before.
func (in *interner) str(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := in.strs[s]; ok {
		return v
	}
	in.strs[s] = s
	return s
}

// strMap returns nil for an empty m (so that equal services compare equal
// whether a map was omitted or written as {}), else a map equal to m that
// is shared with every other equal map of the parse. The result must not
// be modified.
func (in *interner) strMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	keys := in.keys[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	enc := in.key[:0]
	for _, k := range keys {
		enc = appendPair(enc, k, m[k])
	}
	in.keys, in.key = keys[:0], enc[:0]
	if shared, ok := in.maps[string(enc)]; ok {
		return shared
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[in.str(k)] = in.str(v)
	}
	in.maps[string(enc)] = out
	return out
}

// strMapOf is strMap for the key and value nodes of a YAML mapping (k1, v1, k2, v2, ...), all
// strings: the map is only built when no equal one was seen in the parse. It returns false if a
// key repeats. An empty mapping is an empty map.
func (in *interner) strMapOf(pairs []*yaml.Node) (map[string]string, bool) {
	if len(pairs) == 0 {
		return map[string]string{}, true
	}
	idx := in.idx[:0]
	for i := 0; i+1 < len(pairs); i += 2 {
		idx = append(idx, i)
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(pairs[a].Value, pairs[b].Value) })
	enc := in.key[:0]
	for j, i := range idx {
		k, v := pairs[i].Value, pairs[i+1].Value
		if j > 0 && pairs[idx[j-1]].Value == k {
			in.idx, in.key = idx[:0], enc[:0]
			return nil, false
		}
		enc = appendPair(enc, k, v)
	}
	in.idx, in.key = idx[:0], enc[:0]
	if shared, ok := in.maps[string(enc)]; ok {
		return shared, true
	}
	out := make(map[string]string, len(idx))
	for _, i := range idx {
		out[in.str(pairs[i].Value)] = in.str(pairs[i+1].Value)
	}
	in.maps[string(enc)] = out
	return out, true
}

// appendPair appends a map entry to a map's canonical encoding (entries in key order, each
// length-prefixed), which strMap and strMapOf share so that equal maps meet.
func appendPair(enc []byte, k, v string) []byte {
	enc = binary.AppendUvarint(enc, uint64(len(k)))
	enc = append(enc, k...)
	enc = binary.AppendUvarint(enc, uint64(len(v)))
	return append(enc, v...)
}
