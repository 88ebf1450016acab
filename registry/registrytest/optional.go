package registrytest

import (
	"context"
	"fmt"
	"testing"

	"github.com/galleon-mesh/galleon/model"
)

// PartBreaker is implemented by a Driver whose registry has parts that fail
// on their own (datacenters, a list of servers, the members of an ensemble)
// and that can make one of them unreachable for the adapter while the rest
// answers. The Degraded subtest needs it: it checks the contract's clause on
// Sink.Degraded.
type PartBreaker interface {
	// BreakPart makes one part of the registry unreachable, the rest
	// answering, and returns the part name the adapter is expected to pass
	// to Sink.Degraded ("dc2", "eureka-2:8761"), or "" to accept any.
	BreakPart(ctx context.Context) (part string, err error)
	// RestorePart makes the part reachable again, holding what it held.
	RestorePart(ctx context.Context) error
}

// Staller is implemented by a Driver whose registry can be made to accept
// connections and never answer, the failure a client without timeouts
// hangs on. The Stalled subtest needs it: the adapter must report the
// stall with Unreachable(err), and Run must still stop promptly. A driver
// that embeds a *Proxy opts in with one method:
//
//	func (d *driver) Stall(ctx context.Context) error { return d.Proxy.Silence(ctx) }
//
// Restore ends the stall, as it ends a Break.
type Staller interface {
	// Stall makes the registry accept connections, read what the adapter
	// sends and never answer.
	Stall(ctx context.Context) error
	// Restore makes it answer again, holding what it held before Stall.
	Restore(ctx context.Context) error
}

// EventLoser is implemented by a Driver that can make the adapter's watch
// miss events while the registry stays reachable: pause the event stream
// and resume it past a gap, compact the history the watch resumes from, let
// a session expire. The LostEvents subtest needs it: the adapter must
// notice the loss and list the registry again, reporting it with Replace.
type EventLoser interface {
	// LoseEvents calls change (on the calling goroutine), which changes
	// the registry through the Driver, such that the adapter's watch misses those changes, then
	// lets the watch go on. It returns once change's effects are visible
	// to a fresh listing.
	LoseEvents(ctx context.Context, change func(ctx context.Context) error) error
}

func (k *kit) partBreaker(t *testing.T) PartBreaker {
	return optional[PartBreaker](t, k.driver, "PartBreaker", "the Degraded clause is not checked")
}

func (k *kit) staller(t *testing.T) Staller {
	return optional[Staller](t, k.driver, "Staller", "a registry that accepts and never answers is not played")
}

func (k *kit) eventLoser(t *testing.T) EventLoser {
	return optional[EventLoser](t, k.driver, "EventLoser", "recovery from lost events is not checked")
}

// testDegraded: one part down is Degraded(part, err), not an outage; what
// it listed stays served; its return is Degraded(part, nil), and changes
// are picked up again.
func (k *kit) testDegraded(t *testing.T) {
	pb := k.partBreaker(t)
	s := k.scenario(t, "degraded")
	s.put("a")
	s.put("b")
	r := s.start()
	r.waitState("the listing")
	mark := r.rec.Len()
	kept := s.wantKeys()
	var part string
	s.partBroken = true // restore in the cleanup even if BreakPart half failed
	s.driverCall("BreakPart", func(ctx context.Context) error {
		var err error
		part, err = pb.BreakPart(ctx)
		return err
	})
	down := r.waitDegraded(mark, part, true)
	r.hold()
	s.driverCall("RestorePart", pb.RestorePart)
	s.partBroken = false
	r.waitDegraded(down+1, r.rec.Events()[down].Record, false)
	for i, e := range r.rec.Events()[mark:] {
		if e.Op == OpUnreachable && e.Err != nil {
			t.Errorf("call #%d %s while only one part was down: the rest answers, so report Degraded(part, err), not Unreachable\nSink calls:\n%s", mark+i, e, r.rec.Dump())
			break
		}
	}
	loss := func() string {
		if msg := s.firstLoss(r.rec.Events(), mark, kept); msg != "" {
			return "A service was lost or changed while one part was down (what was listed from it stays served): " + msg
		}
		return ""
	}
	if msg := loss(); msg != "" {
		t.Error(msg)
	}
	s.put("c")
	r.waitState("the new service c, put after the part came back")
}

