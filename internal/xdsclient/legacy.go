package xdsclient

import (
	"context"
	"time"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	mcpv1alpha1 "github.com/galleon-mesh/galleon/proto/mcp/v1alpha1"
)

// The legacy MCP collections (istio.mcp.v1alpha1, Istio 1.1 - 1.8 sinks)
// that hold ServiceEntries and WorkloadEntries.
const (
	LegacyServiceEntries  = "istio/networking/v1alpha3/serviceentries"
	LegacyWorkloadEntries = "istio/networking/v1alpha3/workloadentries"
)

// LegacyResponse is one istio.mcp.v1alpha1.Resources message: the full
// state of a collection (Incremental false) or, to a sink that asked for
// incremental updates, the added and changed resources and Removed.
type LegacyResponse struct {
	Collection        string
	SystemVersionInfo string
	Nonce             string
	Incremental       bool
	Received          time.Time
	// Resources are the resources that could be unwrapped (their TypeURL
	// is the collection); Errors are the others.
	Resources []Resource
	Errors    []ResourceError
	// Removed are the names ("<namespace>/<name>") of removed resources;
	// meaningful only when Incremental.
	Removed []string
	Raw     *mcpv1alpha1.Resources
}

// LegacyStream is a legacy MCP stream (ResourceSource.EstablishResourceStream),
// the kind an Istio 1.1 - 1.8 sink opens to its config source.
//
// Recv must be called from one goroutine; ACK and NACK from one goroutine.
type LegacyStream struct {
	stream      grpc.BidiStreamingClient[mcpv1alpha1.RequestResources, mcpv1alpha1.Resources]
	node        *mcpv1alpha1.SinkNode
	incremental bool
}

// OpenLegacy opens a legacy MCP stream on conn and subscribes to each of
// collections, asking for incremental updates when incremental is set.
func OpenLegacy(ctx context.Context, conn grpc.ClientConnInterface, sinkID string, collections []string, incremental bool, opts ...grpc.CallOption) (*LegacyStream, error) {
	stream, err := mcpv1alpha1.NewResourceSourceClient(conn).EstablishResourceStream(ctx, opts...)
	if err != nil {
		return nil, err
	}
	s := &LegacyStream{stream: stream, node: &mcpv1alpha1.SinkNode{Id: sinkID}, incremental: incremental}
	for _, c := range collections {
		if err := s.send(&mcpv1alpha1.RequestResources{Collection: c}); err != nil {
			return nil, openErr(err, stream.Recv)
		}
	}
	return s, nil
}

func (s *LegacyStream) send(req *mcpv1alpha1.RequestResources) error {
	req.SinkNode = s.node
	req.Incremental = s.incremental
	return sendErr(s.stream.Send(req))
}

// Recv waits for the next response and unwraps its resources.
func (s *LegacyStream) Recv() (*LegacyResponse, error) {
	raw, err := s.stream.Recv()
	if err != nil {
		return nil, err
	}
	resp := &LegacyResponse{
		Collection:        raw.GetCollection(),
		SystemVersionInfo: raw.GetSystemVersionInfo(),
		Nonce:             raw.GetNonce(),
		Incremental:       raw.GetIncremental(),
		Received:          time.Now(),
		Removed:           raw.GetRemovedResources(),
		Raw:               raw,
	}
	for i, m := range raw.GetResources() {
		r, err := fromMCP(resp.Collection, m)
		if err != nil {
			resp.Errors = append(resp.Errors, ResourceError{Index: i, Name: m.GetMetadata().GetName(), Err: err})
			continue
		}
		resp.Resources = append(resp.Resources, r)
	}
	return resp, nil
}

// ACK acknowledges resp by its nonce.
func (s *LegacyStream) ACK(resp *LegacyResponse) error {
	return s.send(&mcpv1alpha1.RequestResources{Collection: resp.Collection, ResponseNonce: resp.Nonce})
}

// NACK rejects resp: its nonce and the reason.
func (s *LegacyStream) NACK(resp *LegacyResponse, reason error) error {
	return s.send(&mcpv1alpha1.RequestResources{Collection: resp.Collection, ResponseNonce: resp.Nonce,
		ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: reason.Error()}})
}

// CloseSend tells the source no more requests will come.
func (s *LegacyStream) CloseSend() error { return s.stream.CloseSend() }
