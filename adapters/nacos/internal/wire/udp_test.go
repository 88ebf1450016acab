package wire

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

type udpPushed struct {
	ref  Ref
	info *ServiceInfo
}

// pushRig is a PushListener and a UDP socket that plays the server.
type pushRig struct {
	l      *PushListener
	server *net.UDPConn
	got    chan udpPushed
	mu     sync.Mutex
	drops  []error
}

func newPushRig(t *testing.T, opts ...PushOption) *pushRig {
	t.Helper()
	r := &pushRig{got: make(chan udpPushed, 16)}
	opts = append(opts, PushOnDrop(func(err error) { r.mu.Lock(); r.drops = append(r.drops, err); r.mu.Unlock() }))
	l, err := ListenPush(context.Background(), "127.0.0.1:0", func(ref Ref, info *ServiceInfo) { r.got <- udpPushed{ref, info} }, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r.l = l
	t.Cleanup(func() { _ = l.Close() })
	r.server, err = net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: l.Port()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.server.Close() })
	return r
}

func (r *pushRig) send(t *testing.T, pkt []byte) {
	t.Helper()
	if _, err := r.server.Write(pkt); err != nil {
		t.Fatal(err)
	}
}

// ack reads the listener's answer, or fails.
func (r *pushRig) ack(t *testing.T) map[string]string {
	t.Helper()
	_ = r.server.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 4096)
	n, err := r.server.Read(buf)
	if err != nil {
		t.Fatalf("no ack: %v", err)
	}
	var ack map[string]string
	if err := json.Unmarshal(buf[:n], &ack); err != nil {
		t.Fatalf("ack %q: %v", buf[:n], err)
	}
	return ack
}

// noAck fails if the listener answers within a short while.
func (r *pushRig) noAck(t *testing.T) {
	t.Helper()
	_ = r.server.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 4096)
	if n, err := r.server.Read(buf); err == nil {
		t.Fatalf("unexpected ack %q", buf[:n])
	}
}

func (r *pushRig) next(t *testing.T) udpPushed {
	t.Helper()
	select {
	case p := <-r.got:
		return p
	case <-time.After(2 * time.Second):
		t.Fatal("no push delivered")
	}
	return udpPushed{}
}

