package serve

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// Bounds of ChangeAcks: how long a change may wait for its sinks, and how
// many changes may wait at once, before it is given up.
const (
	DefaultChangeAckWait    = 5 * time.Minute
	DefaultChangeAckPending = 1024
)

// ChangeAcks measures how long a registry change takes to reach every sink:
// from the moment the change was reported (the oldest report the snapshot
// holds) to the moment every stream connected when the snapshot was
// published has answered (ACKed or NACKed) responses that hold it, or has
// gone. One observation per snapshot and protocol, in
// galleon_change_acked_seconds{protocol}.
//
// Cost: Changed is O(streams); a stream's Update walks only the changes it
// had not caught up with, so each (stream, change) pair is visited once.
// Memory: each waiting change holds one target per distinct source (the
// store, or a subset's view) and one count per protocol, and at most
// DefaultChangeAckPending changes wait; a stream holds a cursor. A change
// still waiting after DefaultChangeAckWait, or the oldest when too many
// wait, is given up: it is observed at its age then, for each protocol
// still waited on, and counted in galleon_change_ack_timeouts_total. Both
// bounds are checked on every call and at every scrape.
//
// Why "every stream connected then" is enough: a stream that has answered
// a response built from snapshot seq N holds every change up to N of what
// its source serves, so the changes one stream has caught up with are a
// prefix of those waiting. A stream served a view (a config subset) waits
// for the view's sequence when the change was published: a change to
// services outside the subset asks nothing of it.
type ChangeAcks struct {
	now        func() time.Time
	maxWait    time.Duration
	maxPending int

	acked    *prometheus.HistogramVec
	timeouts *prometheus.CounterVec

	mu      sync.Mutex
	streams map[*AckStream]struct{}
	pending []*pendingChange // oldest first; pending[i] has id base+i
	base    uint64           // id of pending[0]; next when none waits
	next    uint64           // id of the next change
}

// pendingChange is one snapshot waiting for its sinks.
type pendingChange struct {
	reported time.Time
	// targets is, per source, the sequence a stream of that source must
	// have caught up with.
	targets map[snapshot.Source]uint64
	// left counts, per protocol that had streams, those not caught up yet.
	left map[string]int
}

// AckStream is one stream's handle on a ChangeAcks. Its methods are called
// by the stream's goroutine; a nil *AckStream does nothing.
type AckStream struct {
	t        *ChangeAcks
	protocol string
	source   snapshot.Source
	last     uint64 // what Update last told, owned by the stream's goroutine

	// Guarded by t.mu.
	upTo   uint64 // the stream holds everything of its source up to this seq
	cursor uint64 // id of the first change it has not caught up with
}

// ChangeAckOption tunes a ChangeAcks (tests).
type ChangeAckOption func(*ChangeAcks)

// WithChangeAckClock sets the clock ChangeAcks measures with.
func WithChangeAckClock(now func() time.Time) ChangeAckOption {
	return func(t *ChangeAcks) { t.now = now }
}

// WithChangeAckBounds sets how long a change may wait and how many may.
func WithChangeAckBounds(maxWait time.Duration, maxPending int) ChangeAckOption {
	return func(t *ChangeAcks) { t.maxWait, t.maxPending = maxWait, maxPending }
}

// NewChangeAcks returns a tracker whose metrics go to reg (nil:
// unregistered), with their series for protocols present from the start.
func NewChangeAcks(reg prometheus.Registerer, protocols []string, opts ...ChangeAckOption) *ChangeAcks {
	t := &ChangeAcks{
		now: time.Now, maxWait: DefaultChangeAckWait, maxPending: DefaultChangeAckPending,
		acked: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "galleon_change_acked_seconds",
			Help: "From a registry change being reported to every stream of the protocol connected when its snapshot was published having ACKed or NACKed it (or gone); one observation per snapshot and protocol. Changes given up (galleon_change_ack_timeouts_total) are observed at their age then.",
			// Past the debounce (100 ms by default), up to two minutes: a
			// change given up after DefaultChangeAckWait lands in +Inf.
			Buckets: []float64{.005, .01, .025, .05, .1, .15, .25, .5, 1, 2.5, 5, 10, 30, 120},
		}, []string{"protocol"}),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_change_ack_timeouts_total",
			Help: "Snapshots given up waiting for every stream of the protocol to answer: still waiting after 5 minutes, or the oldest of more than 1024 waiting.",
		}, []string{"protocol"}),
		streams: map[*AckStream]struct{}{},
	}
	for _, o := range opts {
		o(t)
	}
	for _, p := range protocols {
		t.acked.WithLabelValues(p)
		t.timeouts.WithLabelValues(p)
	}
	if reg != nil {
		reg.MustRegister(t)
	}
	return t
}

// Describe implements prometheus.Collector.
func (t *ChangeAcks) Describe(ch chan<- *prometheus.Desc) {
	t.acked.Describe(ch)
	t.timeouts.Describe(ch)
}

