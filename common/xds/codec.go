package xds

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// encodedMessage is a message already in wire form. A SotW response for a
// collection version is built once and its buffers handed to every stream;
// the codec below writes them as they are.
type encodedMessage struct {
	buffers mem.BufferSlice
	size    int
}

// passThroughCodec is grpc's proto codec that writes encodedMessage values
// without marshalling them. Every other message, and every message received,
// goes through the proto codec unchanged.
type passThroughCodec struct{ proto encoding.CodecV2 }

func newPassThroughCodec() passThroughCodec {
	return passThroughCodec{proto: encoding.GetCodecV2(proto.Name)}
}

func (c passThroughCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*encodedMessage); ok {
		// The buffers are SliceBuffers over immutable bytes: Ref and Free
		// are no-ops, so the same slice may be written by many streams at
		// once; grpc's reader only re-slices its own copy of the header.
		return m.buffers, nil
	}
	return c.proto.Marshal(v)
}

func (c passThroughCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return c.proto.Unmarshal(data, v)
}

// Name is "proto": the codec replaces the default one for the content type
// every xDS client uses.
func (c passThroughCodec) Name() string { return proto.Name }
