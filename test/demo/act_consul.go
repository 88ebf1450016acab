package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/istiod"
)

// consulInstances are the catalog registrations of the Consul act: each instance on a node of
// its own (as a VM running its own agent would appear), with a passing health check.
func consulInstances() []consultest.Instance {
	return []consultest.Instance{
		consulInstance("vm-1", "10.20.0.1", "web-1", "web", 8080, "http"),
		consulInstance("vm-2", "10.20.0.2", "web-2", "web", 8080, "http"),
		consulInstance("vm-3", "10.20.0.3", "payments-1", "payments", 9090, "grpc"),
	}
}

func consulInstance(node, addr, id, service string, port int, protocol string) consultest.Instance {
	return consultest.Instance{
		Node: node, NodeAddress: addr, ID: id, Service: service, Address: addr, Port: port,
		Tags: []string{"version=v1"}, Meta: map[string]string{"protocol": protocol}, Check: "passing",
	}
}

func describeInstance(in consultest.Instance) string {
	return fmt.Sprintf("node %s (%s): %s instance %s on port %d, tags %v, meta protocol %s, check %s",
		in.Node, in.NodeAddress, in.Service, in.ID, in.Port, in.Tags, in.Meta["protocol"], in.Check)
}

// consulAct starts a Consul agent, registers services, starts galleon-consul and restarts istiod
// on galleon-file and galleon-consul: a check fails and passes again, a service is deregistered.
func (d *demo) consulAct(ctx context.Context) error {
	d.heading("5. Consul " + consultest.Version + " (built from the Go module proxy)")
	bin, err := d.serverBinary(ctx, toolcache.Consul(),
		"    The first run builds Consul (about 5-9 min on 2 cores, ~3 GB of module source and build",
		"    cache) and caches the binary; later runs reuse it.")
	if err != nil {
		return err
	}

	d.heading("6. Start a Consul agent on loopback and register services")
	agent, err := d.startConsul(ctx)
	if err != nil {
		return err
	}
	d.consul = agent
	if err := d.registerConsul(ctx, agent); err != nil {
		return err
	}

	d.heading("7. Start galleon-consul on the agent")
	t0 := time.Now()
	d.command("galleon-consul --consul-address %s --debounce-quiet 20ms", agent.HTTPAddr)
	g, err := d.startDaemon(ctx, "galleon-consul", "--consul-address", agent.HTTPAddr, "--debounce-quiet", "20ms")
	if err != nil {
		return err
	}
	want := []string{"consul/payments", "consul/web"} // not the agent's own "consul" service (--consul-include-consul-service)
	if err := d.waitServes(ctx, g, want); err != nil {
		return err
	}
	d.ok("galleon-consul (pid %d) serves MCP on %s, ready %s after its start", g.srv.Pid(), g.XDS, since(t0))
	d.hints = append(d.hints,
		fmt.Sprintf("Follow what galleon-consul serves:    %s watch --addr %s --delta", d.galleonctlPath(), g.XDS),
		fmt.Sprintf("Use the Consul catalog:               CONSUL_HTTP_ADDR=%s %s catalog services", agent.HTTPAddr, bin))

	d.heading("8. Restart istiod with two configSources: galleon-file and galleon-consul")
	file := d.daemons["galleon-file"]
	if err := d.restartOn(ctx, "istiod-consul", file, g); err != nil {
		return err
	}
	return d.consulStory(ctx, agent, g)
}

// startConsul starts the agent and waits until it is its own leader.
func (d *demo) startConsul(ctx context.Context) (*consultest.Agent, error) {
	t0 := time.Now()
	agent, err := consultest.StartAgent(ctx, consultest.Options{
		Dir: filepath.Join(d.dir, "consul"), LogLevel: "warn", Detach: d.detach(),
	})
	if err != nil {
		return nil, err
	}
	d.crew.add(&member{
		name: "the consul agent", pid: agent.Proc().Pid, exited: func() bool { return !agent.Proc().Running() },
		stop: func() { agent.Close() }, logs: []namedLog{{"consul agent", agent.LogPath}},
		keepMsg: func() string {
			return fmt.Sprintf("pid %d  %s/v1/catalog/services   log %s", agent.Proc().Pid(), agent.URL(), agent.LogPath)
		},
	})
	d.ok("consul agent (pid %d) up in %s: HTTP API on %s, it is its own leader", agent.Proc().Pid(), since(t0), agent.URL())
	return agent, nil
}

