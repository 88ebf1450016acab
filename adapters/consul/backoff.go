package consul

import (
	"context"
	"math/rand/v2"
	"time"
)

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// backoff is jittered exponential backoff ("full jitter" over the upper
// half, so that a retry never comes sooner than half the step).
type backoff struct {
	min, max, step time.Duration
}

func newBackoff(lo, hi time.Duration) *backoff { return &backoff{min: lo, max: hi, step: lo} }

func (b *backoff) next() time.Duration {
	d := b.step/2 + rand.N(b.step/2+1)
	b.step = min(b.step*2, b.max)
	return d
}

func (b *backoff) reset() { b.step = b.min }
