package serve

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// histogram returns the sample count and sum of galleon_change_acked_seconds
// for protocol, and galleon_change_ack_timeouts_total.
func histogram(t *testing.T, reg *prometheus.Registry, protocol string) (count uint64, sum, timeouts float64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if !hasLabel(m, "protocol", protocol) {
				continue
			}
			switch f.GetName() {
			case "galleon_change_acked_seconds":
				count, sum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			case "galleon_change_ack_timeouts_total":
				timeouts = m.GetCounter().GetValue()
			}
		}
	}
	return count, sum, timeouts
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// change applies one ServiceEntry change to store and returns the seq.
func change(t *testing.T, store *snapshot.Store, name, body string) uint64 {
	t.Helper()
	snap, _, err := store.Apply([]snapshot.Change{{Kind: snapshot.ServiceEntry, Name: name,
		Object: &snapshot.Object{Kind: snapshot.ServiceEntry, Name: name, Body: []byte(body)}}}, true)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Seq
}

func newTracker(t *testing.T, opts ...ChangeAckOption) (*ChangeAcks, *prometheus.Registry, *fakeClock) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	reg := prometheus.NewRegistry()
	return NewChangeAcks(reg, []string{"sotw", "delta", "mcp"}, append([]ChangeAckOption{WithChangeAckClock(clock.Now)}, opts...)...), reg, clock
}

// TestChangeAcksWaitsForEveryStream: a change is observed once the last
// stream connected when it was published has answered it, per protocol,
// from the time it was reported; a stream that goes away is not waited for.
func TestChangeAcksWaitsForEveryStream(t *testing.T) {
	acks, reg, clock := newTracker(t)
	store := snapshot.NewStore()
	seq0 := change(t, store, "ns/a", "1")

	a, b := acks.Stream("sotw", store), acks.Stream("sotw", store)
	d := acks.Stream("delta", store)
	a.Update(seq0)
	b.Update(seq0)
	d.Update(seq0)

	reported := clock.Now()
	seq1 := change(t, store, "ns/a", "2")
	clock.Add(100 * time.Millisecond)
	acks.Changed(seq1, reported)
	clock.Add(100 * time.Millisecond)
	a.Update(seq1)
	d.Update(seq1)
	if n, _, _ := histogram(t, reg, "sotw"); n != 0 {
		t.Fatalf("sotw observed %d changes while one stream has not answered", n)
	}
	if n, sum, _ := histogram(t, reg, "delta"); n != 1 || sum != 0.2 {
		t.Fatalf("delta: %d observations, sum %v; want one of 0.2 s", n, sum)
	}
	clock.Add(300 * time.Millisecond)
	b.Update(seq1)
	if n, sum, _ := histogram(t, reg, "sotw"); n != 1 || sum != 0.5 {
		t.Fatalf("sotw: %d observations, sum %v; want one of 0.5 s (report to the last answer)", n, sum)
	}
	if w := acks.Waiting(); w != 0 {
		t.Fatalf("%d changes still waiting", w)
	}

	// Two changes in a row; b goes away having answered neither: each is
	// observed when a answers it.
	seq2 := change(t, store, "ns/a", "3")
	acks.Changed(seq2, clock.Now())
	seq3 := change(t, store, "ns/a", "4")
	acks.Changed(seq3, clock.Now())
	clock.Add(time.Second)
	a.Update(seq2)
	b.Close()
	if n, _, _ := histogram(t, reg, "sotw"); n != 2 {
		t.Fatalf("sotw: %d observations, want 2 (seq2 answered by a, b gone)", n)
	}
	a.Update(seq3)
	d.Update(seq3)
	if n, _, _ := histogram(t, reg, "sotw"); n != 3 {
		t.Fatalf("sotw: %d observations, want 3", n)
	}
	if n, _, _ := histogram(t, reg, "mcp"); n != 0 {
		t.Fatalf("mcp observed %d changes with no mcp stream", n)
	}
	a.Close()
	d.Close()
	if w := acks.Waiting(); w != 0 {
		t.Fatalf("%d changes still waiting", w)
	}
}

// TestChangeAcksFasterStream: a stream that answered before Changed was
// called is not waited for; a change published with no stream connected
// is not tracked.
func TestChangeAcksFasterStream(t *testing.T) {
	acks, reg, clock := newTracker(t)
	store := snapshot.NewStore()
	acks.Changed(change(t, store, "ns/a", "1"), clock.Now()) // nobody to wait for
	if w := acks.Waiting(); w != 0 {
		t.Fatalf("%d changes waiting with no stream", w)
	}
	a := acks.Stream("sotw", store)
	seq := change(t, store, "ns/a", "2")
	a.Update(seq)
	clock.Add(time.Millisecond)
	acks.Changed(seq, clock.Now().Add(-10*time.Millisecond))
	if n, sum, _ := histogram(t, reg, "sotw"); n != 1 || sum != 0.01 {
		t.Fatalf("%d observations, sum %v; want one of 0.01 s at once", n, sum)
	}
}