// registerConsul registers consulInstances in the catalog and shows the catalog's services.
func (d *demo) registerConsul(ctx context.Context, agent *consultest.Agent) error {
	d.command("consultest.Register (PUT %s/v1/txn): catalog registrations, one node each", agent.URL())
	for _, in := range consulInstances() {
		d.say("    %s", describeInstance(in))
	}
	if err := consultest.Register(ctx, agent, consulInstances()); err != nil {
		return err
	}
	d.command("GET %s/v1/catalog/services", agent.URL())
	var services map[string][]string
	if err := agent.Do(ctx, "GET", "/v1/catalog/services", nil, &services); err != nil {
		return fmt.Errorf("cannot list the catalog's services: %w", err)
	}
	names := make([]string, 0, len(services))
	for name, tags := range services {
		names = append(names, fmt.Sprintf("%q: %q", name, tags))
	}
	slices.Sort(names)
	d.indent(strings.Join(names, "\n"))
	if services["web"] == nil || services["payments"] == nil {
		return fmt.Errorf("the catalog does not list payments and web: %v", services)
	}
	d.note("    Catalog registrations are instant: no agent runs on vm-1..3, their checks are set by API.")
	return nil
}

// waitServes waits until the daemon serves exactly want.
func (d *demo) waitServes(ctx context.Context, g *daemon, want []string) error {
	return d.waitUntil(ctx, 20*time.Second, g.name+" serves "+strings.Join(want, ", "), func(ctx context.Context) (bool, error) {
		names, err := d.names(ctx, g)
		if err != nil {
			return false, err
		}
		if !slices.Equal(names, want) {
			return false, fmt.Errorf("it serves %v", names)
		}
		return true, nil
	})
}

// restartOn restarts istiod on the sources and waits until it holds all they serve.
func (d *demo) restartOn(ctx context.Context, dirName string, sources ...*daemon) error {
	if err := d.startIstiod(ctx, dirName, sources...); err != nil {
		return err
	}
	served, err := d.servedBy(ctx, sources...)
	if err != nil {
		return err
	}
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.name
	}
	return d.waitHolds(ctx, strings.Join(names, " or "), served)
}

// consulStory shows what galleon-consul serves and istiod holds, then changes the catalog.
func (d *demo) consulStory(ctx context.Context, agent *consultest.Agent, g *daemon) error {
	d.heading("F. What galleon-consul serves")
	d.command("galleonctl get --addr %s -o names", g.XDS)
	names, err := d.names(ctx, g)
	if err != nil {
		return err
	}
	d.indent(strings.Join(names, "\n"))
	d.say("")
	if err := d.showYAML(ctx, g, "web", "consul/web"); err != nil {
		return err
	}
	d.note("    One ServiceEntry per Consul service (not the agent's own \"consul\" service), host")
	d.note("    <service>.service.consul; meta protocol gives the port's protocol; tags key=value and meta")
	d.note("    become endpoint labels. Only instances whose checks all pass are endpoints.")

	d.heading("G. What istiod holds: both registries")
	es, err := d.showEntries(ctx)
	if err != nil {
		return err
	}
	if err := checkConsulEntries(es); err != nil {
		return err
	}
	c, err := d.showCounters(ctx, "(restarted) so far")
	if err != nil {
		return err
	}
	if c, err = d.consulCheck(ctx, agent, c, "H. A health check fails: web-2 on vm-2 turns critical", "critical", "10.20.0.1"); err != nil {
		return err
	}
	if c, err = d.consulCheck(ctx, agent, c, "I. It passes again", "passing", "10.20.0.1,10.20.0.2"); err != nil {
		return err
	}
	if err := d.consulDeregister(ctx, agent, c); err != nil {
		return err
	}
	return d.consulOwnView(ctx, g)
}

func checkConsulEntries(es []entry) error {
	var web, payments entry
	for _, e := range es {
		switch e.Name {
		case "consul/web":
			web = e
		case "consul/payments":
			payments = e
		}
	}
	if web.hosts() != "web.service.consul" || web.ports() != "8080/HTTP" || len(web.Addresses) != 2 {
		return fmt.Errorf("istiod's consul/web is %+v; want host web.service.consul, port 8080/HTTP, 2 endpoints", web)
	}
	if payments.ports() != "9090/GRPC" {
		return fmt.Errorf("istiod's consul/payments is %+v; want port 9090/GRPC", payments)
	}
	return nil
}

