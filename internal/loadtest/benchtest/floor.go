package benchtest

// The floor: a null source to set Galleon's full-state (SotW, legacy MCP
// full) change latency against, in the same harness. It is served with the
// same gRPC options (xds.GRPCServerOptions: the pass-through codec) on the
// same kind of BenchEnv, to the same sinks, and does nothing but write bytes:
// the full state is encoded once, when the server starts, and every change
// only puts a new version and nonce in front of those bytes. No watches, no
// ACK tracking, no metrics, no send timeouts, no per-version encoding (and
// the body is one buffer, where Galleon's is one per resource). What
// it takes per change is what the transport takes to move the full state to
// every sink; Galleon's figure over it is what Galleon adds.
//
// The bytes it sends are the state of when it started, not the changed one;
// the sinks read only each response's header (loadtest's Sink skips the
// resources), so they see the new version all the same; the size differs
// only by what the changed addresses add (61 of 9.4 MB after 30 changes).

import (
	"context"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/galleon-mesh/galleon/internal/loadtest"
	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// StartFloorSotW serves the full data set (as Start does) from the null
// source, on the SotW ADS method: DiscoveryResponse{version_info 1, resources 2, type_url 4,
// nonce 5}.
func StartFloorSotW(b *testing.B, typeURL string) *loadtest.BenchEnv {
	return Start(b, func(g *grpc.Server, store *snapshot.Store) {
		var body []byte
		body = protowire.AppendTag(body, 4, protowire.BytesType)
		body = protowire.AppendString(body, typeURL)
		for _, r := range store.Current().Collection(snapshot.ServiceEntry).Resources() {
			body = append(body, r.ResponseEntry()...) // already a field-2 element
		}
		register(g, store, "envoy.service.discovery.v3.AggregatedDiscoveryService", "StreamAggregatedResources", body)
	})
}

// StartFloorMCP serves the full data set (as Start does) from the null
// source, on the legacy MCP method: istio.mcp.v1alpha1.Resources{system_version_info 1,
// collection 2, resources 3, nonce 5, incremental 6}. incremental=false is
// written before the resources, as Galleon does, so that sinks stop
// reading at the same place.
func StartFloorMCP(b *testing.B, collection string) *loadtest.BenchEnv {
	return Start(b, func(g *grpc.Server, store *snapshot.Store) {
		var body []byte
		body = protowire.AppendTag(body, 2, protowire.BytesType)
		body = protowire.AppendString(body, collection)
		body = protowire.AppendTag(body, 6, protowire.VarintType)
		body = protowire.AppendVarint(body, 0)
		for _, r := range store.Current().Collection(snapshot.ServiceEntry).Resources() {
			body = protowire.AppendTag(body, 3, protowire.BytesType)
			body = protowire.AppendBytes(body, r.MCP())
		}
		register(g, store, "istio.mcp.v1alpha1.ResourceSource", "EstablishResourceStream", body)
	})
}

// register installs the null source on g as service/method. body is the
// response without its version and nonce: every field but those, encoded
// once. Both message types have the version in field 1 and the nonce in
// field 5; protobuf lets fields come in any order, so a response is a
// small header of those two followed by body, shared by every stream.
func register(g *grpc.Server, store *snapshot.Store, service, method string, body []byte) {
	handler := func(_ any, stream grpc.ServerStream) error {
		return serveFloor(stream, store, body)
	}
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil), // the handler closes over its state
		Streams: []grpc.StreamDesc{{
			StreamName: method, Handler: handler, ServerStreams: true, ClientStreams: true,
		}},
	}, struct{}{})
}

// serveFloor serves one stream: after the first request (the
// subscription), the current ServiceEntry version, then each new one. It
// learns of new versions from a store subscription, as Galleon's servers
// do, and skips none: a response goes out whenever the collection's
// sequence moved, whether or not the last one was acknowledged
// (the benchmark waits for every sink before the next change anyway).
func serveFloor(stream grpc.ServerStream, store *snapshot.Store, body []byte) error {
	// Requests are read as Empty: their fields are dropped unread.
	if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() { // drain the ACKs so that the sink's sends never block
		defer cancel()
		for stream.RecvMsg(&emptypb.Empty{}) == nil {
		}
	}()
	changed, unsubscribe := store.Subscribe()
	defer unsubscribe()
	var sent uint64
	for {
		// The benchmark's store is ready before any sink connects.
		if col := store.Current().Collection(snapshot.ServiceEntry); col.Seq != sent {
			nonce := strconv.FormatUint(col.Seq, 10)
			header := protowire.AppendTag(nil, 1, protowire.BytesType)
			header = protowire.AppendString(header, col.Version)
			header = protowire.AppendTag(header, 5, protowire.BytesType)
			header = protowire.AppendString(header, nonce)
			msg := &serve.Message{Buffers: mem.BufferSlice{mem.SliceBuffer(header), mem.SliceBuffer(body)},
				Size: len(header) + len(body)}
			if err := stream.SendMsg(msg); err != nil {
				return err
			}
			sent = col.Seq
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
