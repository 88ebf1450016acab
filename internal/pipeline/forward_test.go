package pipeline

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/model"
)

// forwarded records what an intake hands on.
type forwarded struct {
	mu       sync.Mutex
	batches  []map[model.ServiceKey]*model.Service
	synced   bool
	services map[model.ServiceKey]*model.Service
}

func (f *forwarded) forward(changes map[model.ServiceKey]*model.Service, synced bool, _ time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, changes)
	f.synced = synced
	if f.services == nil {
		f.services = map[model.ServiceKey]*model.Service{}
	}
	for k, s := range changes {
		if s == nil {
			delete(f.services, k)
		} else {
			f.services[k] = s
		}
	}
}

func (f *forwarded) state() (batches, services int, synced bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.batches), len(f.services), f.synced
}

// TestForwardHandsOnChangesOnly: an intake (the fleet's, one per registry) hands on what
// changed after its own coalescing and emptiness rule, writes nothing to the store, and keeps
// its status and metrics as a whole pipeline does.
func TestForwardHandsOnChangesOnly(t *testing.T) {
	var f forwarded
	reg := prometheus.NewRegistry()
	p, store := run(t, Config{Registry: "consul", Forward: f.forward, RemovalHold: time.Hour,
		Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"registry": "consul"}, reg), LabelledRegisterer: true})
	p.Replace(services(20))
	waitFor(t, "the first listing handed on", func() bool { _, n, synced := f.state(); return n == 20 && synced })
	if st := p.Status(); !st.Synced || st.Services != 20 {
		t.Fatalf("status %+v, want synced with 20 services", st)
	}
	if store.Current().Seq != 0 {
		t.Fatalf("an intake wrote the store: seq %d", store.Current().Seq)
	}
	// The same listing again, one service changed: one change handed on.
	again := services(20)
	again[3] = service("s3", "10.9.9.9")
	p.Replace(again)
	waitFor(t, "the change handed on", func() bool { b, _, _ := f.state(); return b == 2 })
	f.mu.Lock()
	last := f.batches[1]
	f.mu.Unlock()
	if len(last) != 1 || last[model.ServiceKey{Namespace: "ns", Name: "s3"}] == nil {
		t.Fatalf("handed on %d changes (%v), want s3 alone", len(last), last)
	}
	// An empty answer is held here, per registry: nothing is handed on.
	p.Replace(nil)
	waitFor(t, "the hold", func() bool { return p.Status().Held != nil })
	if _, n, _ := f.state(); n != 20 {
		t.Fatalf("%d services handed on after an empty answer, want the 20 held", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "galleon_registry_last_sync_timestamp_seconds" {
			found = len(mf.Metric) == 1 && len(mf.Metric[0].Label) == 1 && mf.Metric[0].Label[0].GetValue() == "consul"
		}
	}
	if !found {
		t.Errorf("galleon_registry_last_sync_timestamp_seconds not labelled registry=consul once")
	}
}

// TestBackdate: the fleet's serving pipeline measures change -> every sink ACKed from when the
// registry first reported the change (its intake's oldest report), not from when the Merger
// handed it on.
func TestBackdate(t *testing.T) {
	type applied struct {
		seq      uint64
		reported time.Time
	}
	got := make(chan applied, 4)
	p, store := run(t, Config{Applied: func(seq uint64, reported time.Time) { got <- applied{seq, reported} }})
	p.Replace(services(2))
	waitSeq(t, store, 0)
	<-got
	first := time.Now().Add(-700 * time.Millisecond)
	p.Update(service("s0", "10.9.9.9"))
	p.Backdate(first)
	p.Backdate(time.Time{})               // zero: nothing
	p.Backdate(time.Now().Add(time.Hour)) // later than the reports: nothing
	select {
	case a := <-got:
		if !a.reported.Equal(first) {
			t.Fatalf("Applied measured from %v, want the backdated %v", a.reported, first)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot applied")
	}
}
