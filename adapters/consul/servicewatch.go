package consul

import (
	"context"
	"math/rand/v2"
)

// serviceWatch is one service's own blocking query (Config.ServiceWatches):
// its answers are fetches, so no signal or sweep needs to name the service.
type serviceWatch struct {
	cancel context.CancelFunc
}

// startWatch follows a service just fetched with a blocking query of its
// own from the index fetched, while fewer than Config.ServiceWatches run
// and the agent answers over HTTP/2 (over HTTP/1.1 each query would hold a
// connection, and the agent refuses a client's 201st).
func (w *watch) startWatch(d *dcWatch, name string, s *dcService) {
	if s.watch != nil || w.watchCount() >= w.cfg.ServiceWatches {
		return
	}
	if !w.c.multiplexed() {
		if !w.warnedHTTP1 {
			w.warnedHTTP1 = true
			w.log.Warn("the Consul agent answers over HTTP/1.1, not HTTP/2: per-service watches (--"+flagServiceWatches+") are off, and changes no signal names are found by sweeps; point --"+flagAddress+" at the agent's HTTPS listener",
				"datacenter", dcLabel(d.name))
		}
		return
	}
	ctx, cancel := context.WithCancel(d.ctx)
	sw := &serviceWatch{cancel: cancel}
	s.watch = sw
	d.watched++
	w.m.serviceWatches.Set(float64(w.watchCount()))
	at := dcGen{d.name, d.gen}
	// An index of 0 would make every query return at once.
	index := max(s.index, 1)
	w.goFunc(func() { w.followService(ctx, at, name, index, sw) })
}

// stopWatch ends a service's watch, if it has one.
func (w *watch) stopWatch(d *dcWatch, s *dcService) {
	if s.watch == nil {
		return
	}
	s.watch.cancel()
	s.watch = nil
	d.watched--
	w.m.serviceWatches.Set(float64(w.watchCount()))
}

// watchCount is the number of service watches over every datacenter.
func (w *watch) watchCount() int {
	n := 0
	for _, d := range w.dcs {
		n += d.watched
	}
	return n
}

// watching reports whether a service of d has a watch of its own.
func (d *dcWatch) watching(name string) bool {
	s := d.svcs[name]
	return s != nil && s.watch != nil
}

// stopWatches ends the watches of a datacenter's services (it is listed
// again: their indexes mean nothing now).
func (w *watch) stopWatches(d *dcWatch) {
	for _, s := range d.svcs {
		w.stopWatch(d, s)
	}
}

// watchedAll reports whether every service the catalog lists in d has its
// own watch: then a catalog change no signal names needs no attribution or
// sweep, since the watch of the service it changed answers.
func (d *dcWatch) watchedAll() bool {
	return d.watched > 0 && d.watched == len(d.names)
}

// followService runs one service's blocking query from index until its
// context ends or a query fails. Each answer whose index moved is a fetch;
// a failure ends the watch, and the loop fetches the service again
// (retried until it succeeds) and starts a new one (see onWatchAnswer), so
// that an agent that is down costs Config.FetchConcurrency retries at a
// time, not one per service.
func (w *watch) followService(ctx context.Context, at dcGen, name string, index uint64, sw *serviceWatch) {
	// A watch waits Consul's longest (10m), not Config.Wait: an answer
	// that changed nothing costs the agent and the adapter a listing of
	// the service, and there is one per service every wait (see
	// docs/benchmarks.md, "With `--consul-service-watches`", idle cost). The
	// transport's HTTP/2 pings find a dead connection instead (see
	// newClient). The watches of a listing start within seconds of each
	// other: a first wait drawn from [5m, 10m] spreads those answers over
	// the period, where equal waits would bring them in one burst.
	wait := maxWait/2 + rand.N(maxWait/2+1)
	for {
		entries, idx, err := w.c.service(ctx, at.dc, name, index, wait, false)
		wait = maxWait
		if ctx.Err() != nil {
			return
		}
		w.m.refetched.WithLabelValues("watch").Inc()
		ev := fetchEvent{dcGen: at, name: name, index: idx, entries: entries, err: err, watch: sw}
		if err != nil {
			w.send(ev)
			return
		}
		outcome := "changed"
		switch {
		case idx < index:
			// Consul's rule is to start over from the answer's
			// index, which this answer already is.
			outcome = "reset"
		case idx == index:
			outcome = "unchanged"
		}
		w.m.wakeups.WithLabelValues("service", outcome).Inc()
		if outcome != "unchanged" && !w.send(ev) {
			return
		}
		index = max(idx, 1)
		// As for the signals: a burst of writes to one service costs a
		// few answers, not one per write.
		if outcome == "changed" && !sleep(ctx, pollGap) {
			return
		}
	}
}

// onWatchAnswer applies an answer of a service's watch, unless the watch
// was stopped since: a fetch; or a failure, which is reported, and the
// service is fetched again, retried until it succeeds, and watched anew.
func (w *watch) onWatchAnswer(ev fetchEvent) {
	d := w.dcs[ev.dc]
	if d == nil || d.gen != ev.gen {
		return
	}
	s := d.svcs[ev.name]
	if s == nil || s.watch != ev.watch {
		return
	}
	if ev.err != nil {
		w.stopWatch(d, s)
		w.answered(ev.dcGen, "fetch", ev.err)
		w.enqueue(d, ev.name, true)
		return
	}
	if w.answered(ev.dcGen, "fetch", nil) != nil {
		w.handleFetch(d, ev)
	}
}
