package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/internal/nacosclient"
	"github.com/galleon-mesh/galleon/test/istiod"
)

// The demo's Nacos registry: cart in the public namespace's DEFAULT_GROUP, three instances;
// later checkout in a new group, PAYMENT. galleon-nacos puts their ServiceEntries in the Istio
// namespace nacosDemoNS.
const (
	nacosDemoNS      = "nacos"
	nacosCart        = "cart"
	nacosCheckout    = "checkout"
	nacosCheckoutGrp = "PAYMENT"
)

// cartInstance is instance i of cart: 10.90.0.<i>:8080, metadata version=v1, ephemeral (bound to
// the registering client's gRPC connection), as a Spring Cloud Alibaba or Dubbo application
// registers with Nacos 2.
func cartInstance(i int) nacosclient.Instance {
	return nacosclient.Instance{IP: fmt.Sprintf("10.90.0.%d", i), Port: 8080, Weight: 1, Metadata: map[string]string{"version": "v1"}}
}

var checkoutInstance = nacosclient.Instance{IP: "10.91.0.1", Port: 9090, Weight: 1, Metadata: map[string]string{"version": "v2"}}

// nacosAct starts a Nacos API server (polaris-server), registers cart through the official Go
// client, starts galleon-nacos and restarts istiod on all five adapters: an instance is
// disabled (EDS-only), a service appears in a new group, and a service is removed.
func (d *demo) nacosAct(ctx context.Context) error {
	d.heading("17. polaris-server " + nacostest.Version + "'s Nacos API, and galleon-nacos")
	t0 := time.Now()
	if err := d.buildGalleon(ctx, "galleon-nacos"); err != nil {
		return err
	}
	if _, err := d.serverBinary(ctx, toolcache.Polaris()); err != nil {
		return err
	}
	srv, err := d.startNacosServer(ctx)
	if err != nil {
		return err
	}
	d.ok("polaris-server (pid %d): Nacos HTTP API on %s, its gRPC API on %s (%s)", srv.Proc().Pid(), srv.HTTPAddr, srv.GRPCAddr, since(t0))
	d.note("    Polaris's service-nacos apiserver speaks Nacos's HTTP OpenAPI (/nacos/v1/ns/...) and its")
	d.note("    gRPC API (the HTTP port + 1000): no Java Nacos server can be built here.")

	d.heading("18. Register cart's instances as a Nacos application does: the official Go client")
	c, err := nacosclient.Open(nacosclient.Options{
		Servers: []nacosclient.Server{{HTTPAddr: srv.HTTPAddr, GRPCAddr: srv.GRPCAddr}},
		Dir:     filepath.Join(d.dir, "nacos", "client"),
	})
	if err != nil {
		return err
	}
	// The client is the demo's: its connection, and with it the ephemeral instances, end with
	// the demo's process.
	d.command("naming_client.RegisterInstance(vo.RegisterInstanceParam{ServiceName: %q, Ip: %q, Port: 8080, Weight: 1, Enable: true, Healthy: true, Ephemeral: true, Metadata: {version: v1}})",
		nacosCart, cartInstance(1).IP)
	d.say("    %s", d.dimmed("and the same for 10.90.0.2 and 10.90.0.3 (nacos-sdk-go v2 over gRPC; public namespace, DEFAULT_GROUP)"))
	for i := 1; i <= 3; i++ {
		if err := c.Register("", nacosCart, cartInstance(i)); err != nil {
			return err
		}
	}
	if err := d.waitNacosList(ctx, srv, "", nacosCart, "10.90.0.1,10.90.0.2,10.90.0.3"); err != nil {
		return err
	}

	d.heading("19. Start galleon-nacos on the server")
	t0 = time.Now()
	args := []string{"--nacos-servers", srv.HTTPAddr, "--namespace", nacosDemoNS, "--nacos-discovery-interval", "1s", "--debounce-quiet", "20ms"}
	d.command("galleon-nacos %s", strings.Join(args, " "))
	g, err := d.startDaemon(ctx, "galleon-nacos", args...)
	if err != nil {
		return err
	}
	var cartName string
	err = d.waitUntil(ctx, 20*time.Second, "galleon-nacos serves cart", func(ctx context.Context) (bool, error) {
		names, err := d.names(ctx, g)
		if err != nil || len(names) != 1 {
			return false, fmt.Errorf("it serves %v (%v)", names, err)
		}
		cartName = names[0]
		return true, nil
	})
	if err != nil {
		return err
	}
	d.ok("galleon-nacos (pid %d) serves MCP on %s, ready %s after its start: %s", g.srv.Pid(), g.XDS, since(t0), cartName)
	d.note("    It connects over gRPC, lists the services of each namespace and group, subscribes to each:")
	d.note("    the server pushes every change. The lists are read again every second for new services.")
	d.hints = append(d.hints,
		fmt.Sprintf("Follow what galleon-nacos serves:     %s watch --addr %s --delta", d.galleonctlPath(), g.XDS),
		fmt.Sprintf("Read Nacos (its HTTP API):            GET http://%s/nacos/v1/ns/instance/list?serviceName=%s", srv.HTTPAddr, nacosCart),
		"Nacos instances are the demo's (ephemeral, of its gRPC connection): they left with it.")

	d.heading("20. Restart istiod with five configSources: galleon-file, galleon-consul, galleon-zookeeper, galleon-eureka and galleon-nacos")
	if err := d.restartOn(ctx, "istiod-nacos", d.daemons["galleon-file"], d.daemons["galleon-consul"], d.daemons["galleon-zookeeper"], d.daemons["galleon-eureka"], g); err != nil {
		return err
	}
	before, err := d.cartShown(ctx, g, cartName)
	if err != nil {
		return err
	}
	if before, err = d.nacosDisable(ctx, c, cartName, before); err != nil {
		return err
	}
	checkoutName, before, err := d.nacosNewGroup(ctx, c, g, cartName, before)
	if err != nil {
		return err
	}
	if err := d.nacosRemove(ctx, c, srv, checkoutName, before); err != nil {
		return err
	}
	return d.nacosOwnView(ctx, g)
}

