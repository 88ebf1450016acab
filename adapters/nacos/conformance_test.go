package nacos

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// kitLogger is the adapter's logger in the kit: silent unless GALLEON_TEST_LOG is set.
func kitLogger() *slog.Logger {
	if os.Getenv("GALLEON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// TestConformance runs the SDK's conformance kit against a real Nacos API server (Polaris's
// service-nacos, nacostest) with nacostest's Driver: it registers each instance over the Nacos
// HTTP v1 API (health checks off, so that an instance keeps the health the kit gives it),
// corrupts a service with an instance whose ip is no address, and breaks or stalls the server
// with a proxy before each of its ports (HTTP at Q, gRPC at Q+1000). The adapter reads over
// gRPC (API auto).
func TestConformance(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+nacostest.Version)
	s := nacostest.Start(t, nacostest.Options{NoHealthCheck: true})
	d := nacostest.NewDriver(t, s)
	runKit(t, d, d.Normalize, APIAuto, d.HTTP)
}

// TestConformanceHTTP is TestConformance with the adapter on the HTTP v1 API (polling, and UDP
// pushes when the server sends them).
func TestConformanceHTTP(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+nacostest.Version)
	toolcache.RequireFullTier(t, "the conformance kit over Nacos's HTTP API")
	s := nacostest.Start(t, nacostest.Options{NoHealthCheck: true})
	d := nacostest.NewDriver(t, s)
	runKit(t, d, d.Normalize, APIHTTP, d.HTTP)
}

// runKit runs the conformance kit against adapters reading the servers behind proxies (their
// HTTP proxies; the gRPC ones are at +1000), listing often enough for the kit's timeouts.
func runKit(t *testing.T, d registrytest.Driver, normalize func(model.Service) model.Service, api string, proxies ...*registrytest.Proxy) {
	t.Helper()
	var servers []string
	for _, p := range proxies {
		servers = append(servers, p.Addr())
	}
	cfg := Config{
		Servers:           servers,
		API:               api,
		DiscoveryInterval: 200 * time.Millisecond,
		Timeout:           2 * time.Second,
		Naming:            Naming{Namespace: registrytest.DefaultNamespace},
		Logger:            kitLogger(),
	}
	registrytest.TestRegistry(t,
		func(t *testing.T) registry.Registry {
			reg, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return reg
		},
		d,
		registrytest.WithOutage(3*time.Second),
		registrytest.WithTimeout(30*time.Second),
		registrytest.WithNormalize(normalize),
	)
}

// TestConformanceTwoServers runs the kit against the adapter reading two polaris-servers
// written alike (as the members of a Nacos cluster agree): the first going down is a Degraded
// part (the adapter fails over to the second and back, and serves all it listed meanwhile);
// both going down, or both going silent, is the outage.
func TestConformanceTwoServers(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+nacostest.Version)
	a := nacostest.Start(t, nacostest.Options{NoHealthCheck: true})
	b := nacostest.Start(t, nacostest.Options{NoHealthCheck: true})
	d := twoServers{first: nacostest.NewDriver(t, a), second: nacostest.NewDriver(t, b)}
	runKit(t, d, d.first.Normalize, APIAuto, d.first.HTTP, d.second.HTTP)
}

// twoServers writes to two servers alike: Break and Stall take both down, BreakPart the first.
type twoServers struct{ first, second *nacostest.Driver }

var (
	_ registrytest.Corrupter   = twoServers{}
	_ registrytest.Staller     = twoServers{}
	_ registrytest.Breaker     = twoServers{}
	_ registrytest.PartBreaker = twoServers{}
	_ registrytest.EventLoser  = twoServers{}
)

func (d twoServers) Put(ctx context.Context, svc model.Service) error {
	return errors.Join(d.first.Put(ctx, svc), d.second.Put(ctx, svc))
}

func (d twoServers) Remove(ctx context.Context, key model.ServiceKey) error {
	return errors.Join(d.first.Remove(ctx, key), d.second.Remove(ctx, key))
}

func (d twoServers) Corrupt(ctx context.Context, key model.ServiceKey) (string, error) {
	rec, err := d.first.Corrupt(ctx, key)
	if err != nil {
		return "", err
	}
	_, err = d.second.Corrupt(ctx, key)
	return rec, err
}

func (d twoServers) Break(ctx context.Context) error {
	return errors.Join(d.first.Break(ctx), d.second.Break(ctx))
}

func (d twoServers) Stall(ctx context.Context) error {
	return errors.Join(d.first.Stall(ctx), d.second.Stall(ctx))
}

func (d twoServers) Restore(ctx context.Context) error {
	return errors.Join(d.first.Restore(ctx), d.second.Restore(ctx))
}

// LoseEvents cuts the adapter off both servers while change writes to them.
func (d twoServers) LoseEvents(ctx context.Context, change func(ctx context.Context) error) error {
	if err := d.Break(ctx); err != nil {
		return err
	}
	return errors.Join(change(ctx), d.Restore(ctx))
}

// BreakPart takes the first server down (both its ports); the adapter names a server as it was
// given, host:port of its HTTP API.
func (d twoServers) BreakPart(ctx context.Context) (string, error) {
	return d.first.HTTP.Addr(), d.first.Break(ctx)
}

func (d twoServers) RestorePart(ctx context.Context) error { return d.first.Restore(ctx) }
