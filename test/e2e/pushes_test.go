package e2e

import (
	"context"
	"testing"

	"github.com/galleon-mesh/galleon/test/istiod"
)

// pushTracker follows istiod's push counters across a test's changes, so that each change can
// say what it cost istiod (full pushes, EDS updates).
type pushTracker struct {
	t   *testing.T
	ctx context.Context
	ist *istiod.Istiod
	// now is istiod's counters after the last change waited for.
	now istiod.PushCounters
}

// trackPushes waits for istiod's first push (its initial sync) and follows its counters from
// there.
func trackPushes(t *testing.T, ctx context.Context, ist *istiod.Istiod) *pushTracker {
	t.Helper()
	now, err := ist.WaitPushed(ctx, istiod.PushCounters{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after initial sync: %+v", now)
	return &pushTracker{t: t, ctx: ctx, ist: ist, now: now}
}

// change makes a change, waits until istiod's ServiceEntries satisfy ok and istiod has pushed,
// and returns the full pushes it caused.
func (p *pushTracker) change(what string, do func() error, ok func(map[string]serviceEntry) string) float64 {
	p.t.Helper()
	before := p.now
	if err := do(); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
	waitForServiceEntries(p.t, p.ctx, p.ist, what, ok)
	after, err := p.ist.WaitPushed(p.ctx, before)
	if err != nil {
		p.t.Fatalf("%s: istiod did not push: %v", what, err)
	}
	p.now = after
	p.t.Logf("%s: full pushes +%v, EDS updates +%v", what, after.FullPushes-before.FullPushes, after.EDSUpdates-before.EDSUpdates)
	return after.FullPushes - before.FullPushes
}
