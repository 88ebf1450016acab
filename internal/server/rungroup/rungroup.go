// Package rungroup runs the parts of a server (a registry watch, a pipeline, its listeners) and
// stops them together.
package rungroup

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Group runs each part in a goroutine of its own. The first part to fail cancels the context
// the parts run under, so the others stop too; Wait returns once every part has returned, with
// that first failure. A part that returns context.Canceled stopped as asked: that is not a
// failure. golang.org/x/sync/errgroup is the same but for part names and that rule; none of
// its packages is built here, and these few lines did not warrant a new direct dependency.
type Group struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

// WithContext returns a Group and the context its parts run under: ctx's, cancelled by the
// first failure and when Wait returns.
func WithContext(ctx context.Context) (*Group, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	return &Group{cancel: cancel}, ctx
}

// Go runs part in a new goroutine; name prefixes its error.
func (g *Group) Go(name string, part func() error) {
	g.wg.Go(func() {
		if err := part(); err != nil && !errors.Is(err, context.Canceled) {
			g.once.Do(func() {
				g.err = fmt.Errorf("%s: %w", name, err)
				g.cancel()
			})
		}
	})
}

// Wait waits for every part to return and returns the first failure, or nil.
func (g *Group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
}
