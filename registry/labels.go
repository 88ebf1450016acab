package registry

import (
	"maps"
	"slices"
	"strconv"
)

// AppendLabelKey appends to b a key that equal label sets, and only they, share: the entries in
// key order, each string preceded by its length. An adapter that keeps one map per distinct
// label set (the instances of a service mostly carry the same labels) looks its sets up by it.
func AppendLabelKey(b []byte, labels map[string]string) []byte {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(append(b, ':'), k...)
		b = strconv.AppendInt(b, int64(len(labels[k])), 10)
		b = append(append(b, ':'), labels[k]...)
	}
	return b
}
