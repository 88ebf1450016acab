package registry

import "testing"

// TestAppendLabelKey: equal label sets get one key whatever their order of insertion; sets
// that differ, even where a separator would have joined them, get different keys.
func TestAppendLabelKey(t *testing.T) {
	key := func(m map[string]string) string { return string(AppendLabelKey(nil, m)) }
	a := map[string]string{"version": "v1", "zone": "z"}
	b := map[string]string{"zone": "z"}
	b["version"] = "v1"
	if key(a) != key(b) {
		t.Errorf("equal sets, keys %q and %q", key(a), key(b))
	}
	for _, pair := range [][2]map[string]string{
		{{"a:1": "b"}, {"a": "1:b"}},
		{{"a\x00": ""}, {"a": "\x00"}},
		{{"a": ""}, {}},
		{{"version": "v1"}, {"version": "v2"}},
	} {
		if key(pair[0]) == key(pair[1]) {
			t.Errorf("%q and %q share the key %q", pair[0], pair[1], key(pair[0]))
		}
	}
	if got := string(AppendLabelKey([]byte("x"), map[string]string{"k": "v"})); got != "x1:k1:v" {
		t.Errorf("appended %q, want x1:k1:v", got)
	}
}
