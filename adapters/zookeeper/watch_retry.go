package zookeeper

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// retryInterval is how long the adapter waits before reading again a path whose read failed
// for a reason other than the connection (it retries a connection loss as soon as the session
// is back), and before connecting again when no server name resolves.
const retryInterval = time.Second

// Backoffs. A read that fails for another reason than the connection (an ACL, an answer over
// the client's limit) is tried again after readRetryBase, then twice as long each time up to
// readRetryMax: 300 unreadable nodes cost a read each every 5 minutes, not 300 a second. An
// oversized answer starts at oversizedRetryBase, since each attempt breaks the connection for
// every read in flight. Reads that lose the connection round after round back off from
// retryInterval to lostRetryMax.
const (
	readRetryBase      = time.Second
	readRetryMax       = 5 * time.Minute
	oversizedRetryBase = 10 * time.Second
	lostRetryMax       = 30 * time.Second
	// lostRoundsUnreachable is how many rounds in a row may lose the connection before the
	// registry is reported unreachable though the session stands: changes are not arriving.
	lostRoundsUnreachable = 3
	// unreadableLogEvery is the least time between two log lines about one cause of unreadable
	// nodes.
	unreadableLogEvery = time.Minute
)

// backoff is base doubled fails-1 times, at most limit, less up to a fifth at random so that
// many adapters (or nodes) do not retry in step.
func backoff(base, limit time.Duration, fails int) time.Duration {
	d := base
	for i := 1; i < fails && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d - rand.N(d/5+1)
}

// Causes of a read retried later (the label of galleon_zookeeper_reads_backing_off).
const (
	causeACL       = "acl"
	causeOversized = "oversized"
	causeOther     = "other"
)

// causeOf classifies a read's error.
func causeOf(err error) string {
	switch {
	case errors.Is(err, errOversized):
		return causeOversized
	case errors.Is(err, zk.ErrNoAuth):
		return causeACL
	}
	return causeOther
}

// errOversized marks an answer over the client's limit.
var errOversized = errors.New("answer over the client's limit")

// retryState is a read that failed, to do again at due.
type retryState struct {
	fails  int
	due    time.Time
	cause  string
	marked bool // made dirty at due; the entry goes once the read succeeds
}

// unreadableLog bounds the log lines about reads that fail: at most one line per cause per
// unreadableLogEvery, naming how many paths fail for that cause now and one of them.
type unreadableLog struct {
	log    *slog.Logger
	causes map[string]*causeLog
}

type causeLog struct {
	last       time.Time
	suppressed int
}

// note logs a failed read of path, unless a line about its cause went less than
// unreadableLogEvery ago. count is how many paths fail for that cause now.
func (l *unreadableLog) note(cause, path string, err error, count int, retryIn time.Duration) {
	if l.causes == nil {
		l.causes = map[string]*causeLog{}
	}
	c := l.causes[cause]
	if c == nil {
		c = &causeLog{}
		l.causes[cause] = c
	}
	now := time.Now()
	if !c.last.IsZero() && now.Sub(c.last) < unreadableLogEvery {
		c.suppressed++
		return
	}
	l.log.Warn("znodes unreadable; each is read again with a backoff",
		"cause", cause, "unreadable", count, "e.g.", path, "error", err,
		"retry_in", retryIn.Round(time.Millisecond), "failures_not_logged", c.suppressed)
	c.last, c.suppressed = now, 0
}

// wait holds reads back until the retry timer fires or, after the first round that lost the
// connection, the session is back: rounds that keep losing it back off.
func (w *watcher) wait() {
	if w.lostConn.waiting {
		return
	}
	w.lostConn.waiting = true
	w.lostConn.waitSession = w.lostConn.rounds <= 1
	d := retryInterval
	if w.lostConn.rounds > 1 {
		d = backoff(retryInterval, lostRetryMax, w.lostConn.rounds-1)
	}
	w.lostConn.retry.Reset(d)
}

// lost handles a round that lost the connection (or the session): what it could not read is
// read again once the session is back, the first time, then with a backoff. A connection that
// breaks round after round while the session stands (a proxy, an answer too large to
// attribute) delivers no change: after lostRoundsUnreachable rounds that is reported.
func (w *watcher) lost(err error) {
	if w.lostConn.rounds == 0 {
		w.lostConn.session = w.sess.id
	}
	w.lostConn.rounds++
	w.r.log.Debug("reading ZooKeeper lost the connection; retrying", "error", err, "rounds", w.lostConn.rounds)
	w.wait()
	if w.lostConn.rounds == lostRoundsUnreachable {
		err = fmt.Errorf("zookeeper %s: the connection broke during %d reads in a row (last: %w); changes are not arriving, serving what was read last",
			strings.Join(w.r.cfg.Servers, ","), w.lostConn.rounds, err)
		w.r.log.Warn("ZooKeeper connection keeps breaking while reading; backing off", "error", err)
		w.rec.Unreachable(err)
		w.down = true
	}
}

