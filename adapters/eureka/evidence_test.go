package eureka

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// Answers only a broken Eureka server gives (an empty 200 from a server that had the
// applications a moment ago: a Spring server restarted with wait-time-in-ms-when-sync-empty 0,
// a peer not yet synced), so an httptest server plays one: brokenServer lists what the test
// sets, consistently in /apps and /apps/delta (an empty delta with the hashcode of what it
// lists), and fails with a 503 while down.
type brokenServer struct {
	*httptest.Server
	mu   sync.Mutex
	apps []string // one instance each, UP
	down bool
	// emptyFulls: the next this many /apps answers list nothing (and /apps/delta says the
	// registry is empty until they are given), then the applications again.
	emptyFulls int
	fulls      int
	// lie: /apps/delta gives a hashcode no listing has.
	lie bool
}

func startBroken(t *testing.T, apps ...string) *brokenServer {
	b := &brokenServer{apps: apps}
	b.Server = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(b.Close)
	return b
}

func (b *brokenServer) set(f func(b *brokenServer)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b)
}

func (b *brokenServer) base() string { return b.URL + "/eureka" }

func (b *brokenServer) serve(w http.ResponseWriter, req *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		http.Error(w, "restarting", http.StatusServiceUnavailable)
		return
	}
	apps := b.apps
	switch req.URL.Path {
	case "/eureka/apps":
		b.fulls++
		if b.emptyFulls > 0 {
			b.emptyFulls--
			apps = nil
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(brokenListing(apps, true))
	case "/eureka/apps/delta":
		if b.emptyFulls > 0 {
			apps = nil
		}
		w.Header().Set("Content-Type", "application/json")
		body := brokenListing(apps, false)
		if b.lie {
			body = bytes.Replace(body, []byte(`"apps__hashcode":"`), []byte(`"apps__hashcode":"UP_99_`), 1)
		}
		_, _ = w.Write(body)
	default:
		http.NotFound(w, req)
	}
}

