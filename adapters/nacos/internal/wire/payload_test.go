package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// goldenPayload and goldenBytes are written by hand from nacos_grpc_service.proto and the
// protobuf encoding spec (tag = field<<3 | wire type 2; length as one varint byte here):
//
//	12 30                      Payload.metadata (2), 48 bytes
//	  1a 12 "HealthCheckRequest"   Metadata.type (3), 18 bytes
//	  3a 10                        Metadata.headers (7), one map entry of 16 bytes
//	    0a 0b "accessToken"          key (1)
//	    12 01 "t"                    value (2)
//	  42 08 "10.0.0.1"             Metadata.clientIp (8)
//	1a 04                      Payload.body (3), an Any of 4 bytes
//	  12 02 "{}"                   Any.value (2); type_url (1) empty, so absent
var goldenPayload = &Payload{
	Type: "HealthCheckRequest", ClientIP: "10.0.0.1",
	Headers: map[string]string{"accessToken": "t"}, Body: []byte("{}"),
}

func goldenBytes(t *testing.T) []byte {
	t.Helper()
	h := "1230" +
		"1a12" + hex.EncodeToString([]byte("HealthCheckRequest")) +
		"3a10" + "0a0b" + hex.EncodeToString([]byte("accessToken")) + "1201" + hex.EncodeToString([]byte("t")) +
		"4208" + hex.EncodeToString([]byte("10.0.0.1")) +
		"1a04" + "1202" + hex.EncodeToString([]byte("{}"))
	b, err := hex.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPayloadGolden(t *testing.T) {
	golden := goldenBytes(t)
	if got := MarshalPayload(goldenPayload); !bytes.Equal(got, golden) {
		t.Errorf("MarshalPayload =\n%x\nwant\n%x", got, golden)
	}
	p, err := UnmarshalPayload(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, goldenPayload) {
		t.Errorf("UnmarshalPayload = %+v, want %+v", p, goldenPayload)
	}
	// The golden bytes are themselves checked against protowire's parser: the hand-written
	// lengths are the lengths of what follows.
	var walk func(b []byte, depth int) int
	walk = func(b []byte, depth int) int {
		n := 0
		for len(b) > 0 {
			num, typ, l := protowire.ConsumeTag(b)
			if l < 0 || typ != protowire.BytesType {
				t.Fatalf("golden bytes: bad tag at depth %d", depth)
			}
			b = b[l:]
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				t.Fatalf("golden bytes: field %d: bad length", num)
			}
			b = b[l:]
			n++
			if depth == 0 || (depth == 1 && num == fieldMetadataHeaders) {
				n += walk(v, depth+1)
			}
		}
		return n
	}
	if n := walk(golden, 0); n != 8 {
		t.Errorf("golden bytes hold %d fields, want 8", n)
	}
}

// dynamicPayload builds the Payload message type from a descriptor written here, with
// google.protobuf.Any from the protobuf module: an independent encoder and decoder to check
// this package's against (dynamicpb registers nothing globally).
func dynamicPayload(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	s := proto.String
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	fd := &descriptorpb.FileDescriptorProto{
		Name: s("wiretest/nacos_grpc_service.proto"), Syntax: s("proto3"),
		Dependency: []string{"google/protobuf/any.proto"},
		MessageType: []*descriptorpb.DescriptorProto{
			{
				Name: s("Metadata"),
				Field: []*descriptorpb.FieldDescriptorProto{
					{Name: s("type"), Number: proto.Int32(3), Type: str, Label: opt, JsonName: s("type")},
					{Name: s("clientIp"), Number: proto.Int32(8), Type: str, Label: opt, JsonName: s("clientIp")},
					{Name: s("headers"), Number: proto.Int32(7), Type: msg, Label: rep, TypeName: s(".Metadata.HeadersEntry"), JsonName: s("headers")},
				},
				NestedType: []*descriptorpb.DescriptorProto{{
					Name: s("HeadersEntry"),
					Field: []*descriptorpb.FieldDescriptorProto{
						{Name: s("key"), Number: proto.Int32(1), Type: str, Label: opt, JsonName: s("key")},
						{Name: s("value"), Number: proto.Int32(2), Type: str, Label: opt, JsonName: s("value")},
					},
					Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
				}},
			},
			{
				Name: s("Payload"),
				Field: []*descriptorpb.FieldDescriptorProto{
					{Name: s("metadata"), Number: proto.Int32(2), Type: msg, Label: opt, TypeName: s(".Metadata"), JsonName: s("metadata")},
					{Name: s("body"), Number: proto.Int32(3), Type: msg, Label: opt, TypeName: s(".google.protobuf.Any"), JsonName: s("body")},
				},
			},
		},
	}
	f, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return f.Messages().ByName("Payload")
}

func randString(r *rand.Rand, n int) string {
	const alphabet = "abcXYZ019_-.@/é中"
	var b strings.Builder
	for range r.IntN(n + 1) {
		rs := []rune(alphabet)
		b.WriteRune(rs[r.IntN(len(rs))])
	}
	return b.String()
}

