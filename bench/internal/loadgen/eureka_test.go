package loadgen

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka"
	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/testing/daemontest"
	"github.com/galleon-mesh/galleon/registry"
)

// startEurekaGenerate runs EurekaGenerate against s in the background and
// returns once every instance is listed; stop ends it and returns its
// result. The generator is stopped when the test ends, before the server.
func startEurekaGenerate(t *testing.T, s *eurekatest.Server, cfg EurekaGenerateConfig) (registered EurekaGenerateStats, stop func() (EurekaGenerateStats, error)) {
	t.Helper()
	cfg.URL = s.BaseURL()
	regc := make(chan EurekaGenerateStats, 1)
	cfg.Registered = func(st EurekaGenerateStats) { regc <- st }
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		st  EurekaGenerateStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := EurekaGenerate(ctx, cfg)
		done <- result{st, err}
	}()
	var once *result
	stop = func() (EurekaGenerateStats, error) {
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
		t.Fatalf("EurekaGenerate ended before registering: %v", r.err)
	case <-time.After(3 * time.Minute):
		t.Fatal("EurekaGenerate registered nothing in 3 minutes")
	}
	return registered, stop
}

// listedLoad returns the generated and target instances a listing holds,
// by APP/id.
func listedLoad(a *eurekatest.Applications) map[string]eurekatest.InstanceInfo {
	out := map[string]eurekatest.InstanceInfo{}
	for _, app := range a.Application {
		if !strings.HasPrefix(app.Name, "LOAD-") {
			continue
		}
		for _, in := range app.Instance {
			out[app.Name+"/"+in.InstanceID] = in
		}
	}
	return out
}

