package file

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/fsnotify/fsnotify"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// Registry is a registry.Registry that reads services from YAML files.
// It holds only configuration: each Run keeps its own state, so a Registry
// may be Run again after a previous Run returned.
type Registry struct {
	cfg Config
	log *slog.Logger
}

var _ registry.Registry = (*Registry)(nil)

// New checks cfg and returns a Registry for it.
func New(cfg Config) (*Registry, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// No "registry" attribute: the daemon's logger carries registry=file
	// already, and a second one would print it twice.
	return &Registry{cfg: cfg, log: log.With("dir", cfg.Dir)}, nil
}

// Run watches the directory and reports to sink until ctx is cancelled,
// then returns ctx.Err(). It fails early only if no file-system watch can
// be created at all (inotify instance limit).
func (r *Registry) Run(ctx context.Context, sink registry.Sink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file registry: cannot create a file-system watch (raise fs.inotify.max_user_instances?): %w", err)
	}
	// Close stops fsnotify's reader goroutine and waits for it, so Run
	// leaves nothing running behind.
	defer w.Close()

	s := &runState{
		cfg:     r.cfg,
		log:     r.log,
		report:  registry.NewReconciler(sink),
		watcher: w,
		files:   map[string]*fileState{},
		served:  map[model.ServiceKey]served{},

		statRacy: racyStat,
	}
	s.loadPersisted()
	s.sync()

	l := newWatchLoop(s)
	defer l.stop()
	return l.run(ctx)
}
