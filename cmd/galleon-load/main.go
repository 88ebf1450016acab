// Command galleon-load measures a running Galleon source the way istiod
// uses it: it connects N sinks, waits for the initial state, rewrites one
// service in the source's file registry N times and reports how long each
// change took to reach every sink, the bytes sent and the source's memory.
//
//	galleon-load generate --dir /tmp/reg --services 10000 --instances 10
//	galleon-file --dir /tmp/reg --listen 127.0.0.1:16010 --http 127.0.0.1:16014 &
//	galleon-load run --addr 127.0.0.1:16010 --dir /tmp/reg --sinks 10 --protocol sotw \
//	  --metrics http://127.0.0.1:16014/metrics
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
	"os"
	"os/signal"
	"time"

	"github.com/galleon-mesh/galleon/internal/loadtest"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	switch os.Args[1] {
	case "generate":
		fs := flag.NewFlagSet("generate", flag.ExitOnError)
		var cfg loadtest.GenerateConfig
		fs.StringVar(&cfg.Dir, "dir", "", "directory to write the file registry into (required)")
		fs.IntVar(&cfg.Services, "services", 10000, "number of services")
		fs.IntVar(&cfg.Instances, "instances", 10, "instances per service")
		fs.IntVar(&cfg.PerFile, "per-file", 500, "services per YAML file")
		_ = fs.Parse(os.Args[2:])
		if cfg.Dir == "" {
			fail("generate: --dir is required")
		}
		if err := loadtest.Generate(cfg); err != nil {
			fail(err.Error())
		}
		fmt.Printf("wrote %d services x %d instances to %s\n", cfg.Services, cfg.Instances, cfg.Dir)
	case "run":
		fs := flag.NewFlagSet("run", flag.ExitOnError)
		cfg := loadtest.RunConfig{Progress: os.Stderr}
		fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:16010", "the source's gRPC address")
		fs.IntVar(&cfg.Sinks, "sinks", 10, "connected sinks")
		fs.IntVar(&cfg.StuckSinks, "stuck-sinks", 0, "SotW sinks connected as well that subscribe and then never read: what they cost the others")
		fs.StringVar(&cfg.Protocol, "protocol", "sotw", "sotw (what istiod uses), delta, mcp or mcp-incremental (legacy MCP, collection istio/networking/v1alpha3/serviceentries)")
		fs.StringVar(&cfg.TypeURL, "type", "networking.istio.io/v1/ServiceEntry", "type URL the ADS sinks ask for")
		fs.StringVar(&cfg.Dir, "dir", "", "the source's file registry directory, to make changes in (empty: measure the initial sync only)")
		fs.IntVar(&cfg.Instances, "instances", 10, "instances of the changed service")
		fs.IntVar(&cfg.Changes, "changes", 100, "changes to make, one at a time")
		fs.DurationVar(&cfg.Interval, "interval", 50*time.Millisecond, "pause after each change has reached every sink")
		fs.StringVar(&cfg.MetricsURL, "metrics", "", "the source's /metrics URL, to report its resident memory")
		fs.DurationVar(&cfg.Timeout, "timeout", time.Minute, "longest wait for the initial sync or one change")
		_ = fs.Parse(os.Args[2:])
		rep, err := loadtest.Run(ctx, cfg)
		if err != nil {
			fail(err.Error())
		}
		fmt.Print(rep.String())
	case "attack":
		fs := flag.NewFlagSet("attack", flag.ExitOnError)
		addr := fs.String("addr", "127.0.0.1:16010", "the source's gRPC address")
		attackers := fs.Int("attackers", 4, "hostile clients, each making the three attacks in turn (made-up type URLs, 3 MB Delta subscriptions, 1 MB NACKs)")
		typeURL := fs.String("type", "networking.istio.io/v1/ServiceEntry", "type URL the Delta and NACK attacks ask for")
		duration := fs.Duration("duration", time.Minute, "how long to attack")
		_ = fs.Parse(os.Args[2:])
		ctx, cancel := context.WithTimeout(ctx, *duration)
		defer cancel()
		stats, err := loadtest.RunAttackers(ctx, *addr, *typeURL, *attackers)
		if err != nil {
			fail(err.Error())
		}
		fmt.Println(stats.String())
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: galleon-load generate|run|attack [flags]   (galleon-load run -h for the flags)")
	os.Exit(2)
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "galleon-load:", msg)
	os.Exit(1)
}
