package loadgen

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/adapters/nacos"
	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/testing/daemontest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/registry"
)

// startNacosGenerate runs NacosGenerate against s in the background and returns once every
// instance is listed; stop ends it and returns its result. The generator is stopped when the
// test ends, before the server.
func startNacosGenerate(t *testing.T, s *nacostest.Server, cfg NacosGenerateConfig) (registered NacosGenerateStats, stop func() (NacosGenerateStats, error)) {
	t.Helper()
	cfg.Server = s.HTTPAddr
	regc := make(chan NacosGenerateStats, 1)
	cfg.Registered = func(st NacosGenerateStats) { regc <- st }
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		st  NacosGenerateStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := NacosGenerate(ctx, cfg)
		done <- result{st, err}
	}()
	var once *result
	stop = func() (NacosGenerateStats, error) {
		if once == nil {
			cancel()
			r := <-done
			once = &r
		}
		return once.st, once.err
	}
	t.Cleanup(func() { _, _ = stop() })
	select {
	case registered = <-regc:
	case r := <-done:
		once = &r
		t.Fatalf("NacosGenerate ended before registering: %v", r.err)
	case <-time.After(3 * time.Minute):
		t.Fatal("NacosGenerate registered nothing in 3 minutes")
	}
	return registered, stop
}

