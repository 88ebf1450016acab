// Package loadtest holds the measuring sinks used by Galleon's benchmarks
// and its load tool (cmd/galleon-load): ADS clients that acknowledge every
// response and record when each version arrived and how many bytes it took.
//
// Sinks read only the response header (version, type URL, nonce) and skip
// the resources: gRPC has received every byte by then, and what a real sink
// does with them is its own cost, not the source's.
package loadtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Arrival is one response as a sink saw it.
type Arrival struct {
	Version string
	At      time.Time
	// Bytes is the size of the response on the wire.
	Bytes int
}

// Sink is one connected ADS client.
type Sink struct {
	conn *grpc.ClientConn

	mu      sync.Mutex
	cond    *sync.Cond
	latest  Arrival
	arrived map[string]Arrival
	err     error
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

func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.ForceCodecV2(headerCodec{encoding.GetCodecV2(grpcproto.Name)})),
		// The window sizes istiod uses for config sources.
		grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(1<<20))
}

// DialSotW connects a SotW sink asking for typeURL. The stream lives until
// ctx is done.
func DialSotW(ctx context.Context, addr, typeURL string) (*Sink, error) {
	return dialStream(ctx, addr, "StreamAggregatedResources", &discovery.DiscoveryRequest{TypeUrl: typeURL},
		func(h header) any {
			return &discovery.DiscoveryRequest{TypeUrl: h.typeURL, VersionInfo: h.version, ResponseNonce: h.nonce}
		})
}

// DialDelta connects a wildcard Delta sink asking for typeURL.
func DialDelta(ctx context.Context, addr, typeURL string) (*Sink, error) {
	return dialStream(ctx, addr, "DeltaAggregatedResources", &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL},
		func(h header) any {
			return &discovery.DeltaDiscoveryRequest{TypeUrl: h.typeURL, ResponseNonce: h.nonce}
		})
}

// dialStream opens one ADS stream, sends subscribe, and then records and
// acknowledges (with ack's request) every response until the stream ends.
func dialStream(ctx context.Context, addr, method string, subscribe any, ack func(header) any) (*Sink, error) {
	conn, err := dial(addr)
	if err != nil {
		return nil, err
	}
	desc := &grpc.StreamDesc{StreamName: method, ServerStreams: true, ClientStreams: true}
	st, err := conn.NewStream(ctx, desc, "/envoy.service.discovery.v3.AggregatedDiscoveryService/"+method)
	if err == nil {
		err = st.SendMsg(subscribe)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s to %s: %w", method, addr, err)
	}
	s := newSink(conn)
	go func() { // ends with the stream: when ctx is done or the source goes
		for {
			var h header
			if err := st.RecvMsg(&h); err != nil {
				s.fail(err)
				return
			}
			s.record(Arrival{Version: h.version, At: time.Now(), Bytes: h.bytes})
			if err := st.SendMsg(ack(h)); err != nil {
				s.fail(err)
				return
			}
		}
	}()
	return s, nil
}

// header is what a sink decodes of a DiscoveryResponse (or, with delta
// set, a DeltaDiscoveryResponse): both carry the version in field 1, the
// type URL in field 4 and the nonce in field 5.
type header struct {
	version, nonce, typeURL string
	bytes                   int
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
	*h = header{bytes: data.Len()}
	rd := data.Reader()
	defer rd.Close()
	for rd.Remaining() > 0 && (h.version == "" || h.nonce == "" || h.typeURL == "") {
		tag, err := readVarint(rd)
		if err != nil {
			return err
		}
		n, err := readVarint(rd)
		if err != nil {
			return err
		}
		if protowire.Type(tag&7) != protowire.BytesType {
			return fmt.Errorf("unexpected wire type %d in a DiscoveryResponse", tag&7)
		}
		switch protowire.Number(tag >> 3) {
		case 1, 4, 5:
			buf := make([]byte, n)
			if _, err := rd.Read(buf); err != nil {
				return err
			}
			switch protowire.Number(tag >> 3) {
			case 1:
				h.version = string(buf)
			case 4:
				h.typeURL = string(buf)
			case 5:
				h.nonce = string(buf)
			}
		default:
			if _, err := rd.Discard(int(n)); err != nil {
				return err
			}
		}
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
