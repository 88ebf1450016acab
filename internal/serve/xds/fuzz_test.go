package xds

import (
	"context"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/galleon-mesh/galleon/internal/serve"
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
	limits := serve.DefaultBudgetLimits()
	limits.NameBytes = 1 << 20 // reachable by a fuzzed request
	total := serve.NewBudget(limits, nil, nil, nil)
	s := NewServer(snapshot.Everyone(store), Options{Budget: total})
	f.Fuzz(func(t *testing.T, first, second []byte) {
		sotw := map[string]*sotwWatch{}
		delta := map[string]*deltaWatch{}
		budget := serve.NewServerLogLimiter().ForStream()
		lease, err := total.Open(context.Background(), protocolDelta)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			lease.Close()
			if streams, names, bytes, _ := total.Held(); streams != 0 || names != 0 || bytes != 0 {
				t.Fatalf("a closed stream left %d streams, %d names of %d bytes in the budget", streams, names, bytes)
			}
		}()
		for _, b := range [][]byte{first, second} {
			var sreq discovery.DiscoveryRequest
			if proto.Unmarshal(b, &sreq) == nil {
				_, _ = s.sotwRequest(sotw, budget, &sreq)
			}
			var dreq discovery.DeltaDiscoveryRequest
			if proto.Unmarshal(b, &dreq) == nil {
				if _, err := s.deltaRequest(delta, budget, lease, &dreq); err == nil {
					// The budget holds what the stream holds, no more, no less.
					if names, bytes := lease.Held(); names != clientNames(delta) || bytes != clientNameBytes(delta) {
						t.Fatalf("the lease holds %d names of %d bytes, the stream %d of %d", names, bytes, clientNames(delta), clientNameBytes(delta))
					}
					snap := store.Current()
					for _, w := range delta {
						if w.known {
							_, _, _ = deltaChanges(w, snap.Collection(w.kind))
						}
					}
				}
			}
		}
		if _, bytes := lease.Held(); bytes > limits.NameBytes {
			t.Fatalf("a Delta stream holds %d bytes of names, over the total %d", bytes, limits.NameBytes)
		}
		if n := clientNames(delta); n > serve.MaxNamesPerStream {
			t.Fatalf("a Delta stream holds %d client names, over the bound %d", n, serve.MaxNamesPerStream)
		}
		if len(sotw) > maxTypesPerStream || len(delta) > maxTypesPerStream {
			t.Fatalf("%d/%d types on one stream, over the bound %d", len(sotw), len(delta), maxTypesPerStream)
		}
	})
}

// clientNameBytes are the bytes of the names clientNames counts: each
// subscription's name, each resume version's name and version.
func clientNameBytes(watches map[string]*deltaWatch) int64 {
	var n int64
	for _, w := range watches {
		for name := range w.names {
			n += int64(len(name))
		}
		n += w.resumedBytes
	}
	return n
}
