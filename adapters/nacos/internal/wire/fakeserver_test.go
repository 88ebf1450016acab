package wire

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// fakeServer is an in-process Nacos 2 gRPC server that behaves as Alibaba's Nacos does where
// it matters to the client (GrpcRequestAcceptor, GrpcBiStreamRequestAcceptor): it answers
// unary requests by type, answers 301 until the bi-stream's ConnectionSetupRequest has been
// processed, and lets a test push requests on the stream and read what the client answers.
type fakeServer struct {
	t    *testing.T
	lis  net.Listener
	srv  *grpc.Server
	addr string

	// setupDelay delays the processing of ConnectionSetupRequest (Nacos registers the
	// connection asynchronously to the client).
	setupDelay time.Duration

	mu       sync.Mutex
	setupAt  time.Time
	setup    *connectionSetupRequest
	unary    []*Payload // requests received, in order
	stream   grpc.ServerStream
	sendMu   sync.Mutex
	answer   map[string]func(p *Payload) *Payload // by request type; nil: success of the matching type
	streamCh chan grpc.ServerStream
	fromCli  chan *Payload // what the client sent on the stream after setup
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{
		t: t, lis: lis, addr: lis.Addr().String(),
		answer:   map[string]func(*Payload) *Payload{},
		streamCh: make(chan grpc.ServerStream, 1),
		fromCli:  make(chan *Payload, 64),
	}
	f.srv = grpc.NewServer(grpc.ForceServerCodec(payloadCodec{}))
	f.srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "Request",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "request",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var p Payload
				if err := dec(&p); err != nil {
					return nil, err
				}
				return f.handleUnary(ctx, &p), nil
			},
		}},
	}, f)
	f.srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "BiRequestStream",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName: "requestBiStream", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error { return f.handleStream(stream) },
		}},
	}, f)
	go func() { _ = f.srv.Serve(lis) }()
	t.Cleanup(f.stop)
	return f
}

func (f *fakeServer) stop() { f.srv.Stop() }

// on sets the answer to requests of type typ.
func (f *fakeServer) on(typ string, answer func(p *Payload) *Payload) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer[typ] = answer
}

func (f *fakeServer) received() []*Payload {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Payload(nil), f.unary...)
}

func jsonPayload(typ string, v any) *Payload {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return &Payload{Type: typ, Body: b}
}

func (f *fakeServer) handleUnary(ctx context.Context, p *Payload) *Payload {
	var req baseRequest
	_ = json.Unmarshal(p.Body, &req)
	f.mu.Lock()
	f.unary = append(f.unary, p)
	answer := f.answer[p.Type]
	registered := f.setup != nil && time.Now().After(f.setupAt.Add(f.setupDelay))
	f.mu.Unlock()
	if p.Type != typeServerCheckRequest && !registered {
		return jsonPayload(typeErrorResponse, response{ResultCode: resultFail, ErrorCode: errorUnregistered, Message: "Connection is unregistered.", RequestID: req.RequestID})
	}
	if answer != nil {
		if out := answer(p); out != nil {
			return out
		}
	}
	ok := response{ResultCode: resultSuccess, Success: true, Message: "success", RequestID: req.RequestID}
	switch p.Type {
	case typeServerCheckRequest:
		return jsonPayload(typeServerCheckResponse, serverCheckResponse{response: ok, ConnectionID: "fake-conn-1"})
	case typeHealthCheckRequest:
		return jsonPayload(typeHealthCheckResponse, ok)
	case typeSubscribeServiceRequest:
		return jsonPayload(typeSubscribeServiceResponse, map[string]any{
			"resultCode": 200, "requestId": req.RequestID,
			"serviceInfo": map[string]any{"name": "svc", "groupName": "DEFAULT_GROUP", "hosts": []any{}},
		})
	case typeServiceListRequest:
		return jsonPayload(typeServiceListResponse, map[string]any{"resultCode": 200, "count": 0, "serviceNames": []string{}})
	}
	return jsonPayload(typeErrorResponse, response{ResultCode: resultFail, ErrorCode: 500, Message: "unknown type"})
}

func (f *fakeServer) handleStream(stream grpc.ServerStream) error {
	for {
		var p Payload
		if err := stream.RecvMsg(&p); err != nil {
			return nil
		}
		if p.Type == typeConnectionSetupRequest {
			var setup connectionSetupRequest
			if err := json.Unmarshal(p.Body, &setup); err != nil {
				f.t.Errorf("ConnectionSetupRequest body: %v", err)
			}
			f.mu.Lock()
			f.setup, f.setupAt, f.stream = &setup, time.Now(), stream
			f.mu.Unlock()
			f.streamCh <- stream
			continue
		}
		f.fromCli <- &p
	}
}

// push sends a request to the client on its bi-stream.
func (f *fakeServer) push(t *testing.T, p *Payload) {
	t.Helper()
	f.mu.Lock()
	stream := f.stream
	f.mu.Unlock()
	f.sendMu.Lock()
	defer f.sendMu.Unlock()
	if err := stream.SendMsg(p); err != nil {
		t.Fatalf("push: %v", err)
	}
}

// next is the next payload the client sent on the stream.
func (f *fakeServer) next(t *testing.T) *Payload {
	t.Helper()
	select {
	case p := <-f.fromCli:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("the client sent nothing on the stream within 5 s")
		return nil
	}
}
