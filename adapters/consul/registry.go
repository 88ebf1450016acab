package consul

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// Registry is a registry.Registry that watches Consul. It holds only
// configuration and metrics: each Run keeps its own state and its own HTTP
// connections, so a Registry may be Run again after a previous Run
// returned.
type Registry struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	mapper *mapper
}

var _ registry.Registry = (*Registry)(nil)

// New checks cfg (see Config.Validate) and returns a Registry for it. Its
// metrics are registered with cfg.Registerer here, once.
func New(cfg Config) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("consul registry: %w", err)
	}
	cfg = cfg.withDefaults()
	mp, err := newMapper(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul registry: --%s: %w", flagHostTemplate, err)
	}
	if usesServiceField(mp.host) {
		cfg.Logger.Warn("the host template reads {{.Service}}, the old name of {{.Name}} (the service's name): it works the same, but write {{.Name}}",
			"flag", "--"+flagHostTemplate, "template", cfg.HostTemplate)
	}
	if _, err := apiConfig(cfg); err != nil {
		return nil, fmt.Errorf("consul registry: %w", err)
	}
	return &Registry{cfg: cfg, log: cfg.Logger, m: newMetrics(cfg.Registerer), mapper: mp}, nil
}

// Run watches Consul and reports to sink until ctx is cancelled, then
// returns ctx.Err(), after every goroutine it started has stopped.
func (r *Registry) Run(ctx context.Context, sink registry.Sink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := newClient(r.cfg, r.m)
	if err != nil {
		return fmt.Errorf("consul registry: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watch{
		cfg: r.cfg, log: r.log, m: r.m, mapper: r.mapper, c: c, ctx: ctx,
		report:   registry.NewReconciler(sink),
		events:   make(chan event, 16),
		work:     make(chan job),
		idle:     r.cfg.FetchConcurrency,
		dcs:      map[string]*dcWatch{},
		pending:  map[jobKey]bool{},
		inflight: map[jobKey]bool{},
		again:    map[jobKey]bool{},
		byKey:    map[model.ServiceKey]map[partRef]bool{},
		collided: map[partRef]collision{},
	}
	defer func() {
		cancel()
		w.wg.Wait()
		// After every request has returned: close the keep-alive
		// connections so that their goroutines end with Run.
		c.close()
	}()
	w.loop()
	return ctx.Err()
}
