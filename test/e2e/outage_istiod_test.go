package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/test/istiod"
)

// outage is how long the registry is away in TestRegistryOutageToIstiod: 60 s by default
// ($GALLEON_E2E_OUTAGE shortens it for a quick local run).
func outage(t *testing.T) time.Duration {
	t.Helper()
	if s := os.Getenv("GALLEON_E2E_OUTAGE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("GALLEON_E2E_OUTAGE=%q: want a positive duration such as 60s", s)
		}
		return d
	}
	return time.Minute
}

// holdsDuring checks istiod every 500 ms for d: each look must find what check wants. It
// returns how many looks there were.
func holdsDuring(t *testing.T, ctx context.Context, ist *istiod.Istiod, d time.Duration, what string, check func(map[string]serviceEntry) string) int {
	t.Helper()
	looks := 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		ses, err := serviceEntries(ctx, ist)
		if err != nil {
			t.Fatalf("%s: reading istiod: %v", what, err)
		}
		if msg := check(ses); msg != "" {
			t.Fatalf("%s, %d looks into the outage: istiod holds less than the last good state: %s", what, looks, msg)
		}
		looks++
	}
	return looks
}

// TestRegistryOutageToIstiod takes the registry away for a minute, file and Consul, with a real
// istiod reading each adapter: istiod must hold every endpoint the whole time, and once the
// registry is back (with a change made meanwhile) converge to it. The time to converge is logged
// (docs/reliability.md), and only bounded loosely here: figures are not asserted by tests.
func TestRegistryOutageToIstiod(t *testing.T) {
	istiod.ForEachRelease(t, func(t *testing.T, rel istiod.Release) {
		// Every release's outages run at once (make e2e passes -parallel 4): they spend their
		// minute waiting, and one release after the other they were half of the package's time.
		t.Parallel()
		t.Run("file", func(t *testing.T) { t.Parallel(); testFileOutage(t, rel) })
		t.Run("consul", func(t *testing.T) { t.Parallel(); testConsulOutage(t, rel) })
	})
}

func endpointsAre(key string, want ...string) func(map[string]serviceEntry) string {
	return func(ses map[string]serviceEntry) string {
		se, ok := ses[key]
		if !ok {
			return key + " is not held"
		}
		if got := se.endpoints(); !slices.Equal(got, want) {
			return fmt.Sprintf("%s endpoints %v, want %v", key, got, want)
		}
		return ""
	}
}

func both(checks ...func(map[string]serviceEntry) string) func(map[string]serviceEntry) string {
	return func(ses map[string]serviceEntry) string {
		for _, c := range checks {
			if m := c(ses); m != "" {
				return m
			}
		}
		return ""
	}
}

func testFileOutage(t *testing.T, rel istiod.Release) {
	bin := galleonBinary(t, "galleon-file")
	ctx, cancel := context.WithTimeout(context.Background(), outage(t)+3*time.Minute)
	defer cancel()
	root := t.TempDir()
	dir := filepath.Join(root, "registry")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	svc := func(name string, addrs ...string) fileService {
		s := fileService{Name: name, Namespace: "outage", Hosts: []string{name + ".outage.internal"},
			Ports: []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}}}
		for i, a := range addrs {
			s.Instances = append(s.Instances, fileInstance{ID: fmt.Sprintf("%s-%d", name, i), Address: a})
		}
		return s
	}
	writeRegistryFile(t, dir, "a.yaml", fileRegistry{Services: []fileService{svc("web", "10.7.0.1", "10.7.0.2"), svc("api", "10.7.1.1")}})
	g := startGalleon(t, bin, "--file-dir", dir, "--debounce-quiet", "20ms")
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: []string{g.Addr}})
	all := both(endpointsAre("outage/web", "10.7.0.1", "10.7.0.2"), endpointsAre("outage/api", "10.7.1.1"))
	waitForServiceEntries(t, ctx, ist, "initial state", all)

	// The directory goes away; meanwhile web gets an instance.
	away := dir + ".away"
	if err := os.Rename(dir, away); err != nil {
		t.Fatal(err)
	}
	writeRegistryFile(t, away, "a.yaml", fileRegistry{Services: []fileService{svc("web", "10.7.0.1", "10.7.0.2", "10.7.0.3"), svc("api", "10.7.1.1")}})
	looks := holdsDuring(t, ctx, ist, outage(t), "file registry directory away", all)

	back := time.Now()
	if err := os.Rename(away, dir); err != nil {
		t.Fatal(err)
	}
	waitForServiceEntries(t, ctx, ist, "after the return", both(endpointsAre("outage/web", "10.7.0.1", "10.7.0.2", "10.7.0.3"), endpointsAre("outage/api", "10.7.1.1")))
	took := time.Since(back)
	t.Logf("file outage of %v: istiod held every endpoint in %d looks; converged %v after the return", outage(t), looks, took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("istiod converged %v after the registry returned", took)
	}
}

func testConsulOutage(t *testing.T, rel istiod.Release) {
	bin := galleonBinary(t, "galleon-consul")
	agent := consultest.Start(t, consultest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), outage(t)+3*time.Minute)
	defer cancel()
	web := func(i int) consultest.Instance {
		return consultest.Instance{Node: fmt.Sprintf("node-%d", i), NodeAddress: fmt.Sprintf("10.8.0.%d", i),
			ID: fmt.Sprintf("web-%d", i), Service: "web", Port: 8080, Meta: map[string]string{"protocol": "http"}, Check: "passing"}
	}
	if err := consultest.Register(ctx, agent, []consultest.Instance{web(1), web(2)}); err != nil {
		t.Fatal(err)
	}
	g := startGalleon(t, bin, "--consul-address", agent.HTTPAddr, "--debounce-quiet", "20ms")
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: []string{g.Addr}})
	held := endpointsAre("consul/web", "10.8.0.1", "10.8.0.2")
	waitForServiceEntries(t, ctx, ist, "initial state", held)

	agent.Stop(t)
	looks := holdsDuring(t, ctx, ist, outage(t), "Consul agent stopped", held)
	if !g.LogContains("unreachable") {
		t.Error("galleon-consul did not report the agent unreachable")
	}

	agent.Restart(t) // same data directory: the catalog is kept
	back := time.Now()
	if err := consultest.Register(ctx, agent, []consultest.Instance{web(3)}); err != nil {
		t.Fatal(err)
	}
	waitForServiceEntries(t, ctx, ist, "after the return", endpointsAre("consul/web", "10.8.0.1", "10.8.0.2", "10.8.0.3"))
	took := time.Since(back)
	t.Logf("Consul outage of %v: istiod held every endpoint in %d looks; converged %v after the agent was back", outage(t), looks, took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("istiod converged %v after the agent returned", took)
	}
}