func (r *pushRig) waitDrops(t *testing.T, n uint64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for r.l.Stats().Dropped < n {
		if time.Now().After(deadline) {
			t.Fatalf("dropped %d, want %d", r.l.Stats().Dropped, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// alibabaPush is a push as Alibaba's 1.x server sends it (PushService.prepareHostsData): data is
// the instance list's JSON, as a string.
func alibabaPush(t *testing.T, lastRef int64, info string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"type": "dom", "data": info, "lastRefTime": lastRef})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestPushAlibabaShapeAcked(t *testing.T) {
	r := newPushRig(t, PushNamespace("ns1"))
	r.send(t, alibabaPush(t, 1234567890123456, instanceListAnswer))
	ack := r.ack(t)
	if ack["type"] != "push-ack" || ack["lastRefTime"] != "1234567890123456" || ack["data"] != "" {
		t.Fatalf("ack %v", ack)
	}
	p := r.next(t)
	if p.ref != (Ref{Namespace: "ns1", Group: "G1", Service: "svc"}) || len(p.info.Hosts) != 1 || p.info.Hosts[0].Port != 8080 {
		t.Fatalf("push %+v %+v", p.ref, p.info)
	}
	if s := r.l.Stats(); s.Received != 1 || s.Delivered != 1 || s.Dropped != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPushGzipped(t *testing.T) {
	r := newPushRig(t)
	r.send(t, gz(t, alibabaPush(t, 7, instanceListAnswer)))
	if ack := r.ack(t); ack["type"] != "push-ack" || ack["lastRefTime"] != "7" {
		t.Fatalf("ack %v", ack)
	}
	if p := r.next(t); p.ref != (Ref{Group: "G1", Service: "svc"}) {
		t.Fatalf("ref %+v", p.ref)
	}
}

// Polaris's push (apiserver/nacosserver/core/push.go WarpUDPPushData): data is an object, the
// service named by "dom", bare, without its group.
func TestPushPolarisShape(t *testing.T) {
	r := newPushRig(t)
	r.send(t, []byte(`{"type":"dom","lastRefTime":42,"data":{"dom":"svc-a","cacheMillis":1000,"lastRefTime":1795765846120,`+
		`"checksum":"c","useSpecifiedURL":false,"hosts":[{"ip":"10.0.0.1","port":8080,"weight":1,"healthy":true,"enabled":true}],"metadata":{}}}`))
	_ = r.ack(t)
	p := r.next(t)
	if p.ref != (Ref{Group: "DEFAULT_GROUP", Service: "svc-a"}) || p.info.LastRefTime != 1795765846120 || len(p.info.Hosts) != 1 {
		t.Fatalf("push %+v %+v", p.ref, p.info)
	}
}

func TestPushDumpAndUnknownAcked(t *testing.T) {
	r := newPushRig(t)
	r.send(t, []byte(`{"type":"dump","lastRefTime":5,"data":""}`))
	if ack := r.ack(t); ack["type"] != "dump-ack" || ack["lastRefTime"] != "5" {
		t.Fatalf("ack %v", ack)
	}
	r.send(t, []byte(`{"type":"whatever","lastRefTime":6}`))
	if ack := r.ack(t); ack["type"] != "unknown-ack" || ack["lastRefTime"] != "6" {
		t.Fatalf("ack %v", ack)
	}
	if s := r.l.Stats(); s.Delivered != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPushMalformedDropped(t *testing.T) {
	r := newPushRig(t, PushLimits(Limits{MaxInstances: 1}), PushMaxBytes(2048))
	twoHosts := strings.Replace(instanceListAnswer, `"hosts":[{`, `"hosts":[{"ip":"10.9.9.9"},{`, 1)
	packets := [][]byte{
		[]byte(`not json`),
		[]byte(`{"lastRefTime":1,"data":"{}"}`),                                // no type
		[]byte(`{"type":"dom","lastRefTime":1}`),                               // no data
		[]byte(`{"type":"dom","data":"{\"hosts\":[]}"}`),                       // no name
		alibabaPush(t, 1, twoHosts),                                            // over MaxInstances
		gz(t, alibabaPush(t, 1, strings.Repeat(" ", 4096)+instanceListAnswer)), // over PushMaxBytes once inflated
		{0x1f, 0x8b, 0x08, 0, 0, 0},                                            // truncated gzip (what Polaris sends for a push over 1 KiB)
		[]byte(`{"type":"dom","data":"{\"name\":\"x\"}"} trailing`),
	}
	for _, pkt := range packets {
		r.send(t, pkt)
	}
	r.waitDrops(t, uint64(len(packets)))
	r.noAck(t)
	if s := r.l.Stats(); s.Delivered != 0 || s.Received != uint64(len(packets)) {
		t.Fatalf("stats %+v", s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.drops {
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("drop reason %T %v, want a *DecodeError", err, err)
		}
		if len(err.Error()) > 2*maxErrorMessage {
			t.Errorf("drop reason unbounded: %d bytes", len(err.Error()))
		}
	}
	// The listener still works.
	r.send(t, alibabaPush(t, 2, instanceListAnswer))
	_ = r.ack(t)
	_ = r.next(t)
}

func TestPushAcceptFrom(t *testing.T) {
	r := newPushRig(t, PushAcceptFrom(func(a netip.Addr) bool { return a == netip.MustParseAddr("10.0.0.1") }))
	r.send(t, alibabaPush(t, 1, instanceListAnswer))
	r.waitDrops(t, 1)
	r.noAck(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.drops) != 1 || !strings.Contains(r.drops[0].Error(), "127.0.0.1") {
		t.Fatalf("drops %v", r.drops)
	}
}

func TestPushListenerStops(t *testing.T) {
	var l *PushListener
	check := withGoroutineLabel(t, "close", func() {
		var err error
		l, err = ListenPush(context.Background(), "127.0.0.1:0", func(Ref, *ServiceInfo) {})
		if err != nil {
			t.Fatal(err)
		}
	})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_ = l.Close() // idempotent
	check()

	ctx, cancel := context.WithCancel(context.Background())
	check = withGoroutineLabel(t, "ctx", func() {
		var err error
		l, err = ListenPush(ctx, "127.0.0.1:0", func(Ref, *ServiceInfo) {})
		if err != nil {
			t.Fatal(err)
		}
	})
	port := l.Port()
	cancel()
	check()
	// The port is free again: the socket was closed.
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatalf("port %d still held after ctx ended: %v", port, err)
	}
	_ = c.Close()
	_ = l.Close()
}
