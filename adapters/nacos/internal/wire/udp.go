package wire

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// MaxPushPacket is the largest UDP push accepted: the largest UDP payload. Nacos's 1.x server
// gzips a push over 1 KiB (PushService.compressIfNecessary; Polaris core/push.go
// CompressIfNecessary) and sends it as one datagram.
const MaxPushPacket = 64 << 10

// DefaultMaxPushBytes bounds a push after decompression: a gzipped datagram of JSON expands
// about tenfold, so this is room for any push a server can send in one datagram.
const DefaultMaxPushBytes = 4 << 20

// PushStats counts what a PushListener received.
type PushStats struct {
	// Received counts datagrams read; Delivered those handed to onPush; Dropped those that
	// could not be decoded, were over a bound or came from a sender not accepted.
	Received, Delivered, Dropped uint64
}

// PushOption configures ListenPush.
type PushOption func(*pushOptions)

type pushOptions struct {
	namespace string
	limits    Limits
	maxBytes  int64
	accept    func(netip.Addr) bool
	onDrop    func(error)
}

// PushNamespace is the namespace whose services the server pushes to this listener: a push
// does not name its namespace, so a client registers a listener's port for one namespace only
// (Nacos's 1.x clients run one PushReceiver per NamingService, hence per namespace). Default "".
func PushNamespace(ns string) PushOption { return func(o *pushOptions) { o.namespace = ns } }

// PushLimits bounds the decoded ServiceInfo (DefaultLimits for zero fields).
func PushLimits(lim Limits) PushOption { return func(o *pushOptions) { o.limits = lim } }

// PushMaxBytes bounds a push after decompression (DefaultMaxPushBytes when <= 0).
func PushMaxBytes(n int64) PushOption { return func(o *pushOptions) { o.maxBytes = n } }

// PushAcceptFrom drops datagrams whose sender accept refuses. The push is unauthenticated UDP:
// anyone who can reach the port can send one, so a caller should accept its servers' addresses
// only. Default: every sender (what Nacos's clients do).
func PushAcceptFrom(accept func(netip.Addr) bool) PushOption {
	return func(o *pushOptions) { o.accept = accept }
}

// PushOnDrop is called, from the listener's goroutine, with the reason of each dropped
// datagram (a *DecodeError, or an error naming the refused sender). It must not block. The
// reasons are bounded (they never hold the datagram).
func PushOnDrop(f func(error)) PushOption { return func(o *pushOptions) { o.onDrop = f } }

// PushListener receives Nacos 1.x's UDP push: the server sends the new state of a service a
// client queried with its udpPort (HTTPClient.Instances) to that port, and the client acks it
// (Java PushReceiver; nacos-sdk-go clients/naming_client/naming_http/push_receiver.go). One
// goroutine reads the socket; Close or the end of ListenPush's ctx stops it.
type PushListener struct {
	conn   *net.UDPConn
	onPush func(Ref, *ServiceInfo)
	opts   pushOptions

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once

	received, delivered, dropped atomic.Uint64
}

// ListenPush listens on addr ("host:port"; port 0: any free one) and calls onPush, from its
// goroutine one call at a time, with every push decoded. onPush must not block (copy and
// signal); info is the callee's. A ServiceInfo is acked once decoded, as Nacos's clients do.
func ListenPush(ctx context.Context, addr string, onPush func(Ref, *ServiceInfo), opts ...PushOption) (*PushListener, error) {
	o := pushOptions{maxBytes: DefaultMaxPushBytes}
	for _, f := range opts {
		f(&o)
	}
	if o.maxBytes <= 0 {
		o.maxBytes = DefaultMaxPushBytes
	}
	o.limits = o.limits.orDefaults()
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	l := &PushListener{conn: conn, onPush: onPush, opts: o, stop: stop, done: make(chan struct{})}
	go l.run(ctx)
	return l, nil
}

// Port is the UDP port listened on: the udpPort to pass to HTTPClient.Instances.
func (l *PushListener) Port() int { return l.conn.LocalAddr().(*net.UDPAddr).Port }

// Stats returns the counts so far.
func (l *PushListener) Stats() PushStats {
	return PushStats{Received: l.received.Load(), Delivered: l.delivered.Load(), Dropped: l.dropped.Load()}
}

// Close stops the listener and waits for its goroutine. Idempotent.
func (l *PushListener) Close() error {
	l.closeOnce.Do(l.stop)
	<-l.done
	return nil
}

// run reads datagrams until ctx ends; closing the socket is what unblocks the read.
func (l *PushListener) run(ctx context.Context) {
	defer close(l.done)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		<-ctx.Done()
		_ = l.conn.Close()
	}()
	defer func() { <-closed }()
	// One byte more than the largest datagram tells an oversized one (from a socket option or a
	// platform allowing larger) from one that fits.
	buf := make([]byte, MaxPushPacket+1)
	for {
		n, from, err := l.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient read error: do not spin on it.
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		l.received.Add(1)
		l.handle(buf[:n], from)
	}
}