// brokenListing is a listing of apps (with their instances when full; an empty delta with the
// hashcode of apps when not).
func brokenListing(apps []string, full bool) []byte {
	var b bytes.Buffer
	hash := ""
	if len(apps) > 0 {
		hash = fmt.Sprintf("UP_%d_", len(apps))
	}
	fmt.Fprintf(&b, `{"applications":{"versions__delta":"1","apps__hashcode":%q,"application":[`, hash)
	if full {
		for k, app := range apps {
			if k > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"name":%q,"instance":[{"instanceId":"%s-1","app":%q,"ipAddr":"10.9.0.%d","hostName":"h%d","status":"UP","port":{"$":8080,"@enabled":"true"}}]}`,
				strings.ToUpper(app), app, strings.ToUpper(app), k+1, k)
		}
	}
	b.WriteString(`]}}`)
	return b.Bytes()
}

// infoLogger logs at INFO into out, for counting lines.
func infoLogger(out *syncbuf.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// servedNames is the names of the services in st.
func servedNames(st map[model.ServiceKey]model.Service) []string {
	var names []string
	for k := range st {
		names = append(names, k.Name)
	}
	slices.Sort(names)
	return names
}

// noRemovals fails the test for any Delete, or any Replace with fewer than want services,
// among events.
func noRemovals(t *testing.T, what string, events []registrytest.Event, want int) {
	t.Helper()
	for _, e := range events {
		if e.Op == registrytest.OpDelete || e.Op == registrytest.OpReplace && len(e.Services) < want {
			t.Errorf("%s: %v", what, e)
		}
	}
}

// waitMetric waits until a counter or gauge reaches want.
func waitMetric(t *testing.T, what string, m prometheus.Metric, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for value(m) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after 30s, want %v", what, value(m), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEmptyAnswerNeedsEvidence (issue 27, finding 1): one server answers its full listing empty
// once, between answers that list the applications: nothing is removed (before, every
// service went at once). Then it answers empty for good: the first answer is held (one WARN),
// the second confirms it, and only then are the services removed.
func TestEmptyAnswerNeedsEvidence(t *testing.T) {
	s := startBroken(t, "orders", "cart", "pay")
	var log syncbuf.Buffer
	r, rec := runAdapter(t, Config{
		URLs:         []string{s.base()},
		PollInterval: 100 * time.Millisecond,
		Timeout:      2 * time.Second,
		Registerer:   prometheus.NewRegistry(),
		Logger:       infoLogger(&log),
	})
	rec.WaitFor(t, 20*time.Second, func(st map[model.ServiceKey]model.Service) bool { return len(st) == 3 })
	before := rec.Len()
	suspect := func(outcome string) prometheus.Metric { return r.metrics.suspect.WithLabelValues(outcome) }

	// One empty answer: held, then cleared by the next full listing.
	s.set(func(b *brokenServer) { b.emptyFulls = 1 })
	waitMetric(t, "suspicious listings cleared", suspect(suspectCleared), 1)
	noRemovals(t, "after one empty answer", rec.Events()[before:], 3)
	if got := servedNames(rec.State()); len(got) != 3 {
		t.Errorf("served %v after one empty answer, want the 3 services", got)
	}
	if n := value(suspect(suspectHeld)); n != 1 {
		t.Errorf("%v listings held, want 1", n)
	}
	if n := value(r.metrics.holding); n != 0 {
		t.Errorf("galleon_eureka_listing_held = %v after the listing was cleared, want 0", n)
	}

	// Empty for good: held once, confirmed by the next answer, then applied.
	s.set(func(b *brokenServer) { b.emptyFulls = 1 << 30 })
	rec.WaitFor(t, 30*time.Second, func(st map[model.ServiceKey]model.Service) bool { return len(st) == 0 })
	if n := value(suspect(suspectHeld)); n != 2 {
		t.Errorf("%v listings held, want 2", n)
	}
	if n := value(suspect(suspectConfirmed)); n != 1 {
		t.Errorf("%v listings confirmed, want 1", n)
	}
	if n := strings.Count(log.String(), "holding it until another answer confirms it"); n != 2 {
		t.Errorf("the hold was logged %d times, want once per suspicious episode (2):\n%s", n, log.String())
	}
	s.set(func(b *brokenServer) {
		if b.fulls < 4 {
			t.Errorf("%d full listings asked for, want at least 4 (start, one held and cleared, one held and confirmed)", b.fulls)
		}
	})
	// Listed again: served again, with no suspicion (nothing was served to lose).
	s.set(func(b *brokenServer) { b.emptyFulls = 0 })
	rec.WaitFor(t, 30*time.Second, func(st map[model.ServiceKey]model.Service) bool { return len(st) == 3 })
	if n := value(suspect(suspectHeld)); n != 2 {
		t.Errorf("%v listings held after the registry came back, want still 2", n)
	}
}

// TestFailoverPrefersListingServerAndFailsBack (issue 27, finding 1): with three servers, the
// primary fails, the next one answers empty (a standby not yet synced) and the third lists the
// applications: the adapter reads the third, never serving the empty answer. When the primary
// answers again it is read again (a change only it has is served). When it is restarted empty
// the adapter keeps a server that lists the applications and does not go back to it.
func TestFailoverPrefersListingServerAndFailsBack(t *testing.T) {
	apps := []string{"orders", "cart", "pay"}
	primary := startBroken(t, apps...)
	empty := startBroken(t)
	full := startBroken(t, apps...)
	var log syncbuf.Buffer
	r, rec := runAdapter(t, Config{
		URLs:         []string{primary.base(), empty.base(), full.base()},
		PollInterval: 100 * time.Millisecond,
		Timeout:      2 * time.Second,
		Registerer:   prometheus.NewRegistry(),
		Logger:       infoLogger(&log),
	})
	rec.WaitFor(t, 20*time.Second, func(st map[model.ServiceKey]model.Service) bool { return len(st) == 3 })
	before := rec.Len()
	okFrom := func(i int, kind fetchKind) float64 {
		return value(r.metrics.requests.WithLabelValues(r.servers[i].name, string(kind), resultOK))
	}

	// 1. The primary fails: the empty standby is asked, and the full one preferred.
	primary.set(func(b *brokenServer) { b.down = true })
	waitMetric(t, "suspicious listings cleared", r.metrics.suspect.WithLabelValues(suspectCleared), 1)
	base := okFrom(2, kindDelta)
	waitMetric(t, "deltas from the third server", r.metrics.requests.WithLabelValues(r.servers[2].name, string(kindDelta), resultOK), base+3)
	noRemovals(t, "after the primary failed", rec.Events()[before:], 3)

	// 2. The primary answers again, with an application only it has: it is read again.
	primary.set(func(b *brokenServer) { b.down, b.apps = false, append(slices.Clone(apps), "ship") })
	rec.WaitFor(t, 30*time.Second, func(st map[model.ServiceKey]model.Service) bool { return len(st) == 4 })
	if n := value(r.metrics.fullFetches.WithLabelValues(fullFailback)); n < 1 {
		t.Errorf("%v full fetches for a failback, want at least 1", n)
	}
	base = okFrom(0, kindDelta)
	waitMetric(t, "deltas from the primary", r.metrics.requests.WithLabelValues(r.servers[0].name, string(kindDelta), resultOK), base+3)
	noRemovals(t, "after the primary came back", rec.Events()[before:], 3)

	// 3. The primary restarts empty: held; the empty standby agrees, the third server lists
	// the applications and is read. The primary's probes answer, and its (empty) listing is
	// not preferred.
	before = rec.Len()
	full.set(func(b *brokenServer) { b.apps = append(slices.Clone(apps), "ship") })
	primary.set(func(b *brokenServer) { b.apps = nil })
	waitMetric(t, "failbacks refused", r.metrics.suspect.WithLabelValues(suspectFailback), 1)
	noRemovals(t, "after the primary restarted empty", rec.Events()[before:], 4)
	if got := servedNames(rec.State()); len(got) != 4 {
		t.Errorf("served %v after the primary restarted empty, want 4 services", got)
	}
	if n := strings.Count(log.String(), "staying on the standby"); n != 1 {
		t.Errorf("a refused failback was logged %d times, want once:\n%s", n, log.String())
	}
	if n := value(r.metrics.suspect.WithLabelValues(suspectConfirmed)); n != 0 {
		t.Errorf("%v suspicious listings confirmed, want 0 (a server listed the applications)", n)
	}
}

// TestMismatchLoggedOnce (issue 27): a server whose hashcode never agrees is logged once, not
// at every poll, while the full fetches it causes back off.
func TestMismatchLoggedOnce(t *testing.T) {
	s := startBroken(t, "orders")
	s.set(func(b *brokenServer) { b.lie = true })
	var log syncbuf.Buffer
	r, rec := runAdapter(t, Config{
		URLs:         []string{s.base()},
		PollInterval: 100 * time.Millisecond,
		Timeout:      2 * time.Second,
		Registerer:   prometheus.NewRegistry(),
		Logger:       infoLogger(&log),
	})
	rec.WaitFor(t, 20*time.Second, func(st map[model.ServiceKey]model.Service) bool { return len(st) == 1 })
	waitMetric(t, "hashcode mismatches", r.metrics.mismatches, 5)
	if n := strings.Count(log.String(), "a full fetch is scheduled"); n != 1 {
		t.Errorf("%v mismatches logged in %d lines, want 1:\n%s", value(r.metrics.mismatches), n, log.String())
	}
}

// TestErrorBodyRedacted (issue 27): a server that echoes the request in its error page (here
// its Authorization header, and a token in a query-like text) does not get the credentials into
// what the adapter reports or logs, and a long body is cut.
func TestErrorBodyRedacted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "denied. You sent:\nAuthorization: %s\nurl=%s?access_token=t0ps3cr3t&x=1 password=hunter2 %s",
			req.Header.Get("Authorization"), req.URL.Path, strings.Repeat("padding ", 1000))
	}))
	defer srv.Close()
	var log syncbuf.Buffer
	base := strings.Replace(srv.URL, "http://", "http://galleon:s3cret-pw@", 1) + "/eureka"
	_, rec := runAdapter(t, Config{URLs: []string{base}, PollInterval: 100 * time.Millisecond, Logger: infoLogger(&log)})
	var reported error
	rec.WaitForEvents(t, 20*time.Second, func(events []registrytest.Event) bool {
		for _, e := range events {
			if e.Op == registrytest.OpUnreachable && e.Err != nil {
				reported = e.Err
				return true
			}
		}
		return false
	})
	msg := reported.Error()
	if !strings.Contains(msg, "403") || !strings.Contains(msg, "Authorization") {
		t.Errorf("reported %q, want the status and the start of the body", msg)
	}
	// The basic credentials, base64 of galleon:s3cret-pw, and the secrets in the text.
	for _, secret := range []string{"Z2FsbGVvbjpzM2NyZXQtcHc=", "s3cret-pw", "t0ps3cr3t", "hunter2"} {
		if strings.Contains(msg, secret) || strings.Contains(log.String(), secret) || strings.Contains(rec.Dump(), secret) {
			t.Errorf("%q shows in what the adapter reported (%q) or logged:\n%s", secret, msg, log.String())
		}
	}
	if len(msg) > 400 {
		t.Errorf("reported %d bytes of error, want the body cut: %q", len(msg), msg)
	}
}

func TestServerText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Authorization: Basic Z2FsbGVvbjpzM2NyZXQ=", "Authorization: [redacted]"},
		{`{"authorization":"Bearer abc.def"}`, `{"authorization":[redacted]}`},
		{"proxy-authorization=Digest x", "proxy-authorization=[redacted]"},
		{"header bearer abc.def-ghi", "header bearer [redacted]"},
		{"GET /x?token=abc&user=bob", "GET /x?token=[redacted]&user=bob"},
		{`"password": "hunter2", "db_password"=x`, `"password": "[redacted]", "db_password"=[redacted]`},
		{"see http://user:pw@host/eureka", "see http://[redacted]@host/eureka"},
		{"line\none\x00\xff", "line one ?"},
		{strings.Repeat("é", 200), strings.Repeat("é", maxServerText/2) + "..."},
	} {
		if got := serverText([]byte(tc.in)); got != tc.want {
			t.Errorf("serverText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
