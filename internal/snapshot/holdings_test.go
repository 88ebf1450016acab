package snapshot

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"testing"
)

func names(rs []*Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

func TestHoldingsCatchUp(t *testing.T) {
	s, _ := newTestStore()
	snap, _ := mustApply(t, s, true, se("ns/a", "a1", 1), se("ns/b", "b1", 1), se("ns/c", "c1", 1))
	col := snap.Collection(ServiceEntry)

	// A client resuming with one current, one stale and one gone resource.
	h := Holdings{}
	h.Hold("ns/a", col.Get("ns/a").Version)
	h.Hold("ns/b", "old")
	h.Hold("ns/gone", "x")
	changed, removed := h.CatchUp(col, Scope{All: true}, nil)
	if !slices.Equal(names(changed), []string{"ns/b", "ns/c"}) || !slices.Equal(removed, []string{"ns/gone"}) {
		t.Fatalf("resume: changed %v removed %v", names(changed), removed)
	}
	if changed, removed = h.CatchUp(col, Scope{All: true}, nil); len(changed)+len(removed) != 0 {
		t.Fatalf("caught up, yet %v / %v", names(changed), removed)
	}

	// One version later: only what changed is looked at and sent.
	snap, _ = mustApply(t, s, true, se("ns/a", "a2", 1), del("ns/c"))
	changed, removed = h.CatchUp(snap.Collection(ServiceEntry), Scope{All: true}, nil)
	if !slices.Equal(names(changed), []string{"ns/a"}) || !slices.Equal(removed, []string{"ns/c"}) {
		t.Fatalf("incremental: changed %v removed %v", names(changed), removed)
	}

	// Further behind than the history reaches: a full comparison, same answer.
	before := h.Seq
	for i := range historyDepth + 2 {
		mustApply(t, s, true, se("ns/b", fmt.Sprint("b", i), 1))
	}
	col = s.Current().Collection(ServiceEntry)
	if _, ok := col.ChangedSince(before); ok {
		t.Fatal("test setup: history still reaches back")
	}
	changed, removed = h.CatchUp(col, Scope{All: true}, nil)
	if !slices.Equal(names(changed), []string{"ns/b"}) || len(removed) != 0 || h.Seq != col.Seq {
		t.Fatalf("full comparison: changed %v removed %v seq %d/%d", names(changed), removed, h.Seq, col.Seq)
	}

	// A named scope: only the named resources, even when others change.
	named := Holdings{}
	changed, _ = named.CatchUp(col, Scope{Names: map[string]struct{}{"ns/a": {}}}, nil)
	if !slices.Equal(names(changed), []string{"ns/a"}) {
		t.Fatalf("named scope: changed %v", names(changed))
	}
	snap, _ = mustApply(t, s, true, se("ns/b", "b-new", 1), se("ns/a", "a3", 1))
	changed, _ = named.CatchUp(snap.Collection(ServiceEntry), Scope{Names: map[string]struct{}{"ns/a": {}}}, nil)
	if !slices.Equal(names(changed), []string{"ns/a"}) {
		t.Fatalf("named scope after a change: changed %v", names(changed))
	}
}

// TestHoldingsOfAWildcardClient follows a client that wants everything
// through random changes, some further apart than the history reaches, and
// checks every answer against a plain map of what it was sent; then that its
// holdings, kept as the collection itself, turn back into a map that says
// the same when the client narrows its scope.
func TestHoldingsOfAWildcardClient(t *testing.T) {
	s, _ := newTestStore()
	rng := rand.New(rand.NewSource(7))
	sent := map[string]string{} // what the client was sent
	var h Holdings
	for step := range 300 {
		var changes []Change
		for range 1 + rng.Intn(3) {
			n := fmt.Sprintf("ns/s%02d", rng.Intn(40))
			if rng.Intn(4) == 0 {
				changes = append(changes, del(n))
			} else {
				changes = append(changes, se(n, fmt.Sprint(n, step), uint64(rng.Intn(3))))
			}
		}
		mustApply(t, s, true, changes...)
		if rng.Intn(3) > 0 { // catch up after some changes only
			continue
		}
		col := s.Current().Collection(ServiceEntry)
		var wantChanged, wantRemoved []string
		for _, r := range col.Resources() {
			if sent[r.Name] != r.Version {
				wantChanged = append(wantChanged, r.Name)
				sent[r.Name] = r.Version
			}
		}
		for _, n := range slices.Sorted(maps.Keys(sent)) {
			if col.Get(n) == nil {
				wantRemoved = append(wantRemoved, n)
				delete(sent, n)
			}
		}
		changed, removed := h.CatchUp(col, Scope{All: true}, nil)
		if !slices.Equal(names(changed), wantChanged) || !slices.Equal(removed, wantRemoved) {
			t.Fatalf("step %d: changed %v removed %v, want %v and %v", step, names(changed), removed, wantChanged, wantRemoved)
		}
		if h.all != col || h.versions != nil {
			t.Fatalf("step %d: a wildcard client's holdings are not the collection itself", step)
		}
	}
	// Narrowing the scope turns the holdings into a map with the same content.
	h.Retain(func(name string) bool { return name < "ns/s20" })
	for n, v := range sent {
		got, ok := h.Version(n)
		if want := n < "ns/s20"; ok != want || (ok && got != v) {
			t.Errorf("after Retain: %s = %q (held %v), sent %q", n, got, ok, v)
		}
	}
	h.Drop("ns/s00")
	if _, ok := h.Version("ns/s00"); ok {
		t.Error("Drop kept the resource")
	}
}
