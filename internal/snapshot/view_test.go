package snapshot

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

func seIn(name, body, team string) Change {
	c := se(name, body, 1)
	c.Object.Origin = &Origin{Registry: "test", Namespace: "ns", Labels: map[string]string{"team": team}}
	return c
}

func teamIs(team string) func(*Resource) bool {
	return func(r *Resource) bool { return r.Origin != nil && r.Origin.Labels["team"] == team }
}

func colNames(col *Collection) []string {
	var out []string
	for _, r := range col.Resources() {
		out = append(out, r.Name)
	}
	return out
}

func TestViewFollowsStore(t *testing.T) {
	s, _ := newTestStore()
	mustApply(t, s, false, seIn("ns/a1", "x", "a"), seIn("ns/b1", "x", "b"))
	// A view made after changes starts with what is there, not ready yet.
	va := s.NewView(teamIs("a"))
	vb := s.NewView(teamIs("b"))
	if got := colNames(va.Current().Collection(ServiceEntry)); !slices.Equal(got, []string{"ns/a1"}) || va.Current().Ready {
		t.Fatalf("view a at start: %v ready=%v", got, va.Current().Ready)
	}
	changedB, cancel := vb.Subscribe()
	defer cancel()

	// Readiness reaches every view, even one nothing changed in.
	mustApply(t, s, true)
	if !va.Current().Ready || !vb.Current().Ready {
		t.Fatal("views not ready after the store is")
	}
	<-changedB

	// A change to a's service leaves b's view, and its subscribers, alone.
	before := vb.Current()
	snap, _ := mustApply(t, s, false, seIn("ns/a1", "y", "a"), seIn("ns/a2", "x", "a"))
	if vb.Current() != before {
		t.Fatal("view b changed on a change to team a's services")
	}
	select {
	case <-changedB:
		t.Fatal("view b's subscriber woken by a change it does not hold")
	default:
	}
	ca := va.Current().Collection(ServiceEntry)
	if got := colNames(ca); !slices.Equal(got, []string{"ns/a1", "ns/a2"}) || ca.Seq != snap.Seq {
		t.Fatalf("view a: %v seq=%d, want a1 a2 at %d", got, ca.Seq, snap.Seq)
	}
	// The view holds the store's own resources: nothing is encoded twice.
	if ca.Get("ns/a1") != snap.Collection(ServiceEntry).Get("ns/a1") {
		t.Fatal("view holds a copy of the store's resource")
	}
	if d := ca.LastDiff(); !slices.Equal(d.Added, []string{"ns/a2"}) || !slices.Equal(d.Updated, []string{"ns/a1"}) {
		t.Fatalf("view a diff: %+v", d)
	}

	// A service that moves to another team leaves one view and joins the other.
	mustApply(t, s, false, seIn("ns/a2", "x", "b"))
	if got := colNames(va.Current().Collection(ServiceEntry)); !slices.Equal(got, []string{"ns/a1"}) {
		t.Fatalf("view a after the move: %v", got)
	}
	if got := colNames(vb.Current().Collection(ServiceEntry)); !slices.Equal(got, []string{"ns/a2", "ns/b1"}) {
		t.Fatalf("view b after the move: %v", got)
	}
	<-changedB
	// Removal.
	mustApply(t, s, false, del("ns/b1"))
	if got := colNames(vb.Current().Collection(ServiceEntry)); !slices.Equal(got, []string{"ns/a2"}) {
		t.Fatalf("view b after removal: %v", got)
	}
}

// An Origin-only change (same served content) still moves the resource
// between views: a WorkloadEntry follows its service's labels.
func TestViewOriginOnlyChange(t *testing.T) {
	s, _ := newTestStore()
	va := s.NewView(teamIs("a"))
	mustApply(t, s, true, seIn("ns/x", "same", "b"))
	if va.Current().Collection(ServiceEntry).Len() != 0 {
		t.Fatal("view a holds team b's service")
	}
	snap, _ := mustApply(t, s, false, seIn("ns/x", "same", "a"))
	if va.Current().Collection(ServiceEntry).Get("ns/x") == nil {
		t.Fatal("origin change did not reach the view")
	}
	if d := snap.Collection(ServiceEntry).LastDiff(); !slices.Equal(d.EndpointOnly, []string{"ns/x"}) {
		t.Fatalf("an origin-only change must not look like a full change to the store's sinks: %+v", d)
	}
}

