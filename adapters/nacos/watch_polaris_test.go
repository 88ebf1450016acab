package nacos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// The watch against a real server with Nacos's API (polaris-server's service-nacos): push
// latency, discovery, reconnects. The conformance kit (conformance_test.go) checks the
// contract; these measure and check what it does not.

// startWatch runs a Registry on the servers at addrs with cfg's other fields, recording.
func startWatch(t *testing.T, cfg Config, addrs ...string) *registrytest.Recorder {
	t.Helper()
	cfg.Servers = addrs
	if cfg.DiscoveryInterval == 0 {
		cfg.DiscoveryInterval = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := registrytest.NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, rec) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			buf := make([]byte, 1<<20)
			t.Errorf("Run did not return 10s after its context was cancelled:\n%s", buf[:runtime.Stack(buf, true)])
		}
		rec.Close()
		if err := rec.Check(); err != nil {
			t.Error(err)
		}
	})
	return rec
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// hasEndpoints says whether the state holds a service of the given Nacos name with n endpoints.
func hasEndpoints(name string, n int) func(map[model.ServiceKey]model.Service) bool {
	return func(state map[model.ServiceKey]model.Service) bool {
		for _, svc := range state {
			if svc.Labels["nacos-service"] == name || svc.Name == name || hostsHave(svc, name) {
				return len(svc.Instances) == n
			}
		}
		return false
	}
}

func hostsHave(svc model.Service, name string) bool {
	for _, h := range svc.Hosts {
		if len(h) >= len(name) && h[:len(name)] == name {
			return true
		}
	}
	return false
}

func TestPolarisWatchPushLatency(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	s := nacostest.Start(t, nacostest.Options{})
	c := s.Client()
	ctx := context.Background()
	ref := nacostest.Ref{Service: "push-latency"}
	in := nacostest.NewInstance("10.0.0.1", 8080)
	if err := c.RegisterInstance(ctx, ref, in); err != nil {
		t.Fatal(err)
	}
	rec := startWatch(t, Config{}, s.HTTPAddr)
	rec.WaitFor(t, 20*time.Second, hasEndpoints("push-latency", 1))

	// A change to a subscribed service: a push.
	var worst time.Duration
	for i := 2; i <= 6; i++ {
		start := time.Now()
		if err := c.RegisterInstance(ctx, ref, nacostest.NewInstance(fmt.Sprintf("10.0.0.%d", i), 8080)); err != nil {
			t.Fatal(err)
		}
		rec.WaitFor(t, 10*time.Second, hasEndpoints("push-latency", i))
		took := time.Since(start)
		worst = max(worst, took)
		t.Logf("FIGURE push latency (registration answered -> Sink Update): %v", took)
	}
	t.Logf("FIGURE push latency worst of 5: %v", worst)

	// A new service: found by discovery (interval 200ms here), then subscribed.
	start := time.Now()
	if err := c.RegisterInstance(ctx, nacostest.Ref{Service: "new-service"}, in); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 10*time.Second, hasEndpoints("new-service", 1))
	t.Logf("FIGURE new service (registration answered -> Sink Update), discovery interval 200ms: %v", time.Since(start))
}

// proxied starts TCP proxies before s's HTTP and gRPC ports and a watch through them (the gRPC
// port reached with the offset between the two proxies).
func proxied(t *testing.T, s *nacostest.Server, cfg Config) (rec *registrytest.Recorder, httpProxy, grpcProxy *registrytest.Proxy) {
	t.Helper()
	httpProxy = registrytest.NewProxy(t, s.HTTPAddr)
	grpcProxy = registrytest.NewProxy(t, s.GRPCAddr)
	cfg.GRPCPortOffset = port(t, grpcProxy.Addr()) - port(t, httpProxy.Addr())
	return startWatch(t, cfg, httpProxy.Addr()), httpProxy, grpcProxy
}

