// Command demo is Galleon's demo: galleon-file, then galleon-consul, then galleon-zookeeper, then
// galleon-eureka, then galleon-nacos, then galleon-fleet feed a real istiod 1.29.2, and every
// registry change shows up in istiod.
//
//	cd test && go run ./demo          (or: make demo)
//	DEMO_KEEP=1 go run ./demo         leave every server, adapter and istiod running afterwards
//
// It builds galleon-file, galleon-consul, galleon-zookeeper, galleon-eureka, galleon-nacos and
// galleonctl, and gets istiod, Consul 1.22.6, ZooKeeper and polaris-server 1.18.1 (a Eureka API
// and a Nacos API server) from the test harnesses (test/istiod, consultest, zktest, eurekatest,
// nacostest), which build or install them when they are missing. Six acts:
//
//   - file: what Galleon serves (galleonctl), what istiod holds (/debug/configz), an instance that
//     moves (an EDS-only update: no full push), a new port (one full push), a removed service;
//   - Consul: one agent, services registered in its catalog, a health check that turns critical
//     and back (EDS-only), a deregistered service, galleon-consul's /debug/status and metrics;
//   - ZooKeeper: three Dubbo 2 providers, one that leaves (EDS-only), and galleon-zookeeper's
//     session expiring while providers change (it relists; EDS-only), its log and metrics;
//   - Eureka: two polaris-servers A and B (every change made in both, as a Eureka cluster's peers
//     would copy it), an instance taken OUT_OF_SERVICE (EDS-only), then A crashes (SIGKILL) and
//     an instance registered in B alone reaches istiod through B (EDS-only);
//   - Nacos: polaris-server's Nacos API, services registered through Nacos's official Go client
//     (gRPC), an instance disabled (EDS-only), a service in a new group, a removed service;
//   - galleon-fleet: the file directory and the Consul agent in one process and one istiod
//     configSource, a host both have merged, then Consul preferred by a live edit of the registry
//     list, then ZooKeeper added to it live.
//
// Every step is checked: the demo exits non-zero, with one line saying what did not happen and
// the tail of every log, if anything does not happen as told. Processes are stopped on exit,
// failure or Ctrl-C (unless DEMO_KEEP=1 and all went well). Colour only on a terminal and
// without NO_COLOR.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
	"github.com/galleon-mesh/galleon/test/istiod"
)

// demo is one run: where its files are, the processes it started, and the istiod of the moment.
type demo struct {
	*narrator
	dir, binDir, logDir string
	keep                bool // DEMO_KEEP=1: leave everything running after a success
	crew                crew
	client              *http.Client

	pilot     istiod.Release // the istiod the demo runs
	ist       *istiod.Istiod
	istMember *member
	daemons   map[string]*daemon // the galleon binaries running, by name
	// The registries of the acts, for galleon-fleet's act: the file directory, the Consul
	// agent, ZooKeeper's address.
	fileDir, zkAddr string
	consul          *consultest.Agent

	// what DEMO_KEEP=1 prints on how to use what runs
	hints []string
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == heartbeatsCommand {
		os.Exit(heartbeatsMain(os.Args[2]))
	}
	os.Exit(run())
}

// run runs the demo and returns the exit code.
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	d, err := newDemo()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return 1
	}
	err = d.tell(ctx)
	switch {
	case err == nil && d.keep:
		d.keepRunning()
		return 0
	case err == nil:
		d.crew.stopAll()
		os.RemoveAll(d.dir)
		return 0
	case ctx.Err() != nil:
		fmt.Fprintf(os.Stderr, "\n%sinterrupted%s: stopping every process the demo started\n", d.bold, d.resetSGR)
		d.crew.stopAll()
		os.RemoveAll(d.dir)
		return 130
	default:
		d.failed(err, d.crew.logs())
		d.crew.stopAll()
		fmt.Fprintf(os.Stderr, "processes stopped; logs kept in %s\n", d.dir)
		return 1
	}
}

func newDemo() (*demo, error) {
	dir, err := os.MkdirTemp("", "galleon-demo.")
	if err != nil {
		return nil, err
	}
	d := &demo{
		narrator: newNarrator(os.Stdout),
		dir:      dir, binDir: filepath.Join(dir, "bin"), logDir: filepath.Join(dir, "logs"),
		keep:    os.Getenv("DEMO_KEEP") == "1",
		client:  serverproc.LoopbackClient(4),
		daemons: map[string]*daemon{},
	}
	for _, p := range []string{d.binDir, d.logDir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// tell tells the five stories, in order.
func (d *demo) tell(ctx context.Context) error {
	d.say("%sGalleon demo%s: Galleon's file adapter (galleon-file) serves the services of a directory of", d.bold, d.resetSGR)
	d.say(`YAML files to a real istiod %s over MCP-over-xDS (istiod's configSources: xds://...).
We edit the files and watch each change arrive in istiod. Then Galleon's Consul adapter
(galleon-consul) does the same for a Consul 1.22.6 catalog: health checks fail and recover,
a service is deregistered. Then Galleon's ZooKeeper adapter (galleon-zookeeper) serves Dubbo
providers registered in ZooKeeper 3.8: a provider leaves, and its ZooKeeper session expires
while providers change. Then Galleon's Eureka adapter (galleon-eureka) serves an application
registered in two Eureka API servers (polaris-server 1.18.1): an instance is taken out of
service, then the server galleon-eureka reads crashes and the other one takes over. Last,
Galleon's Nacos adapter (galleon-nacos) serves services registered through Nacos's official Go
client in a Nacos API server (polaris-server's): an instance is disabled, a service appears in
a new group, another is removed. Then galleon-fleet serves the file directory and the Consul
catalog from one process, a host both have merged, and ZooKeeper joins its registry list live.`, istiod.Version)
	for _, act := range []func(context.Context) error{d.fileAct, d.consulAct, d.zookeeperAct, d.eurekaAct, d.nacosAct, d.fleetAct} {
		if err := act(ctx); err != nil {
			return err
		}
	}
	d.heading("Done")
	d.ok("every step checked, in %s", since(d.start))
	return nil
}

// keepRunning prints where everything is (DEMO_KEEP=1) and how to stop it.
func (d *demo) keepRunning() {
	d.say("\n%sStill running (DEMO_KEEP=1):%s", d.bold, d.resetSGR)
	var pids []string
	for _, m := range d.crew.list() {
		if msg := m.keepMsg(); msg != "" {
			d.say("  %-18s %s", m.name, msg)
		}
		pids = append(pids, fmt.Sprint(m.pid()))
	}
	d.say("")
	for _, h := range d.hints {
		d.say("  %s", h)
	}
	d.say("  Stop everything:                      kill %s; rm -rf %s", strings.Join(pids, " "), d.dir)
}
