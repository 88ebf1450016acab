package snapshot

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestOrderMatchesASortedList applies random batches of upserts and removes
// to a chunked order with small chunks and checks it against a plain sorted
// list after each: the same resources in the same order, chunks sorted and
// within their bounds, and every chunk but the last at least half full, so
// that removals cannot fragment it.
func TestOrderMatchesASortedList(t *testing.T) {
	const chunk = 4
	rng := rand.New(rand.NewPCG(1, 2))
	o := newOrder(chunk)
	held := map[string]*Resource{}
	for step := range 2000 {
		upserts := map[string]*Resource{}
		removes := map[string]struct{}{}
		// Batches of 1 to 40 changes, sometimes large, over 300 names.
		for range 1 + rng.IntN(map[bool]int{true: 40, false: 3}[step%10 == 0]) {
			name := fmt.Sprintf("svc-%03d", rng.IntN(300))
			if _, ok := held[name]; ok && rng.IntN(2) == 0 {
				if _, up := upserts[name]; !up {
					removes[name] = struct{}{}
				}
				continue
			}
			if _, gone := removes[name]; gone {
				continue
			}
			upserts[name] = &Resource{Name: name, hash: uint64(step)}
		}
		var added []string
		for name := range upserts {
			if _, ok := held[name]; !ok {
				added = append(added, name)
			}
		}
		slices.Sort(added)
		prev := o
		prevAll := slices.Clone(prev.all())
		o = o.with(upserts, removes, added)
		for name := range removes {
			delete(held, name)
		}
		for name, r := range upserts {
			held[name] = r
		}

		var want []*Resource
		for _, name := range slices.Sorted(maps.Keys(held)) {
			want = append(want, held[name])
		}
		if got := o.all(); !slices.Equal(got, want) || o.n != len(want) {
			t.Fatalf("step %d: order holds %d (n %d), want %d:\n got %v\nwant %v", step, len(got), o.n, len(want), names(got), names(want))
		}
		if !slices.Equal(prev.all(), prevAll) {
			t.Fatalf("step %d: the change modified the previous version", step)
		}
		for k, c := range o.chunks {
			if len(c) == 0 || len(c) >= 2*chunk || (k < len(o.chunks)-1 && len(c) < chunk/2) {
				t.Fatalf("step %d: chunk %d of %d has %d resources; want 1 to %d, and at least %d but for the last", step, k, len(o.chunks), len(c), 2*chunk-1, chunk/2)
			}
		}
	}
}
