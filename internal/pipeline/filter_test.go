package pipeline

import (
	"slices"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/importfilter"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/model"
)

// servedNames lists the ServiceEntries of snap.
func servedNames(snap *snapshot.Snapshot) []string {
	var names []string
	for _, r := range snap.Collection(snapshot.ServiceEntry).Resources() {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}

// waitFiltered waits for the filtered counts (gauges and status) to be services and instances.
func waitFiltered(t *testing.T, p *Pipeline, services, instances int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		st := p.Status()
		gs, gi := gauge(t, p.metrics.filteredServices), gauge(t, p.metrics.filteredInstances)
		if st.FilteredServices == services && st.FilteredInstances == instances && int(gs) == services && int(gi) == instances {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("filtered: status %d services, %d instances, gauges %v, %v; want %d, %d", st.FilteredServices, st.FilteredInstances, gs, gi, services, instances)
		}
	}
}

// TestFiltersLeaveOutAndCount: what the import filters leave out is not served and is counted;
// an Update that makes a service excluded removes it, and one that makes it included again
// serves it; a filter removed serves everything from the next listing.
func TestFiltersLeaveOutAndCount(t *testing.T) {
	f, err := importfilter.New(importfilter.Settings{
		ExcludeServices:      []string{"skip*"},
		ExcludeLabels:        []string{"canary"},
		ExcludeInstanceCIDRs: []string{"192.168.0.0/16"},
	}, "--")
	if err != nil {
		t.Fatal(err)
	}
	p, store := run(t, Config{Filter: f})
	p.Replace([]model.Service{
		service("a", "10.0.0.1", "192.168.0.1"),
		service("skipme", "10.0.0.2"),
		service("c", "192.168.0.5"), // every instance left out: the service too
	})
	snap := waitSeq(t, store, 0)
	if got := servedNames(snap); !slices.Equal(got, []string{"ns/a"}) {
		t.Fatalf("served %v, want ns/a alone", got)
	}
	if got := endpoints(t, snap, "ns/a"); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Fatalf("ns/a endpoints %v, want 10.0.0.1 alone", got)
	}
	waitFiltered(t, p, 2, 2)
	if rejected, n := p.Rejections(10); n != 0 {
		t.Fatalf("filtered records listed as rejected: %v", rejected)
	}

	// a's only instance is now a canary: a is excluded, so removed.
	canary := service("a", "10.0.0.1")
	canary.Instances[0].Labels = map[string]string{"canary": ""}
	p.Update(canary)
	snap = waitSeq(t, store, snap.Seq)
	if got := servedNames(snap); len(got) != 0 {
		t.Fatalf("served %v after a's update excluded it, want nothing", got)
	}
	waitFiltered(t, p, 3, 2) // skipme, c, a; c's instance and a's
	p.Update(service("skip-2", "10.0.0.3"))
	p.Delete(model.ServiceKey{Namespace: "ns", Name: "c"})
	waitFiltered(t, p, 3, 1) // skipme, a, skip-2; a's instance

	p.Update(service("a", "10.0.0.7"))
	snap = waitSeq(t, store, snap.Seq)
	if got := servedNames(snap); !slices.Equal(got, []string{"ns/a"}) {
		t.Fatalf("served %v after a came back, want ns/a", got)
	}
	waitFiltered(t, p, 2, 0)

	p.SetFilter(nil)
	p.Replace([]model.Service{service("a", "10.0.0.7", "192.168.0.1"), service("skipme", "10.0.0.2")})
	snap = waitSeq(t, store, snap.Seq)
	if got := servedNames(snap); !slices.Equal(got, []string{"ns/a", "ns/skipme"}) {
		t.Fatalf("served %v without filters, want ns/a and ns/skipme", got)
	}
	waitFiltered(t, p, 0, 0)
}

// TestFilterInForwardMode: an intake (the fleet's) hands on the filtered registry.
func TestFilterInForwardMode(t *testing.T) {
	f, err := importfilter.New(importfilter.Settings{IncludeServices: []string{"keep-*"}}, "--")
	if err != nil {
		t.Fatal(err)
	}
	var fw forwarded
	p, _ := run(t, Config{Registry: "r", Forward: fw.forward, Filter: f})
	p.Replace([]model.Service{service("keep-1", "10.0.0.1"), service("drop-1", "10.0.0.2")})
	waitFor(t, "the first listing handed on", func() bool { _, _, synced := fw.state(); return synced })
	fw.mu.Lock()
	_, kept := fw.services[model.ServiceKey{Namespace: "ns", Name: "keep-1"}]
	n := len(fw.services)
	fw.mu.Unlock()
	if !kept || n != 1 {
		t.Fatalf("handed on %d services (keep-1: %v), want keep-1 alone", n, kept)
	}
	waitFiltered(t, p, 1, 0)
}
