package pipeline

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	"github.com/galleon-mesh/galleon/model"
)

func services(n int) []model.Service {
	out := make([]model.Service, n)
	for i := range out {
		out[i] = service(fmt.Sprintf("s%d", i), fmt.Sprintf("10.0.%d.%d", i/250, i%250+1))
	}
	return out
}

func served(store *snapshot.Store) int {
	return store.Current().Collection(snapshot.ServiceEntry).Len()
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestEmptyAnswerIsHeldUntilConfirmed: issue 27 found one 200 with an empty
// application list applied as it was, every ServiceEntry gone. An answer
// that removes every service is held for RemovalHold: the services stay
// served, Status says so, and only an answer that stands for the whole
// window removes them.
func TestEmptyAnswerIsHeldUntilConfirmed(t *testing.T) {
	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	const hold = 400 * time.Millisecond
	p, store := run(t, Config{RemovalHold: hold, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	p.Replace(services(3))
	waitSeq(t, store, 0)
	p.Replace(nil)
	waitFor(t, "the hold", func() bool { return p.Status().Held != nil })
	h := p.Status().Held
	if h.Services != 3 || h.Of != 3 || len(h.Examples) != 3 || !h.ApplyAt.Equal(h.Since.Add(hold)) {
		t.Fatalf("hold %+v, want 3 of 3 services", h)
	}
	if n := served(store); n != 3 {
		t.Fatalf("%d services served during the hold, want 3", n)
	}
	if !strings.Contains(logs.String(), "still serving them until the answer is confirmed") {
		t.Errorf("the hold is not logged:\n%s", logs.String())
	}
	if got := gauge(t, p.metrics.held); got != 3 {
		t.Errorf("galleon_registry_removals_held = %v, want 3", got)
	}
	waitFor(t, "the removal to be confirmed", func() bool { return served(store) == 0 })
	if time.Since(h.Since) < hold {
		t.Fatalf("removed %v after the hold began, before the window of %v", time.Since(h.Since), hold)
	}
	if p.Status().Held != nil || gauge(t, p.metrics.held) != 0 {
		t.Errorf("hold still reported after it was confirmed: %+v", p.Status().Held)
	}
	if got := counterVec(t, reg, "galleon_registry_removal_holds_total"); got["begun"] != 1 || got["confirmed"] != 1 {
		t.Errorf("holds %v, want one begun and confirmed", got)
	}
}

// TestHoldReleasedWhenListedAgain: a registry that answers empty once and
// then lists its services again never had them removed.
func TestHoldReleasedWhenListedAgain(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, store := run(t, Config{RemovalHold: time.Hour, Registerer: reg})
	p.Replace(services(20))
	snap := waitSeq(t, store, 0)
	p.Replace(services(20)[:5]) // 15 of 20 gone: over half
	waitFor(t, "the hold", func() bool { return p.Status().Held != nil })
	if h := p.Status().Held; h.Services != 15 || served(store) != 20 {
		t.Fatalf("hold %+v with %d served; want 15 of 20 held and all 20 served", h, served(store))
	}
	if store.Current().Seq != snap.Seq {
		t.Fatal("a held answer changed the snapshot")
	}
	p.Replace(services(20))
	waitFor(t, "the release", func() bool { return p.Status().Held == nil })
	if n := served(store); n != 20 {
		t.Fatalf("%d served after the registry listed every service again", n)
	}
	if got := counterVec(t, reg, "galleon_registry_removal_holds_total"); got["released"] != 1 || got["confirmed"] != 0 {
		t.Errorf("holds %v, want one released", got)
	}
}

// TestHoldJudgesWhatIsLeft: while a hold stands, deltas that do not mention
// the held services keep them held; one listing part of them again ends
// the hold when what is left to remove is within the share, and that part
// is removed then.
func TestHoldJudgesWhatIsLeft(t *testing.T) {
	p, store := run(t, Config{RemovalHold: time.Hour})
	all := services(20)
	p.Replace(all)
	waitSeq(t, store, 0)
	for _, s := range all[:12] { // deleted one by one in one flush: 12 of 20
		p.Delete(s.Key())
	}
	waitFor(t, "the hold", func() bool { return p.Status().Held != nil })
	p.Update(service("new", "10.9.9.9")) // a delta that says nothing of them
	waitFor(t, "the new service", func() bool { return served(store) == 21 })
	if h := p.Status().Held; h == nil || h.Services != 12 {
		t.Fatalf("hold %+v after an unrelated delta, want the 12 still held", h)
	}
	for _, s := range all[:8] {
		p.Update(s) // 8 come back: 4 of 21 left to remove
	}
	waitFor(t, "the release", func() bool { return p.Status().Held == nil })
	if n := served(store); n != 17 {
		t.Fatalf("%d served, want 21 less the 4 still removed", n)
	}
}

// TestSmallChangesAreNotHeld: removing some services of a small registry,
// or a share within the limit of a large one, is applied at once; so is
// everything when the rule is off.
func TestSmallChangesAreNotHeld(t *testing.T) {
	p, store := run(t, Config{RemovalHold: time.Hour})
	p.Replace(services(3))
	waitSeq(t, store, 0)
	p.Replace(services(3)[:1]) // 2 of 3: fewer than holdMinServices served
	waitFor(t, "the removal", func() bool { return served(store) == 1 })

	p2, store2 := run(t, Config{RemovalHold: time.Hour, RemovalHoldShare: 50})
	p2.Replace(services(20))
	waitSeq(t, store2, 0)
	p2.Replace(services(20)[:10]) // exactly half
	waitFor(t, "the removal", func() bool { return served(store2) == 10 })
	if p2.Status().Held != nil {
		t.Fatal("half of the services removed was held; the limit is more than half")
	}

	off, store3 := run(t, Config{})
	off.Replace(services(3))
	waitSeq(t, store3, 0)
	off.Replace(nil)
	waitFor(t, "the removal with the rule off", func() bool { return served(store3) == 0 })
}

// TestHoldWaitsForTheRegistry: a hold is not confirmed while the registry
// cannot be reached; once it is back the removal is judged again.
func TestHoldWaitsForTheRegistry(t *testing.T) {
	const hold = 2 * time.Second // the Unreachable below must come within it, on a loaded machine too
	p, store := run(t, Config{RemovalHold: hold})
	p.Replace(services(2))
	waitSeq(t, store, 0)
	p.Replace(nil)
	waitFor(t, "the hold", func() bool { return p.Status().Held != nil })
	p.Unreachable(errors.New("connection refused"))
	time.Sleep(hold + hold/2)
	if n := served(store); n != 2 {
		t.Fatalf("%d served: the hold was confirmed while the registry was unreachable", n)
	}
	p.Unreachable(nil)
	waitFor(t, "the removal once the registry is back", func() bool { return served(store) == 0 })
}
