package eureka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
	"github.com/galleon-mesh/galleon/adapters/eureka/internal/wire"
	"github.com/galleon-mesh/galleon/internal/testing/testpki"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// These tests run the adapter against real Eureka API servers (Polaris, eurekatest); the
// conformance kit (conformance_test.go) covers the contract, these the Eureka-specific
// behaviour: failover between servers, one full fetch per hashcode mismatch, TLS and basic auth.

// runAdapter runs a Registry of cfg into a Recorder until the test ends, and checks after it
// returned that the Recorder saw nothing the contract forbids.
func runAdapter(t *testing.T, cfg Config) (*Registry, *registrytest.Recorder) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "eureka-test"
	}
	reg, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := registrytest.NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx, rec) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its cancellation")
		}
		rec.Close()
		if err := rec.Check(); err != nil {
			t.Error(err)
		}
	})
	return reg, rec
}

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if c := d.GetCounter(); c != nil {
		return c.GetValue()
	}
	return d.GetGauge().GetValue()
}

func registerAll(ctx context.Context, t *testing.T, servers []*eurekatest.Server, ins ...eurekatest.Instance) {
	t.Helper()
	for _, s := range servers {
		for _, in := range ins {
			if err := s.Register(ctx, in); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func waitListed(ctx context.Context, t *testing.T, s *eurekatest.Server, app, id, status string) {
	t.Helper()
	if _, err := s.WaitApps(ctx, "/apps", func(a *eurekatest.Applications) bool {
		in := a.Find(app, id)
		return in != nil && in.Status == status
	}); err != nil {
		t.Fatalf("%s does not list %s/%s %s: %v", s.BaseURL(), app, id, status, err)
	}
}

// healthOfInstance is the health the recorded state gives an instance, ok false when absent.
func healthOfInstance(state map[model.ServiceKey]model.Service, name, id string) (model.Health, bool) {
	svc, ok := state[model.ServiceKey{Namespace: "eureka-test", Name: name}]
	if !ok {
		return 0, false
	}
	for _, in := range svc.Instances {
		if in.ID == id {
			return in.Health, true
		}
	}
	return 0, false
}

// TestFailover: two servers holding the same registry (what peer replication gives; Polaris
// servers do not replicate, so the test registers in both). The first is killed: the adapter
// moves to the second without dropping anything, reports the first Degraded, and serves what
// changes on the second.
func TestFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := eurekatest.Start(t, eurekatest.Options{})
	b := eurekatest.Start(t, eurekatest.Options{})
	servers := []*eurekatest.Server{a, b}
	ins := []eurekatest.Instance{
		{App: "orders", ID: "orders-1", IPAddr: "10.1.0.1", Port: 8080},
		{App: "orders", ID: "orders-2", IPAddr: "10.1.0.2", Port: 8080},
	}
	registerAll(ctx, t, servers, ins...)
	eurekatest.RenewEvery(t, b, 10*time.Second, func() map[string][]string {
		return map[string][]string{"ORDERS": {"orders-1", "orders-2", "orders-3"}}
	})
	for _, s := range servers {
		waitListed(ctx, t, s, "ORDERS", "orders-2", wire.StatusUp)
	}
	reg := prometheus.NewRegistry()
	r, rec := runAdapter(t, Config{
		URLs:         []string{a.BaseURL(), b.BaseURL()},
		PollInterval: 200 * time.Millisecond,
		Timeout:      2 * time.Second,
		Registerer:   reg,
	})
	rec.WaitFor(t, 20*time.Second, func(st map[model.ServiceKey]model.Service) bool {
		return len(st[model.ServiceKey{Namespace: "eureka-test", Name: "orders"}].Instances) == 2
	})
	// The standby is probed from the start: its gauge says it answers before it is needed.
	deadline := time.Now().Add(10 * time.Second)
	for value(r.metrics.serverUp.WithLabelValues(r.servers[1].name)) != 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if up := value(r.metrics.serverUp.WithLabelValues(r.servers[1].name)); up != 1 {
		t.Errorf("galleon_eureka_server_up{server=%q} (the standby) = %v, want 1", r.servers[1].name, up)
	}
	before := rec.Len()
	a.Kill(t)
	registerAll(ctx, t, servers[1:], eurekatest.Instance{App: "orders", ID: "orders-3", IPAddr: "10.1.0.3", Port: 8080})
	rec.WaitFor(t, 20*time.Second, func(st map[model.ServiceKey]model.Service) bool {
		_, ok := healthOfInstance(st, "orders", "orders-3")
		return ok
	})
	for _, e := range rec.Events()[before:] {
		switch e.Op {
		case registrytest.OpReplace, registrytest.OpDelete:
			t.Errorf("after the first server was killed: %v (want only Updates and Degraded)", e)
		case registrytest.OpUpdate:
			if n := len(e.Services[0].Instances); n < 2 {
				t.Errorf("after the first server was killed: %v holds %d instances, fewer than before", e, n)
			}
		case registrytest.OpUnreachable:
			t.Errorf("after the first server was killed: %v, while the second answered", e)
		}
	}
	rec.WaitForEvents(t, 10*time.Second, func(events []registrytest.Event) bool {
		for _, e := range events[before:] {
			if e.Op == registrytest.OpDegraded && e.Record == r.servers[0].name && e.Err != nil {
				return true
			}
		}
		return false
	})
	if up := value(r.metrics.serverUp.WithLabelValues(r.servers[0].name)); up != 0 {
		t.Errorf("galleon_eureka_server_up{server=%q} = %v after it was killed, want 0", r.servers[0].name, up)
	}
	if ok := value(r.metrics.requests.WithLabelValues(r.servers[1].name, "delta", resultOK)); ok == 0 {
		t.Errorf("no delta from the second server %s", r.servers[1].name)
	}
}

// TestHashcodeMismatchOneFullFetch: a change the adapter's deltas cannot see (made while the
// adapter was cut off, and out of the server's 1 s delta window by the time it is back) leaves
// its apps__hashcode unlike the server's. Exactly one full fetch follows, and it serves the
// change; the deltas after it reconcile.
func TestHashcodeMismatchOneFullFetch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := eurekatest.Start(t, eurekatest.Options{DeltaExpireInterval: time.Second})
	proxy := registrytest.NewProxy(t, s.EurekaAddr)
	registerAll(ctx, t, []*eurekatest.Server{s},
		eurekatest.Instance{App: "cart", ID: "cart-1", IPAddr: "10.2.0.1", Port: 8080},
		eurekatest.Instance{App: "cart", ID: "cart-2", IPAddr: "10.2.0.2", Port: 8080})
	eurekatest.RenewEvery(t, s, 10*time.Second, func() map[string][]string { return map[string][]string{"CART": {"cart-1", "cart-2"}} })
	waitListed(ctx, t, s, "CART", "cart-2", wire.StatusUp)
	r, rec := runAdapter(t, Config{
		URLs:         []string{"http://" + proxy.Addr() + "/eureka"},
		PollInterval: 300 * time.Millisecond,
		DeltaWindow:  time.Minute, // what the adapter is told; the server keeps 1 s
		Timeout:      2 * time.Second,
		Registerer:   prometheus.NewRegistry(),
	})
	rec.WaitFor(t, 20*time.Second, func(st map[model.ServiceKey]model.Service) bool {
		h, ok := healthOfInstance(st, "cart", "cart-2")
		return ok && h == model.Healthy
	})
	mismatchFull := func() float64 { return value(r.metrics.fullFetches.WithLabelValues(fullMismatch)) }
	if n := mismatchFull(); n != 0 {
		t.Fatalf("%v full fetches for a mismatch before any change", n)
	}
	if err := proxy.Break(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.SetStatus(ctx, "CART", "cart-2", wire.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	waitListed(ctx, t, s, "CART", "cart-2", wire.StatusOutOfService)
	// Out of the delta window: /apps/delta no longer lists the change.
	if _, err := s.WaitApps(ctx, "/apps/delta", func(a *eurekatest.Applications) bool { return a.Find("CART", "cart-2") == nil }); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 20*time.Second, func(st map[model.ServiceKey]model.Service) bool {
		h, ok := healthOfInstance(st, "cart", "cart-2")
		return ok && h == model.Draining
	})
	if n := mismatchFull(); n != 1 {
		t.Errorf("%v full fetches for a mismatch, want exactly 1", n)
	}
	// A few more polls: they reconcile, and fetch nothing in full.
	deltas := func() float64 {
		return value(r.metrics.requests.WithLabelValues(r.servers[0].name, "delta", resultOK))
	}
	base := deltas()
	deadline := time.Now().Add(20 * time.Second)
	for deltas() < base+5 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := mismatchFull(); n != 1 {
		t.Errorf("%v full fetches for a mismatch after %v more deltas, want still 1", n, deltas()-base)
	}
	if m := value(r.metrics.mismatches); m != 1 {
		t.Errorf("galleon_eureka_hashcode_mismatches_total = %v, want 1", m)
	}
}

// TestTLSAndBasicAuth reaches a real server through an HTTPS front that asks for basic auth
// and (in one case) a client certificate, as an ingress in front of Eureka would: credentials
// from the URL and from --eureka-auth-file, the server verified with --eureka-tls-ca.
func TestTLSAndBasicAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := eurekatest.Start(t, eurekatest.Options{})
	registerAll(ctx, t, []*eurekatest.Server{s}, eurekatest.Instance{App: "secure", ID: "secure-1", IPAddr: "10.3.0.1", Port: 8080})
	waitListed(ctx, t, s, "SECURE", "secure-1", wire.StatusUp)
	pki, err := testpki.Write(t.TempDir(), "eureka-client")
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse("http://" + s.EurekaAddr)
	toServer := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != "galleon" || p != "s3cret" {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		toServer.ServeHTTP(w, req)
	}))
	cert, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(caPEM)
	front.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: clients, ClientAuth: tls.VerifyClientCertIfGiven}
	front.StartTLS()
	t.Cleanup(front.Close)
	base := strings.Replace(front.URL, "https://", "https://galleon:s3cret@", 1) + "/eureka"
	authFile := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(authFile, []byte("galleon:s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongFile := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrongFile, []byte("galleon:wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"credentials in the URL", Config{URLs: []string{base}, TLSCAFile: pki.CA}},
		{"credentials in a file, client certificate", Config{URLs: []string{front.URL + "/eureka"}, AuthFile: authFile,
			TLSCAFile: pki.CA, TLSCertFile: pki.ClientCert, TLSKeyFile: pki.ClientKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.PollInterval = 200 * time.Millisecond
			_, rec := runAdapter(t, tc.cfg)
			rec.WaitFor(t, 20*time.Second, func(st map[model.ServiceKey]model.Service) bool {
				_, ok := healthOfInstance(st, "secure", "secure-1")
				return ok
			})
		})
	}
	t.Run("wrong password: unreachable, with the server's answer", func(t *testing.T) {
		_, rec := runAdapter(t, Config{URLs: []string{front.URL + "/eureka"}, AuthFile: wrongFile, TLSCAFile: pki.CA, PollInterval: 200 * time.Millisecond})
		rec.WaitForEvents(t, 20*time.Second, func(events []registrytest.Event) bool {
			for _, e := range events {
				if e.Op == registrytest.OpUnreachable && e.Err != nil && strings.Contains(e.Err.Error(), "401") {
					return true
				}
			}
			return false
		})
		if strings.Contains(rec.Dump(), "wrong") {
			t.Errorf("the password shows in what the adapter reported:\n%s", rec.Dump())
		}
	})
	t.Run("server not verified without the CA", func(t *testing.T) {
		_, rec := runAdapter(t, Config{URLs: []string{base}, PollInterval: 200 * time.Millisecond})
		rec.WaitForEvents(t, 20*time.Second, func(events []registrytest.Event) bool {
			for _, e := range events {
				if e.Op == registrytest.OpUnreachable && e.Err != nil && strings.Contains(e.Err.Error(), "certificate") {
					return true
				}
			}
			return false
		})
		if strings.Contains(rec.Dump(), "s3cret") {
			t.Errorf("the password shows in what the adapter reported:\n%s", rec.Dump())
		}
	})
}

