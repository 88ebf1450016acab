// Package loadtest holds the measuring sinks used by Galleon's benchmarks
// and its load tool (bench/cmd/galleon-load): ADS and legacy MCP clients that
// acknowledge every response and record when each version arrived and how
// many bytes it took.
//
// Sinks read only the response header (version, type URL or collection,
// nonce) and skip the resources: gRPC has received every byte by then, and
// what a real sink does with them is its own cost, not the source's.
package loadtest

import (
	"context"
	"fmt"
	"io"
	"path"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	mcpv1alpha1 "github.com/galleon-mesh/galleon/proto/mcp/v1alpha1"
)

// Arrival is one response as a sink saw it.
type Arrival struct {
	Version string
	At      time.Time
	// Bytes is the size of the response on the wire.
	Bytes int
	// Incremental is set for a legacy MCP response that holds only changes.
	Incremental bool
}

// Sink is one connected ADS client.
type Sink struct {
	conn *grpc.ClientConn

	mu      sync.Mutex
	cond    *sync.Cond
	latest  Arrival
	arrived map[string]Arrival
	// count is how many responses arrived, whatever their versions.
	count int
	err   error
}

func newSink(conn *grpc.ClientConn) *Sink {
	s := &Sink{conn: conn, arrived: map[string]Arrival{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *Sink) record(a Arrival) {
	s.mu.Lock()
	s.latest = a
	s.arrived[a.Version] = a
	s.count++
	s.mu.Unlock()
	s.cond.Broadcast()
}

func (s *Sink) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.cond.Broadcast()
}

// Latest returns the last response received.
func (s *Sink) Latest() Arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest
}

// Count returns how many responses have arrived.
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// Wait blocks until version arrived, the stream failed or ctx is done.
func (s *Sink) Wait(ctx context.Context, version string) (Arrival, error) {
	return s.waitFor(ctx, func() (Arrival, bool) {
		a, ok := s.arrived[version]
		return a, ok
	})
}

// WaitChange blocks until a version other than old is the latest.
func (s *Sink) WaitChange(ctx context.Context, old string) (Arrival, error) {
	return s.waitFor(ctx, func() (Arrival, bool) {
		return s.latest, s.latest.Version != "" && s.latest.Version != old
	})
}

func (s *Sink) waitFor(ctx context.Context, done func() (Arrival, bool)) (Arrival, error) {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if a, ok := done(); ok {
			return a, nil
		}
		if s.err != nil {
			return Arrival{}, s.err
		}
		if err := ctx.Err(); err != nil {
			return Arrival{}, err
		}
		s.cond.Wait()
	}
}

// Close closes the sink's connection.
func (s *Sink) Close() error { return s.conn.Close() }

// Dial connects to a source the way the sinks do: istiod's window sizes, no
// message size limit, and a codec that decodes a response received into
// RecvXDSHeader's header and nothing more (every other message is proto).
func Dial(addr string) (*grpc.ClientConn, error) {
	return DialWith(addr, headerCodec{encoding.GetCodecV2(grpcproto.Name)})
}

// DialWith is Dial with codec in place of the header codec.
func DialWith(addr string, codec encoding.CodecV2) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.ForceCodecV2(codec)),
		// The window sizes istiod uses for config sources.
		grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(1<<20))
}

// DialSotW connects a SotW sink asking for typeURL. The stream lives until
// ctx is done.
func DialSotW(ctx context.Context, addr, typeURL string) (*Sink, error) {
	return dialStream(ctx, addr, ADSService+"StreamAggregatedResources", xdsHeader, &discovery.DiscoveryRequest{TypeUrl: typeURL},
		func(h header) any {
			return &discovery.DiscoveryRequest{TypeUrl: h.typeURL, VersionInfo: h.version, ResponseNonce: h.nonce}
		})
}

// DialDelta connects a wildcard Delta sink asking for typeURL.
func DialDelta(ctx context.Context, addr, typeURL string) (*Sink, error) {
	return dialStream(ctx, addr, ADSService+"DeltaAggregatedResources", xdsHeader, &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL},
		func(h header) any {
			return &discovery.DeltaDiscoveryRequest{TypeUrl: h.typeURL, ResponseNonce: h.nonce}
		})
}

// DialMCP connects a legacy MCP sink (istio.mcp.v1alpha1.ResourceSource)
// subscribing to collection, asking for incremental updates if incremental.
func DialMCP(ctx context.Context, addr, collection string, incremental bool) (*Sink, error) {
	return dialStream(ctx, addr, "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream", mcpHeader,
		&mcpv1alpha1.RequestResources{Collection: collection, Incremental: incremental, SinkNode: &mcpv1alpha1.SinkNode{Id: "galleon-load"}},
		func(h header) any {
			return &mcpv1alpha1.RequestResources{Collection: h.typeURL, ResponseNonce: h.nonce, Incremental: incremental}
		})
}

// ADSService is the path prefix of the ADS methods.
const ADSService = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"

