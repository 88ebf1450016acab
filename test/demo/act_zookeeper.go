package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/test/istiod"
)

const dubboIface = "org.apache.demo.GreetingService"

// greeter is the provider of GreetingService 1.0.0 at ip:20880.
func greeter(ip string) zktest.DubboProvider {
	return zktest.DubboProvider{Interface: dubboIface, IP: ip, Port: 20880, Params: url.Values{
		"application": {"greeter"}, "side": {"provider"}, "version": {"1.0.0"}, "weight": {"100"},
	}}
}

// greeterURLs are the URLs of the greeters at ips, sorted.
func greeterURLs(ips ...string) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = greeter(ip).URL()
	}
	slices.Sort(out)
	return out
}

// zkAct starts ZooKeeper, registers three Dubbo providers, starts galleon-zookeeper and restarts
// istiod on three adapters: a provider leaves, then the adapter's session expires while
// providers change.
func (d *demo) zookeeperAct(ctx context.Context) error {
	d.heading("9. ZooKeeper 3.8 (the Debian package)")
	t0 := time.Now()
	java, classpath, err := zktest.ToolPaths(ctx)
	if err != nil {
		return err
	}
	d.ok("classpath %s:... (%d jars), %s (%s)", strings.Split(classpath, ":")[0], len(strings.Split(classpath, ":")), java, since(t0))

	d.heading("10. Start ZooKeeper on loopback and register three Dubbo providers")
	server, err := d.startZooKeeper(ctx)
	if err != nil {
		return err
	}
	d.zkAddr = server.Addr()
	conn, err := d.dialZooKeeper(server.Addr())
	if err != nil {
		return err
	}
	defer conn.Close()
	w := zktest.DubboWriter{Conn: conn}
	if err := d.registerProviders(w); err != nil {
		return err
	}
	d.hints = append(d.hints, fmt.Sprintf("Use ZooKeeper (zkCli):                %s -cp %q org.apache.zookeeper.ZooKeeperMain -server %s   (then e.g.: ls %s)",
		java, classpath, server.Addr(), zktest.DubboProvidersPath(dubboIface)))

	d.heading("11. Start galleon-zookeeper on ZooKeeper (Dubbo layout)")
	g, session, err := d.startGalleonZooKeeper(ctx, server.Addr())
	if err != nil {
		return err
	}

	d.heading("12. Restart istiod with three configSources: galleon-file, galleon-consul and galleon-zookeeper")
	if err := d.restartOn(ctx, "istiod-zookeeper", d.daemons["galleon-file"], d.daemons["galleon-consul"], g); err != nil {
		return err
	}
	name, c, err := d.dubboShown(ctx, g)
	if err != nil {
		return err
	}
	if c, err = d.providerLeaves(ctx, w, g, name, c); err != nil {
		return err
	}
	if err := d.sessionExpires(ctx, w, server, g, name, session, c); err != nil {
		return err
	}
	return d.zookeeperOwnView(ctx, g)
}

func (d *demo) startZooKeeper(ctx context.Context) (*zktest.Server, error) {
	t0 := time.Now()
	// A tick of 500 ms: ZooKeeper grants session timeouts of 2-20 ticks, so the adapter may ask
	// for 2 s (step O lets its session expire).
	server, err := zktest.StartServer(ctx, zktest.Options{
		TickTime: 500 * time.Millisecond, Dir: filepath.Join(d.dir, "zookeeper"), Detach: d.detach(),
	})
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(server.Dir(), "zookeeper.log")
	d.crew.add(&member{
		name: "ZooKeeper", pid: server.Proc().Pid, exited: func() bool { return !server.Proc().Running() },
		stop: func() { server.Close() }, logs: []namedLog{{"zookeeper", logPath}},
		keepMsg: func() string {
			return fmt.Sprintf("pid %d  %s (data in %s)   log %s", server.Proc().Pid(), server.Addr(), server.Dir(), logPath)
		},
	})
	srvr, _ := server.FourLetter("srvr")
	ruok, _ := server.FourLetter("ruok")
	version, mode := "", ""
	for _, line := range strings.Split(srvr, "\n") {
		if v, ok := strings.CutPrefix(line, "Zookeeper version: "); ok {
			version, _, _ = strings.Cut(v, "-")
			version, _, _ = strings.Cut(version, ",")
		}
		if strings.HasPrefix(line, "Mode: ") {
			mode = line
		}
	}
	d.ok("ZooKeeper %s (pid %d) serves on %s (%s): ruok -> %s, %s", version, server.Proc().Pid(), server.Addr(), since(t0), ruok, mode)
	cfg, err := os.ReadFile(filepath.Join(server.Dir(), "zoo.cfg"))
	if err == nil {
		var keys []string
		for _, line := range strings.Split(strings.TrimSpace(string(cfg)), "\n") {
			if !strings.HasPrefix(line, "dataDir=") {
				keys = append(keys, line)
			}
		}
		d.say("    zoo.cfg: %s", strings.Join(keys, " "))
	}
	return server, nil
}

