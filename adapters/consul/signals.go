package consul

import (
	"context"
	"time"

	"github.com/hashicorp/consul/api"
)

const (
	// pollGap is the least time between two blocking queries of one
	// signal after a change, as Consul's documentation recommends: a
	// burst of check updates costs a few listings, not one per update.
	pollGap = 200 * time.Millisecond
)

// signalQuery reads a signal from index (blocking while it stays there).
// It returns the index of the answer and answer, which makes the event
// that carries it once poll has judged the index.
type signalQuery func(ctx context.Context, index uint64) (idx uint64, answer func(signalAnswer) event, err error)

// catalogQuery reads the catalog signal of datacenter dc.
func (w *watch) catalogQuery(dc string) signalQuery {
	return func(ctx context.Context, index uint64) (uint64, func(signalAnswer) event, error) {
		names, idx, filtered, err := w.c.services(ctx, dc, index)
		return idx, func(a signalAnswer) event {
			return catalogEvent{signalAnswer: a, names: names, filtered: filtered}
		}, err
	}
}

// checksQuery reads the signal of the checks in one state of datacenter
// dc.
func (w *watch) checksQuery(dc, state string) signalQuery {
	return func(ctx context.Context, index uint64) (uint64, func(signalAnswer) event, error) {
		checks, idx, err := w.c.checks(ctx, dc, index, state)
		return idx, func(a signalAnswer) event {
			return checksEvent{signalAnswer: a, state: state, checks: checks}
		}, err
	}
}

// pollChecks lists every check of one datacenter generation (the baseline
// the failing-check signals are diffed against and catalog changes
// attributed with), then runs the critical and warning signals from that
// listing's index until its context ends.
func (w *watch) pollChecks(ctx context.Context, at dcGen) {
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	for {
		checks, idx, err := w.c.checks(ctx, at.dc, 0, api.HealthAny)
		if ctx.Err() != nil {
			return
		}
		ev := checksEvent{signalAnswer: signalAnswer{dcGen: at, index: idx, err: err}, state: api.HealthAny, checks: checks}
		if !w.send(ev) {
			return
		}
		if err == nil {
			// An index of 0 would make every query return at once.
			index := max(idx, 1)
			w.goFunc(func() { w.poll(ctx, at, api.HealthWarning, index, w.checksQuery(at.dc, api.HealthWarning)) })
			w.poll(ctx, at, api.HealthCritical, index, w.checksQuery(at.dc, api.HealthCritical))
			return
		}
		if !sleep(ctx, bo.next()) {
			return
		}
	}
}

// poll runs one blocking-query signal of one datacenter generation until
// its context ends: the catalog, or the checks in one state from index.
// signal names it in metrics and logs.
func (w *watch) poll(ctx context.Context, at dcGen, signal string, index uint64, query signalQuery) {
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	for {
		idx, answer, err := query(ctx, index)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !w.send(answer(signalAnswer{dcGen: at, err: err})) || !sleep(ctx, bo.next()) {
				return
			}
			continue
		}
		bo.reset()
		ans := signalAnswer{dcGen: at, index: idx}
		outcome := "changed"
		switch {
		case idx < index:
			// Consul's rule: an index going backwards means the state
			// was reset (snapshot restore, wiped data): start over.
			outcome = "reset"
			ans.reset = true
		case idx == index:
			outcome = "unchanged"
		}
		w.m.wakeups.WithLabelValues(signal, outcome).Inc()
		w.log.Debug("consul signal", "datacenter", dcLabel(at.dc), "signal", signal, "outcome", outcome, "index", idx, "previous", index)
		if !w.send(answer(ans)) {
			return
		}
		if ans.reset {
			<-ctx.Done() // the loop resynchronises with a new generation
			return
		}
		// An index of 0 would make every query return at once.
		index = max(idx, 1)
		if outcome == "changed" && !sleep(ctx, pollGap) {
			return
		}
	}
}
