package eureka

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
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
	cfg := Config{
		URLs:         []string{"http://" + proxy.Addr() + "/eureka"},
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
		registrytest.WithNormalize(d.Normalize),
	)
}