// roundDone ends a run of lost rounds: when it was reported, and the watches held (the same
// session), the outage ends at the next Flush without a Replace.
func (w *watcher) roundDone() {
	if w.lostConn.rounds >= lostRoundsUnreachable && w.sess.id == w.lostConn.session {
		w.rec.Resumed()
		w.changed = true
	}
	w.lostConn.rounds = 0
}

// failed handles a read of the root or of a service's instances or overrides that failed for
// another reason than the connection (an ACL, an answer over the client's limit): the root is
// reported unreachable, a service's node rejected, and the read is retried with a backoff
// (retryLater). The rest is served meanwhile, a service with the instances and overrides read
// last.
func (w *watcher) failed(r laterRead, p string, err error) {
	err = w.retryLater(r, p, err)
	reason := reasonRead
	if errors.Is(err, errOversized) {
		reason = reasonSize
	}
	switch {
	case r.name == "":
		rs := w.roots[r.root]
		rs.dirty = false
		rs.ok = false
		w.rec.Unreachable(fmt.Errorf("zookeeper: reading %s: %w", p, err))
		w.down = true
	case r.ovr:
		delete(w.dirty.ovr, r.name)
		w.reject(p, bad(reason, fmt.Errorf("cannot list the overrides: %w", err)))
		w.changed = true
	default:
		delete(w.dirty.svc, r.name)
		w.reject(p, bad(reason, fmt.Errorf("cannot list the instances: %w", err)))
		w.changed = true
	}
}

// retryLater schedules read r of path p again, after a backoff that grows with each failure,
// logs it (bounded: unreadableLog) and returns err with what to do about it.
func (w *watcher) retryLater(r laterRead, p string, err error) error {
	if errors.Is(err, zk.ErrNoAuth) {
		err = fmt.Errorf("%w: the node's ACL does not admit this client; give the credentials it names (--%s with digest user:password) or a client certificate it names (--%s)", err, flagAuthFile, flagTLSCert)
	}
	cause := causeOf(err)
	st := w.later.reads[r]
	if st == nil {
		st = &retryState{cause: cause}
		w.later.reads[r] = st
		w.countLater(cause, 1)
	} else if st.cause != cause {
		w.countLater(st.cause, -1)
		w.countLater(cause, 1)
		st.cause = cause
	}
	st.fails++
	base := readRetryBase
	if cause == causeOversized {
		base = oversizedRetryBase
	}
	d := backoff(base, readRetryMax, st.fails)
	st.due, st.marked = time.Now().Add(d), false
	w.later.unreadable.note(cause, p, err, w.later.count[cause], d)
	w.laterAt(st.due)
	return err
}

// countLater keeps the number of reads retried later, by cause, and its gauge.
func (w *watcher) countLater(cause string, n int) {
	if w.later.count == nil {
		w.later.count = map[string]int{}
	}
	w.later.count[cause] += n
	w.r.metrics.backingOff.WithLabelValues(cause).Add(float64(n))
}

// succeeded ends the backoff of read r: it was answered.
func (w *watcher) succeeded(r laterRead) {
	if st, ok := w.later.reads[r]; ok {
		delete(w.later.reads, r)
		w.countLater(st.cause, -1)
	}
}

// laterAt makes later.t fire at t at the latest.
func (w *watcher) laterAt(t time.Time) {
	if w.later.next.IsZero() || t.Before(w.later.next) {
		w.later.next = t
		w.later.t.Reset(time.Until(t))
	}
}

// laterBatch: reads due within it of the one that fired are made together.
const laterBatch = 100 * time.Millisecond

// laterDue marks the reads whose backoff has passed to be read again, forgets those of
// services and nodes gone, and sets later.t for the next.
func (w *watcher) laterDue() {
	w.later.next = time.Time{}
	now := time.Now()
	var next time.Time
	for r, st := range w.later.reads {
		s, ok := w.services[r.name]
		if r.name != "" && (!ok || (r.id != "" && w.nodeOf(s, r.id) == nil)) {
			delete(w.later.reads, r)
			w.countLater(st.cause, -1)
			continue
		}
		if st.marked {
			continue
		}
		if st.due.After(now.Add(laterBatch)) {
			if next.IsZero() || st.due.Before(next) {
				next = st.due
			}
			continue
		}
		st.marked = true
		switch {
		case r.name == "":
			w.roots[r.root].dirty = true
		case r.ovr:
			w.dirty.ovr[r.name] = true
		case r.id != "":
			w.dirty.node[nodeKey{r.name, r.id}] = true
		default:
			w.dirty.svc[r.name] = true
		}
	}
	if !next.IsZero() {
		w.laterAt(next)
	}
}
