package registry_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

func svc(name string, addrs ...string) model.Service {
	s := model.Service{Namespace: "ns", Name: name, Hosts: []string{name + ".test"}, Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}}}
	for _, a := range addrs {
		s.Instances = append(s.Instances, model.Instance{ID: a, Address: a})
	}
	return s
}

// calls returns the recorder's calls since the last look, as strings.
func calls(rec *registrytest.Recorder, seen *int) []string {
	evs := rec.Events()
	var out []string
	for _, e := range evs[*seen:] {
		out = append(out, e.String())
	}
	*seen = len(evs)
	return out
}

func expect(t *testing.T, step string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: Sink calls\n  %s\nwant\n  %s", step, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestReconcilerReportsOnlyChanges(t *testing.T) {
	rec := registrytest.NewRecorder()
	r := registry.NewReconciler(rec)
	seen := 0
	r.Set(svc("b", "10.0.0.2"))
	r.Set(svc("a", "10.0.0.1"))
	expect(t, "before Flush", calls(rec, &seen))
	r.Flush()
	expect(t, "first Flush", calls(rec, &seen), "Replace(2 services: ns/a, ns/b)")

	r.Flush()
	r.Set(svc("a", "10.0.0.1"))
	r.Flush()
	expect(t, "nothing changed", calls(rec, &seen))

	reordered := svc("a", "10.0.0.9", "10.0.0.1")
	slices.Reverse(reordered.Instances)
	r.SetAll([]model.Service{svc("b", "10.0.0.2"), reordered, svc("c")})
	r.Flush()
	expect(t, "a listing", calls(rec, &seen), "Update(ns/a)", "Update(ns/c)")

	r.SetAll([]model.Service{svc("c"), svc("a", "10.0.0.1", "10.0.0.9")}) // same a, in another order
	r.Flush()
	expect(t, "b gone", calls(rec, &seen), "Delete(ns/b)")

	r.Remove(model.ServiceKey{Namespace: "ns", Name: "c"})
	r.Remove(model.ServiceKey{Namespace: "ns", Name: "never"})
	r.Flush()
	expect(t, "c removed", calls(rec, &seen), "Delete(ns/c)")
	if err := rec.Check(); err != nil {
		t.Fatal(err)
	}
	if got, ok := rec.State()[model.ServiceKey{Namespace: "ns", Name: "a"}]; !ok || !model.Equal(got, svc("a", "10.0.0.1", "10.0.0.9")) {
		t.Fatalf("the Sink holds %+v for ns/a", got)
	}
}

