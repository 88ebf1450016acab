package nacos

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// The adapter's behaviour against a real server with Nacos's API (polaris-server's
// service-nacos, nacostest) in what the conformance kit does not look at: namespaces, the
// protect threshold, weights, rejections and credentials. The watch itself (push latency,
// groups, paging, reconnects) is watch_polaris_test.go's. The servers here run without health
// checks (nacostest.Options.NoHealthCheck), so that an instance keeps the health it is written
// with.

// served returns the state's service whose host starts with prefix, if any.
func served(state map[model.ServiceKey]model.Service, prefix string) (model.Service, bool) {
	for _, svc := range state {
		if hostsHave(svc, prefix) {
			return svc, true
		}
	}
	return model.Service{}, false
}

// healthOf maps instance addresses to their health.
func healthOf(svc model.Service) map[string]model.Health {
	out := map[string]model.Health{}
	for _, in := range svc.Instances {
		out[in.Address] = in.Health
	}
	return out
}

// gauge reads the value of a metric family's only series (or its sum) from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestPolarisNamespaces: a service registered in a configured namespace after the start (the
// namespace created by that registration) is found within the discovery interval and served
// under a name and host that carry the namespace.
func TestPolarisNamespaces(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	s := nacostest.Start(t, nacostest.Options{NoHealthCheck: true})
	c := s.Client()
	ctx := t.Context()
	if err := c.RegisterInstance(ctx, nacostest.Ref{Service: "home"}, nacostest.NewInstance("10.9.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	rec := startWatch(t, Config{Namespaces: []string{DefaultNamespace, "team-a"}}, s.HTTPAddr)
	rec.WaitFor(t, 20*time.Second, hasEndpoints("home", 1))

	start := time.Now()
	if err := c.RegisterInstance(ctx, nacostest.Ref{Namespace: "team-a", Service: "away"}, nacostest.NewInstance("10.9.0.2", 8080)); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 20*time.Second, func(state map[model.ServiceKey]model.Service) bool {
		svc, ok := served(state, "away.default-group.team-a.")
		return ok && len(svc.Instances) == 1
	})
	t.Logf("FIGURE a service in a new namespace (registration answered -> served), discovery interval 200ms: %v", time.Since(start))
	// A namespace not configured is not watched.
	if err := c.RegisterInstance(ctx, nacostest.Ref{Namespace: "team-b", Service: "elsewhere"}, nacostest.NewInstance("10.9.0.3", 8080)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // five discovery intervals
	if svc, ok := served(rec.State(), "elsewhere."); ok {
		t.Errorf("a service of an unwatched namespace is served: %v", svc.Hosts)
	}
}

// TestPolarisProtectThreshold: a service whose protect threshold (0.6) is reached, one
// instance healthy of three, is served whole, every instance healthy, as Nacos's clients
// select it; the episode is counted and logged; once enough instances are healthy again the
// unhealthy ones are served unhealthy.
//
// The adapter is given the threshold too (Naming.ProtectThreshold): Polaris applies the
// service's threshold to the answers of a subscription or a query, but not to its pushes
// (apiserver/nacosserver/core/push.go, OnEvent: NoopSelectInstances), so a server-side
// threshold alone comes and goes with every push.
func TestPolarisProtectThreshold(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	s := nacostest.Start(t, nacostest.Options{NoHealthCheck: true})
	c := s.Client()
	ctx := t.Context()
	ref := nacostest.Ref{Service: "guarded"}
	if err := c.CreateService(ctx, ref, nacostest.ServiceOptions{ProtectThreshold: 0.6}); err != nil {
		t.Fatal(err)
	}
	ins := []nacostest.Instance{
		nacostest.NewInstance("10.9.1.1", 8080), nacostest.NewInstance("10.9.1.2", 8080), nacostest.NewInstance("10.9.1.3", 8080),
	}
	ins[1].Healthy, ins[2].Healthy = false, false
	for _, in := range ins {
		if err := c.RegisterInstance(ctx, ref, in); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	logs := &syncLog{}
	cfg := Config{Registerer: reg, Naming: Naming{ProtectThreshold: 0.6}}
	rec := startWatchLogged(t, cfg, logs, s.HTTPAddr)
	allHealthy := func(state map[model.ServiceKey]model.Service) bool {
		svc, ok := served(state, "guarded.")
		if !ok || len(svc.Instances) != 3 {
			return false
		}
		for _, h := range healthOf(svc) {
			if h != model.Healthy {
				return false
			}
		}
		return true
	}
	rec.WaitFor(t, 20*time.Second, allHealthy)
	if got := gauge(t, reg, "galleon_nacos_protect_threshold_reached_total"); got != 1 {
		t.Errorf("galleon_nacos_protect_threshold_reached_total %v, want 1", got)
	}
	if got := gauge(t, reg, "galleon_nacos_services_protect_threshold"); got != 1 {
		t.Errorf("galleon_nacos_services_protect_threshold %v, want 1", got)
	}
	if !strings.Contains(strings.ToLower(logs.String()), "protect") {
		t.Errorf("no log line tells of the protect threshold:\n%s", logs.String())
	}

	// Two of three healthy (0.67 >= 0.6): the third is served unhealthy.
	ins[1].Healthy = true
	if err := c.UpdateInstance(ctx, ref, ins[1]); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 20*time.Second, func(state map[model.ServiceKey]model.Service) bool {
		svc, ok := served(state, "guarded.")
		return ok && healthOf(svc)["10.9.1.3"] == model.Unhealthy && healthOf(svc)["10.9.1.2"] == model.Healthy
	})
	if got := gauge(t, reg, "galleon_nacos_services_protect_threshold"); got != 0 {
		t.Errorf("galleon_nacos_services_protect_threshold %v after the episode, want 0", got)
	}
}

// TestPolarisWeights: Nacos weights scaled by 100 (Dubbo's default weight) into endpoint
// weights, weight 0 served Draining; Polaris keeps whole weights only (2.5 is stored as 2).
func TestPolarisWeights(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	s := nacostest.Start(t, nacostest.Options{NoHealthCheck: true})
	c := s.Client()
	ctx := t.Context()
	ref := nacostest.Ref{Service: "weighted"}
	want := map[string]struct {
		weight float64
		served uint32
		health model.Health
	}{
		"10.9.2.1": {1, 100, model.Healthy},
		"10.9.2.2": {3, 300, model.Healthy},
		"10.9.2.3": {0, 0, model.Draining},
		"10.9.2.4": {2.5, 200, model.Healthy},
	}
	for ip, w := range want {
		in := nacostest.NewInstance(ip, 8080)
		in.Weight = w.weight
		if err := c.RegisterInstance(ctx, ref, in); err != nil {
			t.Fatal(err)
		}
	}
	rec := startWatch(t, Config{}, s.HTTPAddr)
	rec.WaitFor(t, 20*time.Second, hasEndpoints("weighted", 4))
	svc, _ := served(rec.State(), "weighted.")
	for _, in := range svc.Instances {
		w := want[in.Address]
		if in.Weight != w.served || in.Health != w.health {
			t.Errorf("%s (Nacos weight %v): served weight %d health %v, want %d %v", in.Address, w.weight, in.Weight, in.Health, w.served, w.health)
		}
	}
}

// TestPolarisRejected: an instance the adapter cannot serve (an ip that is no address, a
// protocol Istio does not know) is rejected under its record name with its reason, and the
// service's other instances are served.
func TestPolarisRejected(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	s := nacostest.Start(t, nacostest.Options{NoHealthCheck: true})
	c := s.Client()
	ctx := t.Context()
	ref := nacostest.Ref{Service: "mixed"}
	good := nacostest.NewInstance("10.9.3.1", 8080)
	badAddr := nacostest.NewInstance(nacostest.CorruptIP, 8080)
	badProto := nacostest.NewInstance("10.9.3.2", 9090)
	badProto.Metadata = map[string]string{"protocol": "carrier-pigeon"}
	for _, in := range []nacostest.Instance{good, badAddr, badProto} {
		if err := c.RegisterInstance(ctx, ref, in); err != nil {
			t.Fatal(err)
		}
	}
	rec := startWatch(t, Config{}, s.HTTPAddr)
	rec.WaitFor(t, 20*time.Second, hasEndpoints("mixed", 1))
	wantReasons := map[string]string{
		"public/DEFAULT_GROUP/mixed not_an_ip:8080": "address",
		"public/DEFAULT_GROUP/mixed 10.9.3.2:9090":  "protocol",
	}
	rec.WaitForEvents(t, 10*time.Second, func(events []registrytest.Event) bool {
		n := 0
		for _, e := range events {
			if e.Op == registrytest.OpRejected {
				if _, ok := wantReasons[e.Record]; ok {
					n++
				}
			}
		}
		return n >= len(wantReasons)
	})
	for _, e := range rec.Events() {
		if e.Op != registrytest.OpRejected {
			continue
		}
		want, ok := wantReasons[e.Record]
		if !ok {
			t.Errorf("unexpected rejection %s: %v", e.Record, e.Err)
			continue
		}
		if got := registry.ReasonOf(e.Err, ""); got != want {
			t.Errorf("%s rejected with reason %q (%v), want %q", e.Record, got, e.Err, want)
		}
		t.Logf("rejected %s: %v", e.Record, e.Err)
	}
	// Fixing the record serves it.
	if err := c.DeregisterInstance(ctx, ref, badAddr); err != nil {
		t.Fatal(err)
	}
	badProto.Metadata = map[string]string{"protocol": "grpc"}
	if err := c.RegisterInstance(ctx, ref, badProto); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 20*time.Second, hasEndpoints("mixed", 2))
}

// TestPolarisCredentials: Polaris's Nacos login cannot work with client auth on (it never sees
// the token it checks: docs/adapters/nacos.md), so what can be checked against it is that an
// adapter whose login fails reports the server Unreachable with an error that says so and
// holds no secret; and, with auth off, that a configured login (which Polaris then accepts
// whatever the password) does not get in the way of the watch.
func TestPolarisCredentials(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	const secret = "s3cret-Passw0rd-never-logged"
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("auth on", func(t *testing.T) {
		s := nacostest.Start(t, nacostest.Options{Auth: true, NoHealthCheck: true})
		logs := &syncLog{}
		rec := startWatchLogged(t, Config{Username: s.Username, PasswordFile: pwFile}, logs, s.HTTPAddr)
		var err error
		rec.WaitForEvents(t, 20*time.Second, func(events []registrytest.Event) bool {
			for _, e := range events {
				if e.Op == registrytest.OpUnreachable && e.Err != nil {
					err = e.Err
					return true
				}
			}
			return false
		})
		t.Logf("Unreachable: %v", err)
		if msg := strings.ToLower(err.Error()); !strings.Contains(msg, "login") && !strings.Contains(msg, "auth") && !strings.Contains(msg, "token") {
			t.Errorf("Unreachable(%v): the error does not say the login failed", err)
		}
		for _, e := range rec.Events() {
			if e.Err != nil && strings.Contains(e.Err.Error(), secret) {
				t.Errorf("%s carries the password: %v", e, e.Err)
			}
		}
		if strings.Contains(logs.String(), secret) {
			t.Error("the logs carry the password")
		}
		if rec.Synced() {
			t.Error("a Replace came through a failed login")
		}
	})

	t.Run("auth off", func(t *testing.T) {
		s := nacostest.Start(t, nacostest.Options{NoHealthCheck: true})
		if err := s.Client().RegisterInstance(t.Context(), nacostest.Ref{Service: "open"}, nacostest.NewInstance("10.9.4.1", 8080)); err != nil {
			t.Fatal(err)
		}
		logs := &syncLog{}
		rec := startWatchLogged(t, Config{Username: "nacos", PasswordFile: pwFile}, logs, s.HTTPAddr)
		rec.WaitFor(t, 20*time.Second, hasEndpoints("open", 1))
		if strings.Contains(logs.String(), secret) {
			t.Error("the logs carry the password")
		}
	})
}

// syncLog is a log buffer safe for concurrent writes.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startWatchLogged is startWatch with the adapter's logs kept in logs as well as in the test log.
func startWatchLogged(t *testing.T, cfg Config, logs *syncLog, addrs ...string) *registrytest.Recorder {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, logs), &slog.HandlerOptions{Level: slog.LevelDebug}))
	return startWatch(t, cfg, addrs...)
}
