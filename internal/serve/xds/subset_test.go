package xds

import (
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/galleon-mesh/galleon/internal/serve/subset/subsettest"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

func node(id string, meta map[string]any) *core.Node {
	m, err := structpb.NewStruct(meta)
	if err != nil {
		panic(err)
	}
	return &core.Node{Id: id, Metadata: m}
}

// Two sinks with different subsets, over SotW and Delta: each receives its
// own services, changes reach only the sinks whose subset holds them, and a
// sink no subset selects receives everything.
func TestSubsetsPerSink(t *testing.T) {
	store := snapshot.NewStore()
	router := subsettest.TeamRouter(t, store, "TEAM")
	subsettest.PutTeam(t, store, "ns/a1", "x", "a")
	subsettest.PutTeam(t, store, "ns/b1", "x", "b")
	subsettest.PutTeam(t, store, "ns/c1", "x", "c")
	client := startServerWith(t, router, Options{})

	sotwA := openSotW(t, client)
	if err := sotwA.stream.Send(&discovery.DiscoveryRequest{TypeUrl: seV1, Node: node("istiod-1", map[string]any{"TEAM": "a"})}); err != nil {
		t.Fatal(err)
	}
	sotwAll := openSotW(t, client)
	if err := sotwAll.stream.Send(&discovery.DiscoveryRequest{TypeUrl: seV1, Node: node("istiod-2", map[string]any{"TEAM": 7.0})}); err != nil {
		t.Fatal(err)
	}
	deltaB := openDelta(t, client)
	deltaB.send(&discovery.DeltaDiscoveryRequest{Node: node("sink-b-1", nil)})

	respA := sotwA.recv()
	if got := sotwNames(t, respA); !slices.Equal(got, []string{"ns/a1=x"}) {
		t.Fatalf("sink of subset a got %v", got)
	}
	sotwA.ack(respA)
	respAll := sotwAll.recv()
	if got := sotwNames(t, respAll); !slices.Equal(got, []string{"ns/a1=x", "ns/b1=x", "ns/c1=x"}) {
		t.Fatalf("unselected sink (non-string metadata) got %v", got)
	}
	sotwAll.ack(respAll)
	if changed, removed := deltaB.recvAck(); !slices.Equal(changed, []string{"ns/b1=x"}) || len(removed) != 0 {
		t.Fatalf("delta sink of subset b got %v %v", changed, removed)
	}

	// A change to b's service: b and the unselected sink hear of it, a does not.
	subsettest.PutTeam(t, store, "ns/b1", "y", "b")
	if changed, _ := deltaB.recvAck(); !slices.Equal(changed, []string{"ns/b1=y"}) {
		t.Fatalf("delta b after change: %v", changed)
	}
	respAll = sotwAll.recv()
	sotwAll.ack(respAll)
	// A service moving from c to a: a gets it; b's stream stays silent.
	subsettest.PutTeam(t, store, "ns/c1", "x", "a")
	respA = sotwA.recv()
	if got := sotwNames(t, respA); !slices.Equal(got, []string{"ns/a1=x", "ns/c1=x"}) {
		t.Fatalf("sink a after c1 moved to team a: %v", got)
	}
	// b got nothing for these changes: its next response is for its own.
	subsettest.PutTeam(t, store, "ns/b1", "z", "b")
	if changed, removed := deltaB.recvAck(); !slices.Equal(changed, []string{"ns/b1=z"}) || len(removed) != 0 {
		t.Fatalf("delta b was sent %v %v for changes outside its subset", changed, removed)
	}
	// And a service leaving a's subset is removed from a's full state.
	sotwA.ack(respA)
	subsettest.PutTeam(t, store, "ns/a1", "x", "b")
	if got := sotwNames(t, sotwA.recv()); !slices.Equal(got, []string{"ns/c1=x"}) {
		t.Fatalf("sink a after a1 left: %v", got)
	}
	if changed, _ := deltaB.recvAck(); !slices.Equal(changed, []string{"ns/a1=x"}) {
		t.Fatalf("delta b after a1 joined: %v", changed)
	}
}
