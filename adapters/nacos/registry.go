package nacos

import (
	"context"
	"log/slog"

	"github.com/galleon-mesh/galleon/registry"
)

// Registry watches the services of a Nacos registry. It holds configuration only: the state
// of a watch lives in Run, so a Registry can be run again after Run returns.
type Registry struct {
	cfg     Config
	servers []server
	scope   scope
	mapper  *mapper
	log     *slog.Logger
	metrics *metrics
	redact  *redactor
}

var _ registry.Registry = (*Registry)(nil)

// New checks cfg and returns the adapter. Its errors are configuration errors, each naming the
// flag to fix.
func New(cfg Config) (*Registry, error) {
	servers, sc, m, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.name
	}
	r := &Registry{
		cfg:     cfg,
		servers: servers,
		scope:   sc,
		mapper:  m,
		log:     cfg.Logger.With("nacos", names),
		metrics: newMetrics(cfg.Registerer),
		redact:  &redactor{},
	}
	// The secrets as they are now; each later read (a login, a connection) adds the value
	// read, so a rotated secret is scrubbed too.
	if p, err := cfg.password(); err == nil {
		r.redact.learn(p)
	}
	if k, err := cfg.secretKey(); err == nil {
		r.redact.learn(k)
	}
	return r, nil
}

// Run watches the servers until ctx is cancelled; see watch.go.
func (r *Registry) Run(ctx context.Context, sink registry.Sink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return newWatcher(r, sink).run(ctx)
}
