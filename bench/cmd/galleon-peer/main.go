// Command galleon-peer is a benchmark peer, never part of the product: it serves the workload
// galleon-file serves, from go-control-plane v0.14.0's own LinearCache and ADS servers (SotW and
// Delta), so that galleon-load can drive both with the same sinks in one run
// (galleon-bench peer, docs/benchmarks.md "Against a peer").
//
// It reads the registry directory exactly as galleon-file does (Galleon's file adapter,
// pipeline and snapshot store, imported from the main module), and on every change re-puts the
// full ServiceEntry set into the LinearCache with SetResources. The resources are galleon-file's:
// same names, same istio.mcp.v1alpha1.Resource bytes.
//
//	galleon-load generate --dir /tmp/reg --services 10000 --instances 10
//	galleon-peer --dir /tmp/reg --listen 127.0.0.1:16020 --http 127.0.0.1:16024 \
//	  --type type.googleapis.com/istio.mcp.v1alpha1.Resource --debounce-quiet 1ms --debounce-max 10ms &
//	galleon-load run --addr 127.0.0.1:16020 --dir /tmp/reg --type type.googleapis.com/istio.mcp.v1alpha1.Resource \
//	  --sinks 10 --protocol delta --metrics http://127.0.0.1:16024/metrics
//
// Type URLs: go-control-plane stamps the type URL a sink asked for on every resource it sends
// (the Any around each resource), where galleon-file sends every resource as an Any of
// type.googleapis.com/istio.mcp.v1alpha1.Resource whatever the collection (what istiod reads).
// Asked for that type URL, the peer's resources are the same Any bytes as galleon-file's; asked
// for networking.istio.io/v1/ServiceEntry (the default, what istiod and galleon-load ask for)
// they carry that type URL instead, which istiod would skip and galleon-load's check of the
// last change rejects.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/galleon-mesh/galleon/internal/pipeline"
)

func main() {
	var (
		cfg      Config
		listen   string
		httpAddr string
		types    string
		level    string
	)
	flag.StringVar(&cfg.Dir, "dir", "", "directory holding the registry's *.yaml files, as galleon-file's --file-dir (required)")
	flag.StringVar(&cfg.Namespace, "namespace", "default", "namespace of services whose file gives none, as galleon-file's --namespace")
	flag.StringVar(&listen, "listen", "127.0.0.1:16020", "gRPC address serving go-control-plane's ADS (SotW and Delta)")
	flag.StringVar(&httpAddr, "http", "127.0.0.1:16024", "HTTP address for /metrics, /healthz and /readyz")
	flag.StringVar(&types, "type", "networking.istio.io/v1/ServiceEntry", "type URLs to serve the ServiceEntries under, comma-separated, one LinearCache each (type.googleapis.com/istio.mcp.v1alpha1.Resource: the resources are then galleon-file's Any bytes)")
	flag.StringVar(&cfg.AnyTypeURL, "any-type-url", "", "type URL of the Any around each served resource in SotW responses, in place of the request's (go-control-plane's); istiod needs type.googleapis.com/istio.mcp.v1alpha1.Resource")
	flag.DurationVar(&cfg.ScanQuiet, "file-scan-quiet", 0, "galleon-file's --file-scan-quiet (0: its default)")
	flag.DurationVar(&cfg.Quiet, "debounce-quiet", pipeline.DefaultQuiet, "registry changes are served once none came for this long, as galleon-file's --debounce-quiet")
	flag.DurationVar(&cfg.MaxDelay, "debounce-max", pipeline.DefaultMaxDelay, "longest a stream of registry changes may hold serving back, as galleon-file's --debounce-max")
	flag.StringVar(&level, "log-level", "info", "log level: debug (one line per re-put), info, warn or error")
	flag.Parse()
	if cfg.Dir == "" {
		fail(2, errors.New("--dir is required"))
	}
	if cfg.Quiet <= 0 || cfg.MaxDelay <= 0 {
		fail(2, errors.New("--debounce-quiet and --debounce-max must be positive durations such as 100ms"))
	}
	for _, t := range strings.Split(types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.TypeURLs = append(cfg.TypeURLs, t)
		}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		fail(2, fmt.Errorf("--log-level %q: want debug, info, warn or error", level))
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))

	p, err := New(cfg)
	if err != nil {
		fail(2, err)
	}
	grpcLis, err := net.Listen("tcp", listen)
	if err != nil {
		fail(1, fmt.Errorf("--listen: %w", err))
	}
	httpLis, err := net.Listen("tcp", httpAddr)
	if err != nil {
		grpcLis.Close()
		fail(1, fmt.Errorf("--http: %w", err))
	}
	cfg.Logger.Info("serving", "listen", grpcLis.Addr().String(), "http", httpLis.Addr().String(), "types", cfg.TypeURLs,
		"debounce_quiet", cfg.Quiet, "debounce_max", cfg.MaxDelay)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := p.Run(ctx, grpcLis, httpLis); err != nil {
		cfg.Logger.Error("stopped", "error", err)
		stop()
		os.Exit(1)
	}
	cfg.Logger.Info("stopped")
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "galleon-peer:", err)
	os.Exit(code)
}
