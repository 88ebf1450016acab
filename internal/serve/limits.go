package serve

import (
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	// burst of logBurst, then one per logEvery. serverLogBurst and
	// serverLogEvery bound those of all streams together, so that a client
	// gains nothing by opening stream after stream. Lines over a limit are
	// counted, and the next line says how many were left out.
	logBurst       = 5
	logEvery       = 30 * time.Second
	serverLogBurst = 50
	serverLogEvery = 5 * time.Second
)

// AdmitNames checks what one request adds to the resource names a stream
// holds (xDS Delta subscriptions and resume versions, legacy MCP resume
// versions): every name and version at most MaxNameLen bytes, and held,
// plus the names not yet in subscribed, plus the resume entries, at most
// MaxNamesPerStream. A name subscribed again costs nothing more. On refusal
// it returns the metric reason ("name_too_long", "too_many_names") and the
// status to end the stream with.
func AdmitNames(held int, subscribed map[string]struct{}, subscribe []string, resume map[string]string) (reason string, err error) {
	added := 0
	for _, name := range subscribe {
		if len(name) > MaxNameLen {
			return "name_too_long", status.Errorf(codes.InvalidArgument, "resource name %.64q... is %d bytes, over the limit of %d", name, len(name), MaxNameLen)
		}
		if _, already := subscribed[name]; !already {
			added++
		}
	}
	for name, version := range resume {
		if len(name) > MaxNameLen || len(version) > MaxNameLen {
			return "name_too_long", status.Errorf(codes.InvalidArgument, "initial_resource_versions entry %.64q is over the limit of %d bytes", name, MaxNameLen)
		}
	}
	if n := held + added + len(resume); n > MaxNamesPerStream {
		return "too_many_names", status.Errorf(codes.ResourceExhausted,
			"stream would hold %d resource names (subscriptions and resume versions), over the limit of %d: subscribe with a wildcard instead", n, MaxNamesPerStream)
	}
	return "", nil
}

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

// LogLimiter bounds the log lines clients cause: a burst, then one per
// interval (a token bucket). A server holds one for all its streams
// (NewServerLogLimiter), and each stream one of its own (ForStream), so that
// neither one stream nor a client opening stream after stream can flood the
// log. Lines over either limit are counted, and the next line logged says
// how many were left out server-wide.
type LogLimiter struct {
	parent *LogLimiter // the server's; nil for the server's own

	mu         sync.Mutex
	burst      float64
	every      time.Duration
	tokens     float64
	last       time.Time
	suppressed int
}

// NewServerLogLimiter returns the limiter a server shares among its
// streams: a burst of 50 lines, then one per 5 s.
func NewServerLogLimiter() *LogLimiter {
	return &LogLimiter{burst: serverLogBurst, every: serverLogEvery, tokens: serverLogBurst}
}

// ForStream returns a limiter for one stream of the server l limits: a
// burst of 5 lines, then one per 30 s, and l's limit besides.
func (l *LogLimiter) ForStream() *LogLimiter {
	return &LogLimiter{parent: l, burst: logBurst, every: logEvery, tokens: logBurst}
}

// Allow says whether a line may be logged now; if so, suppressed is how many
// lines were left out server-wide since the last one logged (to be said in
// that line).
func (l *LogLimiter) Allow(now time.Time) (ok bool, suppressed int) {
	if l.parent == nil {
		return l.allow(now)
	}
	if !l.take(now) {
		l.parent.mu.Lock()
		l.parent.suppressed++
		l.parent.mu.Unlock()
		return false, 0
	}
	return l.parent.allow(now)
}

// allow takes a token, or counts the line as left out.
func (l *LogLimiter) allow(now time.Time) (bool, int) {
	if !l.take(now) {
		l.mu.Lock()
		l.suppressed++
		l.mu.Unlock()
		return false, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	suppressed := l.suppressed
	l.suppressed = 0
	return true, suppressed
}

// take refills the bucket for the time since the last call and takes one
// token if there is one.
func (l *LogLimiter) take(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+float64(now.Sub(l.last))/float64(l.every))
	}
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}
