package eureka

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
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
// eurekatest). The driver registers each instance through Eureka's REST API (status DOWN for an
// Unhealthy instance, OUT_OF_SERVICE for a Draining one, labels as metadata) and renews them
// while the test runs; it corrupts a service with an instance whose address is no address
// (record APP/id), and breaks the registry with a TCP proxy between the adapter and the server.
// An outage ends with a full listing (a Replace) when it outlasts the delta window, and with a
// delta that reconciles otherwise: the window is set shorter than the kit's outage, so the kit
// sees the relisting it checks for.
func TestConformance(t *testing.T) {
	s := eurekatest.Start(t, eurekatest.Options{})
	proxy := registrytest.NewProxy(t, s.EurekaAddr)
	d := newKitDriver(t, s, proxy)
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
		registrytest.WithNormalize(kitNormalize),
	)
}

// kitNormalize turns a service the kit puts into what the adapter reports: no service labels
// (Eureka has none), the port's default name, hosts derived from the name, and on every
// instance the metadata Polaris adds to each registration ("protocol: HTTP", and "campus",
// "region" and "zone" left empty). It gets a copy.
func kitNormalize(svc model.Service) model.Service {
	svc.Hosts = []string{svc.Name + ".eureka"}
	svc.Labels = nil
	for i := range svc.Ports {
		svc.Ports[i].Name = ""
	}
	for i := range svc.Instances {
		labels := maps.Clone(svc.Instances[i].Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, map[string]string{"protocol": "HTTP", "campus": "", "region": "", "zone": ""})
		svc.Instances[i].Labels = labels
	}
	return svc
}

// kitDriver registers the kit's services in a real server and renews their instances: an
// instance nobody renews leaves Polaris's listing about 90 s after it registered.
type kitDriver struct {
	*registrytest.Proxy
	s *eurekatest.Server

	mu  sync.Mutex
	ids map[string][]string // APP -> instance ids registered
}

var (
	_ registrytest.Driver    = (*kitDriver)(nil)
	_ registrytest.Corrupter = (*kitDriver)(nil)
	_ registrytest.Breaker   = (*kitDriver)(nil)
)

func newKitDriver(t *testing.T, s *eurekatest.Server, proxy *registrytest.Proxy) *kitDriver {
	d := &kitDriver{Proxy: proxy, s: s, ids: map[string][]string{}}
	renewEvery(t, s, 10*time.Second, d.registered)
	return d
}

// renewEvery renews the instances list returns (APP -> ids) every interval until the test ends.
func renewEvery(t *testing.T, s *eurekatest.Server, interval time.Duration, list func() map[string][]string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for app, ids := range list() {
				for _, id := range ids {
					_ = s.Renew(ctx, app, id)
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func (d *kitDriver) registered() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string][]string, len(d.ids))
	for k, v := range d.ids {
		out[k] = slices.Clone(v)
	}
	return out
}

func statusOf(h model.Health) string {
	switch h {
	case model.Unhealthy:
		return StatusDown
	case model.Draining:
		return StatusOutOfService
	}
	return StatusUp
}

func (d *kitDriver) Put(ctx context.Context, svc model.Service) error {
	app := strings.ToUpper(svc.Name)
	want := map[string]string{}
	var ids []string
	for _, inst := range svc.Instances {
		in := eurekatest.Instance{App: app, ID: inst.ID, IPAddr: inst.Address, Port: int(svc.Ports[0].Number),
			Status: statusOf(inst.Health), Metadata: inst.Labels}
		if err := d.s.Register(ctx, in); err != nil {
			return err
		}
		want[inst.ID] = in.Status
		ids = append(ids, inst.ID)
	}
	if err := d.cancelExcept(ctx, app, want); err != nil {
		return err
	}
	d.mu.Lock()
	d.ids[app] = ids
	d.mu.Unlock()
	return d.waitApp(ctx, app, want)
}

func (d *kitDriver) Remove(ctx context.Context, key model.ServiceKey) error {
	app := strings.ToUpper(key.Name)
	if err := d.cancelExcept(ctx, app, nil); err != nil {
		return err
	}
	d.mu.Lock()
	delete(d.ids, app)
	d.mu.Unlock()
	return d.waitApp(ctx, app, nil)
}

func (d *kitDriver) Corrupt(ctx context.Context, key model.ServiceKey) (string, error) {
	app := strings.ToUpper(key.Name)
	id := key.Name + "-bad"
	// Polaris takes any string as an address; the adapter rejects it.
	body := fmt.Sprintf(`{"instance":{"instanceId":%q,"app":%q,"hostName":"not a host","ipAddr":"not an ip","status":"UP",
"port":{"$":8080,"@enabled":"true"},"dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},
"leaseInfo":{"renewalIntervalInSecs":30,"durationInSecs":3600}}}`, id, app)
	r, err := d.s.Do(ctx, "POST", "/apps/"+app, "application/json", []byte(body))
	if err != nil {
		return "", err
	}
	if r.Status != 204 && r.Status != 200 {
		return "", fmt.Errorf("registering %s/%s: %d %s", app, id, r.Status, r.Body)
	}
	d.mu.Lock()
	d.ids[app] = append(d.ids[app], id)
	d.mu.Unlock()
	if _, err := d.s.WaitApps(ctx, "/apps", func(a *eurekatest.Applications) bool { return a.Find(app, id) != nil }); err != nil {
		return "", err
	}
	return app + "/" + id, nil
}

// cancelExcept cancels the instances of app registered before that want does not hold.
func (d *kitDriver) cancelExcept(ctx context.Context, app string, want map[string]string) error {
	d.mu.Lock()
	old := slices.Clone(d.ids[app])
	d.mu.Unlock()
	for _, id := range old {
		if _, ok := want[id]; !ok {
			if err := d.s.Cancel(ctx, app, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitApp waits until a fresh listing holds exactly want (id -> status) for app.
func (d *kitDriver) waitApp(ctx context.Context, app string, want map[string]string) error {
	_, err := d.s.WaitApps(ctx, "/apps", func(a *eurekatest.Applications) bool {
		got := map[string]string{}
		for _, ap := range a.Application {
			if strings.EqualFold(ap.Name, app) {
				for _, in := range ap.Instance {
					got[in.InstanceID] = in.Status
				}
			}
		}
		return maps.Equal(got, want) || len(got) == 0 && len(want) == 0
	})
	return err
}