// testStalled: a registry that accepts connections and never answers is an
// outage like any other. An adapter waiting on a call without a timeout
// never says so; the kit's wait for Unreachable(err) times out, with Run's
// goroutines in the message.
func (k *kit) testStalled(t *testing.T) {
	st := k.staller(t)
	s := k.scenario(t, "stalled")
	s.put("a")
	r := s.start()
	r.waitState("the listing")
	mark := r.rec.Len()
	kept := s.wantKeys()
	s.broken = true // Restore in the cleanup
	s.driverCall("Stall", st.Stall)
	// A change the adapter can learn only by asking the silent registry:
	// not expected before it answers again.
	s.put("b")
	b := s.key("b")
	wantB := s.want[b]
	delete(s.want, b)
	down := r.waitUnreachableWhy(mark, "Unreachable(err) once the registry accepts connections and never answers (bound every request with a timeout)")
	if msg := s.firstLoss(r.rec.Events(), mark, kept); msg != "" {
		t.Error("A service was lost or changed while the registry was silent: " + msg)
	}
	s.driverCall("Restore", st.Restore)
	s.broken = false
	s.want[b] = wantB
	up := r.waitReachable(down)
	r.checkRelisted(down, up)
	r.waitState("the services once the registry answers again")
}

// testLostEvents: changes the watch missed are learnt by listing again, and
// the relisting is a Replace.
func (k *kit) testLostEvents(t *testing.T) {
	l := k.eventLoser(t)
	s := k.scenario(t, "lost")
	s.put("a")
	s.put("b")
	r := s.start()
	r.waitState("the listing")
	mark := r.rec.Len()
	s.driverCall("LoseEvents", func(ctx context.Context) error {
		return l.LoseEvents(ctx, func(context.Context) error {
			s.put("a")
			s.remove("b")
			s.put("c")
			return nil
		})
	})
	r.waitState("the changes made while the watch lost events (notice the loss and list the registry again)")
	if !k.o.noRelist {
		replaced := false
		for _, e := range r.rec.Events()[mark:] {
			replaced = replaced || e.Op == OpReplace
		}
		if !replaced {
			t.Errorf("the changes the watch missed were reported without a Replace: after lost events, list the registry again and report it with Replace (registry.Reconciler.Resync)\nSink calls:\n%s", r.rec.Dump())
		}
	}
	s.put("b")
	r.waitState("the new service b, put after the relisting (the watch must resume)")
}

// waitDegraded waits for Degraded(part, err) (down) or Degraded(part, nil)
// (!down) among the calls from index from on, any part if part is "", and
// returns its index.
func (r *runner) waitDegraded(from int, part string, down bool) int {
	r.s.t.Helper()
	what := fmt.Sprintf("Degraded(%q, err) once one part of the registry is down (the rest answers)", part)
	if !down {
		what = fmt.Sprintf("Degraded(%q, nil) once the part is back and relisted", part)
	}
	idx := -1
	r.waitDetail(what, func(events []Event, _ map[model.ServiceKey]model.Service) bool {
		for i := from; i < len(events); i++ {
			e := events[i]
			if e.Op == OpDegraded && (e.Err != nil) == down && (part == "" || e.Record == part) {
				idx = i
				return true
			}
		}
		return false
	}, func() string {
		for _, e := range r.rec.Events()[from:] {
			if e.Op == OpUnreachable && e.Err != nil {
				return fmt.Sprintf("The adapter reported %s instead: the rest of the registry answers, so report Degraded(part, err), not Unreachable", e)
			}
		}
		return ""
	})
	return idx
}
