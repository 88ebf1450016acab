package consul_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/consul"
	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/internal/testing/testpki"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// testConfig is the adapter's configuration in tests: the defaults, with
// retries and sweeps quick enough for a test to watch them.
func testConfig(a *consultest.Agent) consul.Config {
	return consul.Config{
		Address:       a.HTTPAddr,
		Token:         a.Token,
		Wait:          10 * time.Second,
		RetryMin:      50 * time.Millisecond,
		RetryMax:      500 * time.Millisecond,
		SweepInterval: 200 * time.Millisecond,
		Logger:        testLogger(),
	}
}

// TestConformance runs the adapter SDK's conformance kit against a real
// Consul agent: the driver registers the kit's services in the catalog,
// registers malformed instances, and stops and restarts the agent.
func TestConformance(t *testing.T) {
	conformance(t, consultest.Options{}, testConfig)
}

// TestConformanceServiceWatches runs the kit with every service followed
// by a watch of its own, over HTTP/2 on the agent's HTTPS listener.
func TestConformanceServiceWatches(t *testing.T) {
	pki, err := testpki.Write(t.TempDir(), "galleon")
	if err != nil {
		t.Fatal(err)
	}
	conformance(t, consultest.Options{HTTPSCert: pki.ServerCert, HTTPSKey: pki.ServerKey}, func(a *consultest.Agent) consul.Config {
		return watchConfig(a, pki.CA, 1000)
	})
}

// watchConfig is testConfig over the agent's HTTPS listener (HTTP/2) with
// up to n services each followed by a watch of its own, and no sweep
// before an hour has passed: a change a watch misses is not found.
func watchConfig(a *consultest.Agent, ca string, n int) consul.Config {
	cfg := testConfig(a)
	cfg.Address = "https://" + a.HTTPSAddr
	cfg.CAFile, cfg.TLSServerName = ca, "localhost"
	cfg.ServiceWatches = n
	cfg.SweepInterval, cfg.Resync = time.Hour, time.Hour
	return cfg
}

func conformance(t *testing.T, opts consultest.Options, config func(*consultest.Agent) consul.Config) {
	a := consultest.Start(t, opts)
	d := consultest.NewCatalogDriver(t, a, "galleon-rt")
	registrytest.TestRegistry(t,
		func(t *testing.T) registry.Registry {
			reg, err := consul.New(config(a))
			if err != nil {
				t.Fatal(err)
			}
			return reg
		},
		d,
		registrytest.WithNamespace(consul.DefaultNamespace),
		registrytest.WithNormalize(d.Normalize),
		registrytest.WithTimeout(20*time.Second),
	)
}

// TestConformanceTwoDatacenters runs the kit against the adapter following two datacenters
// joined over WAN, the kit's services in the first (the agent the adapter talks to): the
// second's servers going down is a Degraded part (nothing the first lists is lost, its changes
// go on being reported, and the second's return is Degraded(dc2, nil)); the first going down is
// the outage.
func TestConformanceTwoDatacenters(t *testing.T) {
	dc1 := consultest.Start(t, consultest.Options{Datacenter: "dc1"})
	dc2 := consultest.Start(t, consultest.Options{Datacenter: "dc2", JoinWAN: dc1})
	d := twoDatacenters{CatalogDriver: consultest.NewCatalogDriver(t, dc1, "galleon-rt"), t: t, dc2: dc2}
	registrytest.TestRegistry(t,
		func(t *testing.T) registry.Registry {
			cfg := testConfig(dc1)
			cfg.Datacenters = []string{"dc1", "dc2"}
			reg, err := consul.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return reg
		},
		d,
		registrytest.WithNamespace(consul.DefaultNamespace),
		registrytest.WithNormalize(d.Normalize),
		registrytest.WithTimeout(30*time.Second),
	)
}

// twoDatacenters is consultest's driver for the first of two datacenters; the second is the
// part it breaks.
type twoDatacenters struct {
	*consultest.CatalogDriver
	t   testing.TB
	dc2 *consultest.Agent
}

var _ registrytest.PartBreaker = twoDatacenters{}

// BreakPart stops the second datacenter's server.
func (d twoDatacenters) BreakPart(context.Context) (string, error) {
	d.dc2.Stop(d.t)
	return "dc2", nil
}

// RestorePart restarts it, with its catalog, on the same ports (it joins the WAN again).
func (d twoDatacenters) RestorePart(context.Context) error {
	d.dc2.Restart(d.t)
	return nil
}

// testLogger discards the adapter's logs unless GALLEON_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("GALLEON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
