package zookeeper

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/go-zookeeper/zk"
)

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
