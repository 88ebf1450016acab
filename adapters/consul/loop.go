package consul

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// watch is the state of one Run. Everything but the channels, ctx and wg
// is owned by the loop goroutine.
type watch struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	mapper *mapper
	c      *client
	ctx    context.Context
	wg     sync.WaitGroup

	// report tells the Sink what changed in the merged services, the
	// rejections and the outages (see flush).
	report *registry.Reconciler
	// listedOnce is set once the first complete listing was reported: a
	// datacenter added later is counted as added, not as started.
	listedOnce bool

	events chan event
	work   chan job
	idle   int // workers waiting for a job

	dcsSet bool // the datacenters are known
	// dcsFailing is set while listing the datacenters fails: an outage
	// that ends with the next listing.
	dcsFailing bool
	dcs        map[string]*dcWatch

	queue    []jobKey
	pending  map[jobKey]bool // queued; value: a full fetch (else a probe)
	inflight map[jobKey]bool
	again    map[jobKey]bool // requested while in flight; value: full

	byKey    map[model.ServiceKey]map[partRef]bool // the parts each service merges
	collided map[partRef]collision                 // parts rejected for a name taken

	sweepTimer *time.Timer

	warnedHTTP1 bool // said that the agent answers over HTTP/1.1 (no watches)
}

// loop starts the workers and the watches of the datacenters, then
// applies what they answer and what the timers ask, reporting after each,
// until the Run's context ends.
func (w *watch) loop() {
	for range w.cfg.FetchConcurrency {
		w.goFunc(w.worker)
	}
	w.startDatacenters()
	w.sweepTimer = time.NewTimer(time.Hour)
	w.sweepTimer.Stop()
	defer w.sweepTimer.Stop()
	relist := time.NewTicker(w.cfg.Resync)
	defer relist.Stop()

	for {
		work, next := w.nextJob()
		select {
		case <-w.ctx.Done():
			return
		case work <- next:
			w.dispatched(next)
		case ev := <-w.events:
			ev.apply(w)
		case <-w.sweepTimer.C:
			w.onSweepTimer()
		case <-relist.C:
			w.onRelist()
		}
		w.flush()
	}
}

// startDatacenters watches the configured datacenters, or follows the
// list of every datacenter the agent knows.
func (w *watch) startDatacenters() {
	switch {
	case len(w.cfg.Datacenters) == 1 && w.cfg.Datacenters[0] == AllDatacenters:
		w.goFunc(w.followDatacenters)
	case len(w.cfg.Datacenters) == 0:
		w.dcsSet = true
		w.addDC("", "start")
	default:
		w.dcsSet = true
		for _, dc := range w.cfg.Datacenters {
			w.addDC(dc, "start")
		}
	}
}

// nextJob returns the work channel and the job at the head of the queue
// when a worker is idle, else a nil channel (no job offered).
func (w *watch) nextJob() (chan job, job) {
	if len(w.queue) == 0 || w.idle == 0 {
		return nil, job{}
	}
	k := w.queue[0]
	d := w.dcs[k.dc]
	return w.work, job{key: k, probe: !w.pending[k], gen: d.gen, ctx: d.ctx}
}

// dispatched records that a worker took next, the queue's head.
func (w *watch) dispatched(next job) {
	w.queue = w.queue[1:]
	delete(w.pending, next.key)
	w.inflight[next.key] = true
	w.idle--
}

// onSweepTimer sweeps the datacenters whose unattributed catalog changes
// waited for the sweep interval.
func (w *watch) onSweepTimer() {
	for _, d := range w.dcs {
		if d.sweepDue {
			d.sweepDue = false
			w.sweep(d, "unattributed")
		}
	}
}

// onRelist starts the periodic sweep (Config.Resync) of every listed
// datacenter.
func (w *watch) onRelist() {
	for _, d := range w.dcs {
		if d.listed {
			w.startSweep(d, "periodic")
		}
	}
}

// goFunc runs f in a goroutine Run waits for.
func (w *watch) goFunc(f func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f()
	}()
}

// send hands an event to the loop unless the Run is over.
func (w *watch) send(ev event) bool {
	select {
	case w.events <- ev:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// flush has the reconciler report what changed, when the services held
// are consistent: a Replace once every datacenter is listed after the
// start or an outage (then Unreachable(nil)), else an Update or Delete
// per service changed (then Degraded(dc, nil) for a datacenter back).
func (w *watch) flush() {
	if !w.consistent() {
		return
	}
	w.report.Flush()
	w.listedOnce = true
}

// consistent reports whether the services held are what the registry
// holds, as far as the signals tell: the datacenters are known, each is
// listed since it was added or listed again, and no request fails but
// those of a degraded datacenter (whose last good state is served, and
// said to be stale). A report in the middle of a listing would drop what
// is not fetched yet; one while the registry is unreachable would end the
// outage (a reconciler reports the registry reachable at its first Flush
// after Unreachable) before the relisting that learns what changed
// meanwhile.
func (w *watch) consistent() bool {
	if !w.dcsSet || w.dcsFailing {
		return false
	}
	for _, d := range w.dcs {
		if !d.listed || (len(d.failing) > 0 && !d.degraded) {
			return false
		}
	}
	return true
}