// TestChangeAcksViews: a stream served a config subset's view waits only
// for changes to what the view holds.
func TestChangeAcksViews(t *testing.T) {
	acks, reg, clock := newTracker(t)
	store := snapshot.NewStore()
	view := store.NewView(func(r *snapshot.Resource) bool { return strings.HasPrefix(r.Name, "team-a/") })
	whole, sub := acks.Stream("sotw", store), acks.Stream("sotw", view)
	seq := change(t, store, "team-a/x", "1")
	whole.Update(seq)
	sub.Update(view.Current().Seq)
	acks.Changed(seq, clock.Now())
	if n, _, _ := histogram(t, reg, "sotw"); n != 1 {
		t.Fatalf("%d observations after both answered, want 1", n)
	}
	// A change outside the subset: its streams are not woken and need not
	// answer anything.
	seq = change(t, store, "team-b/y", "1")
	acks.Changed(seq, clock.Now())
	whole.Update(seq)
	if n, _, _ := histogram(t, reg, "sotw"); n != 2 {
		t.Fatalf("%d observations, want 2: the subset's stream holds all its view has", n)
	}
	// A change inside it: wait for the subset's stream.
	seq = change(t, store, "team-a/x", "2")
	acks.Changed(seq, clock.Now())
	whole.Update(seq)
	if n, _, _ := histogram(t, reg, "sotw"); n != 2 {
		t.Fatal("observed before the subset's stream answered")
	}
	sub.Update(view.Current().Seq)
	if n, _, _ := histogram(t, reg, "sotw"); n != 3 {
		t.Fatalf("%d observations, want 3", n)
	}
}

// TestChangeAcksAreBounded: a stream that never answers holds changes at
// most the wait, and at most so many of them; each given up is observed at
// its age and counted.
func TestChangeAcksAreBounded(t *testing.T) {
	acks, reg, clock := newTracker(t, WithChangeAckBounds(time.Minute, 3))
	store := snapshot.NewStore()
	stuck := acks.Stream("mcp", store)
	defer stuck.Close()
	for i := range 5 {
		acks.Changed(change(t, store, "ns/a", string(rune('a'+i))), clock.Now())
		clock.Add(time.Second)
	}
	if w := acks.Waiting(); w != 3 {
		t.Fatalf("%d changes waiting, want the bound 3", w)
	}
	if n, sum, timeouts := histogram(t, reg, "mcp"); n != 2 || timeouts != 2 || sum != 3+3 {
		t.Fatalf("%d observed (sum %v), %v timeouts; want the 2 oldest given up, each 3 s old", n, sum, timeouts)
	}
	clock.Add(time.Minute)
	// A scrape gives up what waited too long, with nothing else going on.
	if n, _, timeouts := histogram(t, reg, "mcp"); n != 5 || timeouts != 5 {
		t.Fatalf("%d observed, %v timeouts after the wait; want 5 and 5", n, timeouts)
	}
	if w := acks.Waiting(); w != 0 {
		t.Fatalf("%d changes waiting after the wait", w)
	}
}

// TestChangeAcksNewWatch: a stream whose progress goes down (it asked for
// a new type) catches up with a change only when it rises again.
func TestChangeAcksNewWatch(t *testing.T) {
	acks, reg, clock := newTracker(t)
	store := snapshot.NewStore()
	s := acks.Stream("sotw", store)
	defer s.Close()
	s.Update(change(t, store, "ns/a", "1"))
	seq := change(t, store, "ns/a", "2")
	acks.Changed(seq, clock.Now())
	s.Update(seq - 1) // a new watch: nothing answered of seq yet
	if n, _, _ := histogram(t, reg, "sotw"); n != 0 {
		t.Fatal("observed although the stream's progress went down")
	}
	s.Update(seq)
	if n, _, _ := histogram(t, reg, "sotw"); n != 1 {
		t.Fatal("not observed once the stream answered")
	}
}

// A nil tracker and its nil streams do nothing (servers without one).
func TestChangeAcksNil(t *testing.T) {
	var acks *ChangeAcks
	s := acks.Stream("sotw", snapshot.NewStore())
	s.Update(3)
	s.Close()
	acks.Changed(3, time.Now())
}