func TestPayloadAgainstProtobuf(t *testing.T) {
	md := dynamicPayload(t)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		p := &Payload{Type: randString(r, 30), ClientIP: randString(r, 15), TypeURL: randString(r, 10)}
		if n := r.IntN(5); n > 0 {
			p.Headers = map[string]string{}
			for range n {
				p.Headers[randString(r, 12)] = randString(r, 40)
			}
		}
		if r.IntN(4) > 0 {
			p.Body = []byte(randString(r, 200))
		}

		// Ours -> protobuf's.
		m := dynamicpb.NewMessage(md)
		if err := proto.Unmarshal(MarshalPayload(p), m); err != nil {
			t.Fatalf("#%d: protobuf cannot read our encoding: %v", i, err)
		}
		// Protobuf's -> ours.
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := UnmarshalPayload(b)
		if err != nil {
			t.Fatalf("#%d: cannot read protobuf's encoding: %v", i, err)
		}
		if !payloadEqual(got, p) {
			t.Fatalf("#%d: round trip through protobuf: got %+v, want %+v", i, got, p)
		}
		// Both encoders write the same bytes (same field order, map keys sorted).
		if !bytes.Equal(b, MarshalPayload(p)) {
			t.Errorf("#%d: encodings differ:\nours     %x\nprotobuf %x", i, MarshalPayload(p), b)
		}
	}
}

func payloadEqual(a, b *Payload) bool {
	if len(a.Headers) == 0 && len(b.Headers) == 0 {
		a2, b2 := *a, *b
		a2.Headers, b2.Headers = nil, nil
		a, b = &a2, &b2
	}
	return a.Type == b.Type && a.ClientIP == b.ClientIP && a.TypeURL == b.TypeURL &&
		bytes.Equal(a.Body, b.Body) && reflect.DeepEqual(a.Headers, b.Headers)
}

// TestPolarisPayloads decodes payloads captured from polaris-server 1.18.1 (marshalled by its
// generated golang/protobuf code: apiserver/nacosserver/v2/remote MarshalPayload), written by
// TestPolarisGRPC with GALLEON_NACOS_CAPTURE=1.
func TestPolarisPayloads(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "polaris", "*.pb"))
	if len(files) < 5 {
		t.Fatalf("%d captured payloads in testdata/polaris, want 5", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := UnmarshalPayload(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if want := strings.TrimSuffix(filepath.Base(f), ".pb"); p.Type != want {
			t.Errorf("%s: type %q", f, p.Type)
		}
		if !bytes.HasPrefix(p.Body, []byte("{")) || p.TypeURL != "" || len(p.Headers) != 0 {
			t.Errorf("%s: %+v", f, p)
		}
		if !bytes.Equal(MarshalPayload(p), b) {
			t.Errorf("%s: re-encoding differs from Polaris's", f)
		}
	}
}

func TestUnmarshalPayloadRejects(t *testing.T) {
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	bytesField := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(tag(num, protowire.BytesType), v)
	}
	manyHeaders := []byte{}
	for i := range maxPayloadHeaders + 1 {
		entry := append(bytesField(1, []byte{byte('a' + i%26), byte('a' + i/26)}), bytesField(2, []byte("v"))...)
		manyHeaders = append(manyHeaders, bytesField(fieldMetadataHeaders, entry)...)
	}
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"group":             {tag(5, protowire.StartGroupType), "unsupported wire type 3"},
		"truncated length":  {[]byte{0x12, 0x05, 0x01}, "field 2"},
		"bad tag":           {[]byte{0x80}, "bad tag"},
		"metadata varint":   {append(tag(2, protowire.VarintType), 1), "Payload.metadata: wire type 0"},
		"type too long":     {bytesField(2, bytesField(3, bytes.Repeat([]byte("x"), maxPayloadTypeBytes+1))), "Metadata.type longer"},
		"type not utf-8":    {bytesField(2, bytesField(3, []byte{0xff})), "not valid UTF-8"},
		"too many headers":  {bytesField(2, manyHeaders), "more than 64 headers"},
		"header value long": {bytesField(2, bytesField(7, bytesField(2, bytes.Repeat([]byte("x"), maxPayloadHeaderBytes+1)))), "headers value longer"},
		"body fixed32":      {bytesField(3, append(tag(2, protowire.Fixed32Type), 1, 2, 3, 4)), "Any.value: wire type 5"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := UnmarshalPayload(tc.in)
			var de *DecodeError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("UnmarshalPayload(%x) = %v, want a DecodeError with %q", tc.in, err, tc.want)
			}
		})
	}
	// Unknown fields of every valid wire type are skipped.
	in := append(MarshalPayload(goldenPayload), tag(9, protowire.VarintType)...)
	in = append(in, 5)
	in = append(in, tag(10, protowire.Fixed64Type)...)
	in = append(in, 1, 2, 3, 4, 5, 6, 7, 8)
	if p, err := UnmarshalPayload(in); err != nil || p.Type != goldenPayload.Type {
		t.Errorf("unknown fields: %+v, %v", p, err)
	}
}
