package eureka

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

func testLogger() *slog.Logger {
	if os.Getenv("GALLEON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// TestConformance runs the SDK's conformance kit against a real Eureka API server (Polaris,
// eurekatest) with eurekatest's Driver: it registers each instance through Eureka's REST API and
// renews them while the test runs, corrupts a service with an instance whose address is no
// address (record APP/id), and breaks the registry with a TCP proxy between the adapter and the
// server.
// An outage ends with a full listing (a Replace) when it outlasts the delta window, and with a
// delta that reconciles otherwise: the window is set shorter than the kit's outage, so the kit
// sees the relisting it checks for.
func TestConformance(t *testing.T) {
	s := eurekatest.Start(t, eurekatest.Options{})
	proxy := registrytest.NewProxy(t, s.EurekaAddr)
	d := eurekatest.NewDriver(t, s, proxy)
	runKit(t, d, d.Normalize, proxy)
}

// runKit runs the conformance kit against adapters reading the servers behind proxies, with
// polls and a delta window short enough for the kit's outage (3 s) to end in a relisting.
func runKit(t *testing.T, d registrytest.Driver, normalize func(model.Service) model.Service, proxies ...*registrytest.Proxy) {
	t.Helper()
	var urls []string
	for _, p := range proxies {
		urls = append(urls, "http://"+p.Addr()+"/eureka")
	}
	cfg := Config{
		URLs:         urls,
		PollInterval: 200 * time.Millisecond,
		DeltaWindow:  time.Second,
		Timeout:      2 * time.Second,
		Namespace:    registrytest.DefaultNamespace,
		Logger:       testLogger(),
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

// TestConformanceTwoServers runs the kit against the adapter reading two servers, here two
// proxies to one Polaris (the same registry seen through two addresses, as replicas that agree):
// the first going down is a Degraded part (the adapter fails over to the second and back, and
// serves all it listed meanwhile); both going down, or both going silent, is the outage.
func TestConformanceTwoServers(t *testing.T) {
	s := eurekatest.Start(t, eurekatest.Options{})
	primary, standby := registrytest.NewProxy(t, s.EurekaAddr), registrytest.NewProxy(t, s.EurekaAddr)
	d := twoServers{Driver: eurekatest.NewDriver(t, s, primary), standby: standby}
	runKit(t, d, d.Normalize, primary, standby)
}

// twoServers is eurekatest's Driver for an adapter that reads two servers: Break and Stall take
// both down, BreakPart the first (the one read), so that the adapter fails over.
type twoServers struct {
	*eurekatest.Driver // its Proxy is the first server
	standby            *registrytest.Proxy
}

var _ registrytest.PartBreaker = twoServers{}

func (d twoServers) Break(ctx context.Context) error {
	return errors.Join(d.Driver.Break(ctx), d.standby.Break(ctx))
}

func (d twoServers) Stall(ctx context.Context) error {
	return errors.Join(d.Driver.Stall(ctx), d.standby.Silence(ctx))
}

func (d twoServers) Restore(ctx context.Context) error {
	return errors.Join(d.Driver.Restore(ctx), d.standby.Restore(ctx))
}

// BreakPart takes the first server down; the adapter names it by its address.
func (d twoServers) BreakPart(ctx context.Context) (string, error) {
	return "", d.Driver.Proxy.Break(ctx)
}

func (d twoServers) RestorePart(ctx context.Context) error { return d.Driver.Proxy.Restore(ctx) }
