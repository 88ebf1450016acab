package xdsclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// NewNode returns the Node a client presents to the source. Sources may
// use it to pick what to send (Istio's own source grouped sinks by node).
func NewNode(id string) *corev3.Node {
	return &corev3.Node{Id: id, UserAgentName: "galleon-xdsclient"}
}

// sendErr explains the io.EOF gRPC returns from Send on a broken stream:
// the actual reason is what the receiving side's Recv returns.
func sendErr(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("the stream was closed (Recv has the reason): %w", err)
	}
	return err
}

// openErr is why a stream broke while its subscriptions were being sent:
// when the source ends the stream (Unimplemented, say) before a Send, gRPC
// reports only io.EOF there, and Recv has the status.
func openErr[T any](err error, recv func() (T, error)) error {
	if errors.Is(err, io.EOF) {
		if _, rerr := recv(); rerr != nil && !errors.Is(rerr, io.EOF) {
			return rerr
		}
	}
	return err
}

// ResourceError is a resource of a response that could not be unwrapped.
type ResourceError struct {
	// Index is the resource's position in the response.
	Index int
	// Name is the resource name where the protocol carries one outside
	// the payload (Delta), else "".
	Name string
	Err  error
}

func (e ResourceError) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("resource %d (%s): %v", e.Index, e.Name, e.Err)
	}
	return fmt.Sprintf("resource %d: %v", e.Index, e.Err)
}

// Response is one SotW response: the full state of one collection.
type Response struct {
	TypeURL     string
	VersionInfo string
	Nonce       string
	// Received is when the response arrived.
	Received time.Time
	// Resources are the resources that could be unwrapped, in the order
	// sent; Errors are the others.
	Resources []Resource
	Errors    []ResourceError
	// Raw is the response as received.
	Raw *discoveryv3.DiscoveryResponse
}

// SotWStream is a State-of-the-World ADS stream
// (StreamAggregatedResources), the kind istiod opens to a config source.
//
// Recv must be called from one goroutine; ACK and NACK from one goroutine,
// which may be a different one (gRPC allows one sender and one receiver).
type SotWStream struct {
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *corev3.Node
	// acked is the last ACKed version per type, the version_info a NACK
	// must carry. Used by the sending goroutine only.
	acked map[string]string
}

// OpenSotW opens a SotW ADS stream on conn and subscribes (wildcard) to
// each of typeURLs with one request each, back to back, like istiod. The
// stream lives until ctx is cancelled or the source ends it.
func OpenSotW(ctx context.Context, conn grpc.ClientConnInterface, node *corev3.Node, typeURLs []string, opts ...grpc.CallOption) (*SotWStream, error) {
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx, opts...)
	if err != nil {
		return nil, err
	}
	s := &SotWStream{stream: stream, node: node, acked: map[string]string{}}
	for _, t := range typeURLs {
		if err := s.send(&discoveryv3.DiscoveryRequest{TypeUrl: t}); err != nil {
			return nil, openErr(err, stream.Recv)
		}
	}
	return s, nil
}

func (s *SotWStream) send(req *discoveryv3.DiscoveryRequest) error {
	req.Node = s.node
	return sendErr(s.stream.Send(req))
}

// Recv waits for the next response and unwraps its resources.
func (s *SotWStream) Recv() (*Response, error) {
	raw, err := s.stream.Recv()
	if err != nil {
		return nil, err
	}
	resp := &Response{
		TypeURL:     raw.GetTypeUrl(),
		VersionInfo: raw.GetVersionInfo(),
		Nonce:       raw.GetNonce(),
		Received:    time.Now(),
		Raw:         raw,
	}
	for i, a := range raw.GetResources() {
		r, err := Unwrap(resp.TypeURL, a)
		if err != nil {
			resp.Errors = append(resp.Errors, ResourceError{Index: i, Err: err})
			continue
		}
		resp.Resources = append(resp.Resources, r)
	}
	return resp, nil
}

// ACK acknowledges resp: same type, its version and nonce.
func (s *SotWStream) ACK(resp *Response) error {
	s.acked[resp.TypeURL] = resp.VersionInfo
	return s.send(&discoveryv3.DiscoveryRequest{
		TypeUrl:       resp.TypeURL,
		VersionInfo:   resp.VersionInfo,
		ResponseNonce: resp.Nonce,
	})
}

