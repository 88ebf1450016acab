// Package serve is what the two protocol servers (serve/xds and serve/mcp) share: the stream
// loop, the bounds on what clients may make the process hold (per stream and in total), the
// change-acknowledgement latency, full-state bodies in chunks, and the codec below.
//
// The codec lets gRPC services write messages that are already in wire form. A full-state
// response for a collection version is encoded once and the same bytes are written to every
// stream; the codec installed on the grpc.Server passes such messages through and marshals
// everything else with grpc's proto codec.
package serve

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Message is a protobuf message already in wire form: Buffers, written one
// after the other, are its encoding, Size bytes in all. The buffers must be
// SliceBuffers over bytes nobody modifies, so that one Message can be written
// by many streams at once.
type Message struct {
	Buffers mem.BufferSlice
	Size    int
}

// Codec returns grpc's proto codec extended to write *Message values as they
// are. Every other message, and every message received, goes through the
// proto codec unchanged. Install it with grpc.ForceServerCodecV2.
func Codec() encoding.CodecV2 {
	return passThroughCodec{proto: encoding.GetCodecV2(proto.Name)}
}

type passThroughCodec struct{ proto encoding.CodecV2 }

func (c passThroughCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*Message); ok {
		// The buffers are SliceBuffers over immutable bytes: Ref and Free
		// are no-ops, so the same slice may be written by many streams at
		// once; grpc's reader only re-slices its own copy of the header.
		return m.Buffers, nil
	}
	return c.proto.Marshal(v)
}

func (c passThroughCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return c.proto.Unmarshal(data, v)
}

// Name is "proto": the codec replaces the default one for the content type
// every gRPC client uses.
func (c passThroughCodec) Name() string { return proto.Name }