// zkQuiet keeps go-zookeeper's connection messages out of the demo's story.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

func (d *demo) dialZooKeeper(addr string) (*zk.Conn, error) {
	conn, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
	if err != nil {
		return nil, fmt.Errorf("connecting to ZooKeeper at %s: %w", addr, err)
	}
	return conn, nil
}

func (d *demo) registerProviders(w zktest.DubboWriter) error {
	d.command("zktest.DubboWriter.Register: create %s/<provider URL, URL-encoded>", zktest.DubboProvidersPath(dubboIface))
	ips := []string{"10.50.0.1", "10.50.0.2", "10.50.0.3"}
	for _, ip := range ips {
		d.say("    %s", greeter(ip).URL())
		if err := w.Register(greeter(ip)); err != nil {
			return err
		}
	}
	d.note("    A Dubbo 2 provider registers its URL, URL-encoded, as the name of a znode under")
	d.note("    /dubbo/<interface>/providers (an ephemeral one: here they are persistent, so that they")
	d.note("    outlive the demo's session with DEMO_KEEP=1).")
	listed, err := w.Providers(dubboIface)
	if err != nil {
		return err
	}
	if !slices.Equal(listed, greeterURLs(ips...)) {
		return fmt.Errorf("ZooKeeper lists under %s: %v; want the three providers", zktest.DubboProvidersPath(dubboIface), listed)
	}
	d.ok("ZooKeeper lists 3 providers under %s, decoded:", zktest.DubboProvidersPath(dubboIface))
	d.indent(strings.Join(listed, "\n"))
	return nil
}

var sessionEstablished = regexp.MustCompile(`msg="ZooKeeper session established".* session=(0x[0-9a-f]+)`)

