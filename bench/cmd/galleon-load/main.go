// Command galleon-load measures a running Galleon source the way istiod
// uses it: it connects N sinks, waits for the initial state, changes one
// service in the source's registry (files, ZooKeeper, Eureka or Nacos) N times and
// reports how long each change took to reach every sink, the bytes sent
// and the source's memory.
//
//	galleon-load generate --dir /tmp/reg --services 10000 --instances 10
//	galleon-file --file-dir /tmp/reg --listen 127.0.0.1:16010 --http 127.0.0.1:16014 &
//	galleon-load run --addr 127.0.0.1:16010 --dir /tmp/reg --sinks 10 --protocol sotw \
//	  --metrics http://127.0.0.1:16014/metrics
//
// Against ZooKeeper, zk-generate writes the registry into a running
// ZooKeeper (persistent znodes, in batched transactions; it can be run
// again) and each change of run is one ZooKeeper transaction: a provider of
// org.galleon.load.Target leaving as another joins (Dubbo layout), or one
// instance of load-target rewritten with a new address (--zk-layout
// curator, Curator / Spring Cloud Zookeeper). With --metrics, run also
// reports the source's ZooKeeper requests per change. A ZooKeeper for it
// (from the repository's root):
// java -cp "$(go run ./internal/testing/devtool zookeeper classpath)"
// org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg (clientPort=2181).
//
//	galleon-load zk-generate --zk-servers 127.0.0.1:2181 --layout dubbo --services 10000 --instances 10
//	galleon-zookeeper --zk-servers 127.0.0.1:2181 --zk-layout dubbo --listen 127.0.0.1:16010 --http 127.0.0.1:16014 &
//	galleon-load run --addr 127.0.0.1:16010 --zk-servers 127.0.0.1:2181 --zk-layout dubbo --sinks 10 --protocol sotw \
//	  --metrics http://127.0.0.1:16014/metrics
//
// Against Eureka, eureka-generate registers the registry through a running
// Eureka server's REST API (applications LOAD-00000... and LOAD-TARGET) and
// then keeps running: it renews every instance (a Eureka server drops
// instances that stop renewing) and, with --churn-percent, registers that
// share of the instances again with new metadata every --churn-interval,
// until it is stopped (Ctrl-C or SIGTERM). Each change of run --eureka-url
// registers an instance of LOAD-TARGET again at a new address; since churn
// moves the served version on too, the run finds the version holding each
// change with a stream of its own that decodes the target's ServiceEntry.
// It also reports when the server listed each change. A Eureka API server:
// PolarisMesh's polaris-server, built by `go run ./internal/testing/devtool build
// polaris-server` and configured by eurekatest.Config (`galleon-bench eureka`
// runs one).
//
//	galleon-load eureka-generate --eureka-url http://127.0.0.1:8761/eureka --apps 2000 --instances 10 \
//	  --churn-percent 1 --churn-interval 10s &
//	galleon-eureka --eureka-urls http://127.0.0.1:8761/eureka --listen 127.0.0.1:16010 --http 127.0.0.1:16014 &
//	galleon-load run --addr 127.0.0.1:16010 --eureka-url http://127.0.0.1:8761/eureka --sinks 10 --protocol delta \
//	  --changes 50 --interval-jitter 10s --metrics http://127.0.0.1:16014/metrics
//
// Against Nacos, nacos-generate registers the registry through a running Nacos server's gRPC
// API (its HTTP port + 1000): services load-00000... and load-target in one namespace and group,
// one InstanceRequest each, ephemeral instances held by its connection (no heartbeat needed; the
// server drops them when it stops), then keeps running to make --churn changes a second (a new
// metadata value, or weight, of one instance each) until it is stopped. Each change of run
// --nacos-server registers the run's own instance of load-target (registered at its start,
// dropped at its end) again with a new metadata value ("churn", a token of the run and the change);
// the run finds the version holding it with a stream of its own that looks for the token among
// the endpoints' labels, and times each change to the server listing it too. A Nacos API
// server: PolarisMesh's polaris-server, as adapters/nacos/nacostest runs it (`galleon-bench
// nacos` runs one).
//
//	galleon-load nacos-generate --nacos-server 127.0.0.1:8848 --services 10000 --instances 10 --churn 10 &
//	galleon-nacos --nacos-servers 127.0.0.1:8848 --listen 127.0.0.1:16010 --http 127.0.0.1:16014 &
//	galleon-load run --addr 127.0.0.1:16010 --nacos-server 127.0.0.1:8848 --sinks 10 --protocol delta \
//	  --changes 50 --interval-jitter 1s --metrics http://127.0.0.1:16014/metrics
//
// galleon-load floor is a null source in a process of its own: it copies a running source's
// first SotW and Delta responses once and answers every subscription with them, so that run
// against it measures the floor of an initial sync across processes
// (galleon-bench sync-floor):
//
//	galleon-load floor --from 127.0.0.1:16010 --listen 127.0.0.1:16020 &
//	galleon-load run --addr 127.0.0.1:16020 --sinks 10 --protocol delta
//
// galleon-load attack runs hostile clients against a source for a while
// (run it beside galleon-load run to see what they cost the sinks):
//
//	galleon-load attack --addr 127.0.0.1:16010 --attackers 4 --duration 1m
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/bench/internal/loadgen"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	// SIGTERM too: eureka-generate runs until stopped, and reports what it
	// did when it is.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch os.Args[1] {
	case "generate":
		fs := flag.NewFlagSet("generate", flag.ExitOnError)
		var cfg filegen.GenerateConfig
		fs.StringVar(&cfg.Dir, "dir", "", "directory to write the file registry into (required)")
		fs.IntVar(&cfg.Services, "services", 10000, "number of services")
		fs.IntVar(&cfg.Instances, "instances", 10, "instances per service")
		fs.IntVar(&cfg.PerFile, "per-file", 500, "services per YAML file")
		fs.StringVar(&cfg.Namespace, "namespace", filegen.DefaultNamespace, "namespace of every service (registries with different ones share no host)")
		_ = fs.Parse(os.Args[2:])
		if cfg.Dir == "" {
			fail("generate: --dir is required")
		}
		if err := filegen.Generate(cfg); err != nil {
			fail(err.Error())
		}
		fmt.Printf("wrote %d services x %d instances to %s\n", cfg.Services, cfg.Instances, cfg.Dir)
	case "zk-generate":
		fs := flag.NewFlagSet("zk-generate", flag.ExitOnError)
		cfg := loadgen.ZKGenerateConfig{Progress: os.Stderr}
		servers := fs.String("zk-servers", "127.0.0.1:2181", "ZooKeeper servers to write into, host:port,...")
		fs.StringVar(&cfg.Layout, "layout", loadgen.ZKLayoutDubbo, "dubbo (<root>/<interface>/providers/<URL-encoded provider URL>) or curator (<root>/<name>/<id> JSON): the source's --zk-layout")
		fs.StringVar(&cfg.Root, "root", "", "root znode, the source's --zk-root (default /dubbo for dubbo, /services for curator)")
		fs.IntVar(&cfg.Services, "services", 10000, "number of services (Dubbo interfaces)")
		fs.IntVar(&cfg.Instances, "instances", 10, "instances (providers) per service, at most 250")
		fs.IntVar(&cfg.Concurrency, "concurrency", 8, "ZooKeeper transactions (Multi, up to 500 znodes each) in flight")
		_ = fs.Parse(os.Args[2:])
		cfg.Servers = splitList(*servers)
		st, err := loadgen.ZKGenerate(ctx, cfg)
		if err != nil {
			fail(err.Error())
		}
		fmt.Printf("wrote %d services x %d instances (%s layout) under %s on ZooKeeper %s: %d znodes created, %d there already, in %v\n",
			cfg.Services, cfg.Instances, cfg.Layout, st.Root, strings.Join(cfg.Servers, ","), st.Created, st.Existing, st.Took.Round(time.Millisecond))
	case "eureka-generate":
		fs := flag.NewFlagSet("eureka-generate", flag.ExitOnError)
		cfg := loadgen.EurekaGenerateConfig{Progress: os.Stderr}
		fs.StringVar(&cfg.URL, "eureka-url", "http://127.0.0.1:8761/eureka", "base URL of the Eureka server to register with (what clients call its serviceUrl)")
		fs.IntVar(&cfg.Apps, "apps", 2000, "number of applications (LOAD-00000, ...), besides LOAD-TARGET")
		fs.IntVar(&cfg.Instances, "instances", 10, "instances per application, at most 250")
		fs.IntVar(&cfg.Concurrency, "concurrency", loadgen.DefaultEurekaConcurrency, "requests in flight: renewals, and up to half of them registrations and churn")
		fs.DurationVar(&cfg.RenewInterval, "renew-interval", loadgen.DefaultRenewInterval, "renew each instance this long after its registration, then after each renewal (at most two thirds of --lease-duration)")
		fs.DurationVar(&cfg.LeaseDuration, "lease-duration", loadgen.DefaultLeaseDuration, "the lease the instances declare (leaseInfo durationInSecs; renewalIntervalInSecs a third of it): how long a server keeps an instance whose renewals it has not seen (Polaris: at most 180s, longer ones become 15 s)")
		fs.Float64Var(&cfg.ChurnPercent, "churn-percent", 0, "percent of the instances (LOAD-TARGET's aside) registered again with a new metadata value every --churn-interval, spread evenly; 0: none")
		fs.DurationVar(&cfg.ChurnInterval, "churn-interval", loadgen.DefaultChurnInterval, "the period of --churn-percent: the source's --eureka-poll-interval makes it churn per poll")
		fs.DurationVar(&cfg.ReportInterval, "report-interval", 0, "print the counts (renewals, changes, how late) this often once registered (default: --renew-interval)")
		_ = fs.Parse(os.Args[2:])
		cfg.Registered = func(st loadgen.EurekaGenerateStats) {
			fmt.Printf("registered %d applications x %d instances and %s on %s: %d instances in %v, all listed %v after the start (/apps %d bytes); renewing every %v, churning %d instances every %v until stopped\n",
				cfg.Apps, cfg.Instances, loadgen.TargetApp, cfg.URL, st.Registered, st.RegisterTook.Round(time.Millisecond), st.Listed.Round(time.Millisecond),
				st.ListingBytes, cfg.RenewInterval, st.ChurnPerInterval, cfg.ChurnInterval)
		}
		st, err := loadgen.EurekaGenerate(ctx, cfg)
		if err != nil {
			fail(err.Error())
		}
		fmt.Printf("stopped: %d renewals (%d failed, %d re-registered after a 404, %d first ones before the server listed the instance), %d changes (%d failed), renewals at worst %v behind schedule\n",
			st.Renewals, st.RenewFailures, st.Reregistered, st.NotYetListed, st.Changes, st.ChangeFailures, st.MaxBehind.Round(time.Millisecond))
	case "nacos-generate":
		fs := flag.NewFlagSet("nacos-generate", flag.ExitOnError)
		cfg := loadgen.NacosGenerateConfig{Progress: os.Stderr}
		fs.StringVar(&cfg.Server, "nacos-server", "127.0.0.1:8848", "the Nacos server's HTTP address, host:port (what Nacos clients are given): its service and instance lists are read there")
		fs.StringVar(&cfg.GRPC, "nacos-grpc", "", "the server's gRPC address, where the instances are registered (default: --nacos-server's port + 1000)")
		fs.StringVar(&cfg.PolarisHTTP, "polaris-http", "", "a polaris-server's own HTTP API, host:port (optional): services it lists without any instance after the registrations are written again there, which Polaris's cache needs when it missed them")
		fs.StringVar(&cfg.Namespace, "namespace", loadgen.DefaultNacosNamespace, "Nacos namespace (ID) to register in")
		fs.StringVar(&cfg.Group, "group", loadgen.DefaultNacosGroup, "Nacos group to register in")
		fs.IntVar(&cfg.Services, "services", 10000, "number of services (load-00000, ...), besides "+loadgen.NacosTargetService)
		fs.IntVar(&cfg.Instances, "instances", 10, "instances per service, at most 250")
		fs.IntVar(&cfg.Concurrency, "concurrency", loadgen.DefaultNacosConcurrency, "requests in flight: registrations and churn changes, one instance each")
		fs.Float64Var(&cfg.Churn, "churn", 0, "changes a second once everything is listed, each one instance of a generated service registered again; 0: none")
		fs.StringVar(&cfg.ChurnKind, "churn-kind", loadgen.NacosChurnMetadata, "what a churn change changes: metadata (the key \"churn\") or weight")
		fs.DurationVar(&cfg.ReportInterval, "report-interval", 10*time.Second, "print the churn's counts this often once registered")
		_ = fs.Parse(os.Args[2:])
		cfg.Registered = func(st loadgen.NacosGenerateStats) {
			fmt.Printf("registered %d services x %d instances and %s on %s: %d instances in %v (%d retried, %d registered again), all listed %v after the start; churning %g changes a second until stopped\n",
				cfg.Services, cfg.Instances, loadgen.NacosTargetService, cfg.Server, st.Registered, st.RegisterTook.Round(time.Millisecond), st.Retries,
				st.Reregistered, st.Listed.Round(time.Millisecond), cfg.Churn)
		}
		st, err := loadgen.NacosGenerate(ctx, cfg)
		if err != nil {
			fail(err.Error())
		}
		fmt.Printf("stopped: %d changes (%d failed), at most %d behind schedule\n", st.Changes, st.ChangeFailures, st.MaxBehind)
	case "run":
		fs := flag.NewFlagSet("run", flag.ExitOnError)
		cfg := loadgen.RunConfig{Progress: os.Stderr}
		fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:16010", "the source's gRPC address")
		fs.IntVar(&cfg.Sinks, "sinks", 10, "connected sinks")
		fs.IntVar(&cfg.StuckSinks, "stuck-sinks", 0, "SotW sinks connected as well that subscribe and then never read: what they cost the others")
		fs.StringVar(&cfg.Protocol, "protocol", "sotw", "sotw (what istiod uses), delta, mcp or mcp-incremental (legacy MCP, collection istio/networking/v1alpha3/serviceentries)")
		fs.StringVar(&cfg.TypeURL, "type", "networking.istio.io/v1/ServiceEntry", "type URL the ADS sinks ask for")
		fs.StringVar(&cfg.Dir, "dir", "", "the source's file registry directory, to make changes in (none of this, --zk-servers and --eureka-url: measure the initial sync only)")
		fs.IntVar(&cfg.Instances, "instances", 10, "instances of the changed service (--dir)")
		zkServers := fs.String("zk-servers", "", "the source's ZooKeeper servers, host:port,..., to make changes in (instead of --dir; write the registry with zk-generate)")
		fs.StringVar(&cfg.ZKLayout, "zk-layout", loadgen.ZKLayoutDubbo, "the source's --zk-layout: dubbo or curator")
		fs.StringVar(&cfg.ZKRoot, "zk-root", "", "the source's --zk-root (default /dubbo for dubbo, /services for curator)")
		eurekaURL := fs.String("eureka-url", "", "base URL of a Eureka server the source reads, to make changes in (instead of --dir; register the registry with eureka-generate, and keep it running)")
		eurekaNamespace := fs.String("eureka-namespace", "default", "the source's --namespace (with --eureka-url)")
		nacosServer := fs.String("nacos-server", "", "HTTP address (host:port) of a Nacos server the source reads, to make changes in (instead of --dir; register the registry with nacos-generate)")
		nacosGRPC := fs.String("nacos-grpc", "", "with --nacos-server: the server's gRPC address (default: its port + 1000)")
		nacosNamespace := fs.String("nacos-namespace", loadgen.DefaultNacosNamespace, "with --nacos-server: the namespace nacos-generate registered in")
		nacosGroup := fs.String("nacos-group", loadgen.DefaultNacosGroup, "with --nacos-server: the group nacos-generate registered in")
		jitter := fs.Duration("interval-jitter", 0, "with --eureka-url or --nacos-server: a random extra pause of up to this after each change, so that changes fall at every point of the source's poll cycle (its --eureka-poll-interval) or the server's cache refresh")
		fs.IntVar(&cfg.Changes, "changes", 100, "changes to make, one at a time")
		fs.DurationVar(&cfg.Interval, "interval", 50*time.Millisecond, "pause after each change has reached every sink")
		fs.StringVar(&cfg.MetricsURL, "metrics", "", "the source's /metrics URL, to report its resident memory (and, with --zk-servers, its ZooKeeper requests per change; with --eureka-url, its Eureka requests over the changes; with --nacos-server, its Nacos pushes and requests over them)")
		fs.DurationVar(&cfg.Timeout, "timeout", time.Minute, "longest wait for the initial sync or one change")
		_ = fs.Parse(os.Args[2:])
		cfg.ZKServers = splitList(*zkServers)
		given := 0
		for _, set := range []bool{cfg.Dir != "", len(cfg.ZKServers) > 0, *eurekaURL != "", *nacosServer != ""} {
			if set {
				given++
			}
		}
		if given > 1 {
			fail("run: give one of --dir, --zk-servers, --eureka-url and --nacos-server: the registry the source serves")
		}
		if *nacosServer != "" {
			rep, err := loadgen.RunNacos(ctx, loadgen.NacosRunConfig{RunConfig: cfg, Server: *nacosServer, GRPC: *nacosGRPC,
				Namespace: *nacosNamespace, Group: *nacosGroup, IntervalJitter: *jitter})
			if err != nil {
				fail(err.Error())
			}
			fmt.Print(rep.String())
			return
		}
		if *eurekaURL != "" {
			rep, err := loadgen.RunEureka(ctx, loadgen.EurekaRunConfig{RunConfig: cfg, URL: *eurekaURL, Namespace: *eurekaNamespace, IntervalJitter: *jitter})
			if err != nil {
				fail(err.Error())
			}
			fmt.Print(rep.String())
			return
		}
		rep, err := loadgen.Run(ctx, cfg)
		if err != nil {
			fail(err.Error())
		}
		fmt.Print(rep.String())
	case "floor":
		fs := flag.NewFlagSet("floor", flag.ExitOnError)
		from := fs.String("from", "127.0.0.1:16010", "the source whose first SotW and Delta responses are copied")
		listen := fs.String("listen", "127.0.0.1:16020", "the address to serve the copies on")
		typeURL := fs.String("type", "networking.istio.io/v1/ServiceEntry", "type URL to copy")
		_ = fs.Parse(os.Args[2:])
		floor, err := loadgen.CopyFloor(ctx, *from, *typeURL)
		if err != nil {
			fail("floor: copy the responses of " + *from + ": " + err.Error())
		}
		l, err := net.Listen("tcp", *listen)
		if err != nil {
			fail("floor: " + err.Error())
		}
		sotw, delta := floor.Sizes()
		fmt.Printf("serving the floor on %s: SotW response %d bytes, Delta response %d bytes, copied from %s\n", l.Addr(), sotw, delta, *from)
		if err := floor.Serve(ctx, l); err != nil {
			fail("floor: " + err.Error())
		}
	case "attack":
		fs := flag.NewFlagSet("attack", flag.ExitOnError)
		addr := fs.String("addr", "127.0.0.1:16010", "the source's gRPC address")
		attackers := fs.Int("attackers", 4, "hostile clients, each making the three attacks in turn (made-up type URLs, 3 MB Delta subscriptions, 1 MB NACKs)")
		typeURL := fs.String("type", "networking.istio.io/v1/ServiceEntry", "type URL the Delta and NACK attacks ask for")
		duration := fs.Duration("duration", time.Minute, "how long to attack")
		_ = fs.Parse(os.Args[2:])
		ctx, cancel := context.WithTimeout(ctx, *duration)
		defer cancel()
		stats, err := loadgen.RunAttackers(ctx, *addr, *typeURL, *attackers)
		if err != nil {
			fail(err.Error())
		}
		fmt.Println(stats.String())
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: galleon-load generate|zk-generate|eureka-generate|nacos-generate|run|floor|attack [flags]   (galleon-load run -h for the flags)")
	os.Exit(2)
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "galleon-load:", msg)
	os.Exit(1)
}
