package mcp

import (
	"slices"
	"testing"

	"github.com/galleon-mesh/galleon/internal/serve/subset/subsettest"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// Two legacy sinks with different subsets, one selected by SinkNode
// annotations (full state), one by node id (incremental), and one that no
// subset selects.
func TestSubsetsPerSink(t *testing.T) {
	store := snapshot.NewStore()
	subsettest.PutTeam(t, store, "ns/a1", "x", "a")
	subsettest.PutTeam(t, store, "ns/b1", "x", "b")
	subsettest.PutTeam(t, store, "ns/c1", "x", "c")
	_, client := startServer(t, subsettest.TeamRouter(t, store, "galleon.io/team"), Options{})

	a := openSink(t, client, "istiod-a")
	a.annotations = map[string]string{"galleon.io/team": "a"}
	a.subscribe(ServiceEntries, false)
	b := openSink(t, client, "sink-b-1")
	b.subscribe(ServiceEntries, true)
	all := openSink(t, client, "other")
	all.subscribe(ServiceEntries, false)

	ra := a.recv()
	if got := names(t, ra); !slices.Equal(got, []string{"ns/a1=x"}) {
		t.Fatalf("sink a got %v", got)
	}
	a.ack(ra, false)
	rb := b.recv()
	if got := names(t, rb); !slices.Equal(got, []string{"ns/b1=x"}) {
		t.Fatalf("sink b got %v", got)
	}
	b.ack(rb, true)
	rall := all.recv()
	if got := names(t, rall); !slices.Equal(got, []string{"ns/a1=x", "ns/b1=x", "ns/c1=x"}) {
		t.Fatalf("unselected sink got %v", got)
	}
	all.ack(rall, false)

	// A change to b's service reaches b (incrementally) and the default sink.
	subsettest.PutTeam(t, store, "ns/b1", "y", "b")
	rb = b.recv()
	if got := names(t, rb); !rb.Incremental || !slices.Equal(got, []string{"ns/b1=y"}) {
		t.Fatalf("sink b after change: incremental=%v %v", rb.Incremental, got)
	}
	b.ack(rb, true)
	all.ack(all.recv(), false)
	a.nothing()

	// b1 moves to team a: removed from b, added to a.
	subsettest.PutTeam(t, store, "ns/b1", "y", "a")
	rb = b.recv()
	if len(rb.Resources) != 0 || !slices.Equal(rb.RemovedResources, []string{"ns/b1"}) {
		t.Fatalf("sink b after b1 left: %v removed %v", names(t, rb), rb.RemovedResources)
	}
	if got := names(t, a.recv()); !slices.Equal(got, []string{"ns/a1=x", "ns/b1=y"}) {
		t.Fatalf("sink a after b1 joined: %v", got)
	}
}

// A callout sink is routed by the SinkNode of the first request it sends.
func TestSubsetsCallout(t *testing.T) {
	store := snapshot.NewStore()
	subsettest.PutTeam(t, store, "ns/a1", "x", "a")
	subsettest.PutTeam(t, store, "ns/b1", "x", "b")
	srv := NewServer(subsettest.TeamRouter(t, store, "galleon.io/team"), Options{})
	ss := startSinkServer(t, "127.0.0.1:0", nil)
	callout(t, srv, CalloutConfig{Address: ss.addr})
	s := ss.accept("sink-b-7")
	s.subscribe(ServiceEntries, false)
	if got := names(t, s.recv()); !slices.Equal(got, []string{"ns/b1=x"}) {
		t.Fatalf("callout sink b got %v", got)
	}
}
