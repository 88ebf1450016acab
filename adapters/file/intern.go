package file

import (
	"encoding/binary"
	"reflect"
	"slices"
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
}

func newInterner() *interner {
	return &interner{strs: map[string]string{}, maps: map[string]map[string]string{}, fields: map[reflect.Type]*structFields{}}
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
		v := m[k]
		enc = binary.AppendUvarint(enc, uint64(len(k)))
		enc = append(enc, k...)
		enc = binary.AppendUvarint(enc, uint64(len(v)))
		enc = append(enc, v...)
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