// NACK rejects resp: its nonce, the last ACKed version and the reason.
func (s *SotWStream) NACK(resp *Response, reason error) error {
	return s.send(&discoveryv3.DiscoveryRequest{
		TypeUrl:       resp.TypeURL,
		VersionInfo:   s.acked[resp.TypeURL],
		ResponseNonce: resp.Nonce,
		ErrorDetail:   &status.Status{Code: int32(codes.InvalidArgument), Message: reason.Error()},
	})
}

// CloseSend tells the source no more requests will come. Recv keeps
// working until the source ends the stream.
func (s *SotWStream) CloseSend() error { return s.stream.CloseSend() }

// DeltaResponse is one Delta response: changed and removed resources.
type DeltaResponse struct {
	TypeURL           string
	SystemVersionInfo string
	Nonce             string
	Received          time.Time
	// Resources are the added or changed resources that could be
	// unwrapped; Errors are the others.
	Resources []Resource
	Errors    []ResourceError
	// Removed are the names of removed resources.
	Removed []string
	Raw     *discoveryv3.DeltaDiscoveryResponse
}

// DeltaStream is an incremental ADS stream (DeltaAggregatedResources).
// The same goroutine rules as SotWStream apply.
type DeltaStream struct {
	stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node   *corev3.Node
}

// OpenDelta opens a Delta ADS stream on conn with a wildcard subscription
// (no resource names) to each of typeURLs.
func OpenDelta(ctx context.Context, conn grpc.ClientConnInterface, node *corev3.Node, typeURLs []string, opts ...grpc.CallOption) (*DeltaStream, error) {
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx, opts...)
	if err != nil {
		return nil, err
	}
	d := &DeltaStream{stream: stream, node: node}
	for _, t := range typeURLs {
		if err := d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: t}); err != nil {
			return nil, openErr(err, stream.Recv)
		}
	}
	return d, nil
}

func (d *DeltaStream) send(req *discoveryv3.DeltaDiscoveryRequest) error {
	req.Node = d.node
	return sendErr(d.stream.Send(req))
}

// Recv waits for the next response and unwraps its resources.
func (d *DeltaStream) Recv() (*DeltaResponse, error) {
	raw, err := d.stream.Recv()
	if err != nil {
		return nil, err
	}
	resp := &DeltaResponse{
		TypeURL:           raw.GetTypeUrl(),
		SystemVersionInfo: raw.GetSystemVersionInfo(),
		Nonce:             raw.GetNonce(),
		Received:          time.Now(),
		Removed:           raw.GetRemovedResources(),
		Raw:               raw,
	}
	for i, dr := range raw.GetResources() {
		if dr.GetResource() == nil {
			resp.Errors = append(resp.Errors, ResourceError{Index: i, Name: dr.GetName(), Err: fmt.Errorf("no resource body")})
			continue
		}
		r, err := Unwrap(resp.TypeURL, dr.GetResource())
		if err != nil {
			resp.Errors = append(resp.Errors, ResourceError{Index: i, Name: dr.GetName(), Err: err})
			continue
		}
		if r.Version == "" {
			r.Version = dr.GetVersion() // Delta carries it outside the payload too
		}
		resp.Resources = append(resp.Resources, r)
	}
	return resp, nil
}

// ACK acknowledges resp.
func (d *DeltaStream) ACK(resp *DeltaResponse) error {
	return d.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.TypeURL, ResponseNonce: resp.Nonce})
}

// NACK rejects resp with a reason.
func (d *DeltaStream) NACK(resp *DeltaResponse, reason error) error {
	return d.send(&discoveryv3.DeltaDiscoveryRequest{
		TypeUrl:       resp.TypeURL,
		ResponseNonce: resp.Nonce,
		ErrorDetail:   &status.Status{Code: int32(codes.InvalidArgument), Message: reason.Error()},
	})
}

// CloseSend tells the source no more requests will come.
func (d *DeltaStream) CloseSend() error { return d.stream.CloseSend() }

// FirstSotW dials addr in plain text, subscribes to typeURL on a new SotW
// stream as node id, and returns the first response: what the source serves
// a new istiod now. ctx bounds it all; the connection is closed on return.
func FirstSotW(ctx context.Context, addr, id, typeURL string) (*Response, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream
	st, err := OpenSotW(ctx, conn, NewNode(id), []string{typeURL})
	if err != nil {
		return nil, err
	}
	return st.Recv()
}