func (d *demo) startNacosServer(ctx context.Context) (*nacostest.Server, error) {
	s, err := nacostest.StartServer(ctx, nacostest.Options{Dir: filepath.Join(d.dir, "nacos", "server"), Detach: d.detach()})
	if err != nil {
		return nil, fmt.Errorf("polaris-server (Nacos API): %w", err)
	}
	d.crew.add(&member{
		name: "polaris-server (Nacos)", pid: s.Proc().Pid, exited: func() bool { return !s.Proc().Running() },
		// SIGTERM takes polaris-server 5-15 s; its store goes with the demo's directory.
		stop: func() { _ = s.Proc().Kill() },
		logs: []namedLog{{"polaris-server (Nacos)", s.OutPath},
			{"polaris-server (Nacos)'s Nacos log", filepath.Join(s.Dir, "log", "runtime", "nacos-apiserver.log")}},
		keepMsg: func() string {
			return fmt.Sprintf("pid %d  http://%s/nacos/v1/ns/service/list?pageNo=1&pageSize=10   log %s", s.Proc().Pid(), s.HTTPAddr, s.OutPath)
		},
	})
	return s, nil
}

// waitNacosList waits until the server lists (GET /nacos/v1/ns/instance/list) the enabled
// instances want ("ip,ip,...", sorted) of group ("" : DEFAULT_GROUP) and service, and shows it.
func (d *demo) waitNacosList(ctx context.Context, srv *nacostest.Server, group, service, want string) error {
	if group == "" {
		group = "DEFAULT_GROUP"
	}
	var got string
	err := d.waitUntil(ctx, 20*time.Second, fmt.Sprintf("the Nacos API lists %s of %s@@%s", want, group, service), func(ctx context.Context) (bool, error) {
		si, err := srv.Client().Instances(ctx, nacostest.Ref{Group: group, Service: service})
		if err != nil {
			return false, err
		}
		var ips []string
		for _, in := range si.Hosts {
			ips = append(ips, in.IP)
		}
		slices.Sort(ips)
		got = list(ips)
		return got == want, nil
	})
	if err != nil {
		return err
	}
	d.command("GET http://%s/nacos/v1/ns/instance/list?serviceName=%s@@%s    %s", srv.HTTPAddr, group, service, d.dimmed("# enabled instances"))
	d.indent(strings.ReplaceAll(got, ",", "\n"))
	return nil
}

