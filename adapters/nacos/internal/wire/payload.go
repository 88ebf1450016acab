package wire

import (
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of nacos_grpc_service.proto (Nacos's api/src/main/proto; Polaris's copy is
// apiserver/nacosserver/v2/pb/nacos_grpc_service.proto):
//
//	message Metadata { string type = 3; string clientIp = 8; map<string,string> headers = 7; }
//	message Payload  { Metadata metadata = 2; google.protobuf.Any body = 3; }
//	message Any      { string type_url = 1; bytes value = 2; }            (google/protobuf/any.proto)
//	map entry        { string key = 1; string value = 2; }                (proto3 map encoding)
const (
	fieldPayloadMetadata protowire.Number = 2
	fieldPayloadBody     protowire.Number = 3

	fieldMetadataType     protowire.Number = 3
	fieldMetadataHeaders  protowire.Number = 7
	fieldMetadataClientIP protowire.Number = 8

	fieldAnyTypeURL protowire.Number = 1
	fieldAnyValue   protowire.Number = 2

	fieldMapKey   protowire.Number = 1
	fieldMapValue protowire.Number = 2
)

// Bounds of what a Payload may carry besides its body (the body is bounded by the gRPC
// message size, DialConfig.MaxMessageBytes). Nacos servers send a handful of headers; the
// type is a Java class's simple name.
const (
	maxPayloadHeaders     = 64
	maxPayloadHeaderBytes = 4096 // per key and per value
	maxPayloadTypeBytes   = 256  // Metadata.type, Any.type_url, Metadata.clientIp
)

// Payload is one message of Nacos's gRPC API: a request or a response, named by Type (the Java
// simple class name, "SubscribeServiceRequest", "ErrorResponse", ...), with Body its JSON.
type Payload struct {
	Type     string
	ClientIP string
	Headers  map[string]string
	// TypeURL is the body's google.protobuf.Any type_url: Nacos clients leave it empty and so
	// do Nacos and Polaris servers; it is carried, not interpreted.
	TypeURL string
	Body    []byte
}

// MarshalPayload encodes p as the protobuf Payload message. Headers are written in key order,
// so the encoding of a Payload is deterministic.
func MarshalPayload(p *Payload) []byte {
	var md []byte
	md = appendString(md, fieldMetadataType, p.Type)
	keys := make([]string, 0, len(p.Headers))
	for k := range p.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		// A map entry carries its key and value even when empty, as protobuf-go and
		// protobuf-java write them.
		var entry []byte
		entry = protowire.AppendTag(entry, fieldMapKey, protowire.BytesType)
		entry = protowire.AppendString(entry, k)
		entry = protowire.AppendTag(entry, fieldMapValue, protowire.BytesType)
		entry = protowire.AppendString(entry, p.Headers[k])
		md = protowire.AppendTag(md, fieldMetadataHeaders, protowire.BytesType)
		md = protowire.AppendBytes(md, entry)
	}
	md = appendString(md, fieldMetadataClientIP, p.ClientIP)

	var body []byte
	body = appendString(body, fieldAnyTypeURL, p.TypeURL)
	if len(p.Body) > 0 {
		body = protowire.AppendTag(body, fieldAnyValue, protowire.BytesType)
		body = protowire.AppendBytes(body, p.Body)
	}

	out := make([]byte, 0, len(md)+len(body)+16)
	out = protowire.AppendTag(out, fieldPayloadMetadata, protowire.BytesType)
	out = protowire.AppendBytes(out, md)
	out = protowire.AppendTag(out, fieldPayloadBody, protowire.BytesType)
	out = protowire.AppendBytes(out, body)
	return out
}

// appendString appends a proto3 string field; proto3 omits empty scalars.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// UnmarshalPayload decodes a protobuf Payload message. It follows protobuf's rules (unknown
// fields skipped, the last of a repeated scalar wins, repeated embedded messages merge) within
// bounds: at most maxPayloadHeaders headers, each key and value at most maxPayloadHeaderBytes,
// strings valid UTF-8 (as proto3 requires), no groups. Body is a copy: data may be reused by
// the caller. Errors are *DecodeError.
func UnmarshalPayload(data []byte) (*Payload, error) {
	p := &Payload{}
	err := forEachField(data, "Payload", func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case fieldPayloadMetadata:
			if typ != protowire.BytesType {
				return errWireType("Payload.metadata", typ)
			}
			return p.unmarshalMetadata(v)
		case fieldPayloadBody:
			if typ != protowire.BytesType {
				return errWireType("Payload.body", typ)
			}
			return p.unmarshalAny(v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Payload) unmarshalMetadata(data []byte) error {
	return forEachField(data, "Metadata", func(num protowire.Number, typ protowire.Type, v []byte) error {
		var err error
		switch num {
		case fieldMetadataType:
			p.Type, err = stringField("Metadata.type", typ, v, maxPayloadTypeBytes)
		case fieldMetadataClientIP:
			p.ClientIP, err = stringField("Metadata.clientIp", typ, v, maxPayloadTypeBytes)
		case fieldMetadataHeaders:
			if typ != protowire.BytesType {
				return errWireType("Metadata.headers", typ)
			}
			err = p.unmarshalHeader(v)
		}
		return err
	})
}

func (p *Payload) unmarshalHeader(data []byte) error {
	var key, value string
	err := forEachField(data, "Metadata.headers", func(num protowire.Number, typ protowire.Type, v []byte) error {
		var err error
		switch num {
		case fieldMapKey:
			key, err = stringField("Metadata.headers key", typ, v, maxPayloadHeaderBytes)
		case fieldMapValue:
			value, err = stringField("Metadata.headers value", typ, v, maxPayloadHeaderBytes)
		}
		return err
	})
	if err != nil {
		return err
	}
	if p.Headers == nil {
		p.Headers = make(map[string]string)
	}
	if _, dup := p.Headers[key]; !dup && len(p.Headers) >= maxPayloadHeaders {
		return decodeErr("Payload", nil, "more than %d headers", maxPayloadHeaders)
	}
	p.Headers[key] = value
	return nil
}

func (p *Payload) unmarshalAny(data []byte) error {
	return forEachField(data, "Any", func(num protowire.Number, typ protowire.Type, v []byte) error {
		var err error
		switch num {
		case fieldAnyTypeURL:
			p.TypeURL, err = stringField("Any.type_url", typ, v, maxPayloadTypeBytes)
		case fieldAnyValue:
			if typ != protowire.BytesType {
				return errWireType("Any.value", typ)
			}
			p.Body = append([]byte(nil), v...)
		}
		return err
	})
}

// forEachField calls fn with each field of the message in data. For a length-delimited field v
// is its content; for other wire types v is nil (they are only ever skipped or rejected). Groups
// (deprecated in proto3 and absent from this proto) and malformed input are errors.
func forEachField(data []byte, what string, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return decodeErr(what, protowire.ParseError(n), "bad tag: %v", protowire.ParseError(n))
		}
		data = data[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(data)
		case protowire.VarintType:
			_, n = protowire.ConsumeVarint(data)
		case protowire.Fixed32Type:
			_, n = protowire.ConsumeFixed32(data)
		case protowire.Fixed64Type:
			_, n = protowire.ConsumeFixed64(data)
		default:
			return decodeErr(what, nil, "field %d: unsupported wire type %d", num, typ)
		}
		if n < 0 {
			return decodeErr(what, protowire.ParseError(n), "field %d: %v", num, protowire.ParseError(n))
		}
		data = data[n:]
		if err := fn(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

func stringField(what string, typ protowire.Type, v []byte, limit int) (string, error) {
	if typ != protowire.BytesType {
		return "", errWireType(what, typ)
	}
	if len(v) > limit {
		return "", decodeErr("Payload", nil, "%s longer than %d bytes", what, limit)
	}
	if !utf8.Valid(v) {
		return "", decodeErr("Payload", nil, "%s is not valid UTF-8", what)
	}
	return string(v), nil
}

func errWireType(what string, typ protowire.Type) error {
	return decodeErr("Payload", nil, "%s: wire type %d, want %d", what, typ, protowire.BytesType)
}

// payloadCodec is the gRPC codec of the two Nacos services: it (un)marshals *Payload and
// nothing else. It is passed per call (grpc.ForceCodec), never registered: registration is
// global, and the content-subtype stays the default ("application/grpc"), which is what Nacos
// and Polaris servers expect.
type payloadCodec struct {
	tap func(raw []byte) // tests: sees what Unmarshal is given
}

func (payloadCodec) Marshal(v any) ([]byte, error) {
	p, ok := v.(*Payload)
	if !ok {
		return nil, fmt.Errorf("nacos payload codec: cannot marshal %T", v)
	}
	return MarshalPayload(p), nil
}

func (c payloadCodec) Unmarshal(data []byte, v any) error {
	if c.tap != nil {
		c.tap(data)
	}
	p, ok := v.(*Payload)
	if !ok {
		return fmt.Errorf("nacos payload codec: cannot unmarshal into %T", v)
	}
	got, err := UnmarshalPayload(data)
	if err != nil {
		return err
	}
	*p = *got
	return nil
}

// Name is "proto": the messages are protobuf; gRPC uses a forced codec's name only for the
// content-subtype when CallContentSubtype is also given, which this package never does.
func (payloadCodec) Name() string { return "proto" }
