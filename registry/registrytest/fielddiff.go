package registrytest

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// maxFieldDiffs bounds the differences fieldDiffs lists.
const maxFieldDiffs = 8

// fieldDiffs lists where after differs from before, field by field, as
// "path: was X, now Y" (path starting at root), at most maxFieldDiffs of
// them. Unlike Diff it compares exactly: order, and nil against empty,
// count, since it tells what an adapter changed in a value it had passed on.
func fieldDiffs(root string, before, after any) []string {
	var out []string
	walkDiff(root, reflect.ValueOf(before), reflect.ValueOf(after), &out)
	return out
}

func walkDiff(path string, a, b reflect.Value, out *[]string) {
	if len(*out) >= maxFieldDiffs {
		return
	}
	if a.IsValid() != b.IsValid() || (a.IsValid() && a.Type() != b.Type()) {
		*out = append(*out, fmt.Sprintf("%s: was %s, now %s", path, showValue(a), showValue(b)))
		return
	}
	if !a.IsValid() {
		return
	}
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			walkDiff(path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i), out)
		}
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			*out = append(*out, fmt.Sprintf("%s: was %s, now %s", path, showValue(a), showValue(b)))
			return
		}
		for i := range a.Len() {
			walkDiff(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i), out)
		}
	case reflect.Map:
		if a.IsNil() != b.IsNil() {
			*out = append(*out, fmt.Sprintf("%s: was %s, now %s", path, showValue(a), showValue(b)))
			return
		}
		keys := map[string]reflect.Value{}
		for _, k := range append(a.MapKeys(), b.MapKeys()...) {
			keys[fmt.Sprint(k.Interface())] = k
		}
		for _, name := range slices.Sorted(maps.Keys(keys)) {
			k := keys[name]
			walkDiff(fmt.Sprintf("%s[%q]", path, name), a.MapIndex(k), b.MapIndex(k), out)
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, fmt.Sprintf("%s: was %s, now %s", path, showValue(a), showValue(b)))
		}
	}
}

// showValue renders a value for a difference, marking absent and nil.
func showValue(v reflect.Value) string {
	if !v.IsValid() {
		return "(absent)"
	}
	if (v.Kind() == reflect.Slice || v.Kind() == reflect.Map) && v.IsNil() {
		return "nil"
	}
	s := fmt.Sprintf("%#v", v.Interface())
	s = strings.TrimPrefix(s, "model.")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}