// cartShown shows what galleon-nacos serves and istiod holds, and checks cart's ServiceEntry.
func (d *demo) cartShown(ctx context.Context, g *daemon, cartName string) (istiod.PushCounters, error) {
	d.heading("V. What galleon-nacos serves, and what istiod holds: five registries")
	if err := d.showYAML(ctx, g, "", "the one service"); err != nil {
		return istiod.PushCounters{}, err
	}
	d.note("    One ServiceEntry per (namespace, group, service), in the Istio namespace --namespace names;")
	d.note("    healthy, enabled instances are endpoints, their metadata endpoint labels.")
	d.say("")
	es, err := d.showEntries(ctx)
	if err != nil {
		return istiod.PushCounters{}, err
	}
	i := slices.IndexFunc(es, func(e entry) bool { return e.Name == cartName })
	if i < 0 || !strings.HasPrefix(cartName, nacosDemoNS+"/") || es[i].addresses() != "10.90.0.1,10.90.0.2,10.90.0.3" || !strings.HasPrefix(es[i].ports(), "8080/") {
		return istiod.PushCounters{}, fmt.Errorf("istiod's %s is not in namespace %s with port 8080 and endpoints 10.90.0.1,10.90.0.2,10.90.0.3", cartName, nacosDemoNS)
	}
	d.ok("%s: host %s, port %s, 3 endpoints (%s)", cartName, es[i].hosts(), es[i].ports(), es[i].addresses())
	return d.showCounters(ctx, "(restarted) so far")
}

// nacosDisable disables cart's 10.90.0.2 (enabled=false, what the Nacos console's "offline"
// does): an endpoint-only update.
func (d *demo) nacosDisable(ctx context.Context, c *nacosclient.Client, cartName string, before istiod.PushCounters) (istiod.PushCounters, error) {
	d.heading("W. An operator disables 10.90.0.2 (enabled=false)")
	off := cartInstance(2)
	off.Disabled = true
	d.command("naming_client.UpdateInstance(vo.UpdateInstanceParam{ServiceName: %q, Ip: %q, Port: 8080, Enable: false, ...})", nacosCart, off.IP)
	if err := c.Update("", nacosCart, off); err != nil {
		return before, err
	}
	t0 := time.Now()
	if _, err := d.waitEntry(ctx, "istiod holds "+cartName+" with endpoints 10.90.0.1 and 10.90.0.3", cartName,
		func(e entry, _ bool) bool { return e.addresses() == "10.90.0.1,10.90.0.3" }); err != nil {
		return before, err
	}
	after, err := d.pushed(ctx, before)
	if err != nil {
		return before, err
	}
	d.ok("istiod has it %s after the update: endpoints 10.90.0.1,10.90.0.3", since(t0))
	if err := d.edsOnly(before, after, "an instance disabled", "an endpoint-only (EDS) update, no full push"); err != nil {
		return after, err
	}
	d.note("    The server pushed cart's new state over galleon-nacos's subscription; only the endpoints")
	d.note("    changed, so istiod updated EDS without recomputing the mesh config.")
	return after, nil
}

// nacosNewGroup registers checkout in a new group: galleon-nacos finds it at its next
// service listing, and it is a new ServiceEntry (a full push).
func (d *demo) nacosNewGroup(ctx context.Context, c *nacosclient.Client, g *daemon, cartName string, before istiod.PushCounters) (string, istiod.PushCounters, error) {
	d.heading("X. A new service in a new group: checkout in PAYMENT")
	d.command("naming_client.RegisterInstance(vo.RegisterInstanceParam{ServiceName: %q, GroupName: %q, Ip: %q, Port: 9090, ...})",
		nacosCheckout, nacosCheckoutGrp, checkoutInstance.IP)
	if err := c.Register(nacosCheckoutGrp, nacosCheckout, checkoutInstance); err != nil {
		return "", before, err
	}
	t0 := time.Now()
	var name string
	err := d.waitUntil(ctx, 20*time.Second, "galleon-nacos serves checkout", func(ctx context.Context) (bool, error) {
		names, err := d.names(ctx, g)
		if err != nil {
			return false, err
		}
		names = slices.DeleteFunc(names, func(n string) bool { return n == cartName })
		if len(names) != 1 {
			return false, fmt.Errorf("it serves %v besides %s", names, cartName)
		}
		name = names[0]
		return true, nil
	})
	if err != nil {
		return "", before, err
	}
	e, err := d.waitEntry(ctx, "istiod holds "+name+" with endpoint 10.91.0.1", name, func(e entry, held bool) bool { return held && e.addresses() == "10.91.0.1" })
	if err != nil {
		return "", before, err
	}
	after, err := d.pushed(ctx, before)
	if err != nil {
		return "", before, err
	}
	d.ok("istiod holds %s %s after the registration: host %s, port %s; full pushes %.0f -> %.0f", name, since(t0), e.hosts(), e.ports(), before.FullPushes, after.FullPushes)
	if err := fullPush(before, after, "a new service"); err != nil {
		return "", after, err
	}
	d.note("    No one told galleon-nacos about PAYMENT: it lists the groups of each namespace and their")
	d.note("    services every second (--nacos-discovery-interval), and subscribed to checkout when it")
	d.note("    appeared. A new service is a new ServiceEntry: one full push.")
	return name, after, nil
}

