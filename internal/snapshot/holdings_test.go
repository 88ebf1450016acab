package snapshot

import (
	"fmt"
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
	h := Holdings{Versions: map[string]string{"ns/a": col.Get("ns/a").Version, "ns/b": "old", "ns/gone": "x"}}
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
