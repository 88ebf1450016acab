package legacymcp

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	mcp "istio.io/api/mcp/v1alpha1"
)

// sinkServer is a ResourceSink server registered with istio.io/api
// v1.22.0's generated code: the side a legacy sink runs when it cannot
// reach its source and the source dials it (callout mode).
type sinkServer struct {
	mcp.UnimplementedResourceSinkServer
	t       *testing.T
	streams chan *sink
}

// EstablishResourceStream hands the stream to the test and receives on it
// until it ends; the handler returning ends the stream.
func (ss *sinkServer) EstablishResourceStream(stream mcp.ResourceSink_EstablishResourceStreamServer) error {
	s := &sink{t: ss.t, stream: stream, got: make(chan result, 64),
		annotations: map[string]string{"galleon.io/subset": "only-b"}}
	select {
	case ss.streams <- s:
	case <-stream.Context().Done():
		return nil
	}
	for {
		r, err := stream.Recv()
		select {
		case s.got <- result{r, err}:
		case <-stream.Context().Done():
			return nil
		}
		if err != nil {
			return nil
		}
	}
}

// TestCalloutWithSubset: galleon-file dials a ResourceSink server built on
// Istio's generated code (--mcp-callout); the sink subscribes on that
// stream, states a SinkNode annotation that a config subset (--subsets)
// selects, and receives only that subset's service, then its changes.
func TestCalloutWithSubset(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ss := &sinkServer{t: t, streams: make(chan *sink, 4)}
	g := grpc.NewServer()
	mcp.RegisterResourceSinkServer(g, ss)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	rules := filepath.Join(t.TempDir(), "subsets.yaml")
	if err := os.WriteFile(rules, []byte(`subsets:
- name: only-b
  sinks:
    metadata: {galleon.io/subset: only-b}
  services:
    hosts: ["b.*.internal"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	gal := startGalleonWith(t, []string{"--mcp-callout", lis.Addr().String(), "--subsets", rules}, svcA, svcB, svcC)

	var s *sink
	select {
	case s = <-ss.streams:
	case <-time.After(wait):
		t.Fatalf("galleon-file did not dial the sink within %v:\n%s", wait, gal.log.String())
	}
	s.send(&mcp.RequestResources{Collection: serviceEntries})
	r := s.recv()
	if held := decode(t, r); !matches(held, svcB) {
		t.Fatalf("callout sink of subset only-b got %s, want b only", describe(held))
	}
	s.ack(r, false)
	// A change outside the subset and one inside: only the latter arrives.
	gal.write(t, svcA2, svcB2, svcC)
	r = s.recv()
	if held := decode(t, r); !matches(held, svcB2) {
		t.Fatalf("after the change the sink got %s, want b with its new endpoint", describe(held))
	}
}
