package xds

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/galleon-mesh/galleon/internal/grpcwire"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// FuzzRequests applies arbitrary request bytes, as a client would send them,
// to one SotW and one Delta stream's state, twice each (a subscription, then
// whatever the second reads as: an ACK, a NACK, a resubscription), and
// pushes the current snapshot after each: no panic, and the per-stream
// bounds hold whatever the client sent.
func FuzzRequests(f *testing.F) {
	seeds := []proto.Message{
		&discovery.DiscoveryRequest{TypeUrl: seV1},
		&discovery.DiscoveryRequest{TypeUrl: seV1, ResponseNonce: "1", VersionInfo: "v"},
		&discovery.DeltaDiscoveryRequest{TypeUrl: seV1, ResourceNamesSubscribe: []string{"ns/a", "*"}, InitialResourceVersions: map[string]string{"ns/a": "v"}},
		&discovery.DeltaDiscoveryRequest{TypeUrl: "example.com/Other", ResourceNamesUnsubscribe: []string{"*"}, ResponseNonce: "1"},
	}
	for _, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, b)
	}
	store := snapshot.NewStore()
	put(f, store, true, "ns/a", "a1", "ns/b", "b1")
	s := NewServer(snapshot.Everyone(store), Options{})
	f.Fuzz(func(t *testing.T, first, second []byte) {
		sotw := map[string]*sotwWatch{}
		delta := map[string]*deltaWatch{}
		budget := grpcwire.NewServerLogLimiter().ForStream()
		for _, b := range [][]byte{first, second} {
			var sreq discovery.DiscoveryRequest
			if proto.Unmarshal(b, &sreq) == nil {
				_, _ = s.sotwRequest(sotw, budget, &sreq)
			}
			var dreq discovery.DeltaDiscoveryRequest
			if proto.Unmarshal(b, &dreq) == nil {
				if _, err := s.deltaRequest(delta, budget, &dreq); err == nil {
					snap := store.Current()
					for _, w := range delta {
						if w.known {
							_, _ = deltaChanges(w, snap.Collection(w.kind))
						}
					}
				}
			}
		}
		if n := clientNames(delta); n > grpcwire.MaxNamesPerStream {
			t.Fatalf("a Delta stream holds %d client names, over the bound %d", n, grpcwire.MaxNamesPerStream)
		}
		if len(sotw) > maxTypesPerStream || len(delta) > maxTypesPerStream {
			t.Fatalf("%d/%d types on one stream, over the bound %d", len(sotw), len(delta), maxTypesPerStream)
		}
	})
}
