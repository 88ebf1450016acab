package zookeeper

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"text/template"

	"github.com/galleon-mesh/galleon/registry"
)

// Registry watches one ZooKeeper ensemble. It holds configuration only: the state of a watch
// lives in Run, so a Registry can be run again after Run returns.
type Registry struct {
	cfg     Config
	host    *template.Template
	layout  layout
	log     *slog.Logger
	metrics *metrics
}

var _ registry.Registry = (*Registry)(nil)

// New checks cfg and returns the adapter. Its errors are configuration errors, each naming the
// flag to fix.
func New(cfg Config) (*Registry, error) {
	cfg.Servers = slices.Clone(cfg.Servers)
	host, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	for i, s := range cfg.Servers {
		cfg.Servers[i] = strings.TrimSpace(s)
	}
	var l layout = curator{}
	switch cfg.Layout {
	case LayoutDubbo:
		l = newDubbo(cfg.DubboProtocols)
	case LayoutDubbo3:
		l = newDubbo3(cfg.DubboProtocols)
	}
	log := cfg.Logger.With("zookeeper", strings.Join(cfg.Servers, ","), "root", cfg.Root, "layout", cfg.Layout)
	return &Registry{cfg: cfg, host: host, layout: l, log: log, metrics: newMetrics(cfg.Registerer)}, nil
}

// Run watches the registry until ctx is cancelled. Only its own goroutine calls the Sink.
func (r *Registry) Run(ctx context.Context, sink registry.Sink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return newWatcher(r, sink).run(ctx)
}