// TestShortOutageResumesWithDelta: an outage shorter than the delta window ends with a delta
// that reconciles, not a full fetch: Unreachable(nil) with no Replace before it, and a change
// made during the outage (still in the window) served by that delta.
func TestShortOutageResumesWithDelta(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := eurekatest.Start(t, eurekatest.Options{})
	proxy := registrytest.NewProxy(t, s.EurekaAddr)
	registerAll(ctx, t, []*eurekatest.Server{s},
		eurekatest.Instance{App: "pay", ID: "pay-1", IPAddr: "10.4.0.1", Port: 8080},
		eurekatest.Instance{App: "pay", ID: "pay-2", IPAddr: "10.4.0.2", Port: 8080})
	eurekatest.RenewEvery(t, s, 10*time.Second, func() map[string][]string { return map[string][]string{"PAY": {"pay-1", "pay-2"}} })
	waitListed(ctx, t, s, "PAY", "pay-2", wire.StatusUp)
	r, rec := runAdapter(t, Config{
		URLs:         []string{"http://" + proxy.Addr() + "/eureka"},
		PollInterval: 200 * time.Millisecond,
		Timeout:      time.Second,
		Registerer:   prometheus.NewRegistry(),
	})
	rec.WaitFor(t, 20*time.Second, func(st map[model.ServiceKey]model.Service) bool {
		h, ok := healthOfInstance(st, "pay", "pay-2")
		return ok && h == model.Healthy
	})
	before := rec.Len()
	if err := proxy.Break(ctx); err != nil {
		t.Fatal(err)
	}
	rec.WaitForEvents(t, 20*time.Second, func(events []registrytest.Event) bool {
		return slices.ContainsFunc(events[before:], func(e registrytest.Event) bool { return e.Op == registrytest.OpUnreachable && e.Err != nil })
	})
	if err := s.SetStatus(ctx, "PAY", "pay-2", wire.StatusOutOfService); err != nil {
		t.Fatal(err)
	}
	waitListed(ctx, t, s, "PAY", "pay-2", wire.StatusOutOfService)
	if err := proxy.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	rec.WaitForEvents(t, 20*time.Second, func(events []registrytest.Event) bool {
		return slices.ContainsFunc(events[before:], func(e registrytest.Event) bool { return e.Op == registrytest.OpUnreachable && e.Err == nil })
	})
	h, _ := healthOfInstance(rec.State(), "pay", "pay-2")
	if h != model.Draining {
		t.Errorf("pay-2 is %v after the outage, want Draining (the change made during it)", h)
	}
	for _, e := range rec.Events()[before:] {
		if e.Op == registrytest.OpReplace || e.Op == registrytest.OpDelete {
			t.Errorf("%v: an outage inside the delta window needs no relisting", e)
		}
	}
	for _, why := range []string{fullOutage, fullMismatch} {
		if n := value(r.metrics.fullFetches.WithLabelValues(why)); n != 0 {
			t.Errorf("%v full fetches for reason %s, want 0", n, why)
		}
	}
}
