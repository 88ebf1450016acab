package loadtest

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	istiomcp "istio.io/api/mcp/v1alpha1"

	mcpv1alpha1 "github.com/galleon-mesh/galleon/proto/mcp/v1alpha1"
)

// split cuts b into several buffers, as gRPC hands a message over, so that
// fields straddle buffer boundaries.
func split(b []byte, size int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > size {
		s = append(s, mem.SliceBuffer(b[:size]))
		b = b[size:]
	}
	return append(s, mem.SliceBuffer(b))
}

func decode(t *testing.T, kind headerKind, wire []byte) header {
	t.Helper()
	c := headerCodec{encoding.GetCodecV2(grpcproto.Name)}
	h := header{kind: kind}
	if err := c.Unmarshal(split(wire, 7), &h); err != nil {
		t.Fatal(err)
	}
	if h.kind != kind || h.bytes != len(wire) {
		t.Fatalf("kind %d, %d bytes; want kind %d, %d bytes", h.kind, h.bytes, kind, len(wire))
	}
	return h
}

// TestMCPHeaderHandBuilt decodes a Resources message built field by field,
// in the order Galleon's source writes it (header fields first, then the
// resources) and with a field the decoder does not know.
func TestMCPHeaderHandBuilt(t *testing.T) {
	body := make([]byte, 300) // a resource's bytes: skipped, not parsed
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "v42")
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, "istio/networking/v1alpha3/serviceentries")
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendString(b, "ns/gone")
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendString(b, "7.3")
	b = protowire.AppendTag(b, 6, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 99, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 1)
	for range 3 {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, body)
	}
	h := decode(t, mcpHeader, b)
	if h.version != "v42" || h.typeURL != "istio/networking/v1alpha3/serviceentries" || h.nonce != "7.3" || !h.incremental {
		t.Fatalf("decoded %+v", h)
	}

	// Full state, as proto.Marshal orders it: resources before the nonce,
	// no incremental flag.
	m := &mcpv1alpha1.Resources{SystemVersionInfo: "v1", Collection: "c", Nonce: "n1",
		Resources: []*istiomcp.Resource{{Body: &anypb.Any{TypeUrl: "t", Value: body}}, {}}}
	wire, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if h := decode(t, mcpHeader, wire); h.version != "v1" || h.typeURL != "c" || h.nonce != "n1" || h.incremental {
		t.Fatalf("decoded %+v", h)
	}
}

// TestXDSHeader: the same decoder reads a DiscoveryResponse's fields.
func TestXDSHeader(t *testing.T) {
	wire, err := proto.Marshal(&discovery.DiscoveryResponse{VersionInfo: "v9", TypeUrl: "type", Nonce: "n9",
		Resources: []*anypb.Any{{TypeUrl: "x", Value: make([]byte, 100)}}})
	if err != nil {
		t.Fatal(err)
	}
	if h := decode(t, xdsHeader, wire); h.version != "v9" || h.typeURL != "type" || h.nonce != "n9" {
		t.Fatalf("decoded %+v", h)
	}
}
