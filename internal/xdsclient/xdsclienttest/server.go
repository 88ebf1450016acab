// Package xdsclienttest provides a scripted ADS server for testing xDS
// clients: it records every request and answers from a fixed script, one
// response at a time per type, the next one only after the previous one
// was ACKed. It checks the client's side of the protocol, nothing more: it
// is not an MCP source.
package xdsclienttest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcp "istio.io/api/mcp/v1alpha1"
)

// Script is what the server answers, per type URL, in order. The first
// response of a type is sent on the client's first request for it; each
// next one when the previous one is ACKed (its nonce echoed without an
// error). Every response must carry a distinct nonce.
type Script struct {
	SotW  map[string][]*discoveryv3.DiscoveryResponse
	Delta map[string][]*discoveryv3.DeltaDiscoveryResponse
}

// Server is a scripted ADS server listening on 127.0.0.1.
type Server struct {
	// Addr is the host:port the server listens on.
	Addr string

	grpc   *grpc.Server
	script Script

	mu            sync.Mutex
	requests      []*discoveryv3.DiscoveryRequest
	deltaRequests []*discoveryv3.DeltaDiscoveryRequest
	pendingAcks   int // scripted responses not ACKed yet
	allAcked      chan struct{}
	halfClosed    chan struct{}
	halfCloseOnce sync.Once

	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
}

// NewServer starts a server for script; it stops when the test ends.
func NewServer(t testing.TB, script Script) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{
		Addr:       lis.Addr().String(),
		grpc:       grpc.NewServer(),
		script:     script,
		allAcked:   make(chan struct{}),
		halfClosed: make(chan struct{}),
	}
	for _, rs := range script.SotW {
		s.pendingAcks += len(rs)
	}
	for _, rs := range script.Delta {
		s.pendingAcks += len(rs)
	}
	if s.pendingAcks == 0 {
		close(s.allAcked)
	}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(s.grpc, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.grpc.Serve(lis)
	}()
	t.Cleanup(func() {
		s.grpc.Stop()
		<-done
	})
	return s
}

// AllAcked is closed once every scripted response has been ACKed.
func (s *Server) AllAcked() <-chan struct{} { return s.allAcked }

// HalfClosed is closed when a client ended its side of a stream
// (CloseSend) instead of cancelling it.
func (s *Server) HalfClosed() <-chan struct{} { return s.halfClosed }

// Requests returns the SotW requests received so far.
func (s *Server) Requests() []*discoveryv3.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discoveryv3.DiscoveryRequest(nil), s.requests...)
}

// DeltaRequests returns the Delta requests received so far.
func (s *Server) DeltaRequests() []*discoveryv3.DeltaDiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discoveryv3.DeltaDiscoveryRequest(nil), s.deltaRequests...)
}

func (s *Server) acked() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pendingAcks--
	if s.pendingAcks == 0 {
		close(s.allAcked)
	}
}

// recvEnd maps the end of the request stream to the handler's result: a
// half-close ends the stream cleanly, as real servers do.
func (s *Server) recvEnd(err error) error {
	if errors.Is(err, io.EOF) {
		s.halfCloseOnce.Do(func() { close(s.halfClosed) })
		return nil
	}
	return err
}

// StreamAggregatedResources serves the SotW script.
func (s *Server) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	next := map[string]int{}         // type -> index of the next response
	lastNonce := map[string]string{} // type -> nonce of the last response sent
	for {
		req, err := stream.Recv()
		if err != nil {
			return s.recvEnd(err)
		}
		s.mu.Lock()
		s.requests = append(s.requests, proto.Clone(req).(*discoveryv3.DiscoveryRequest))
		s.mu.Unlock()

		t := req.GetTypeUrl()
		sent, isAck := lastNonce[t], false
		if sent != "" && req.GetResponseNonce() == sent && req.GetErrorDetail() == nil {
			isAck = true
			lastNonce[t] = ""
			s.acked()
		}
		if !isAck && req.GetResponseNonce() != "" {
			continue // a NACK or a stale nonce: wait
		}
		if i := next[t]; i < len(s.script.SotW[t]) {
			resp := s.script.SotW[t][i]
			next[t] = i + 1
			lastNonce[t] = resp.GetNonce()
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

// DeltaAggregatedResources serves the Delta script.
func (s *Server) DeltaAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	next := map[string]int{}
	lastNonce := map[string]string{}
	for {
		req, err := stream.Recv()
		if err != nil {
			return s.recvEnd(err)
		}
		s.mu.Lock()
		s.deltaRequests = append(s.deltaRequests, proto.Clone(req).(*discoveryv3.DeltaDiscoveryRequest))
		s.mu.Unlock()

		t := req.GetTypeUrl()
		sent, isAck := lastNonce[t], false
		if sent != "" && req.GetResponseNonce() == sent && req.GetErrorDetail() == nil {
			isAck = true
			lastNonce[t] = ""
			s.acked()
		}
		if !isAck && req.GetResponseNonce() != "" {
			continue
		}
		if i := next[t]; i < len(s.script.Delta[t]) {
			resp := s.script.Delta[t][i]
			next[t] = i + 1
			lastNonce[t] = resp.GetNonce()
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

// MCPResource wraps body into the Any an MCP-over-xDS response carries:
// an istio.mcp.v1alpha1.Resource named "<namespace>/<name>".
func MCPResource(t testing.TB, name, version string, createTime time.Time, labels map[string]string, body proto.Message) *anypb.Any {
	t.Helper()
	b, err := anypb.New(body)
	if err != nil {
		t.Fatal(err)
	}
	md := &mcp.Metadata{Name: name, Version: version, Labels: labels}
	if !createTime.IsZero() {
		md.CreateTime = timestamppb.New(createTime)
	}
	a, err := anypb.New(&mcp.Resource{Metadata: md, Body: b})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Dial connects to a plaintext gRPC server at addr (a test's loopback source), closed when the
// test ends.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