// Collect implements prometheus.Collector: changes past their bounds are
// given up first, so a scrape sees them even when nothing else happens.
func (t *ChangeAcks) Collect(ch chan<- prometheus.Metric) {
	t.mu.Lock()
	t.expire(t.now())
	t.mu.Unlock()
	t.acked.Collect(ch)
	t.timeouts.Collect(ch)
}

// Changed says the snapshot seq was published, holding changes reported
// from the moment reported on. Call it once per snapshot, after the store
// published it, in order of seq.
func (t *ChangeAcks) Changed(seq uint64, reported time.Time) {
	if t == nil || reported.IsZero() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.expire(now)
	if len(t.streams) == 0 {
		return
	}
	id := t.next
	t.next++
	if len(t.pending) == 0 {
		t.base = id
	}
	c := &pendingChange{reported: reported, targets: map[snapshot.Source]uint64{}, left: map[string]int{}}
	for s := range t.streams {
		target, ok := c.targets[s.source]
		if !ok {
			target = min(s.source.Current().Seq, seq)
			c.targets[s.source] = target
		}
		if _, ok := c.left[s.protocol]; !ok {
			c.left[s.protocol] = 0
		}
		if max(s.cursor, t.base) == id && s.upTo >= target {
			s.cursor = id + 1 // already there: the stream was faster than this call
			continue
		}
		c.left[s.protocol]++
	}
	t.pending = append(t.pending, c)
	for p, n := range c.left {
		if n == 0 {
			t.observe(p, now.Sub(reported))
		}
	}
	t.popDone()
	t.expire(now)
}

// Stream registers a stream of protocol served from source, a pointer (a
// *snapshot.Store or *snapshot.View: sources are map keys). Close it when
// the stream ends. On a nil ChangeAcks it returns nil, which does nothing.
func (t *ChangeAcks) Stream(protocol string, source snapshot.Source) *AckStream {
	if t == nil {
		return nil
	}
	s := &AckStream{t: t, protocol: protocol, source: source}
	t.mu.Lock()
	defer t.mu.Unlock()
	s.cursor = t.next
	t.streams[s] = struct{}{}
	return s
}

// Update says the stream has answered everything its source served up to
// snapshot seq upTo (a stream that has asked for nothing holds all it asked
// for). It may go down, when the stream asks for a new type; only a rise
// can catch up with a change.
func (s *AckStream) Update(upTo uint64) {
	if s == nil || upTo == s.last {
		return
	}
	rise := upTo > s.last
	s.last = upTo
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	s.upTo = upTo
	if !rise {
		return
	}
	now := t.now()
	t.expire(now)
	id := max(s.cursor, t.base)
	for ; id < t.next; id++ {
		c := t.pending[id-t.base]
		if target, ok := c.targets[s.source]; ok && upTo < target {
			break
		}
		t.done(c, s.protocol, now)
	}
	s.cursor = id
	t.popDone()
}

// Close says the stream has gone: no change waits for it any more.
func (s *AckStream) Close() {
	if s == nil {
		return
	}
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.streams, s)
	now := t.now()
	for id := max(s.cursor, t.base); id < t.next; id++ {
		t.done(t.pending[id-t.base], s.protocol, now)
	}
	s.cursor = t.next
	t.popDone()
	t.expire(now)
}

// done counts one stream of protocol off c, observing c when it was the
// last. t.mu is held.
func (t *ChangeAcks) done(c *pendingChange, protocol string, now time.Time) {
	n, ok := c.left[protocol]
	if !ok || n == 0 {
		return
	}
	c.left[protocol] = n - 1
	if n == 1 {
		t.observe(protocol, now.Sub(c.reported))
	}
}

// popDone drops the changes at the front that no stream waits for. They
// finish in order: a stream that caught up with a change caught up with
// every earlier one. t.mu is held.
func (t *ChangeAcks) popDone() {
	for len(t.pending) > 0 && waitsForNone(t.pending[0]) {
		t.pop()
	}
}

func waitsForNone(c *pendingChange) bool {
	for _, n := range c.left {
		if n > 0 {
			return false
		}
	}
	return true
}

// expire gives up the changes past the bounds. t.mu is held.
func (t *ChangeAcks) expire(now time.Time) {
	for len(t.pending) > 0 {
		c := t.pending[0]
		if now.Sub(c.reported) <= t.maxWait && len(t.pending) <= t.maxPending {
			return
		}
		for p, n := range c.left {
			if n > 0 {
				t.observe(p, now.Sub(c.reported))
				t.timeouts.WithLabelValues(p).Inc()
			}
		}
		t.pop()
	}
}

func (t *ChangeAcks) pop() {
	t.pending[0] = nil
	t.pending = t.pending[1:]
	t.base++
	if len(t.pending) == 0 {
		t.pending = nil // let the array go
	}
}

func (t *ChangeAcks) observe(protocol string, d time.Duration) {
	t.acked.WithLabelValues(protocol).Observe(max(d, 0).Seconds())
}

// Waiting returns how many changes wait for their sinks (tests).
func (t *ChangeAcks) Waiting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}