// consulCheck registers web-2's check again with status and waits until istiod's consul/web has
// the endpoints want, an EDS-only update.
func (d *demo) consulCheck(ctx context.Context, agent *consultest.Agent, before istiod.PushCounters, title, status, want string) (istiod.PushCounters, error) {
	d.heading(title)
	in := consulInstances()[1]
	in.Check = status
	d.command("consultest.Register (PUT %s/v1/txn): %s", agent.URL(), describeInstance(in))
	if err := consultest.Register(ctx, agent, []consultest.Instance{in}); err != nil {
		return before, err
	}
	t0 := time.Now()
	e, err := d.waitEntry(ctx, "istiod holds consul/web with endpoints "+want, "consul/web",
		func(e entry, _ bool) bool { return e.addresses() == want })
	if err != nil {
		return before, err
	}
	after, err := d.pushed(ctx, before)
	if err != nil {
		return before, err
	}
	d.ok("istiod has it %s after the write: consul/web endpoints %s", since(t0), e.addresses())
	return after, d.edsOnly(before, after, "a health check turning "+status, "an endpoint-only (EDS) update, no full push")
}

func (d *demo) consulDeregister(ctx context.Context, agent *consultest.Agent, before istiod.PushCounters) error {
	d.heading("J. A service is deregistered: payments")
	served, err := d.entries(ctx)
	if err != nil {
		return err
	}
	d.command("consultest.Deregister (PUT %s/v1/catalog/deregister): node vm-3, service payments-1", agent.URL())
	if err := consultest.Deregister(ctx, agent, "vm-3", "payments-1"); err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := d.waitEntry(ctx, "consul/payments gone from istiod", "consul/payments",
		func(_ entry, held bool) bool { return !held }); err != nil {
		return err
	}
	after, err := d.pushed(ctx, before)
	if err != nil {
		return err
	}
	d.ok("gone from istiod %s after the write; full pushes %.0f -> %.0f", since(t0), before.FullPushes, after.FullPushes)
	if err := fullPush(before, after, "deregistering a service"); err != nil {
		return err
	}
	d.say("")
	es, err := d.showEntries(ctx)
	if err != nil {
		return err
	}
	if len(es) != len(served)-1 {
		return fmt.Errorf("istiod holds %d ServiceEntries, want the %d remaining services", len(es), len(served)-1)
	}
	return nil
}

// consulOwnView shows galleon-consul's /debug/status and some of its metrics.
func (d *demo) consulOwnView(ctx context.Context, g *daemon) error {
	d.heading("K. galleon-consul's own view: /debug/status and metrics")
	status, err := d.showStatus(ctx, g)
	if err != nil {
		return err
	}
	if !strings.Contains(status, `"synced":true`) {
		return fmt.Errorf("galleon-consul's /debug/status does not say synced")
	}
	if !strings.Contains(status, `"stale":false`) {
		return fmt.Errorf("galleon-consul's /debug/status says it is stale")
	}
	d.say("")
	if _, err := d.showMetrics(ctx, g, `^galleon_consul_(blocking_wakeups|services_fetched|stale)`); err != nil {
		return err
	}
	d.note("    Blocking queries on the catalog and on health checks wake galleon-consul on every change;")
	d.note("    only the services that changed are fetched again.")
	return nil
}

// showStatus prints the daemon's /debug/status and returns it compacted (no blanks), for checks.
func (d *demo) showStatus(ctx context.Context, g *daemon) (string, error) {
	d.command("GET http://%s/debug/status", g.HTTP)
	body, err := g.get(ctx, "/debug/status")
	if err != nil {
		return "", fmt.Errorf("%s's /debug/status does not answer: %w", g.name, err)
	}
	d.indent(string(body))
	var compact bytes.Buffer
	if err := json.Compact(&compact, body); err != nil {
		return "", fmt.Errorf("%s's /debug/status is not JSON: %w", g.name, err)
	}
	return compact.String(), nil
}

// showMetrics prints the lines of the daemon's /metrics that match pattern, and returns the whole
// body; it fails when none match.
func (d *demo) showMetrics(ctx context.Context, g *daemon, pattern string) ([]byte, error) {
	d.command("GET http://%s/metrics | grep -E '%s'", g.HTTP, pattern)
	body, err := g.get(ctx, "/metrics")
	if err != nil {
		return nil, fmt.Errorf("%s's /metrics does not answer: %w", g.name, err)
	}
	re := regexp.MustCompile(pattern)
	var picked []string
	for _, line := range strings.Split(string(body), "\n") {
		if re.MatchString(line) {
			picked = append(picked, line)
		}
	}
	if len(picked) == 0 {
		return nil, fmt.Errorf("%s exports no metric matching %s", g.name, pattern)
	}
	d.indent(strings.Join(picked, "\n"))
	return body, nil
}