// A view always equals filtering the store, after any sequence of changes.
func TestViewEqualsFilterRandom(t *testing.T) {
	s, _ := newTestStore()
	views := map[string]*View{"a": s.NewView(teamIs("a")), "b": s.NewView(teamIs("b"))}
	rng := rand.New(rand.NewSource(7))
	teams := []string{"a", "b", "c"}
	for step := range 300 {
		var changes []Change
		for range 1 + rng.Intn(5) {
			name := fmt.Sprintf("ns/s%d", rng.Intn(40))
			if rng.Intn(4) == 0 {
				changes = append(changes, del(name))
			} else {
				changes = append(changes, seIn(name, fmt.Sprint(rng.Intn(3)), teams[rng.Intn(3)]))
			}
		}
		snap, _ := mustApply(t, s, step > 10, changes...)
		for team, v := range views {
			var want []string
			for _, r := range snap.Collection(ServiceEntry).Resources() {
				if teamIs(team)(r) {
					want = append(want, r.Name)
				}
			}
			vc := v.Current()
			if got := colNames(vc.Collection(ServiceEntry)); !slices.Equal(got, want) {
				t.Fatalf("step %d view %s = %v, want %v", step, team, got, want)
			}
			if vc.Ready != snap.Ready {
				t.Fatalf("step %d view %s ready=%v, store %v", step, team, vc.Ready, snap.Ready)
			}
			// Versions are content hashes: equal content, equal version.
			fresh := s.NewView(teamIs(team)).Current().Collection(ServiceEntry)
			if fresh.Version != vc.Collection(ServiceEntry).Version {
				t.Fatalf("step %d view %s version %s, a fresh view has %s", step, team, vc.Collection(ServiceEntry).Version, fresh.Version)
			}
		}
	}
}

// TestMemoFromFollowsOneLineage checks what MemoFrom hands a build: nothing
// for the first version, the newest value built by an earlier version of the
// same collection, never a view's (which has a lineage of its own), and no
// older value over a newer one when a lagging reader builds late.
func TestMemoFromFollowsOneLineage(t *testing.T) {
	s, _ := newTestStore()
	view := s.NewView(teamIs("a"))
	type key struct{}
	build := func(col *Collection) any {
		var got any = "unset"
		col.MemoFrom(key{}, func(prev any) any {
			got = prev
			return fmt.Sprintf("built at %d", col.Seq)
		})
		return got
	}
	snap1, _ := mustApply(t, s, true, seIn("ns/a1", "x", "a"))
	v1 := snap1.Collection(ServiceEntry)
	if got := build(v1); got != nil {
		t.Fatalf("first version: prev = %v, want nil", got)
	}
	if got := build(view.Current().Collection(ServiceEntry)); got != nil {
		t.Fatalf("a view's first version: prev = %v, want nil (not the store's)", got)
	}
	snap2, _ := mustApply(t, s, true, seIn("ns/a1", "y", "a"))
	snap3, _ := mustApply(t, s, true, seIn("ns/a1", "z", "a"))
	v2, v3 := snap2.Collection(ServiceEntry), snap3.Collection(ServiceEntry)
	if got := build(v3); got != "built at 1" {
		t.Fatalf("third version: prev = %v, want the first's", got)
	}
	// v2 builds after v3: it gets v3's value, and does not replace it.
	if got := build(v2); got != "built at 3" {
		t.Fatalf("a lagging version: prev = %v, want the newest", got)
	}
	snap4, _ := mustApply(t, s, true, seIn("ns/a1", "w", "a"))
	if got := build(snap4.Collection(ServiceEntry)); got != "built at 3" {
		t.Fatalf("after a lagging build: prev = %v, want the newest (3)", got)
	}
	// Memo still builds once per version.
	if got := build(v3); got != "unset" {
		t.Fatalf("second MemoFrom on one version built again (prev %v)", got)
	}
}