func port(t *testing.T, addr string) int {
	t.Helper()
	var p int
	if _, err := fmt.Sscanf(addr[len("127.0.0.1:"):], "%d", &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// count counts the events of op from the index from.
func count(events []registrytest.Event, from int, op registrytest.Op) int {
	n := 0
	for _, e := range events[from:] {
		if e.Op == op {
			n++
		}
	}
	return n
}

// TestPolarisWatchReconnect: a connection cut and made again at once (no outage reported)
// is reported with nothing (nothing changed) and the watch goes on; an outage during which
// the registry changed ends with a Replace holding the change.
func TestPolarisWatchReconnect(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	s := nacostest.Start(t, nacostest.Options{})
	c := s.Client()
	ctx := context.Background()
	ref := nacostest.Ref{Service: "reconnect"}
	if err := c.RegisterInstance(ctx, ref, nacostest.NewInstance("10.0.1.1", 8080)); err != nil {
		t.Fatal(err)
	}
	rec, _, grpcProxy := proxied(t, s, Config{})
	rec.WaitFor(t, 20*time.Second, hasEndpoints("reconnect", 1))

	// Cut: the adapter connects again at once and subscribes again; nothing changed.
	mark := rec.Len()
	grpcProxy.Retarget(s.GRPCAddr)
	if err := c.RegisterInstance(ctx, ref, nacostest.NewInstance("10.0.1.2", 8080)); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 10*time.Second, hasEndpoints("reconnect", 2))
	if n := count(rec.Events(), mark, registrytest.OpReplace) + count(rec.Events(), mark, registrytest.OpUnreachable); n != 0 {
		t.Errorf("a connection cut and remade at once was reported with %d Replace or Unreachable calls, want none:\n%s", n, rec.Dump())
	}

	// An outage with a change meanwhile: Unreachable, then a Replace with the change.
	mark = rec.Len()
	if err := grpcProxy.Break(ctx); err != nil {
		t.Fatal(err)
	}
	rec.WaitForEvents(t, 10*time.Second, func(events []registrytest.Event) bool {
		return count(events, mark, registrytest.OpUnreachable) > 0
	})
	if err := c.RegisterInstance(ctx, ref, nacostest.NewInstance("10.0.1.3", 8080)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitInstances(ctx, ref, func(si *nacostest.ServiceInfo) bool { return len(si.Hosts) == 3 }); err != nil {
		t.Fatal(err)
	}
	if err := grpcProxy.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 20*time.Second, hasEndpoints("reconnect", 3))
	rec.WaitForEvents(t, 10*time.Second, func(events []registrytest.Event) bool {
		last := events[len(events)-1]
		return last.Op == registrytest.OpUnreachable && last.Err == nil
	})
	if n := count(rec.Events(), mark, registrytest.OpReplace); n != 1 {
		t.Errorf("the outage ended with %d Replace calls, want 1:\n%s", n, rec.Dump())
	}
}

// TestPolarisWatchServerRestart: the server killed and started again (its store kept); the
// adapter reconnects, subscribes again and sees changes made after.
func TestPolarisWatchServerRestart(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	s := nacostest.Start(t, nacostest.Options{})
	c := s.Client()
	ctx := context.Background()
	ref := nacostest.Ref{Service: "restart"}
	persistent := func(ip string) nacostest.Instance {
		in := nacostest.NewInstance(ip, 8080)
		in.Ephemeral = false
		return in
	}
	if err := c.RegisterInstance(ctx, ref, persistent("10.0.2.1")); err != nil {
		t.Fatal(err)
	}
	rec := startWatch(t, Config{}, s.HTTPAddr)
	rec.WaitFor(t, 20*time.Second, hasEndpoints("restart", 1))
	s.Kill(t)
	rec.WaitForEvents(t, 10*time.Second, func(events []registrytest.Event) bool {
		last := events[len(events)-1]
		return last.Op == registrytest.OpUnreachable && last.Err != nil
	})
	start := time.Now()
	s.Restart(t)
	rec.WaitForEvents(t, 40*time.Second, func(events []registrytest.Event) bool {
		last := events[len(events)-1]
		return last.Op == registrytest.OpUnreachable && last.Err == nil
	})
	t.Logf("FIGURE server restart answered -> outage over (resubscribed): %v", time.Since(start))
	if err := c.RegisterInstance(ctx, ref, persistent("10.0.2.2")); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 20*time.Second, hasEndpoints("restart", 2))
}

