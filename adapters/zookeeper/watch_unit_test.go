package zookeeper

import (
	"bytes"
	"encoding/binary"
	"net"
	"slices"
	"testing"
	"time"
)

// frame is a length-prefixed frame of the given body parts.
func frame(parts ...[]byte) []byte {
	var body []byte
	for _, p := range parts {
		body = append(body, p...)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func i32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

func zkString(s string) []byte { return append(i32(int32(len(s))), s...) }

// discard reads c until it fails: the server side of a pipe, for the requests it is not asked
// to answer.
func discard(c net.Conn) {
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// TestFrameConn: the requests a client writes are remembered until answered; an answer over
// the limit is attributed to the read it answers, by the xid that follows its length; silence
// counts from the oldest request owed.
func TestFrameConn(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	var got []bigAnswer
	fc := newFrameConn(client, 100, func(b bigAnswer) { got = append(got, b) })
	go discard(server)
	write := func(b []byte) {
		t.Helper()
		if _, err := fc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	write(frame(make([]byte, 40)))                                                    // the handshake
	write(frame(i32(7), i32(opGetChildren2), zkString("/services/small"), []byte{1})) // answered
	write(frame(i32(8), i32(opGetChildren2), zkString("/services/big"), []byte{1}))   // too big
	if d, n := fc.silence(time.Now().Add(time.Second)); n != 2 || d < 900*time.Millisecond {
		t.Errorf("silence with 2 owed: %v, %d", d, n)
	}
	go func() {
		server.Write(frame(make([]byte, 36)))                                     // the handshake's answer
		server.Write(frame(i32(-1), make([]byte, 12), zkString("/services/x")))   // a watch event
		server.Write(frame(i32(7), make([]byte, 12), i32(0)))                     // the answer to 7
		server.Write(append(binary.BigEndian.AppendUint32(nil, 5000), i32(8)...)) // 5000 bytes for 8
	}()
	buf := make([]byte, 4)
	read := func(n int) {
		t.Helper()
		for got := 0; got < n; {
			k, err := fc.Read(buf[:min(4, n-got)])
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	}
	read(4 + 36)
	read(4 + 4 + 12 + 4 + len("/services/x"))
	read(4 + 4 + 12 + 4)
	if _, n := fc.silence(time.Now()); n != 1 {
		t.Errorf("%d requests owed after the answer to one of two, want 1", n)
	}
	read(4) // the length the client refuses
	if len(got) != 1 || got[0].path != "/services/big" || got[0].size != 5000 || got[0].op != opGetChildren2 {
		t.Fatalf("oversized answers: %+v, want one to /services/big of 5000 bytes", got)
	}
	read(4) // the xid read ahead is still there for the client
	if binary.BigEndian.Uint32(buf) != 8 {
		t.Errorf("read after the look-ahead: %v, want the xid 8", buf)
	}
}

// TestFrameConnReadAhead: answers arrive in pieces that do not follow the client's reads (the
// read-ahead takes what is there); what the client reads is the stream as sent, byte for byte,
// and an oversized answer whose xid arrives split is still attributed.
func TestFrameConnReadAhead(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	var got []bigAnswer
	// A read that waits for bytes never sent fails the test instead of hanging it.
	client.SetDeadline(time.Now().Add(10 * time.Second))
	fc := newFrameConn(client, 100, func(b bigAnswer) { got = append(got, b) })
	go discard(server)
	for _, b := range [][]byte{
		frame(make([]byte, 40)),
		frame(i32(7), i32(opGetData), zkString("/services/a/i0"), []byte{1}),
		frame(i32(8), i32(opGetData), zkString("/services/a/big"), []byte{1}),
	} {
		if _, err := fc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	answers := frame(make([]byte, 36))                                                    // the handshake's answer
	answers = append(answers, frame(i32(7), make([]byte, 12), zkString("data-of-i0"))...) // the answer to 7
	big := append(binary.BigEndian.AppendUint32(nil, 5000), i32(8)...)                    // 5000 bytes for 8
	answers = append(answers, big[:6]...)
	sent := append(slices.Clone(answers), big[6:]...)
	go func() {
		// Both answers and half the oversized one's xid in one piece, the rest in another.
		server.Write(answers)
		server.Write(big[6:])
	}()
	// The client reads as go-zookeeper does: a length, then the frame's body; the oversized
	// answer's length, then (here) its xid.
	var read []byte
	readN := func(n int) int {
		t.Helper()
		buf := make([]byte, n)
		for got := 0; got < n; {
			k, err := fc.Read(buf[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
		read = append(read, buf...)
		return int(binary.BigEndian.Uint32(buf))
	}
	readN(readN(4)) // the handshake's answer
	readN(readN(4)) // the answer to 7
	readN(4)        // the length the client refuses
	readN(4)        // the xid, read ahead for the attribution, still there for the client
	if !bytes.Equal(read, sent) {
		t.Fatalf("the client read %x, want %x", read, sent)
	}
	if len(got) != 1 || got[0].path != "/services/a/big" || got[0].op != opGetData || got[0].size != 5000 {
		t.Fatalf("oversized answers: %+v, want one to /services/a/big of 5000 bytes", got)
	}
	if _, n := fc.silence(time.Now()); n != 1 {
		t.Errorf("%d requests owed, want 1 (the oversized answer's)", n)
	}
}

// TestHostProviderFlaps: a connection dropped soon after its session makes the next attempt
// wait, doubling to flapMax; one that lasted ends the backoff.
func TestHostProviderFlaps(t *testing.T) {
	var waits []time.Duration
	p := &hostProvider{sleep: func(d time.Duration, _ <-chan struct{}) { waits = append(waits, d) }}
	if err := p.Init([]string{"127.0.0.1:2181"}); err != nil {
		t.Fatal(err)
	}
	for range 12 {
		p.Connected()
		p.Next()
	}
	if len(waits) != 12 {
		t.Fatalf("%d waits for 12 short connections, want 12", len(waits))
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] < waits[i-1]*3/2 && waits[i-1] < flapMax/3 {
			t.Errorf("wait %d: %v after %v: not growing", i, waits[i], waits[i-1])
		}
	}
	if last := waits[len(waits)-1]; last > flapMax || last < flapMax*4/5 {
		t.Errorf("last wait %v, want about the cap %v", last, flapMax)
	}
	// A connection that lasted: no wait.
	p.Connected()
	p.mu.Lock()
	p.connectedAt = time.Now().Add(-2 * flapTime)
	p.mu.Unlock()
	waits = nil
	p.Next()
	if len(waits) != 0 || p.Flaps() != 0 {
		t.Errorf("after a lasting connection: waits %v, flaps %d, want none", waits, p.Flaps())
	}
}
