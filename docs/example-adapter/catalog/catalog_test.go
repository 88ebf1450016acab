package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// pollInterval is short so that the kit's waits end in milliseconds;
// pollTimeout short enough that a stalled catalog is reported well within
// the kit's wait (registrytest.DefaultTimeout).
const (
	pollInterval = 20 * time.Millisecond
	pollTimeout  = time.Second
)

// TestConformance runs the SDK's conformance kit against the adapter and
// a real catalog: an HTTP server on a loopback port, which the kit drives
// through catalogServer's Driver methods.
func TestConformance(t *testing.T) {
	cat := startCatalog(t)
	registrytest.TestRegistry(t,
		func(t *testing.T) registry.Registry {
			reg, err := New(Config{URL: cat.baseURL(), Interval: pollInterval, Timeout: pollTimeout, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return reg
		},
		cat,
		// What the catalog cannot hold: service labels, and health (it
		// lists only instances that are up, which the adapter reports
		// Healthy). Normalising rather than IgnoreFields still checks
		// that the adapter reports exactly that.
		registrytest.WithNormalize(func(s model.Service) model.Service {
			s.Labels = nil
			for i := range s.Instances {
				s.Instances[i].Health = model.Healthy
			}
			return s
		}),
	)
}

// The catalog's wire format, spelt out here independently of the
// adapter's own types, so that the test checks the adapter against the
// JSON rather than against itself.
type wireEntry struct {
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	Hosts     []string       `json:"hosts"`
	Ports     []wirePort     `json:"ports"`
	Instances []wireInstance `json:"instances"`
}

type wirePort struct {
	Number   int    `json:"number"`
	Protocol string `json:"protocol"`
	Name     string `json:"name"`
}

type wireInstance struct {
	ID      string            `json:"id"`
	Address string            `json:"address"`
	Labels  map[string]string `json:"labels"`
}

// catalogServer is the registry of this example: a catalog that keeps its
// services in memory, in the order they were added (an entry's index in
// the listing is its position), and serves them with ETags. It implements
// registrytest.Driver, Corrupter, Breaker and Staller; the kit calls them
// from the test's goroutine only, so only entries and the stall, which the
// handler reads, need the mutex.
type catalogServer struct {
	mu      sync.Mutex
	entries []wireEntry
	// stalled, while not nil, holds every request until it is closed.
	stalled chan struct{}

	addr   string // 127.0.0.1:<port>, kept across Break and Restore
	srv    *http.Server
	served chan struct{} // closed when srv.Serve returned
}

var (
	_ registrytest.Driver    = (*catalogServer)(nil)
	_ registrytest.Corrupter = (*catalogServer)(nil)
	_ registrytest.Breaker   = (*catalogServer)(nil)
	_ registrytest.Staller   = (*catalogServer)(nil)
)

func startCatalog(t *testing.T) *catalogServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &catalogServer{entries: []wireEntry{}, addr: lis.Addr().String()}
	c.serve(lis)
	t.Cleanup(c.stop)
	return c
}

func (c *catalogServer) baseURL() string { return "http://" + c.addr }

func (c *catalogServer) serve(lis net.Listener) {
	c.srv = &http.Server{Handler: c, ReadHeaderTimeout: 5 * time.Second}
	c.served = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		_ = srv.Serve(lis) // http.ErrServerClosed once stopped
	}(c.srv, c.served)
}

// stop closes the listener and every connection, idle or busy, as a
// catalog process that goes away does.
func (c *catalogServer) stop() {
	if c.srv == nil {
		return
	}
	_ = c.srv.Close()
	<-c.served
	c.srv = nil
}