func (l *PushListener) handle(pkt []byte, from netip.AddrPort) {
	if l.opts.accept != nil && !l.opts.accept(from.Addr().Unmap()) {
		l.drop(errors.New("nacos: UDP push from a sender not accepted: " + from.Addr().String()))
		return
	}
	if len(pkt) > MaxPushPacket {
		l.drop(decodeErr("UDP push", nil, "datagram longer than %d bytes", MaxPushPacket))
		return
	}
	p, err := decodePush(pkt, l.opts.maxBytes, l.opts.limits)
	if err != nil {
		l.drop(err)
		return
	}
	var ackType string
	switch p.Type {
	case "dom", "service":
		ackType = "push-ack"
	case "dump":
		// A dump asks for the client's whole cache (for the server's debugging); this
		// listener keeps none, so it answers with an empty one.
		ackType = "dump-ack"
	default:
		ackType = "unknown-ack"
	}
	l.ack(ackType, p.LastRefTime, from)
	if p.Info != nil {
		ref := pushRef(pushHeader{Namespace: l.opts.namespace}, p.Info)
		l.delivered.Add(1)
		l.onPush(ref, p.Info)
	}
}

func (l *PushListener) drop(err error) {
	l.dropped.Add(1)
	if l.opts.onDrop != nil {
		l.opts.onDrop(err)
	}
}

// ack answers a push as Nacos's clients do: {"type": "push-ack", "lastRefTime": "<n>", "data": ""}
// (the Java PushReceiver and nacos-sdk-go send lastRefTime as a string; Alibaba's server
// PushService reads it into a long either way). A failed send is not an error: the server
// resends an unacked push, and the poll catches what is lost.
func (l *PushListener) ack(kind string, lastRefTime int64, to netip.AddrPort) {
	data := ""
	if kind == "dump-ack" {
		data = "{}"
	}
	msg, _ := json.Marshal(map[string]string{"type": kind, "lastRefTime": strconv.FormatInt(lastRefTime, 10), "data": data})
	_, _ = l.conn.WriteToUDPAddrPort(msg, to)
}

// pushPacket is one decoded push.
type pushPacket struct {
	Type        string
	LastRefTime int64
	// Info is the pushed state of a "dom" or "service" push; nil for other types.
	Info *ServiceInfo
}

// gzipMagic starts a gzipped push (Java PushReceiver checks it; IoUtils.isGzipStream).
var gzipMagic = []byte{0x1f, 0x8b}

// decodePush decodes a datagram of Nacos's push: {"type": "dom"|"service"|"dump", "lastRefTime":
// n, "data": d}, gzipped or not. Alibaba's server sends d as a string holding the ServiceInfo
// JSON (PushService.prepareHostsData); Polaris as the object itself, its name under "dom" (core/
// push.go WarpUDPPushData). Both are read.
func decodePush(pkt []byte, maxBytes int64, lim Limits) (pushPacket, error) {
	const what = "UDP push"
	var p pushPacket
	if bytes.HasPrefix(pkt, gzipMagic) {
		zr, err := gzip.NewReader(bytes.NewReader(pkt))
		if err != nil {
			return p, decodeErr(what, err, "bad gzip: %v", err)
		}
		data, err := io.ReadAll(io.LimitReader(zr, maxBytes+1))
		if err != nil {
			return p, decodeErr(what, err, "bad gzip: %v", err)
		}
		if int64(len(data)) > maxBytes {
			return p, decodeErr(what, nil, "more than %d bytes decompressed", maxBytes)
		}
		pkt = data
	} else if int64(len(pkt)) > maxBytes {
		return p, decodeErr(what, nil, "more than %d bytes", maxBytes)
	}
	d := newJSONDecoder(pkt, what, lim)
	var raw json.RawMessage
	err := d.object(func(key string) error {
		switch key {
		case "type":
			var err error
			p.Type, err = d.str("type", 64)
			return err
		case "lastRefTime":
			return d.scalar("lastRefTime", &p.LastRefTime)
		case "data":
			return d.scalar("data", &raw)
		}
		return d.skip()
	})
	if err == nil {
		err = d.end()
	}
	if err != nil {
		return pushPacket{}, err
	}
	if p.Type == "" {
		return pushPacket{}, decodeErr(what, nil, "no type")
	}
	if p.Type != "dom" && p.Type != "service" {
		return p, nil
	}
	body := []byte(raw)
	if len(body) > 0 && body[0] == '"' {
		var s string
		if err := json.Unmarshal(body, &s); err != nil {
			return pushPacket{}, decodeErr(what, err, "data: %v", err)
		}
		body = []byte(s)
	}
	if len(body) == 0 || string(body) == "null" {
		return pushPacket{}, decodeErr(what, nil, "no data")
	}
	info, err := DecodeServiceInfo(body, lim)
	if err != nil {
		return pushPacket{}, err
	}
	if info.Name == "" {
		// Polaris names the service under "dom" (as Nacos's oldest answers did).
		var alt struct {
			Dom string `json:"dom"`
		}
		if err := json.Unmarshal(body, &alt); err == nil && len(alt.Dom) <= lim.orDefaults().MaxStringBytes {
			info.Name = alt.Dom
		}
	}
	if pushRef(pushHeader{}, info).Service == "" {
		return pushPacket{}, decodeErr(what, nil, "no service name")
	}
	p.Info = info
	return p, nil
}