// dialStream opens one stream on method (a full method path), sends
// subscribe, and then records and acknowledges (with ack's request) every
// response, decoded as a header of kind, until the stream ends.
func dialStream(ctx context.Context, addr, method string, kind headerKind, subscribe any, ack func(header) any) (*Sink, error) {
	conn, err := Dial(addr)
	if err != nil {
		return nil, err
	}
	desc := &grpc.StreamDesc{StreamName: path.Base(method), ServerStreams: true, ClientStreams: true}
	st, err := conn.NewStream(ctx, desc, method)
	if err == nil {
		err = st.SendMsg(subscribe)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s to %s: %w", path.Base(method), addr, err)
	}
	s := newSink(conn)
	go func() { // ends with the stream: when ctx is done or the source goes
		for {
			h := header{kind: kind}
			if err := st.RecvMsg(&h); err != nil {
				s.fail(err)
				return
			}
			s.record(Arrival{Version: h.version, At: time.Now(), Bytes: h.bytes, Incremental: h.incremental})
			if err := st.SendMsg(ack(h)); err != nil {
				s.fail(err)
				return
			}
		}
	}()
	return s, nil
}

// RecvXDSHeader receives one DiscoveryResponse or DeltaDiscoveryResponse on
// st, a stream of a connection from Dial, decoding its header only (the
// resources are skipped), and returns its nonce.
func RecvXDSHeader(st grpc.ClientStream) (nonce string, err error) {
	h := header{kind: xdsHeader}
	err = st.RecvMsg(&h)
	return h.nonce, err
}

// headerKind says which message a header is decoded from.
type headerKind int

const (
	// xdsHeader: a DiscoveryResponse or DeltaDiscoveryResponse. Both carry
	// the version in field 1, the type URL in field 4 and the nonce in
	// field 5.
	xdsHeader headerKind = iota
	// mcpHeader: a legacy istio.mcp.v1alpha1.Resources. The version is field
	// 1, the collection field 2 (kept in typeURL), the nonce field 5 and
	// the incremental flag field 6 (a varint; proto3 encoders omit it when
	// false, Galleon writes it before the resources).
	mcpHeader
)

// header is what a sink decodes of a response: all but the resources.
type header struct {
	kind                    headerKind
	version, nonce, typeURL string
	incremental             bool // mcpHeader only
	sawIncremental          bool // the incremental field was on the wire
	bytes                   int  // the whole message
}

// Field numbers of the header fields, by kind.
var headerFields = [...]struct{ version, typeURL, nonce protowire.Number }{
	xdsHeader: {version: 1, typeURL: 4, nonce: 5},
	mcpHeader: {version: 1, typeURL: 2, nonce: 5},
}

const mcpFieldIncremental protowire.Number = 6

// done reports whether the rest of the message can be skipped. An MCP
// message whose incremental flag was not seen is read to its end: the flag
// is only absent when false, and a proto encoder may put it last.
func (h *header) done() bool {
	if h.version == "" || h.nonce == "" || h.typeURL == "" {
		return false
	}
	return h.kind != mcpHeader || h.sawIncremental
}

// headerCodec decodes *header values from the wire and leaves every other
// message to the proto codec.
type headerCodec struct{ proto encoding.CodecV2 }

func (c headerCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }
func (c headerCodec) Name() string                           { return grpcproto.Name }

func (c headerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	h, ok := v.(*header)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	*h = header{kind: h.kind, bytes: data.Len()}
	rd := data.Reader()
	defer rd.Close()
	return h.decode(rd)
}

func (h *header) decode(rd *mem.Reader) error {
	fields := headerFields[h.kind]
	for rd.Remaining() > 0 && !h.done() {
		tag, err := readVarint(rd)
		if err != nil {
			return err
		}
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		switch typ {
		case protowire.VarintType:
			v, err := readVarint(rd)
			if err != nil {
				return err
			}
			if h.kind == mcpHeader && num == mcpFieldIncremental {
				h.incremental, h.sawIncremental = v != 0, true
			}
			continue
		case protowire.Fixed32Type, protowire.Fixed64Type:
			n := 4
			if typ == protowire.Fixed64Type {
				n = 8
			}
			if _, err := rd.Discard(n); err != nil {
				return err
			}
			continue
		case protowire.BytesType:
		default:
			return fmt.Errorf("unexpected wire type %d in a response", typ)
		}
		n, err := readVarint(rd)
		if err != nil {
			return err
		}
		if n > uint64(rd.Remaining()) {
			return fmt.Errorf("field %d: length %d past the end of the message", num, n)
		}
		var dst *string
		switch num {
		case fields.version:
			dst = &h.version
		case fields.typeURL:
			dst = &h.typeURL
		case fields.nonce:
			dst = &h.nonce
		}
		if dst == nil {
			if _, err := rd.Discard(int(n)); err != nil {
				return err
			}
			continue
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return err
		}
		*dst = string(buf)
	}
	return nil
}
func readVarint(rd *mem.Reader) (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		c, err := rd.ReadByte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("varint overflows 64 bits")
}
