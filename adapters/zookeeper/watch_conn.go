package zookeeper

import (
	"encoding/binary"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// frameConn is the connection the client talks through, read frame by frame on its way. The
// client does not say which read an answer it refused belonged to, nor when a server stopped
// answering before its own read timeout (two thirds of the session timeout); frameConn does:
//
//   - Every request the client writes is one frame (go-zookeeper writes each with one Write):
//     its xid, opcode and, for a read, the path are kept until the answer with that xid comes.
//   - An answer whose length is over the client's limit (Config.MaxBuffer) makes the client
//     drop the connection after reading its length: frameConn reads the xid that follows, so
//     the adapter learns which path's answer was too large, and how large.
//   - The time of the last byte received, and the oldest request unanswered, say how long the
//     server has owed an answer without sending anything (silence).
//
// The first frame each way is the session handshake (no xid), and the server's watch events
// (xid -1) answer nothing.
type frameConn struct {
	net.Conn
	limit int
	// oversized is called, on the client's receive goroutine, when an answer over limit
	// arrives: before the client drops the connection and fails the reads in flight.
	oversized func(bigAnswer)

	mu       sync.Mutex
	pending  map[int32]request // unanswered, by xid
	wrote    bool              // the handshake request went
	read     bool              // the handshake answer came (its length at least)
	hdr      [8]byte           // the length and xid of the answer being read
	hdrN     int
	left     int // bytes of the answer being read still to come
	lastRecv time.Time
	ahead    []byte // read past what the client asked for; returned first
	buf      []byte // readAhead bytes, what ahead is cut from (the receive goroutine's)
}

// request is a request written and not answered yet.
type request struct {
	op   int32
	path string
	at   time.Time
}

// bigAnswer is an answer over the client's limit: to a read of path (op), size bytes long.
type bigAnswer struct {
	op   int32
	path string
	size int
	xid  bool // the xid was read (path is "" if it answers no request known)
	// part is what was read of the xid when it was not all read (learnXid reads the rest).
	part []byte
}

// ZooKeeper opcodes of the requests the adapter makes (go-zookeeper's constants are private).
const (
	opExists       = 3
	opGetData      = 4
	opGetChildren  = 8
	opGetChildren2 = 12
)

// maxPending bounds the requests remembered: the adapter has ListConcurrency reads in flight,
// a probe and the client's ping; a client that had more would only lose attributions.
const maxPending = 4096

func newFrameConn(c net.Conn, limit int, oversized func(bigAnswer)) *frameConn {
	return &frameConn{Conn: c, limit: limit, oversized: oversized, pending: map[int32]request{}, lastRecv: time.Now()}
}

func (c *frameConn) Write(p []byte) (int, error) {
	c.note(p)
	return c.Conn.Write(p)
}

// note records the requests framed in p.
func (c *frameConn) note(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for len(p) >= 4 {
		n := int(binary.BigEndian.Uint32(p))
		if n < 0 || n > len(p)-4 {
			return // not a whole frame: not the client this was written for
		}
		body := p[4 : 4+n]
		p = p[4+n:]
		if !c.wrote {
			c.wrote = true // the handshake
			continue
		}
		if len(body) < 8 || len(c.pending) >= maxPending {
			continue
		}
		xid := int32(binary.BigEndian.Uint32(body))
		r := request{op: int32(binary.BigEndian.Uint32(body[4:])), at: now}
		switch r.op {
		case opExists, opGetData, opGetChildren, opGetChildren2:
			if len(body) >= 12 {
				l := int(binary.BigEndian.Uint32(body[8:]))
				if l >= 0 && l <= len(body)-12 {
					r.path = string(body[12 : 12+l])
				}
			}
		}
		c.pending[xid] = r
	}
}

// readAhead is the buffer Read fills when the client asks for less: go-zookeeper reads each
// answer's length and then its body, two read calls an answer, and its receive loop was a
// sixth of the adapter's CPU while it listed a registry; reading ahead cut the read system
// calls by two thirds (docs/benchmarks.md, "what bounds the Curator layout's start").
const readAhead = 32 << 10

func (c *frameConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		c.ahead = c.ahead[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	if len(p) >= readAhead {
		n, err := c.Conn.Read(p)
		c.follow(p[:n])
		return n, err
	}
	if c.buf == nil {
		c.buf = make([]byte, readAhead)
	}
	n, err := c.Conn.Read(c.buf)
	// What the client did not ask for waits in ahead. Only Read and learnXid, both on the
	// client's receive goroutine, touch buf; ahead is empty whenever it is refilled.
	k := copy(p, c.buf[:n])
	c.mu.Lock()
	c.ahead = c.buf[k:n]
	c.mu.Unlock()
	c.follow(c.buf[:n])
	return k, err
}

// follow tracks the answers in b, just read from the connection (nothing when it is empty: no
// byte came), and reports an oversized one.
func (c *frameConn) follow(b []byte) {
	if len(b) == 0 {
		return
	}
	big, ok := c.received(b)
	if !ok {
		return
	}
	if !big.xid {
		c.learnXid(&big)
	}
	if c.oversized != nil {
		c.oversized(big)
	}
}

// received follows the answers in b; it reports an answer over the limit once its length is
// read (the client reads no further).
func (c *frameConn) received(b []byte) (big bigAnswer, over bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastRecv = time.Now()
	for len(b) > 0 {
		if c.left > 0 {
			k := min(c.left, len(b))
			c.left -= k
			b = b[k:]
			continue
		}
		need := 8
		if !c.read {
			need = 4
		}
		k := min(need-c.hdrN, len(b))
		copy(c.hdr[c.hdrN:], b[:k])
		c.hdrN += k
		b = b[k:]
		if c.hdrN < 4 {
			continue
		}
		length := int(binary.BigEndian.Uint32(c.hdr[:4]))
		if !c.read {
			c.read, c.hdrN, c.left = true, 0, length
			continue
		}
		if length > c.limit {
			big := bigAnswer{size: length}
			if c.hdrN == 8 { // the xid came in the same read
				big.xid = true
				if r, ok := c.pending[int32(binary.BigEndian.Uint32(c.hdr[4:]))]; ok {
					big.op, big.path = r.op, r.path
				}
			} else {
				big.part = slices.Clone(c.hdr[4:c.hdrN])
			}
			c.hdrN = 0
			c.left = 1 << 62 // the client drops the connection: nothing more to follow
			return big, true
		}
		if c.hdrN < 8 {
			continue
		}
		xid := int32(binary.BigEndian.Uint32(c.hdr[4:]))
		if xid != -1 { // -1: a watch event, not an answer
			delete(c.pending, xid)
		}
		c.hdrN, c.left = 0, max(length-4, 0)
	}
	return bigAnswer{}, false
}

// learnXid reads the xid that follows an oversized answer's length (the server has sent it
// with the length), or the rest of it (big.part), to find the request it answers. The bytes
// stay to be read.
func (c *frameConn) learnXid(big *bigAnswer) {
	var x [4]byte
	have := copy(x[:], big.part)
	n, _ := io.ReadFull(c.Conn, x[have:])
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ahead = append(c.ahead, x[have:have+n]...)
	if have+n < 4 {
		return
	}
	if r, ok := c.pending[int32(binary.BigEndian.Uint32(x[:]))]; ok {
		big.op, big.path = r.op, r.path
	}
}

// silence is how long the server has owed an answer without sending a byte (0 when it owes
// none), with the number of requests it owes.
func (c *frameConn) silence(now time.Time) (time.Duration, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return 0, 0
	}
	oldest := now
	for _, r := range c.pending {
		if r.at.Before(oldest) {
			oldest = r.at
		}
	}
	since := oldest
	if c.lastRecv.After(since) {
		since = c.lastRecv
	}
	return max(now.Sub(since), 0), len(c.pending)
}

// idle is how long since the last byte received, when no request is unanswered (else 0).
func (c *frameConn) idle(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) > 0 {
		return 0
	}
	return now.Sub(c.lastRecv)
}