// TestEurekaGenerate registers a registry in a real Eureka API server
// (Polaris), checks every instance as a client would read it, then churns
// it: each change is one MODIFIED entry of /apps/delta, renewals none.
func TestEurekaGenerate(t *testing.T) {
	// A delta window of 3 s: the registrations' ADDED entries leave it
	// soon, and what stays is the churn's.
	s := eurekatest.Start(t, eurekatest.Options{DeltaExpireInterval: 3 * time.Second})
	const apps, instances = 30, 3
	reg, stop := startEurekaGenerate(t, s, EurekaGenerateConfig{
		Apps: apps, Instances: instances, Concurrency: 8, RenewInterval: time.Second,
		ChurnPercent: 10, ChurnInterval: time.Second, Progress: io.Discard,
	})
	total := (apps + 1) * instances
	if reg.Registered != total || reg.ChurnPerInterval != 9 || reg.Listed <= 0 || reg.ListingBytes == 0 {
		t.Fatalf("registered: %+v, want %d instances and 9 changes per interval", reg, total)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := s.Apps(ctx, "/apps")
	if err != nil {
		t.Fatal(err)
	}
	got := listedLoad(a)
	if len(got) != total {
		t.Fatalf("the server lists %d generated instances, want %d", len(got), total)
	}
	for i := -1; i < apps; i++ {
		app, addr := TargetApp, targetAddr
		if i >= 0 {
			app = eurekaApp(i)
			addr = func(j int) string { return filegen.InstanceAddr(i, j) }
		}
		for j := range instances {
			id := eurekaInstanceID(app, j)
			in, ok := got[app+"/"+id]
			if !ok {
				t.Fatalf("%s/%s is not listed", app, id)
			}
			if in.IPAddr != addr(j) || in.HostName != addr(j) || in.Status != "UP" || !in.Port.Enabled || in.Port.Port != 8080 ||
				in.SecurePort.Enabled || in.VIPAddress != strings.ToLower(app) || in.Metadata["version"] != "v1" || in.Metadata["zone"] != "zone-a" {
				t.Errorf("%s/%s listed as %+v, want UP at %s:8080 with vip %s and metadata version=v1, zone=zone-a", app, id, in, addr(j), strings.ToLower(app))
			}
		}
	}

	// Churn: 9 instances a second, each registered again with a new
	// "churn" value. Once the registrations' entries have left the 3 s
	// window, the delta holds the churn's: MODIFIED, one per change (no
	// two changes of an instance fall in one window here), and nothing for
	// the renewals, which run every second for all 93.
	deadline := time.Now().Add(time.Minute)
	for {
		d, err := s.Apps(ctx, "/apps/delta")
		if err != nil {
			t.Fatal(err)
		}
		entries, modified, bad := 0, 0, []string{}
		for _, app := range d.Application {
			for _, in := range app.Instance {
				entries++
				n, err := strconv.Atoi(in.Metadata[eurekaChurnKey])
				switch {
				case in.ActionType == "MODIFIED" && err == nil && n > 0:
					modified++
					// It is the instance change n made, listed as it made it.
					if want := (&eurekaGenerator{cfg: EurekaGenerateConfig{Apps: apps, Instances: instances}}).churned(int64(n)); want.id != in.InstanceID || want.ip != in.IPAddr {
						bad = append(bad, fmt.Sprintf("change %d listed on %s at %s, want %s at %s", n, in.InstanceID, in.IPAddr, want.id, want.ip))
					}
				case in.ActionType == "ADDED" && err != nil:
					// A registration not yet out of the window.
				default:
					bad = append(bad, fmt.Sprintf("%s/%s %s churn=%q", app.Name, in.InstanceID, in.ActionType, in.Metadata[eurekaChurnKey]))
				}
			}
		}
		if len(bad) > 0 {
			t.Fatalf("unexpected delta entries: %v", bad)
		}
		// 3 s of churn at 9 a second, give or take the server's 1 s
		// rebuild.
		if entries == modified && modified >= 18 && modified <= 45 {
			t.Logf("the delta holds %d MODIFIED entries, the churn of its 3 s window", modified)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delta never held the churn alone: %d entries, %d MODIFIED by churn", entries, modified)
		}
		time.Sleep(500 * time.Millisecond)
	}
	st, err := stop()
	if err != nil {
		t.Fatalf("EurekaGenerate stopped with %v, want nil", err)
	}
	if st.Renewals < int64(total) || st.RenewFailures != 0 || st.Changes < 18 || st.ChangeFailures != 0 || st.Reregistered != 0 {
		t.Fatalf("stats %+v: want at least a round of renewals and 18 changes, no failures", st)
	}
	t.Logf("%+v", st)

	// Configuration errors name the flag.
	for _, cfg := range []EurekaGenerateConfig{
		{URL: s.BaseURL(), Apps: 0, Instances: 1},
		{URL: s.BaseURL(), Apps: 1, Instances: 251},
		{URL: s.BaseURL(), Apps: 1, Instances: 1, RenewInterval: 2 * time.Minute},
		{URL: s.BaseURL(), Apps: 1, Instances: 1, RenewInterval: 30 * time.Second, LeaseDuration: 30 * time.Second},
		{URL: s.BaseURL(), Apps: 1, Instances: 1, ChurnPercent: 101},
		{URL: "127.0.0.1:8761", Apps: 1, Instances: 1},
	} {
		if _, err := EurekaGenerate(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %v, want an error naming a flag", cfg, err)
		}
	}
}

// TestEurekaChanger makes changes to the target: after each the server
// lists its first instance at the address the change returned, and nothing
// else moved; a second changer (a second run) moves the same one on.
func TestEurekaChanger(t *testing.T) {
	s := eurekatest.Start(t, eurekatest.Options{})
	const instances = 3
	startEurekaGenerate(t, s, EurekaGenerateConfig{Apps: 4, Instances: instances, Concurrency: 4, RenewInterval: 5 * time.Second, LeaseDuration: 2 * time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before, err := s.Apps(ctx, "/apps")
	if err != nil {
		t.Fatal(err)
	}
	first := eurekaInstanceID(TargetApp, 0)
	check := func(changes int) {
		t.Helper()
		a, err := s.WaitApps(ctx, "/apps", func(a *eurekatest.Applications) bool {
			in := a.Find(TargetApp, first)
			return in != nil && in.IPAddr == filegen.MoverAddr(changes)
		})
		if err != nil {
			t.Fatalf("after %d changes: %v", changes, err)
		}
		got, want := listedLoad(a), listedLoad(before)
		if len(got) != len(want) {
			t.Fatalf("after %d changes %d instances are listed, want %d", changes, len(got), len(want))
		}
		for k, in := range want {
			if k == TargetApp+"/"+first {
				continue
			}
			if got[k].IPAddr != in.IPAddr {
				t.Errorf("after %d changes %s is at %s, was at %s", changes, k, got[k].IPAddr, in.IPAddr)
			}
		}
	}
	ch, err := newEurekaChanger(ctx, s.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	// A change keeps the lease the instance was registered with.
	if ch.lease != (eurekaLease{Renewal: 40, Duration: 120}) {
		t.Errorf("the changer registers leases of %+v, want the generator's 40 s / 120 s", ch.lease)
	}
	for i := 1; i <= 3; i++ {
		sent, addr, err := ch.Change(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		if addr != filegen.MoverAddr(i) || sent.IsZero() || time.Since(sent) > time.Minute {
			t.Fatalf("change %d returned %s at %v, want %s now", i, addr, sent, filegen.MoverAddr(i))
		}
		at, err := ch.listed(ctx, addr)
		if err != nil || at.Before(sent) {
			t.Fatalf("change %d listed at %v (sent %v): %v", i, at, sent, err)
		}
		check(i)
	}
	ch.Close()

	ch, err = newEurekaChanger(ctx, s.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if ch.id != first || ch.v0 != 3 {
		t.Fatalf("a second changer moves %s from variant %d, want %s from 3", ch.id, ch.v0, first)
	}
	if _, addr, err := ch.Change(ctx, 1); err != nil || addr != filegen.MoverAddr(4) {
		t.Fatalf("a second run's first change moved to %s (%v), want %s: the moved instance moves on", addr, err, filegen.MoverAddr(4))
	}
	check(4)

	// No target: the error says how to register one.
	empty := eurekatest.Start(t, eurekatest.Options{})
	if _, err := newEurekaChanger(ctx, empty.BaseURL()); err == nil || !strings.Contains(err.Error(), "galleon-load eureka-generate --eureka-url "+empty.BaseURL()) {
		t.Fatalf("a changer without a target: %v, want an error saying to run eureka-generate", err)
	}
}

// startGalleonEureka runs the daemon galleon-eureka runs, in process, on
// the Eureka server at base; it returns the gRPC and HTTP addresses.
func startGalleonEureka(t *testing.T, base string, poll time.Duration) (listen, httpAddr string) {
	t.Helper()
	return daemontest.Start(t, "galleon-eureka", "eureka", func(env daemon.Env) (registry.Registry, error) {
		return eureka.New(eureka.Config{URLs: []string{base}, PollInterval: poll, Logger: env.Logger, Registerer: env.Registerer})
	}, 30*time.Second)
}

// TestRunEurekaAgainstGalleonEureka drives RunEureka against the daemon
// galleon-eureka runs, on a real Eureka API server whose registry churns
// meanwhile: every change is timed to the version that holds it (not to
// the churn's), and the last one is what the source serves.
func TestRunEurekaAgainstGalleonEureka(t *testing.T) {
	s := eurekatest.Start(t, eurekatest.Options{})
	startEurekaGenerate(t, s, EurekaGenerateConfig{
		Apps: 40, Instances: 3, Concurrency: 8, RenewInterval: 5 * time.Second,
		ChurnPercent: 5, ChurnInterval: 500 * time.Millisecond,
	})
	const poll = 500 * time.Millisecond
	listen, httpAddr := startGalleonEureka(t, s.BaseURL(), poll)
	for _, protocol := range []string{"sotw", "delta"} {
		rep, err := RunEureka(context.Background(), EurekaRunConfig{
			RunConfig: RunConfig{
				Addr: listen, Sinks: 3, Protocol: protocol, TypeURL: "networking.istio.io/v1/ServiceEntry",
				Changes: 4, Interval: time.Millisecond, MetricsURL: "http://" + httpAddr + "/metrics", Timeout: 30 * time.Second,
			},
			URL: s.BaseURL(), IntervalJitter: poll,
		})
		if err != nil {
			t.Fatalf("%s: %v", protocol, err)
		}
		if rep.Changes != 4 || len(rep.Latencies) != 4 || len(rep.Listed) != 4 || rep.ChangeBytes == 0 || rep.SourceRSS == 0 ||
			rep.Registry != "eureka" || rep.Polls == nil || rep.Polls["delta"] < 1 {
			t.Fatalf("%s report incomplete: %+v", protocol, rep)
		}
		if !slices.IsSorted(rep.Latencies) || rep.Latencies[0] <= 0 || rep.Listed[0] <= 0 {
			t.Fatalf("%s: latencies %v, listed %v", protocol, rep.Latencies, rep.Listed)
		}
		// At least one update per change; the churn may ride along (Polaris
		// publishes what was written once a second) or come on its own.
		if rep.Updates < rep.Changes {
			t.Errorf("%s: %d updates for %d changes", protocol, rep.Updates, rep.Changes)
		}
		out := rep.String()
		for _, want := range []string{"registry change -> every sink (4 changes)", "registry change -> listed by the server", "eureka requests over the changes: "} {
			if !strings.Contains(out, want) {
				t.Fatalf("the report lacks %q:\n%s", want, out)
			}
		}
		t.Logf("%s: %s", protocol, out)
	}
	// Flags that do not go together.
	for _, cfg := range []EurekaRunConfig{
		{RunConfig: RunConfig{Addr: listen, Sinks: 1, Protocol: "sotw", TypeURL: "networking.istio.io/v1/ServiceEntry", Dir: "/tmp"}, URL: s.BaseURL()},
		{RunConfig: RunConfig{Addr: listen, Sinks: 1, Protocol: "sotw", TypeURL: "networking.istio.io/v1/WorkloadEntry"}, URL: s.BaseURL()},
	} {
		if _, err := RunEureka(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %v, want an error naming a flag", cfg, err)
		}
	}
}