// ServeHTTP answers GET /v1/services. The ETag is a hash of the body, so
// it changes exactly when the listing does, and survives a restart.
func (c *catalogServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/services" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	c.mu.Lock()
	stalled := c.stalled
	body, err := json.Marshal(c.entries)
	c.mu.Unlock()
	if stalled != nil {
		// Stalled: the request was read and is never answered, until
		// Restore or the connection's end.
		select {
		case <-stalled:
		case <-r.Context().Done():
		}
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:8]) + `"`
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// set puts e in place of the entry of the same key, or appends it, and
// returns its index. c.mu is held.
func (c *catalogServer) set(e wireEntry) int {
	i := slices.IndexFunc(c.entries, func(o wireEntry) bool { return o.Namespace == e.Namespace && o.Name == e.Name })
	if i < 0 {
		c.entries = append(c.entries, e)
		return len(c.entries) - 1
	}
	c.entries[i] = e
	return i
}

// Put writes svc as the catalog holds it: no service labels, no health.
func (c *catalogServer) Put(_ context.Context, svc model.Service) error {
	e := wireEntry{Namespace: svc.Namespace, Name: svc.Name, Hosts: slices.Clone(svc.Hosts)}
	for _, p := range svc.Ports {
		e.Ports = append(e.Ports, wirePort{Number: int(p.Number), Protocol: string(p.Protocol), Name: p.Name})
	}
	for _, inst := range svc.Instances {
		e.Instances = append(e.Instances, wireInstance{ID: inst.ID, Address: inst.Address, Labels: inst.Labels})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(e)
	return nil
}

// Remove deletes the key's entry, good or malformed.
func (c *catalogServer) Remove(_ context.Context, key model.ServiceKey) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = slices.DeleteFunc(c.entries, func(e wireEntry) bool { return e.Namespace == key.Namespace && e.Name == key.Name })
	return nil
}

// Corrupt writes an entry with port 0, which the adapter must reject and
// name by the listing URL, the entry's index and its key.
func (c *catalogServer) Corrupt(_ context.Context, key model.ServiceKey) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.set(wireEntry{
		Namespace: key.Namespace,
		Name:      key.Name,
		Hosts:     []string{key.Name + ".test"},
		Ports:     []wirePort{{Number: 0, Protocol: "HTTP"}},
		Instances: []wireInstance{{ID: key.Name + "-1", Address: "10.0.0.1"}},
	})
	return fmt.Sprintf("%s/v1/services#%d (%s)", c.baseURL(), i, key), nil
}

// Break takes the catalog down the way an outage usually looks: the
// process is gone, so established keep-alive connections are cut and new
// ones refused. That is harder on the adapter than a 503 (which
// TestBadAnswers covers): the failure comes from the transport, and a
// pooled connection dies under it.
func (c *catalogServer) Break(context.Context) error {
	c.stop()
	return nil
}

// Stall makes the catalog accept connections and requests and answer
// none: what an adapter without a timeout waits on forever.
func (c *catalogServer) Stall(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stalled = make(chan struct{})
	return nil
}