// nacosRemove deregisters checkout's instance and deletes the service: its ServiceEntry goes.
func (d *demo) nacosRemove(ctx context.Context, c *nacosclient.Client, srv *nacostest.Server, name string, before istiod.PushCounters) error {
	d.heading("Y. checkout is removed: its instance deregisters, then the service is deleted")
	d.command("naming_client.DeregisterInstance(vo.DeregisterInstanceParam{ServiceName: %q, GroupName: %q, Ip: %q, Port: 9090})", nacosCheckout, nacosCheckoutGrp, checkoutInstance.IP)
	if err := c.Deregister(nacosCheckoutGrp, nacosCheckout, checkoutInstance); err != nil {
		return err
	}
	if err := d.waitNacosList(ctx, srv, nacosCheckoutGrp, nacosCheckout, "-"); err != nil {
		return err
	}
	ref := nacostest.Ref{Group: nacosCheckoutGrp, Service: nacosCheckout}
	d.command("POST http://%s/naming/v1/services/delete [{\"namespace\": \"default\", \"name\": \"%s__%s\"}]    %s", srv.PolarisHTTPAddr,
		nacosCheckoutGrp, nacosCheckout, d.dimmed("# Polaris's own API: its Nacos API has no DELETE /nacos/v1/ns/service"))
	// Polaris refuses to delete a service while its store still holds an instance: it may lag
	// the listing by a moment.
	err := d.waitUntil(ctx, 10*time.Second, "polaris-server deletes "+nacosCheckoutGrp+"@@"+nacosCheckout, func(ctx context.Context) (bool, error) {
		err := srv.Client().DeleteService(ctx, ref)
		return err == nil, err
	})
	if err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := d.waitEntry(ctx, name+" gone from istiod", name, func(_ entry, held bool) bool { return !held }); err != nil {
		return err
	}
	after, err := d.pushed(ctx, before)
	if err != nil {
		return err
	}
	d.ok("gone from istiod %s after the delete; full pushes %.0f -> %.0f", since(t0), before.FullPushes, after.FullPushes)
	d.note("    galleon-nacos's next service listing no longer had checkout: it unsubscribed and removed it.")
	return fullPush(before, after, "removing a service")
}

// nacosOwnView shows galleon-nacos's metrics and /debug/status.
func (d *demo) nacosOwnView(ctx context.Context, g *daemon) error {
	d.heading("Z. galleon-nacos's own view: metrics and /debug/status")
	body, err := d.showMetrics(ctx, g, `^galleon_nacos_(pushes_total|subscriptions|connects_total|server_up)`)
	if err != nil {
		return err
	}
	fams, err := istiod.ParseMetrics(body)
	if err != nil {
		return err
	}
	pushes, err := istiod.MetricValue(fams, "galleon_nacos_pushes_total", map[string]string{"outcome": "applied"})
	if err != nil || pushes < 1 {
		return fmt.Errorf("galleon-nacos counts no push applied (galleon_nacos_pushes_total{outcome=\"applied\"} %v, %v)", pushes, err)
	}
	d.ok("%.0f service state(s) pushed by the server over the subscription and applied", pushes)
	d.say("")
	status, err := d.showStatus(ctx, g)
	if err != nil {
		return err
	}
	if !strings.Contains(status, `"synced":true`) || !strings.Contains(status, `"stale":false`) {
		return errors.New("galleon-nacos's /debug/status does not say synced and not stale")
	}
	return nil
}
