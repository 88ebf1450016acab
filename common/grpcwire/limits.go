package grpcwire

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// Limits on what one client of a config stream can make the server keep or
// write. A client chooses its node id, the names it subscribes to and the
// text of its NACKs; none of them may cost the server more than these.
const (
	// MaxNameLen bounds one resource name a client sends. Istio names are
	// "<namespace>/<name>": at most 63 + 1 + 253 bytes.
	MaxNameLen = 512
	// MaxNamesPerStream bounds the resource names one stream may hold as
	// subscriptions and resume versions, all types together. A registry of
	// 10,000 services x 10 instances as WorkloadEntries is 110,000 names;
	// clients that want everything subscribe with a wildcard instead.
	MaxNamesPerStream = 200_000
	// MaxLoggedText bounds the client-chosen text (a NACK's message, a node
	// id) quoted in one log line.
	MaxLoggedText = 1024
	// logBurst and logEvery bound the log lines one stream can cause: a
	// burst of logBurst, then one per logEvery. Lines over the limit are
	// counted, and the next line says how many were left out.
	logBurst = 5
	logEvery = 30 * time.Second
)

// ClientText returns s cut to at most max bytes at a rune boundary, saying
// how much was cut, for quoting client-chosen text in a log line.
func ClientText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d more bytes)", s[:cut], len(s)-cut)
}

// LogLimiter bounds the log lines one client causes: a burst, then one per
// interval (a token bucket). It is used by the goroutine that owns a stream
// only, so it needs no lock.
type LogLimiter struct {
	burst      float64
	every      time.Duration
	tokens     float64
	last       time.Time
	suppressed int
}

// NewLogLimiter returns the limiter every config stream uses.
func NewLogLimiter() *LogLimiter {
	return &LogLimiter{burst: logBurst, every: logEvery, tokens: logBurst}
}

// Allow says whether a line may be logged now; if so, suppressed is how many
// were refused since the last one allowed (to be said in that line).
func (l *LogLimiter) Allow(now time.Time) (ok bool, suppressed int) {
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+float64(now.Sub(l.last))/float64(l.every))
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		return false, 0
	}
	l.tokens--
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