// TestNacosGenerate registers a registry in a real Nacos API server (Polaris), checks every
// instance as a client reads it, churns it (every change listed as made, each on another
// service), then stops: the server drops the instances with the generator's connection.
func TestNacosGenerate(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+nacostest.Version)
	s := nacostest.Start(t, nacostest.Options{})
	const services, instances = 12, 3
	reg, stop := startNacosGenerate(t, s, NacosGenerateConfig{Services: services, Instances: instances, Concurrency: 4, Churn: 20, ReportInterval: time.Second})
	if reg.Registered != (services+1)*instances || reg.Listed <= 0 || reg.RegisterTook <= 0 {
		t.Fatalf("registered: %+v, want %d instances", reg, (services+1)*instances)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := newNacosHTTP(s.HTTPAddr, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, names, err := h.Services(ctx, DefaultNacosNamespace, DefaultNacosGroup, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, NacosTargetService) || !slices.Contains(names, nacosServiceName(services-1)) {
		t.Fatalf("the service list %v lacks %s or %s", names, NacosTargetService, nacosServiceName(services-1))
	}
	for i := -1; i < services; i++ {
		ref := nacostest.Ref{Namespace: DefaultNacosNamespace, Group: DefaultNacosGroup, Service: NacosTargetService}
		addr := targetAddr
		if i >= 0 {
			ref.Service = nacosServiceName(i)
			addr = func(j int) string { return filegen.InstanceAddr(i, j) }
		}
		hosts, err := h.instances(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		var ips []string
		for _, in := range hosts {
			ips = append(ips, in.IP)
			if in.Port != nacosPort || !in.Healthy || !in.Enabled || in.Weight != 1 || in.Metadata["version"] != "v1" || in.Metadata["zone"] != "zone-a" {
				t.Errorf("%s lists %+v, want port 8080, healthy, enabled, weight 1, metadata version=v1 zone=zone-a", ref.Service, in)
			}
		}
		slices.Sort(ips)
		var want []string
		for j := range instances {
			want = append(want, addr(j))
		}
		slices.Sort(want)
		if !slices.Equal(ips, want) {
			t.Fatalf("%s lists %v, want %v", ref.Service, ips, want)
		}
	}

	// Churn: 20 changes a second, each a new "churn" value of one instance, one service after
	// another. Wait for change 30 to be listed, on the instance churned says it is on.
	g := &nacosGenerator{cfg: NacosGenerateConfig{Services: services, Instances: instances, ChurnKind: NacosChurnMetadata, Namespace: DefaultNacosNamespace, Group: DefaultNacosGroup}}
	i, in := g.churned(30)
	deadline := time.Now().Add(time.Minute)
	for {
		hosts, err := h.instances(ctx, g.ref(i))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, h := range hosts {
			if h.IP == in.IP && h.Metadata[nacosChurnKey] != "" {
				n, _ := strconv.Atoi(h.Metadata[nacosChurnKey])
				found = n >= 30
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("change 30 (%s %s) was never listed: %+v", g.ref(i).Service, in.IP, hosts)
		}
		time.Sleep(200 * time.Millisecond)
	}
	st, err := stop()
	if err != nil {
		t.Fatalf("NacosGenerate stopped with %v, want nil", err)
	}
	if st.Changes < 30 || st.ChangeFailures != 0 {
		t.Fatalf("stats %+v: want 30 changes or more, no failures", st)
	}
	t.Logf("%+v", st)
	// The connection is gone: so are its instances.
	deadline = time.Now().Add(30 * time.Second)
	for {
		hosts, err := h.instances(ctx, g.ref(0))
		if err == nil && len(hosts) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the generator stopped the server still lists %d instances of %s (%v)", len(hosts), g.ref(0).Service, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestNacosChanger: the run's own instance of the target is registered and listed, each change
// listed with its token, and dropped when the changer closes; a registry without the target
// fails with a hint.
func TestNacosChanger(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+nacostest.Version)
	s := nacostest.Start(t, nacostest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := newNacosChanger(ctx, s.HTTPAddr, "", DefaultNacosNamespace, DefaultNacosGroup, 30*time.Second); err == nil ||
		!strings.Contains(err.Error(), "galleon-load nacos-generate --nacos-server "+s.HTTPAddr) {
		t.Fatalf("a changer without a target: %v, want an error saying to run nacos-generate", err)
	}
	const instances = 2
	startNacosGenerate(t, s, NacosGenerateConfig{Services: 3, Instances: instances})
	ch, err := newNacosChanger(ctx, s.HTTPAddr, "", DefaultNacosNamespace, DefaultNacosGroup, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h, err := newNacosHTTP(s.HTTPAddr, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	target := nacostest.Ref{Namespace: DefaultNacosNamespace, Group: DefaultNacosGroup, Service: NacosTargetService}
	for i := 1; i <= 3; i++ {
		sent, tok, err := ch.Change(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if tok != ch.token(i) || sent.IsZero() {
			t.Fatalf("change %d: token %q at %v", i, tok, sent)
		}
		at, err := ch.listed(ctx, tok)
		if err != nil || at.Before(sent) {
			t.Fatalf("change %d listed at %v (sent %v): %v", i, at, sent, err)
		}
		hosts, err := h.instances(ctx, target)
		if err != nil || len(hosts) != instances+1 {
			t.Fatalf("after change %d the target lists %d instances (%v), want the generator's %d and the mover", i, len(hosts), err, instances)
		}
	}
	ch.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		hosts, err := h.instances(ctx, target)
		if err == nil && len(hosts) == instances {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the changer closed the target lists %d instances (%v), want the generator's %d", len(hosts), err, instances)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startGalleonNacos runs the daemon galleon-nacos runs, in process, on the Nacos server at
// server; it returns the gRPC and HTTP addresses.
func startGalleonNacos(t *testing.T, server string) (listen, httpAddr string) {
	t.Helper()
	return daemontest.Start(t, "galleon-nacos", "nacos", func(env daemon.Env) (registry.Registry, error) {
		return nacos.New(nacos.Config{Servers: []string{server}, Logger: env.Logger, Registerer: env.Registerer})
	}, time.Minute)
}

// TestRunNacosAgainstGalleonNacos drives RunNacos against the daemon galleon-nacos runs, on a
// real Nacos API server: every change is timed to the version that holds it, the last one is
// what the source serves, and the pushes and requests over the changes are reported.
//
// Without churn: a SotW source sends a slow sink only the latest version, so under churn a sink
// may never hold the exact version a change made (it holds a later one), which the run reports
// as a skipped version; that is the server doing its job, and the benchmark says so
// (docs/benchmarks.md). The churn's part is checked by TestNacosGenerate's churn.
func TestRunNacosAgainstGalleonNacos(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+nacostest.Version)
	s := nacostest.Start(t, nacostest.Options{})
	startNacosGenerate(t, s, NacosGenerateConfig{Services: 30, Instances: 3, Concurrency: 4})
	listen, httpAddr := startGalleonNacos(t, s.HTTPAddr)
	for _, protocol := range []string{"sotw", "delta"} {
		rep, err := RunNacos(context.Background(), NacosRunConfig{
			RunConfig: RunConfig{
				Addr: listen, Sinks: 3, Protocol: protocol, TypeURL: "networking.istio.io/v1/ServiceEntry",
				Changes: 4, Interval: time.Millisecond, MetricsURL: "http://" + httpAddr + "/metrics", Timeout: 30 * time.Second,
			},
			Server: s.HTTPAddr, IntervalJitter: time.Second,
		})
		if err != nil {
			t.Fatalf("%s: %v", protocol, err)
		}
		if rep.Changes != 4 || len(rep.Latencies) != 4 || len(rep.Listed) != 4 || len(rep.Served) != 4 || rep.ChangeBytes == 0 || rep.SourceRSS == 0 ||
			rep.Registry != "nacos" || rep.Pushes == nil || rep.Pushes["applied"] < 4 {
			t.Fatalf("%s report incomplete: %+v", protocol, rep)
		}
		if !slices.IsSorted(rep.Latencies) || rep.Latencies[0] <= 0 || rep.Listed[0] <= 0 {
			t.Fatalf("%s: latencies %v, listed %v", protocol, rep.Latencies, rep.Listed)
		}
		if rep.Updates < rep.Changes {
			t.Errorf("%s: %d updates for %d changes", protocol, rep.Updates, rep.Changes)
		}
		out := rep.String()
		for _, want := range []string{"registry change -> every sink (4 changes)", "registry change -> listed by the server", "listed by the server -> every sink", "nacos pushes over the changes: "} {
			if !strings.Contains(out, want) {
				t.Fatalf("the report lacks %q:\n%s", want, out)
			}
		}
		t.Logf("%s: %s", protocol, out)
	}
	// Flags that do not go together.
	for _, cfg := range []NacosRunConfig{
		{RunConfig: RunConfig{Addr: listen, Sinks: 1, Protocol: "sotw", TypeURL: "networking.istio.io/v1/ServiceEntry", Dir: "/tmp"}, Server: s.HTTPAddr},
		{RunConfig: RunConfig{Addr: listen, Sinks: 1, Protocol: "sotw", TypeURL: "networking.istio.io/v1/WorkloadEntry"}, Server: s.HTTPAddr},
		{RunConfig: RunConfig{Addr: listen, Sinks: 0, Protocol: "sotw", TypeURL: "networking.istio.io/v1/ServiceEntry"}, Server: s.HTTPAddr},
	} {
		if _, err := RunNacos(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %v, want an error naming a flag", cfg, err)
		}
	}
}