// TestPolarisWatchGroups: a service registered in another group is found (every group is
// watched by default: Polaris lists it under DEFAULT_GROUP as "group__service") and served
// under its group; with --nacos-groups naming the group it is found by that group's listing.
func TestPolarisWatchGroups(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	s := nacostest.Start(t, nacostest.Options{})
	c := s.Client()
	ctx := context.Background()
	all := startWatch(t, Config{}, s.HTTPAddr)
	named := startWatch(t, Config{Groups: []string{"billing"}}, s.HTTPAddr)
	start := time.Now()
	ref := nacostest.Ref{Group: "billing", Service: "invoices"}
	if err := c.RegisterInstance(ctx, ref, nacostest.NewInstance("10.0.3.1", 8080)); err != nil {
		t.Fatal(err)
	}
	for _, rec := range []*registrytest.Recorder{all, named} {
		rec.WaitFor(t, 20*time.Second, func(state map[model.ServiceKey]model.Service) bool {
			for _, svc := range state {
				if len(svc.Instances) == 1 && hostsHave(svc, "invoices.billing") {
					return true
				}
			}
			return false
		})
	}
	t.Logf("FIGURE a service in a new group (registration answered -> served), discovery interval 200ms: %v", time.Since(start))
	for _, e := range all.Events() {
		for _, svc := range e.Services {
			for _, h := range svc.Hosts {
				if hostsHave(model.Service{Hosts: []string{h}}, "billing") {
					t.Errorf("the Polaris spelling DEFAULT_GROUP/billing__invoices was served: %s", h)
				}
			}
		}
	}
}

