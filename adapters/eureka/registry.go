package eureka

import (
	"context"
	"log/slog"
	"text/template"

	"github.com/galleon-mesh/galleon/registry"
)

// Registry watches the applications of a Eureka cluster. It holds configuration only: the
// state of a watch lives in Run, so a Registry can be run again after Run returns.
type Registry struct {
	cfg     Config
	host    *template.Template
	servers []server
	log     *slog.Logger
	metrics *metrics
}

var _ registry.Registry = (*Registry)(nil)

// New checks cfg and returns the adapter. Its errors are configuration errors, each naming the
// flag to fix.
func New(cfg Config) (*Registry, error) {
	host, servers, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.name
	}
	r := &Registry{
		cfg:     cfg,
		host:    host,
		servers: servers,
		log:     cfg.Logger.With("eureka", names),
		metrics: newMetrics(cfg.Registerer),
	}
	return r, nil
}

// Run polls the servers until ctx is cancelled; see poller.
func (r *Registry) Run(ctx context.Context, sink registry.Sink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := newPoller(r, sink)
	return p.run(ctx)
}
