package zookeeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// TestConformance runs the SDK's conformance kit against a real ZooKeeper server. The driver
// (zktest.CuratorDriver) writes Curator instance nodes (one transaction per Put), corrupts a service with a node that
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
	var sessions zktest.Sessions
	d := &expiringDriver{
		CuratorDriver: &zktest.CuratorDriver{Proxy: proxy, W: &zktest.Writer{Conn: client(t, s.Addr()), Root: "/galleon-kit", Timeout: waitTimeout}},
		server:        s, sessions: &sessions,
	}
	if err := d.W.EnsureRoot(); err != nil {
		t.Fatal(err)
	}
	// What Curator cannot hold: service labels (the adapter has none to report), and the port's
	// name (the adapter leaves the default, "http-8080"). Hosts are derived from the name.
	runKit(t, proxy, Config{Root: d.W.Root, dial: sessions.Dial}, d, curatorKitNormalize)
}

// curatorKitNormalize is what the Curator layout reports of a service the kit puts.
func curatorKitNormalize(svc model.Service) model.Service {
	svc.Hosts = []string{svc.Name + "." + svc.Namespace + ".zookeeper"}
	svc.Labels = nil
	for i := range svc.Ports {
		svc.Ports[i].Name = ""
	}
	return svc
}

// expiringDriver is the Curator driver that also loses the adapter's watch events the way
// ZooKeeper does (registrytest.EventLoser): a session that expires while the adapter is cut off
// takes its watches with it, and what changed meanwhile is learnt only by listing again.
type expiringDriver struct {
	*zktest.CuratorDriver
	server   *zktest.Server
	sessions *zktest.Sessions // the adapter's, through Config.dial
}

var _ registrytest.EventLoser = (*expiringDriver)(nil)

// LoseEvents cuts the adapter off, expires its session, runs change, and lets it reconnect.
func (d *expiringDriver) LoseEvents(ctx context.Context, change func(context.Context) error) error {
	id, passwd, ok := d.sessions.Last()
	if !ok {
		return errors.New("the adapter's session was not recorded")
	}
	if err := d.Proxy.Break(ctx); err != nil {
		return err
	}
	if err := d.server.ExpireSession(id, passwd); err != nil {
		return errors.Join(err, d.Proxy.Restore(ctx))
	}
	return errors.Join(change(ctx), d.Proxy.Restore(ctx))
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
