package zookeeper

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"text/template"

	"github.com/galleon-mesh/galleon/registry"
)

// Registry watches one ZooKeeper ensemble: one root per layout served, or one root Curator and
// Dubbo 3 share (layouts.go). It holds configuration only: the state of a watch lives in Run, so
// a Registry can be run again after Run returns.
type Registry struct {
	cfg Config
	// trees are the roots watched, in --zk-layout order of their first layout.
	trees []*tree
	// hosts is the host template of each layout served; rank its place in --zk-layout (the
	// first listed wins a name two services share: claims.go).
	hosts   [nKinds]*template.Template
	rank    [nKinds]int
	log     *slog.Logger
	metrics *metrics
}

var _ registry.Registry = (*Registry)(nil)

// New checks cfg and returns the adapter. Its errors are configuration errors, each naming the
// flag to fix.
func New(cfg Config) (*Registry, error) {
	cfg.Servers = slices.Clone(cfg.Servers)
	hosts, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	for i, s := range cfg.Servers {
		cfg.Servers[i] = strings.TrimSpace(s)
	}
	r := &Registry{cfg: cfg, hosts: hosts, metrics: newMetrics(cfg.Registerer)}
	for i, k := range cfg.kinds {
		r.rank[k] = i
	}
	roots := make([]string, len(cfg.trees))
	for i, tc := range cfg.trees {
		r.trees = append(r.trees, newTree(tc, cfg.DubboProtocols))
		roots[i] = tc.root
	}
	r.log = cfg.Logger.With("zookeeper", strings.Join(cfg.Servers, ","), "root", strings.Join(roots, ","), "layout", cfg.Layout)
	return r, nil
}

// Run watches the registry until ctx is cancelled. Only its own goroutine calls the Sink.
func (r *Registry) Run(ctx context.Context, sink registry.Sink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return newWatcher(r, sink).run(ctx)
}