// Restore ends a Stall, or starts the catalog again after a Break on the
// same address, with its content intact. The port was ours a moment ago;
// listening again is retried briefly in case the kernel is slow to let it
// go.
func (c *catalogServer) Restore(ctx context.Context) error {
	c.mu.Lock()
	if c.stalled != nil {
		close(c.stalled)
		c.stalled = nil
	}
	c.mu.Unlock()
	if c.srv != nil {
		return nil // stalled, not broken: still serving
	}
	for {
		lis, err := net.Listen("tcp", c.addr)
		if err == nil {
			c.serve(lis)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("listening again on %s: %w", c.addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestDecode checks the wire format and the validation of entries: a bad
// entry is rejected by name with a message that says what to fix, and
// costs no other entry.
func TestDecode(t *testing.T) {
	const src = "http://cat/v1/services"
	good := `{"namespace":"shop","name":"web","hosts":["web.shop.example"],
		"ports":[{"number":80,"protocol":"http","name":"web"}],
		"instances":[{"id":"web-1","address":"10.0.0.1","labels":{"version":"v1"}},{"id":"web-2","address":"web-2.vm"}]}`
	bad := []struct{ entry, record, says string }{
		{`{"name":"a","hosts":["a"]}`, "#1 (/a)", "no namespace"},
		{`{"namespace":"ns","hosts":["a"]}`, "#2 (ns/)", "no name"},
		{`{"namespace":"ns","name":"nohosts"}`, "#3 (ns/nohosts)", "no hosts"},
		{`{"namespace":"ns","name":"port0","hosts":["h"],"ports":[{"number":0}]}`, "#4 (ns/port0)", "number 0 is not in 1-65535"},
		{`{"namespace":"ns","name":"portbig","hosts":["h"],"ports":[{"number":70000}]}`, "#5 (ns/portbig)", "number 70000 is not in 1-65535"},
		{`{"namespace":"ns","name":"portstr","hosts":["h"],"ports":[{"number":"80"}]}`, "#6 (ns/portstr)", "cannot unmarshal string"},
		{`{"namespace":"ns","name":"noid","hosts":["h"],"instances":[{"address":"10.0.0.1"}]}`, "#7 (ns/noid)", "has no id"},
		{`{"namespace":"ns","name":"noaddr","hosts":["h"],"instances":[{"id":"x"}]}`, "#8 (ns/noaddr)", "has no address"},
		{`{"namespace":"ns","name":"dupid","hosts":["h"],"instances":[{"id":"x","address":"a"},{"id":"x","address":"b"}]}`, "#9 (ns/dupid)", "used twice"},
		{`null`, "#10 (/)", "no namespace"},
		{`{"namespace":"shop","name":"web","hosts":["dup.example"]}`, "#11 (shop/web)", "already defined by entry #0"},
	}
	entries := []string{good}
	for _, b := range bad {
		entries = append(entries, b.entry)
	}
	services, rejected, err := decode(src, []byte("["+strings.Join(entries, ",")+"]"))
	if err != nil {
		t.Fatal(err)
	}
	want := model.Service{
		Namespace: "shop", Name: "web", Hosts: []string{"web.shop.example"},
		Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP, Name: "web"}},
		Instances: []model.Instance{
			{ID: "web-1", Address: "10.0.0.1", Labels: map[string]string{"version": "v1"}, Health: model.Healthy},
			{ID: "web-2", Address: "web-2.vm", Health: model.Healthy},
		},
	}
	if len(services) != 1 || !model.Equal(services[0], want) {
		t.Errorf("services = %+v\nwant only %+v", services, want)
	}
	for _, b := range bad {
		err, ok := rejected[src+b.record]
		switch {
		case !ok:
			t.Errorf("%s: not rejected as %q; rejected: %v", b.entry, src+b.record, rejected)
		case !strings.Contains(err.Error(), b.says):
			t.Errorf("%s: rejected with %q, want it to say %q", b.entry, err, b.says)
		}
	}
	if len(rejected) != len(bad) {
		t.Errorf("%d rejections, want %d: %v", len(rejected), len(bad), rejected)
	}

	for _, body := range []string{`{"services":[]}`, `<html>`, ``} {
		if _, _, err := decode(src, []byte(body)); err == nil {
			t.Errorf("decode(%q): no error, want one (not a listing)", body)
		}
	}
	if services, rejected, err := decode(src, []byte(`[]`)); err != nil || len(services) != 0 || len(rejected) != 0 {
		t.Errorf("decode([]) = %v, %v, %v; want an empty listing", services, rejected, err)
	}
}

// TestBadAnswers checks what the conformance kit's Breaker does not: a
// catalog that answers, but with a 503 or with something other than a
// listing, is unreachable until it lists again, and polls of an unchanged
// catalog ask with the ETag and report nothing.
func TestBadAnswers(t *testing.T) {
	var mode atomic.Value // "ok", "503" or "garbage"
	mode.Store("ok")
	var notModified atomic.Int64
	const etag = `"v1"`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "503":
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		case "garbage":
			_, _ = w.Write([]byte("<html>maintenance</html>"))
		default:
			w.Header().Set("ETag", etag)
			if r.Header.Get("If-None-Match") == etag {
				notModified.Add(1)
				w.WriteHeader(http.StatusNotModified)
				return
			}
			_, _ = w.Write([]byte(`[{"namespace":"ns","name":"web","hosts":["web.example"],"ports":[{"number":80}],"instances":[{"id":"i1","address":"10.0.0.1"}]}]`))
		}
	}))
	defer srv.Close()
	reg, err := New(Config{URL: srv.URL, Interval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rec := registrytest.NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx, rec) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
		if err := rec.Check(); err != nil {
			t.Error(err)
		}
	}()
	count := func(events []registrytest.Event, match func(registrytest.Event) bool) int {
		n := 0
		for _, e := range events {
			if match(e) {
				n++
			}
		}
		return n
	}
	replaces := func(events []registrytest.Event) int {
		return count(events, func(e registrytest.Event) bool { return e.Op == registrytest.OpReplace })
	}
	down := func(says string) func([]registrytest.Event) bool {
		return func(events []registrytest.Event) bool {
			return count(events, func(e registrytest.Event) bool {
				return e.Op == registrytest.OpUnreachable && e.Err != nil && strings.Contains(e.Err.Error(), says)
			}) > 0
		}
	}
	const wait = 10 * time.Second

	rec.WaitForEvents(t, wait, func(events []registrytest.Event) bool { return replaces(events) == 1 })
	// Let a few polls of the unchanged catalog pass (polled for: they
	// make no Sink call for WaitForEvents to wake on).
	for deadline := time.Now().Add(wait); notModified.Load() < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("no poll asked with the ETag (If-None-Match) within %v", wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := rec.Len(); n != 1 {
		t.Fatalf("polls of an unchanged catalog reported something:\n%s", rec.Dump())
	}

	// Back: relisted in full (a 304 would not do), reported with Replace,
	// then the outage is over.
	back := func(n int) func([]registrytest.Event) bool {
		return func(events []registrytest.Event) bool {
			last := events[len(events)-1]
			return replaces(events) == n && last.Op == registrytest.OpUnreachable && last.Err == nil
		}
	}
	// Each bad answer starts an outage of its own: within one outage the
	// Reconciler reports a different error only every 30 s.
	mode.Store("503")
	rec.WaitForEvents(t, wait, down("503 Service Unavailable"))
	mode.Store("ok")
	rec.WaitForEvents(t, wait, back(2))
	mode.Store("garbage")
	rec.WaitForEvents(t, wait, down("not a JSON array"))
	mode.Store("ok")
	rec.WaitForEvents(t, wait, back(3))
	if _, ok := rec.State()[model.ServiceKey{Namespace: "ns", Name: "web"}]; !ok {
		t.Errorf("ns/web is not served after the outage:\n%s", rec.Dump())
	}
}

// TestNew checks that configuration mistakes are caught before anything
// runs, with a message that says what to fix.
func TestNew(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		says string
	}{
		{Config{}, "URL is empty"},
		{Config{URL: "catalog.example:8080"}, "scheme must be http or https"},
		{Config{URL: "http://"}, "has no host"},
		{Config{URL: "http://cat/?x=1"}, "without a query"},
		{Config{URL: "http://cat", Interval: -time.Second}, "negative"},
		{Config{URL: "http://cat", Timeout: -time.Second}, "timeout -1s is negative"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("New(%+v) = %v, want an error saying %q", tc.cfg, err, tc.says)
		}
	}
	reg, err := New(Config{URL: "https://user:secret@cat.example/base/"})
	if err != nil {
		t.Fatal(err)
	}
	if reg.listURL != "https://user:secret@cat.example/base/v1/services" || strings.Contains(reg.source, "secret") {
		t.Errorf("listURL %q, source %q: want <base>/v1/services, and no password in the source", reg.listURL, reg.source)
	}
}