// TestPolarisWatchPaging: listings read page by page, with pages smaller than the groups,
// over both APIs. Polaris fails a later page of a group other than DEFAULT_GROUP when the
// namespace holds more services than the group; the adapter asks again in one page.
func TestPolarisWatchPaging(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	s := nacostest.Start(t, nacostest.Options{})
	c := s.Client()
	ctx := context.Background()
	for i := range 5 {
		for _, g := range []string{"", "pages"} {
			ref := nacostest.Ref{Group: g, Service: fmt.Sprintf("paged-%d", i)}
			if err := c.RegisterInstance(ctx, ref, nacostest.NewInstance(fmt.Sprintf("10.0.4.%d", i+1), 8080)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, api := range []string{APIGRPC, APIHTTP} {
		t.Run(api, func(t *testing.T) {
			rec := startWatch(t, Config{API: api, PageSize: 2, Groups: []string{DefaultGroup, "pages"}}, s.HTTPAddr)
			rec.WaitFor(t, 20*time.Second, func(state map[model.ServiceKey]model.Service) bool { return len(state) == 10 })
		})
	}
}

// TestPolarisWatchHTTP: the 1.x watch (HTTP API, UDP push, poll) sees a change.
func TestPolarisWatchHTTP(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	s := nacostest.Start(t, nacostest.Options{})
	c := s.Client()
	ctx := context.Background()
	ref := nacostest.Ref{Service: "http-watch"}
	if err := c.RegisterInstance(ctx, ref, nacostest.NewInstance("10.0.5.1", 8080)); err != nil {
		t.Fatal(err)
	}
	rec := startWatch(t, Config{API: APIHTTP}, s.HTTPAddr)
	rec.WaitFor(t, 20*time.Second, hasEndpoints("http-watch", 1))
	start := time.Now()
	if err := c.RegisterInstance(ctx, ref, nacostest.NewInstance("10.0.5.2", 8080)); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 2*pollFloor, hasEndpoints("http-watch", 2))
	t.Logf("FIGURE HTTP API (UDP push, poll every %v at most): registration answered -> Sink Update: %v", pollFloor, time.Since(start))
}

// TestPolarisWatchStartAtScale: start -> ready (the first Replace, every service subscribed)
// with many services, the subscriptions pipelined (maxInFlight). A figure, and a bound.
func TestPolarisWatchStartAtScale(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	toolcache.RequireFullTier(t, "registering thousands of services")
	n := scaleServices()
	s := nacostest.Start(t, nacostest.Options{})
	c := s.Client()
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			in := nacostest.NewInstance(fmt.Sprintf("10.%d.%d.1", i/256, i%256), 8080)
			in.Ephemeral = false
			if err := c.RegisterInstance(ctx, nacostest.Ref{Service: fmt.Sprintf("scale-%05d", i)}, in); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("registered %d services in %v", n, time.Since(start))
	// Polaris shows them after its cache refresh.
	deadline := time.Now().Add(60 * time.Second)
	for {
		count, _, err := c.Services(ctx, "", "", 1, 1)
		if err == nil && count >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Polaris lists %d services after 60s (%v), want %d", count, err, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	start = time.Now()
	rec := startWatch(t, Config{DiscoveryInterval: time.Minute}, s.HTTPAddr)
	rec.WaitForEvents(t, 120*time.Second, func(events []registrytest.Event) bool {
		return len(events) > 0 && events[0].Op == registrytest.OpReplace && len(events[0].Services) >= n
	})
	took := time.Since(start)
	t.Logf("FIGURE start -> ready (first Replace, %d services subscribed, %d in flight): %v", n, maxInFlight, took)
	if took > 60*time.Second {
		t.Errorf("start -> ready took %v at %d services, want under a minute", took, n)
	}
}

// scaleServices is the services TestPolarisWatchStartAtScale registers:
// $GALLEON_NACOS_SCALE_SERVICES, default 1000 (Polaris registers a few hundred a second over
// the Nacos API here, each a new Polaris service; galleon-load measures 10,000).
func scaleServices() int {
	if n, err := strconv.Atoi(os.Getenv("GALLEON_NACOS_SCALE_SERVICES")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// TestPolarisWatchRefresh: the refresh net against Polaris, which pushes no change of a
// service outside DEFAULT_GROUP: such a change is served within the refresh interval and
// counted as a lost push; a change in DEFAULT_GROUP (pushed) is not counted. The refreshes
// cost one request per service per interval, spread evenly: measured over two intervals.
func TestPolarisWatchRefresh(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	const n, interval = 60, 2 * time.Second
	s := nacostest.Start(t, nacostest.Options{})
	c := s.Client()
	ctx := context.Background()
	pay := nacostest.Ref{Group: "PAY", Service: "payments"}
	if err := c.RegisterInstance(ctx, pay, nacostest.NewInstance("10.0.5.1", 8080)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if err := c.RegisterInstance(ctx, nacostest.Ref{Service: fmt.Sprintf("refresh-%02d", i)}, nacostest.NewInstance("10.0.6.1", 8080)); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	// The rate cap above what n services every interval ask, so that the interval is the one
	// measured (TestRefreshRateCap tests the cap).
	rec := startWatch(t, Config{RefreshInterval: interval, RefreshMaxRate: 1000, Registerer: reg}, s.HTTPAddr)
	rec.WaitFor(t, 30*time.Second, func(state map[model.ServiceKey]model.Service) bool { return len(state) == n })
	metric := func(name string, labels map[string]string) float64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
		metrics:
			for _, m := range f.GetMetric() {
				for _, lp := range m.GetLabel() {
					if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
						continue metrics
					}
				}
				sum += m.GetCounter().GetValue()
			}
		}
		return sum
	}
	refreshes := func() float64 {
		return metric("galleon_nacos_requests_total", map[string]string{"kind": "refresh", "result": "ok"})
	}

	// A DEFAULT_GROUP change: pushed, not counted.
	if err := c.RegisterInstance(ctx, nacostest.Ref{Service: "refresh-01"}, nacostest.NewInstance("10.0.6.2", 8080)); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 20*time.Second, hasEndpoints("refresh-01", 2))

	// A PAY change: no push, the refresh brings it.
	start := time.Now()
	if err := c.RegisterInstance(ctx, pay, nacostest.NewInstance("10.0.5.2", 8080)); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 20*time.Second, func(state map[model.ServiceKey]model.Service) bool {
		for _, svc := range state {
			if hostsHave(svc, "payments.pay") {
				return len(svc.Instances) == 2
			}
		}
		return false
	})
	t.Logf("FIGURE a change in group PAY (no push from Polaris), refresh interval %v: registration answered -> Sink Update: %v", interval, time.Since(start))

	// The cost: n services every interval, whatever changed.
	before, at := refreshes(), time.Now()
	time.Sleep(2 * interval)
	rate := (refreshes() - before) / time.Since(at).Seconds()
	want := float64(n) / interval.Seconds()
	t.Logf("FIGURE refresh cost: %.1f requests a second for %d services every %v (want %.1f)", rate, n, interval, want)
	if rate < 0.7*want || rate > 1.3*want {
		t.Errorf("%.1f refreshes a second, want about %.1f (%d services every %v)", rate, want, n, interval)
	}
	// The PAY change is the one lost push, once its grace has passed.
	lost := 0.0
	for deadline := time.Now().Add(pushGrace + 5*time.Second); lost == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		lost = metric("galleon_nacos_refresh_changes_total", nil)
	}
	if lost != 1 {
		t.Errorf("galleon_nacos_refresh_changes_total %v, want 1: the PAY change (the DEFAULT_GROUP one was pushed)", lost)
	}
}
