package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/galleon-mesh/galleon/internal/loadtest"
	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/serve/xds"
)

// Floor is a null source in a process of its own: the floor of an initial sync across
// processes. It copies a source's first SotW and Delta responses for one type once, then
// answers every stream's subscription with those bytes and does nothing else: no snapshot,
// no per-stream state, no ACK tracking. It is served with Galleon's gRPC server options, so
// what separates the source's initial sync from the floor's, measured by the same sinks, is
// what the source adds; what the floor takes is the transport's and the sinks' share.
type Floor struct {
	sotw, delta *serve.Message
}

// CopyFloor subscribes to typeURL at the source at addr, on SotW and on Delta (wildcard), and
// keeps each first response as it came.
func CopyFloor(ctx context.Context, addr, typeURL string) (*Floor, error) {
	conn, err := loadtest.DialWith(addr, rawCodec{encoding.GetCodecV2(grpcproto.Name)})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	f := &Floor{}
	if f.sotw, err = firstResponse(ctx, conn, loadtest.ADSService+"StreamAggregatedResources", &discovery.DiscoveryRequest{TypeUrl: typeURL}); err != nil {
		return nil, err
	}
	if f.delta, err = firstResponse(ctx, conn, loadtest.ADSService+"DeltaAggregatedResources", &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL}); err != nil {
		return nil, err
	}
	return f, nil
}

// Sizes are the bytes of the SotW and the Delta response.
func (f *Floor) Sizes() (sotw, delta int) { return f.sotw.Size, f.delta.Size }

// Serve answers streams on l until ctx is done.
func (f *Floor) Serve(ctx context.Context, l net.Listener) error {
	server := grpc.NewServer(xds.GRPCServerOptions()...)
	desc := &grpc.ServiceDesc{
		ServiceName: "envoy.service.discovery.v3.AggregatedDiscoveryService",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{
			{StreamName: "StreamAggregatedResources", Handler: f.handler(f.sotw), ServerStreams: true, ClientStreams: true},
			{StreamName: "DeltaAggregatedResources", Handler: f.handler(f.delta), ServerStreams: true, ClientStreams: true},
		},
	}
	server.RegisterService(desc, struct{}{})
	stop := context.AfterFunc(ctx, server.Stop)
	defer stop()
	if err := server.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// handler sends msg after the stream's first request, then reads the rest (the sink's ACKs)
// unread until the stream ends.
func (f *Floor) handler(msg *serve.Message) grpc.StreamHandler {
	return func(_ any, stream grpc.ServerStream) error {
		if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
			return err
		}
		if err := stream.SendMsg(msg); err != nil {
			return err
		}
		for {
			if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
				return nil
			}
		}
	}
}

// firstResponse opens a stream on method, sends subscribe and returns the first response as
// it came off the wire.
func firstResponse(ctx context.Context, conn *grpc.ClientConn, method string, subscribe any) (*serve.Message, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream
	desc := &grpc.StreamDesc{StreamName: path.Base(method), ServerStreams: true, ClientStreams: true}
	st, err := conn.NewStream(ctx, desc, method)
	if err == nil {
		err = st.SendMsg(subscribe)
	}
	var raw rawMessage
	if err == nil {
		err = st.RecvMsg(&raw)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path.Base(method), err)
	}
	return &serve.Message{Buffers: mem.BufferSlice{mem.SliceBuffer(raw)}, Size: len(raw)}, nil
}

// rawMessage is a received message's encoding, undecoded.
type rawMessage []byte

// rawCodec receives into *rawMessage as is and marshals with the proto codec.
type rawCodec struct{ proto encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }
func (c rawCodec) Name() string                           { return grpcproto.Name }

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if raw, ok := v.(*rawMessage); ok {
		*raw = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}