func TestReconcilerRelistsAfterAnOutage(t *testing.T) {
	rec := registrytest.NewRecorder()
	r := registry.NewReconciler(rec)
	seen := 0
	down := errors.New("connection refused")
	r.Unreachable(down)
	r.Unreachable(errors.New("connection refused"))
	expect(t, "down before the first listing", calls(rec, &seen), "Unreachable(connection refused)")
	r.Set(svc("a"))
	r.Flush()
	expect(t, "first listing", calls(rec, &seen), "Replace(1 services: ns/a)", "Unreachable(<nil>)")

	r.Unreachable(down)
	r.Unreachable(errors.New("read tcp 127.0.0.1:53412: connection reset")) // every retry's message differs
	r.Unreachable(nil)                                                      // reachable again is said by the relisting, not by this
	expect(t, "outage", calls(rec, &seen), "Unreachable(connection refused)")
	r.Set(svc("a", "10.0.0.1"))
	r.Flush()
	expect(t, "relisted", calls(rec, &seen), "Replace(1 services: ns/a)", "Unreachable(<nil>)")
	if err := rec.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestReconcilerReportsEachRejectionOnce(t *testing.T) {
	rec := registrytest.NewRecorder()
	r := registry.NewReconciler(rec)
	seen := 0
	bad := errors.New("port is not a number")
	r.Reject("a.yaml:3", bad)
	r.Flush()
	r.Reject("a.yaml:3", errors.New("port is not a number"))
	r.Flush()
	expect(t, "first", calls(rec, &seen), `Rejected("a.yaml:3", port is not a number)`, "Replace(0 services: )")

	r.Reject("a.yaml:3", errors.New("host is empty"))
	r.Flush()
	expect(t, "another message", calls(rec, &seen), `Rejected("a.yaml:3", host is empty)`)

	if n := r.Rejected(); n != 1 {
		t.Errorf("Rejected() = %d with a.yaml:3 rejected, want 1", n)
	}
	r.Accept("a.yaml:3")
	if n := r.Rejected(); n != 0 {
		t.Errorf("Rejected() = %d after the only rejection was accepted, want 0", n)
	}
	r.Flush()
	r.SetRejections(map[string]error{"a.yaml:3": bad, "b.yaml:1": bad})
	if n := r.Rejected(); n != 2 {
		t.Errorf("Rejected() = %d after SetRejections of two, want 2", n)
	}
	r.Flush()
	expect(t, "accepted (cleared), then rejected again", calls(rec, &seen), `Rejected("a.yaml:3", <nil>)`,
		`Rejected("a.yaml:3", port is not a number)`, `Rejected("b.yaml:1", port is not a number)`)

	r.Unreachable(errors.New("gone"))
	r.SetRejections(map[string]error{"b.yaml:1": bad})
	r.Flush()
	expect(t, "after an outage what no longer applies is cleared and every rejection that applies is reported again", calls(rec, &seen),
		"Unreachable(gone)", `Rejected("a.yaml:3", <nil>)`, `Rejected("b.yaml:1", port is not a number)`,
		"Replace(0 services: )", "Unreachable(<nil>)")
	if err := rec.Check(); err != nil {
		t.Fatal(err)
	}
}

// discard is a Sink that keeps nothing, for benchmarks.
type discard struct{}

func (discard) Replace([]model.Service) {}
func (discard) Update(model.Service)    {}
func (discard) Delete(model.ServiceKey) {}
func (discard) Rejected(string, error)  {}
func (discard) Unreachable(error)       {}
func (discard) Degraded(string, error)  {}

// BenchmarkFlushOneChange is what one changed service costs an adapter's
// reconciler holding 10,000 services of 10 instances.
func BenchmarkFlushOneChange(b *testing.B) {
	r := registry.NewReconciler(discard{})
	var all []model.Service
	for i := range 10000 {
		s := svc(fmt.Sprintf("s%05d", i))
		for j := range 10 {
			s.Instances = append(s.Instances, model.Instance{ID: strconv.Itoa(j), Address: fmt.Sprintf("10.%d.%d.%d", i/256, i%256, j)})
		}
		all = append(all, s)
	}
	r.SetAll(all)
	r.Flush()
	b.ResetTimer()
	for i := range b.N {
		s := all[i%len(all)].Clone()
		s.Instances[0].Weight = uint32(i%7 + 1)
		r.Set(s)
		r.Flush()
	}
}

// TestReconcilerResyncForcesAReplace: a watch that lost events while the
// registry stayed reachable relists, and Resync makes that Flush a Replace
// (the rejections that apply told again), though nothing looked missed.
func TestReconcilerResyncForcesAReplace(t *testing.T) {
	rec := registrytest.NewRecorder()
	r := registry.NewReconciler(rec)
	seen := 0
	r.Set(svc("a", "10.0.0.1"))
	r.Set(svc("b", "10.0.0.2"))
	r.Reject("rec-1", errors.New("bad port"))
	r.Flush()
	expect(t, "first listing", calls(rec, &seen), "Rejected(\"rec-1\", bad port)", "Replace(2 services: ns/a, ns/b)")

	r.Resync()
	expect(t, "Resync reports nothing by itself", calls(rec, &seen))
	r.SetAll([]model.Service{svc("a", "10.0.0.1"), svc("c")}) // b was deleted while events were lost
	r.Flush()
	expect(t, "the relisting after Resync", calls(rec, &seen), "Rejected(\"rec-1\", bad port)", "Replace(2 services: ns/a, ns/c)")

	r.Set(svc("c", "10.0.0.3"))
	r.Flush()
	expect(t, "then changes again", calls(rec, &seen), "Update(ns/c)")

	// During an outage, Resync changes nothing: the Flush that ends it is a
	// Replace anyway, then the outage is over.
	r.Unreachable(errors.New("connection refused"))
	r.Resync()
	r.Flush()
	expect(t, "resync during an outage", calls(rec, &seen), "Unreachable(connection refused)", "Rejected(\"rec-1\", bad port)", "Replace(2 services: ns/a, ns/c)", "Unreachable(<nil>)")
	if err := rec.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestReconcilerReportsDegradedParts(t *testing.T) {
	rec := registrytest.NewRecorder()
	r := registry.NewReconciler(rec)
	seen := 0
	r.Set(svc("a", "10.0.0.1"))
	r.Set(svc("b", "10.1.0.1"))
	r.Flush()
	calls(rec, &seen)

	r.Degraded("dc2", errors.New("connection refused"))
	r.Degraded("dc2", errors.New("read tcp 127.0.0.1:53412: connection reset")) // within 30 s: kept, not told
	r.Degraded("dc3", nil)                                                      // never down: nothing to say
	expect(t, "dc2 down", calls(rec, &seen), `Degraded("dc2", connection refused)`)
	r.Flush()
	expect(t, "a part down calls for no Replace", calls(rec, &seen))

	r.Degraded("dc2", nil)
	expect(t, "back is told after the part's relisting is flushed", calls(rec, &seen))
	r.Set(svc("b", "10.1.0.2")) // what dc2 holds now
	r.Flush()
	expect(t, "dc2 back", calls(rec, &seen), "Update(ns/b)", `Degraded("dc2", <nil>)`)
	if err := rec.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestReconcilerResumesWithoutAReplace: an outage that missed nothing (the
// watches survived) ends without a Replace; one before the first listing
// cannot be resumed.
func TestReconcilerResumesWithoutAReplace(t *testing.T) {
	rec := registrytest.NewRecorder()
	r := registry.NewReconciler(rec)
	seen := 0
	r.Unreachable(errors.New("connection loss"))
	r.Resumed() // before the first listing: nothing to resume
	r.Set(svc("a", "10.0.0.1"))
	r.Flush()
	expect(t, "first listing", calls(rec, &seen), "Unreachable(connection loss)", "Replace(1 services: ns/a)", "Unreachable(<nil>)")

	r.Unreachable(errors.New("connection loss"))
	r.Resumed()
	r.Flush()
	expect(t, "resumed, nothing changed", calls(rec, &seen), "Unreachable(connection loss)", "Unreachable(<nil>)")

	r.Unreachable(errors.New("connection loss"))
	r.Resumed()
	r.Set(svc("a", "10.0.0.2"))
	r.Flush()
	expect(t, "resumed with a change", calls(rec, &seen), "Unreachable(connection loss)", "Update(ns/a)", "Unreachable(<nil>)")
	if err := rec.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestReconcilerCutsLongRecordNames: a registry chooses its record names;
// the Reconciler keeps and reports them Cut, and the same long name is
// cleared by the same call.
func TestReconcilerCutsLongRecordNames(t *testing.T) {
	rec := registrytest.NewRecorder()
	r := registry.NewReconciler(rec)
	long := "/dubbo/x/providers/" + strings.Repeat("y", 200_000)
	r.SetAll(nil)
	r.Reject(long, errors.New("not a provider URL"))
	r.Flush()
	var told string
	for _, e := range rec.Events() {
		if e.Record != "" {
			told = e.Record
		}
	}
	if told != registry.Cut(long, registry.MaxRecordLen) || len(told) > registry.MaxRecordLen+64 {
		t.Fatalf("reported a record of %d bytes, want it cut", len(told))
	}
	r.Accept(long)
	r.Flush()
	evs := rec.Events()
	if last := evs[len(evs)-1]; last.Record != told || last.Err != nil {
		t.Fatalf("the long record was not cleared: last call %s", last)
	}
	if got := registry.Cut("héllo wörld", 3); !strings.Contains(got, "bytes") || registry.Cut("short", 10) != "short" {
		t.Errorf("Cut: %q", got)
	}
}
