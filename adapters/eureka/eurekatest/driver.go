package eurekatest

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// Normalize turns a service the kit puts into what the adapter reports with its default
// configuration (the kit's registrytest.WithNormalize): no service labels
// (Eureka has none), the port's default name, hosts derived from the name, and on every
// instance the metadata Polaris adds to each registration ("protocol: HTTP", and "campus",
// "region" and "zone" left empty). It gets a copy.
func (d *Driver) Normalize(svc model.Service) model.Service {
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

// Driver is the conformance kit's registrytest.Driver for Eureka (also a Corrupter, and a
// Breaker and a Staller through a registrytest.Proxy between the adapter and the server). It registers each
// instance through Eureka's REST API (status DOWN for an Unhealthy instance, OUT_OF_SERVICE for a
// Draining one, labels as metadata) and renews them while the test runs: an instance nobody
// renews leaves Polaris's listing a few heartbeat TTLs after it registered. It corrupts a
// service with an instance whose address is no address (record APP/id).
type Driver struct {
	*registrytest.Proxy
	s *Server

	mu  sync.Mutex
	ids map[string][]string // APP -> instance ids registered
}

var (
	_ registrytest.Driver    = (*Driver)(nil)
	_ registrytest.Corrupter = (*Driver)(nil)
	_ registrytest.Breaker   = (*Driver)(nil)
	_ registrytest.Staller   = (*Driver)(nil)
)

// Stall makes the server accept the adapter's connections and never answer (Proxy.Silence);
// Restore ends it.
func (d *Driver) Stall(ctx context.Context) error { return d.Proxy.Silence(ctx) }

// NewDriver returns a driver that registers in s and breaks the registry with proxy (which
// the adapter must be given as its server), renewing its instances every 10 s until t ends.
func NewDriver(t testing.TB, s *Server, proxy *registrytest.Proxy) *Driver {
	d := &Driver{Proxy: proxy, s: s, ids: map[string][]string{}}
	RenewEvery(t, s, 10*time.Second, d.registered)
	return d
}

// RenewEvery renews the instances list returns (APP -> ids) every interval until the test ends.
func RenewEvery(t testing.TB, s *Server, interval time.Duration, list func() map[string][]string) {
	Every(t, interval, func(ctx context.Context) {
		for app, ids := range list() {
			for _, id := range ids {
				_ = s.Renew(ctx, app, id)
			}
		}
	})
}

// Every calls f every interval, on a goroutine of its own, until the test ends: its cleanup
// cancels f's context and waits for f to return (register it after the servers f talks to, so
// that it stops before they do).
func Every(t testing.TB, interval time.Duration, f func(ctx context.Context)) {
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
			f(ctx)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// registered is a copy of the instances registered, APP -> ids.
func (d *Driver) registered() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string][]string, len(d.ids))
	for k, v := range d.ids {
		out[k] = slices.Clone(v)
	}
	return out
}

// statusOf is the status an instance of health h is registered with.
func statusOf(h model.Health) string {
	switch h {
	case model.Unhealthy:
		return "DOWN"
	case model.Draining:
		return "OUT_OF_SERVICE"
	}
	return "UP"
}

// Put registers svc's instances (as application svc.Name, upper-cased) and cancels the ones it
// no longer holds, then waits until the server lists exactly them.
func (d *Driver) Put(ctx context.Context, svc model.Service) error {
	app := strings.ToUpper(svc.Name)
	want := map[string]string{}
	var ids []string
	for _, inst := range svc.Instances {
		in := Instance{App: app, ID: inst.ID, IPAddr: inst.Address, Port: int(svc.Ports[0].Number),
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

// Remove cancels every instance of the application and waits until none is listed.
func (d *Driver) Remove(ctx context.Context, key model.ServiceKey) error {
	app := strings.ToUpper(key.Name)
	if err := d.cancelExcept(ctx, app, nil); err != nil {
		return err
	}
	d.mu.Lock()
	delete(d.ids, app)
	d.mu.Unlock()
	return d.waitApp(ctx, app, nil)
}

// Corrupt registers an instance whose address is no address in the application, and returns
// its record name, APP/id.
func (d *Driver) Corrupt(ctx context.Context, key model.ServiceKey) (string, error) {
	app := strings.ToUpper(key.Name)
	id := key.Name + "-bad"
	// Polaris takes any string as an address; the adapter rejects it.
	if err := d.s.Register(ctx, Instance{App: app, ID: id, HostName: "not a host", IPAddr: "not an ip", Port: 8080}); err != nil {
		return "", err
	}
	d.mu.Lock()
	d.ids[app] = append(d.ids[app], id)
	d.mu.Unlock()
	if _, err := d.s.WaitApps(ctx, "/apps", func(a *Applications) bool { return a.Find(app, id) != nil }); err != nil {
		return "", err
	}
	return app + "/" + id, nil
}

// cancelExcept cancels the instances of app registered before that want does not hold.
func (d *Driver) cancelExcept(ctx context.Context, app string, want map[string]string) error {
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
func (d *Driver) waitApp(ctx context.Context, app string, want map[string]string) error {
	_, err := d.s.WaitApps(ctx, "/apps", func(a *Applications) bool {
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
