package mcp

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	mcpv1alpha1 "github.com/galleon-mesh/galleon/proto/mcp/v1alpha1"
)

// FuzzRequest applies arbitrary RequestResources bytes, as a legacy sink
// would send them, to one stream's state twice (a subscription, then an
// ACK, NACK or resubscription by what it says), pushing the current snapshot
// after each: no panic, and the per-stream bounds hold.
func FuzzRequest(f *testing.F) {
	for _, m := range []*mcpv1alpha1.RequestResources{
		{Collection: ServiceEntries, SinkNode: &mcpv1alpha1.SinkNode{Id: "sink", Annotations: map[string]string{"a": "b"}}},
		{Collection: ServiceEntries, Incremental: true, InitialResourceVersions: map[string]string{"ns/a": "v1"}},
		{Collection: WorkloadEntries, ResponseNonce: "1"},
		{Collection: "istio/other", ResponseNonce: "2", Incremental: true},
	} {
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
		st := newStreamState(func(any) error { return nil }, serve.NewServerLogLimiter(), nil)
		for _, b := range [][]byte{first, second} {
			var req mcpv1alpha1.RequestResources
			if proto.Unmarshal(b, &req) != nil {
				continue
			}
			if s.request(st, &req) != nil {
				return // the stream would be closed here
			}
			for _, w := range st.order {
				_ = s.push(st, w, store.Current())
			}
		}
		if st.resumed > serve.MaxNamesPerStream || len(st.watches) > maxCollectionsPerStream {
			t.Fatalf("stream holds %d resume versions and %d collections, over the bounds", st.resumed, len(st.watches))
		}
		if len(st.sink) > 256+64 {
			t.Fatalf("the sink id kept for logs is %d bytes", len(st.sink))
		}
	})
}
