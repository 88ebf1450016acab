package nacos

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// fakeSession is a gRPC session whose every service has one instance, at the IP ips holds
// for it (10.0.0.1 by default); it counts the watches of each service. Every listing holds
// the names in listed.
type fakeSession struct {
	mu      sync.Mutex
	ips     map[wire.Ref]string
	watches map[wire.Ref]int
	listed  []string
	stop    chan struct{}
}

func newFakeSession() *fakeSession {
	return &fakeSession{ips: map[wire.Ref]string{}, watches: map[wire.Ref]int{}, stop: make(chan struct{})}
}

func (f *fakeSession) api() string { return APIGRPC }
func (f *fakeSession) list(context.Context, string, string, int, int) (wire.ServicePage, error) {
	return wire.ServicePage{Count: len(f.listed), Names: f.listed}, nil
}
func (f *fakeSession) watch(_ context.Context, ref wire.Ref) (*wire.ServiceInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watches[ref]++
	ip := f.ips[ref]
	if ip == "" {
		ip = "10.0.0.1"
	}
	return &wire.ServiceInfo{Name: ref.Service, LastRefTime: time.Now().UnixMilli(),
		Hosts: []wire.Instance{{IP: ip, Port: 8080, Weight: 1, Healthy: true, Enabled: true, ClusterName: "DEFAULT"}}}, nil
}
func (f *fakeSession) unwatch(context.Context, wire.Ref) error { return nil }
func (f *fakeSession) polls() bool                             { return false }
func (f *fakeSession) http() *wire.HTTPClient                  { return nil }
func (f *fakeSession) done() <-chan struct{}                   { return f.stop }
func (f *fakeSession) err() error                              { return nil }
func (f *fakeSession) close()                                  {}

// refreshWatcher is a watcher of cfg (its server a placeholder: the session is fake) holding n
// services svc-000, svc-001, ... not yet watched, and the recorder it reports to.
func refreshWatcher(t *testing.T, cfg Config, n int) (*watcher, *fakeSession, []wire.Ref, *registrytest.Recorder) {
	t.Helper()
	cfg.Servers, cfg.Logger = []string{"127.0.0.1:8848"}, slog.New(slog.DiscardHandler)
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := registrytest.NewRecorder()
	t.Cleanup(rec.Close)
	w := newWatcher(r, rec)
	refs := make([]wire.Ref, n)
	for i := range refs {
		refs[i] = wire.Ref{Group: DefaultGroup, Service: fmt.Sprintf("svc-%03d", i)}
		w.svcs.add(refs[i])
	}
	return w, newFakeSession(), refs, rec
}

// TestRefreshSpread: services watched together get refresh times spread evenly over one
// interval; a refresh reads again only those due, at most maxRefreshShare shares of a tick
// at once, and moves each one interval on; a state that changed without a push is served.
func TestRefreshSpread(t *testing.T) {
	const n, interval = 100, 10 * time.Second
	w, sess, refs, rec := refreshWatcher(t, Config{RefreshInterval: interval}, n)
	ctx := context.Background()
	start := time.Now()
	if err := w.watchAll(ctx, sess, refs); err != nil {
		t.Fatal(err)
	}
	w.rec.Flush()
	// Evenly: the i-th of n at (i+1)/n of the interval.
	for i, ref := range refs {
		at := w.svcs.entries[ref].nextRefresh.Sub(start)
		want := interval * time.Duration(i+1) / n
		if at < want || at > want+time.Second {
			t.Fatalf("%s refreshed %v after it was watched, want about %v (evenly over %v)", ref.Service, at, want, interval)
		}
	}
	// Nothing is due yet.
	if err := w.refresh(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if got := sess.watches[refs[0]]; got != 1 {
		t.Errorf("refreshed before it was due: %d watches", got)
	}
	// All due at once (a watch that fell behind): at most two ticks' share (n / 10 s a
	// second) in one tick, the longest due first.
	changed := refs[n-1]
	sess.ips[changed] = "10.0.0.2"
	for _, e := range w.svcs.entries {
		e.nextRefresh = time.Now().Add(-time.Second)
	}
	w.svcs.entries[changed].nextRefresh = time.Now().Add(-time.Minute)
	if err := w.refresh(ctx, sess); err != nil {
		t.Fatal(err)
	}
	refreshed := 0
	for _, ref := range refs {
		refreshed += sess.watches[ref] - 1
	}
	if share := maxRefreshShare * n * int(tick) / int(interval); refreshed != share {
		t.Errorf("%d services refreshed in one tick, want %d (%d shares of %d services over %v)", refreshed, share, maxRefreshShare, n, interval)
	}
	if sess.watches[changed] != 2 {
		t.Errorf("the service due longest was not refreshed first")
	}
	if e := w.svcs.entries[changed]; e.nextRefresh.Before(time.Now().Add(interval - time.Second)) {
		t.Errorf("next refresh of the one refreshed in %v, want one interval (%v)", time.Until(e.nextRefresh), interval)
	}
	state := rec.State()
	found := false
	for _, svc := range state {
		if hostsHave(svc, changed.Service) {
			found = len(svc.Instances) == 1 && svc.Instances[0].Address == "10.0.0.2"
		}
	}
	if !found {
		t.Errorf("the state the refresh found was not served:\n%s", rec.Dump())
	}
}

// TestRefreshRateCap: with more services than the interval and the rate allow, each is
// refreshed every services / rate seconds instead (spread over that), and one tick refreshes
// at most twice its share of that rate.
func TestRefreshRateCap(t *testing.T) {
	const n, interval, rate = 100, time.Second, 10.0
	w, sess, refs, _ := refreshWatcher(t, Config{RefreshInterval: interval, RefreshMaxRate: rate}, n)
	if every := w.refreshEvery(); every != 10*time.Second {
		t.Fatalf("refresh every %v for %d services at %g a second, want 10s", every, n, rate)
	}
	start := time.Now()
	if err := w.watchAll(context.Background(), sess, refs); err != nil {
		t.Fatal(err)
	}
	if at := w.svcs.entries[refs[n-1]].nextRefresh.Sub(start); at < 10*time.Second || at > 11*time.Second {
		t.Errorf("the last service's first refresh %v after its watch, want about 10s (the rate's period, not the interval %v)", at, interval)
	}
	for _, e := range w.svcs.entries {
		e.nextRefresh = time.Now().Add(-time.Second)
	}
	if err := w.refresh(context.Background(), sess); err != nil {
		t.Fatal(err)
	}
	refreshed := 0
	for _, ref := range refs {
		refreshed += sess.watches[ref] - 1
	}
	// A tick's share at 10 a second is 10; at most twice that.
	if want := int(maxRefreshShare * rate * tick.Seconds()); refreshed != want {
		t.Errorf("one tick with every service due refreshed %d, want %d (twice a tick's share of %g a second)", refreshed, want, rate)
	}
}
