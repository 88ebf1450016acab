package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// TestConformance runs the SDK's conformance kit against a real ZooKeeper server. The driver
// writes Curator instance nodes (one transaction per Put), corrupts a service with a node that
// is not JSON (record: the node's path), and breaks the registry with a TCP proxy between the
// adapter and the server that cuts every connection.
//
// WithoutRelist: a cut shorter than the session timeout keeps the session, and with it every
// watch (the client re-registers them and the server fires those whose path changed
// meanwhile), so nothing can be missed and the adapter relists nothing: it ends the outage with
// Unreachable(nil) and no Replace (Reconciler.Resumed). WithOutage (2s), plus the 300ms before the outage is reported and the client's
// reconnection delay (about 1s), stays well under the 10s session: the session survives, which
// is the case WithoutRelist is about. (A cut that outlasts the session is an expiry:
// TestSessionExpiry.)
func TestConformance(t *testing.T) {
	s := startServer(t)
	proxy := registrytest.NewProxy(t, s.Addr())
	d := &kitDriver{Proxy: proxy, w: writer{c: client(t, s.Addr()), root: "/galleon-kit"}}
	d.w.ensureRoot(t)
	// What Curator cannot hold: service labels (the adapter has none to report), and the port's
	// name (the adapter leaves the default, "http-8080"). Hosts are derived from the name.
	runKit(t, proxy, Config{Root: d.w.root}, d, func(svc model.Service) model.Service {
		svc.Hosts = []string{svc.Name + "." + svc.Namespace + ".zookeeper"}
		svc.Labels = nil
		for i := range svc.Ports {
			svc.Ports[i].Name = ""
		}
		return svc
	})
}

// runKit runs the conformance kit against an adapter of cfg (its Layout and Root; the rest is
// set here) reaching the server through proxy, the Breaker driver embeds: WithoutRelist and
// an outage well inside the session, for the reasons TestConformance gives.
func runKit(t *testing.T, proxy *registrytest.Proxy, cfg Config, d registrytest.Driver, normalize func(model.Service) model.Service) {
	t.Helper()
	cfg.Servers = []string{proxy.Addr()}
	cfg.Namespace = registrytest.DefaultNamespace
	cfg.SessionTimeout = 10 * time.Second
	cfg.UnreachableAfter = 300 * time.Millisecond
	cfg.Logger = testLogger()
	registrytest.TestRegistry(t,
		func(t *testing.T) registry.Registry {
			reg, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return reg
		},
		d,
		registrytest.WithoutRelist(),
		registrytest.WithOutage(2*time.Second),
		registrytest.WithTimeout(20*time.Second),
		registrytest.WithNormalize(normalize),
	)
}

// kitDriver writes the kit's services as Curator instance nodes: Unhealthy instances carry
// instance_status DOWN, Draining ones OUT_OF_SERVICE (Spring's status), labels are metadata.
type kitDriver struct {
	*registrytest.Proxy
	w writer
}

var (
	_ registrytest.Driver    = (*kitDriver)(nil)
	_ registrytest.Corrupter = (*kitDriver)(nil)
	_ registrytest.Breaker   = (*kitDriver)(nil)
)

func (d *kitDriver) Put(_ context.Context, svc model.Service) error {
	nodes := map[string][]byte{}
	for _, inst := range svc.Instances {
		meta := map[string]string{}
		for k, v := range inst.Labels {
			meta[k] = v
		}
		switch inst.Health {
		case model.Unhealthy:
			meta[statusKey] = "DOWN"
		case model.Draining:
			meta[statusKey] = statusOutOfService
		}
		nodes[inst.ID] = curatorJSON(svc.Name, inst.ID, inst.Address, int(svc.Ports[0].Number), 0, meta)
	}
	return d.w.set(svc.Name, nodes)
}

func (d *kitDriver) Remove(_ context.Context, key model.ServiceKey) error {
	return d.w.remove(key.Name)
}

func (d *kitDriver) Corrupt(_ context.Context, key model.ServiceKey) (string, error) {
	id := key.Name + "-bad"
	return d.w.root + "/" + key.Name + "/" + id, d.w.set(key.Name, map[string][]byte{id: []byte(`{"name": "` + key.Name + `", "address": `)})
}