func (d *demo) startGalleonZooKeeper(ctx context.Context, zkAddr string) (*daemon, string, error) {
	t0 := time.Now()
	args := []string{"--zk-servers", zkAddr, "--zk-layout", "dubbo", "--zk-session-timeout", "2s",
		"--zk-unreachable-after", "1500ms", "--debounce-quiet", "20ms"}
	d.command("galleon-zookeeper %s", strings.Join(args, " "))
	g, err := d.startDaemon(ctx, "galleon-zookeeper", args...)
	if err != nil {
		return nil, "", err
	}
	err = d.waitUntil(ctx, 20*time.Second, "galleon-zookeeper serves default/org-apache-demo-greetingservice-1-0-0--<hash>", func(ctx context.Context) (bool, error) {
		names, err := d.names(ctx, g)
		return err == nil && len(names) == 1 && strings.HasPrefix(names[0], "default/org-apache-demo-greetingservice-1-0-0--"), err
	})
	if err != nil {
		return nil, "", err
	}
	d.ok("galleon-zookeeper (pid %d) serves MCP on %s, ready %s after its start", g.srv.Pid(), g.XDS, since(t0))
	session := lastMatch(sessionEstablished, readFile(g.LogPath))
	if session == "" {
		return nil, "", errors.New(`galleon-zookeeper logged no "ZooKeeper session established ... session=0x..."`)
	}
	d.ok("its ZooKeeper session: %s (2 s timeout)", session)
	d.hints = append(d.hints, fmt.Sprintf("Follow what galleon-zookeeper serves: %s watch --addr %s --delta", d.galleonctlPath(), g.XDS))
	return g, session, nil
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// lastMatch is the first group of re's last match in text, or "".
func lastMatch(re *regexp.Regexp, text string) string {
	ms := re.FindAllStringSubmatch(text, -1)
	if len(ms) == 0 {
		return ""
	}
	return ms[len(ms)-1][1]
}

// dubboShown shows what galleon-zookeeper serves and istiod holds, checks the Dubbo
// ServiceEntry, and returns its name and the counters.
func (d *demo) dubboShown(ctx context.Context, g *daemon) (string, istiod.PushCounters, error) {
	d.heading("L. What galleon-zookeeper serves")
	d.command("galleonctl get --addr %s -o names", g.XDS)
	names, err := d.names(ctx, g)
	if err != nil {
		return "", istiod.PushCounters{}, err
	}
	d.indent(strings.Join(names, "\n"))
	d.say("")
	if err := d.showYAML(ctx, g, "", "the one service"); err != nil {
		return "", istiod.PushCounters{}, err
	}
	d.note("    One ServiceEntry per (interface, group, version): a readable name plus 10 hex digits of a")
	d.note("    hash (lower-casing the interface is lossy), host <name>.default.dubbo; scheme dubbo gives")
	d.note("    a TCP port named tcp-dubbo; weight and application/side/version become endpoint fields.")

	d.heading("M. What istiod holds: three registries")
	es, err := d.showEntries(ctx)
	if err != nil {
		return "", istiod.PushCounters{}, err
	}
	e, err := checkDubboEntry(es)
	if err != nil {
		return "", istiod.PushCounters{}, err
	}
	d.ok("%s: host %s, port 20880/TCP tcp-dubbo, 3 endpoints (%s)", e.Name, e.hosts(), e.addresses())
	c, err := d.showCounters(ctx, "(restarted) so far")
	return e.Name, c, err
}

var dubboName = regexp.MustCompile(`^default/org-apache-demo-greetingservice-1-0-0--[0-9a-f]{10}$`)

func checkDubboEntry(es []entry) (entry, error) {
	var dubbo []entry
	for _, e := range es {
		if strings.HasSuffix(e.hosts(), ".default.dubbo") {
			dubbo = append(dubbo, e)
		}
	}
	if len(dubbo) != 1 {
		return entry{}, fmt.Errorf("istiod holds %d ServiceEntries with a host ending in .default.dubbo; want 1", len(dubbo))
	}
	e := dubbo[0]
	if !dubboName.MatchString(e.Name) {
		return e, fmt.Errorf("istiod's Dubbo ServiceEntry is named %q; want default/org-apache-demo-greetingservice-1-0-0--<10 hex digits>", e.Name)
	}
	if e.hosts() != strings.TrimPrefix(e.Name, "default/")+".default.dubbo" {
		return e, fmt.Errorf("istiod's %s has hosts %s", e.Name, e.hosts())
	}
	if e.ports() != "20880/TCP" || list(e.PortNames) != "tcp-dubbo" || e.addresses() != "10.50.0.1,10.50.0.2,10.50.0.3" {
		return e, fmt.Errorf("istiod's %s is %+v; want port 20880/TCP named tcp-dubbo and endpoints 10.50.0.1,10.50.0.2,10.50.0.3", e.Name, e)
	}
	return e, nil
}

// zkReads are the reads galleon-zookeeper has sent to ZooKeeper so far: every op and result but
// its liveness probes, which go out on a timer while the connection is idle, not for a change.
func zkReads(ctx context.Context, g *daemon) (float64, error) {
	body, err := g.get(ctx, "/metrics")
	if err != nil {
		return 0, fmt.Errorf("galleon-zookeeper's /metrics does not answer: %w", err)
	}
	fams, err := istiod.ParseMetrics(body)
	if err != nil {
		return 0, err
	}
	all, err := istiod.MetricValue(fams, "galleon_zookeeper_requests_total", nil)
	if err != nil {
		return 0, err
	}
	probes, err := istiod.MetricValue(fams, "galleon_zookeeper_requests_total", map[string]string{"op": "probe"})
	if err != nil && !errors.Is(err, istiod.ErrMetricNotFound) {
		return 0, err
	}
	return all - probes, nil
}

func (d *demo) providerLeaves(ctx context.Context, w zktest.DubboWriter, g *daemon, name string, before istiod.PushCounters) (istiod.PushCounters, error) {
	d.heading("N. A provider leaves: 10.50.0.3")
	d.command("zktest.DubboWriter.Unregister: delete %s", greeter("10.50.0.3").Path())
	reads0, err := zkReads(ctx, g)
	if err != nil {
		return before, err
	}
	t0 := time.Now()
	if err := w.Unregister(greeter("10.50.0.3")); err != nil {
		return before, err
	}
	after, err := d.dubboEndpoints(ctx, name, "10.50.0.1,10.50.0.2", before)
	if err != nil {
		return before, err
	}
	d.ok("istiod has it %s after the delete: endpoints 10.50.0.1,10.50.0.2", since(t0))
	if err := d.edsOnly(before, after, "a provider leaving", "an endpoint-only (EDS) update, no full push"); err != nil {
		return after, err
	}
	reads, err := zkReads(ctx, g)
	if err != nil {
		return after, err
	}
	d.ok("galleon-zookeeper sent %.0f read to ZooKeeper for it (galleon_zookeeper_requests_total)", reads-reads0)
	if reads-reads0 != 1 {
		return after, fmt.Errorf("galleon-zookeeper sent %.0f reads to ZooKeeper for one provider leaving; want 1 (the providers list)", reads-reads0)
	}
	d.note("    Its children watch on providers fired: it read that list again, nothing else.")
	return after, nil
}

// dubboEndpoints waits until istiod's Dubbo ServiceEntry has the endpoints want and istiod has
// pushed since before.
func (d *demo) dubboEndpoints(ctx context.Context, name, want string, before istiod.PushCounters) (istiod.PushCounters, error) {
	if _, err := d.waitEntry(ctx, "istiod holds "+name+" with endpoints "+want, name,
		func(e entry, _ bool) bool { return e.addresses() == want }); err != nil {
		return before, err
	}
	return d.pushed(ctx, before)
}

func (d *demo) sessionExpires(ctx context.Context, w zktest.DubboWriter, server *zktest.Server, g *daemon, name, session string, before istiod.PushCounters) error {
	d.heading("O. The adapter's ZooKeeper session expires while providers change")
	d.say("    galleon-zookeeper's session %s, as ZooKeeper lists its connection (cons):", session)
	cons, err := server.FourLetter("cons")
	if err != nil {
		return fmt.Errorf("ZooKeeper's cons: %w", err)
	}
	conn := connOf(cons, session)
	if conn == "" {
		return fmt.Errorf("ZooKeeper's cons does not list galleon-zookeeper's session %s", session)
	}
	d.indent(conn)
	d.command("kill -STOP %d    %s", g.srv.Pid(), d.dimmed("# galleon-zookeeper: no more pings, its session times out"))
	if err := g.srv.Pause(); err != nil {
		return err
	}
	t0 := time.Now()
	if err := d.changeWhilePaused(w, t0); err != nil {
		return err
	}
	if err := d.waitUntil(ctx, 30*time.Second, "ZooKeeper expires session "+session+" (cons no longer lists it)", func(context.Context) (bool, error) {
		cons, err := server.FourLetter("cons")
		return err == nil && cons != "" && connOf(cons, session) == "", err
	}); err != nil {
		return err
	}
	d.ok("ZooKeeper expired session %s %s after the stop: cons no longer lists it", session, since(t0))
	e, _, err := d.entry(ctx, name)
	if err != nil {
		return err
	}
	if e.addresses() != "10.50.0.1,10.50.0.2" {
		return fmt.Errorf("istiod's %s changed while galleon-zookeeper was stopped: %+v", name, e)
	}
	d.say("    istiod still holds %s: the adapter has not heard of it yet", e.addresses())
	return d.resumeAndRelist(ctx, g, name, session, before)
}

// connOf is the line of cons's answer that lists session, its leading blanks trimmed.
func connOf(cons, session string) string {
	for _, line := range strings.Split(cons, "\n") {
		if strings.Contains(line, "sid="+session+",") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

func (d *demo) changeWhilePaused(w zktest.DubboWriter, stopped time.Time) error {
	d.command("zktest.DubboWriter: delete %s", greeter("10.50.0.2").Path())
	d.say("                      create %s", greeter("10.50.0.4").Path())
	if err := w.Unregister(greeter("10.50.0.2")); err != nil {
		return err
	}
	if err := w.Register(greeter("10.50.0.4")); err != nil {
		return err
	}
	listed, err := w.Providers(dubboIface)
	if err != nil {
		return err
	}
	if !slices.Equal(listed, greeterURLs("10.50.0.1", "10.50.0.4")) {
		return fmt.Errorf("ZooKeeper lists under %s: %v; want 10.50.0.1 and 10.50.0.4", zktest.DubboProvidersPath(dubboIface), listed)
	}
	d.ok("ZooKeeper now lists 10.50.0.1 and 10.50.0.4 (%s after the stop)", since(stopped))
	return nil
}

var relisting = regexp.MustCompile(`msg="ZooKeeper session expired: relisting.* new_session=(0x[0-9a-f]+)`)

func (d *demo) resumeAndRelist(ctx context.Context, g *daemon, name, session string, before istiod.PushCounters) error {
	d.command("kill -CONT %d", g.srv.Pid())
	if err := g.srv.Resume(); err != nil {
		return err
	}
	t1 := time.Now()
	after, err := d.dubboEndpoints(ctx, name, "10.50.0.1,10.50.0.4", before)
	if err != nil {
		return err
	}
	d.ok("istiod has it %s after galleon-zookeeper resumed: endpoints 10.50.0.1,10.50.0.4", since(t1))
	var newSession string
	if err := d.waitUntil(ctx, 10*time.Second, `galleon-zookeeper logs "ZooKeeper session expired: relisting ..."`, func(context.Context) (bool, error) {
		newSession = lastMatch(relisting, readFile(g.LogPath))
		return newSession != "", nil
	}); err != nil {
		return err
	}
	if newSession == session {
		return fmt.Errorf("galleon-zookeeper logged no new session id after the expiry (got %s)", newSession)
	}
	d.ok("galleon-zookeeper relisted on a new session (%s -> %s)", session, newSession)
	if err := d.edsOnly(before, after, "the session expiry and its relisting", "the relisting sent only the difference, EDS-only"); err != nil {
		return err
	}
	d.note("    Every watch died with the session; on the new one the adapter read /dubbo and each")
	d.note("    interface's lists again and compared with what it had served: only endpoints differed.")
	return nil
}

var zkLogLines = regexp.MustCompile(`msg="(ZooKeeper session|registry (un)?reachable|reconnected)`)
var zkLogNoise = regexp.MustCompile(` registry=zookeeper| zookeeper=\S+ root=\S+ layout=\S+`)

func (d *demo) zookeeperOwnView(ctx context.Context, g *daemon) error {
	d.heading("P. galleon-zookeeper's own view: its log and metrics")
	picked := d.showLog(g, zkLogLines, zkLogNoise, "registry=, zookeeper=, root=, layout=")
	if len(picked) == 0 {
		return errors.New("galleon-zookeeper's log has no session lines")
	}
	d.note("    Resumed, the client found its connection closed, connected again at once, learnt that")
	d.note("    its session had expired and got a new one straight away (the adapter's host provider")
	d.note("    pauses only once every server has been tried).")
	if slices.ContainsFunc(picked, func(l string) bool { return strings.Contains(l, "registry unreachable") }) {
		d.note("    With no session for --zk-unreachable-after (1.5s) the adapter reported the registry")
		d.note("    unreachable and kept serving what it had read last: istiod saw nothing of the outage.")
	}
	d.say("")
	body, err := d.showMetrics(ctx, g, `^galleon_zookeeper_(session_events|requests|relists)_total`)
	if err != nil {
		return err
	}
	if err := checkZooKeeperMetrics(body); err != nil {
		return err
	}
	d.note("    Only children lists are read in the Dubbo layout (a provider is its znode's name); no_node:")
	d.note("    the interface has no configurators znode (overrides), so it is watched through the interface.")
	return nil
}

func checkZooKeeperMetrics(body []byte) error {
	fams, err := istiod.ParseMetrics(body)
	if err != nil {
		return err
	}
	value := func(event string) float64 {
		v, _ := istiod.MetricValue(fams, "galleon_zookeeper_session_events_total", map[string]string{"event": event})
		return v
	}
	if value("expired") < 1 {
		return errors.New(`galleon_zookeeper_session_events_total{event="expired"} is not counted`)
	}
	if value("established") < 2 {
		return errors.New(`galleon_zookeeper_session_events_total{event="established"} counts fewer than 2 sessions`)
	}
	if _, err := istiod.MetricValue(fams, "galleon_zookeeper_requests_total", nil); err != nil {
		return fmt.Errorf("galleon-zookeeper exports no galleon_zookeeper_requests_total: %w", err)
	}
	return nil
}
