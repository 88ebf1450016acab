package consul

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/consul/api"
)

// dcWatch is the state of one datacenter.
type dcWatch struct {
	name   string // "" is the agent's own datacenter
	gen    int    // bumped by every resync; older results are ignored
	ctx    context.Context
	cancel context.CancelFunc

	catalogSeen    bool
	catalogIndex   uint64
	names          map[string][]string // service name -> tags, as last listed
	checksSeen     bool
	checks         map[string]checkInfo            // node/checkID -> check: the last full listing, kept current by the signals
	unhealthy      map[string]map[string]checkInfo // state -> node/checkID -> check: the failing checks, as last signalled
	attributing    bool                            // an attribution (the checks index, maybe every check) is in flight
	attributeAgain bool                            // and another is wanted after it
	svcs           map[string]*dcService
	watched        int             // services with a watch of their own
	awaiting       map[string]bool // fetches the current listing waits for
	listed         bool

	warnedFiltered bool

	failing map[string]error // by source: catalog, checks/<state>, fetch
	outage  bool             // a signal failed: list again once it is back
	// degraded is set while this datacenter's failures are reported as
	// one part of the registry down (see failed), until it is listed
	// again.
	degraded bool
	answered bool // a request to it succeeded once

	unexplained map[uint64]bool // catalog indexes not attributed yet
	lastSweep   time.Time
	sweepDue    bool // a sweep waits for SweepInterval to pass
}

// dcService is what one datacenter holds of one service.
type dcService struct {
	index    uint64 // X-Consul-Index of the last fetch
	part     *part  // nil: nothing to serve
	nodes    []string
	rejected map[string]bool // the records the last fetch rejected
	watch    *serviceWatch   // its own blocking query, if any
}

// dcName is the datacenter's name for locality and record names: the one
// configured, or for the agent's own the one Consul reports on its nodes.
func (d *dcWatch) dcName(entries []*api.ServiceEntry) string {
	if d.name != "" {
		return d.name
	}
	for _, e := range entries {
		if e.Node != nil && e.Node.Datacenter != "" {
			return e.Node.Datacenter
		}
	}
	return "local"
}

// followDatacenters lists the datacenters now and every DatacenterRefresh.
func (w *watch) followDatacenters() {
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	for {
		list, err := w.c.datacenters(w.ctx)
		if w.ctx.Err() != nil {
			return
		}
		if !w.send(datacentersEvent{list: list, err: err}) {
			return
		}
		wait := w.cfg.DatacenterRefresh
		if err != nil {
			wait = bo.next()
		} else {
			bo.reset()
		}
		if !sleep(w.ctx, wait) {
			return
		}
	}
}

func (w *watch) onDatacenters(ev datacentersEvent) {
	if ev.err != nil {
		w.m.contact("", false)
		w.dcsFailing = true
		w.report.Unreachable(ev.err)
		return
	}
	w.dcsSet, w.dcsFailing = true, false
	want := map[string]bool{}
	for _, dc := range ev.list {
		want[dc] = true
		if w.dcs[dc] == nil {
			reason := "datacenter_added"
			if !w.listedOnce {
				reason = "start"
			}
			w.addDC(dc, reason)
		}
	}
	for name, d := range w.dcs {
		if !want[name] {
			w.dropDC(d)
		}
	}
}

func (w *watch) addDC(name, reason string) {
	d := &dcWatch{name: name, svcs: map[string]*dcService{}, failing: map[string]error{}}
	w.dcs[name] = d
	w.resync(d, reason)
}

// dropDC forgets a datacenter that is no longer listed.
func (w *watch) dropDC(d *dcWatch) {
	d.cancel()
	for name := range d.svcs {
		w.forget(d, name)
	}
	w.dropQueued(d.name)
	delete(w.dcs, d.name)
	if d.degraded {
		w.back(d) // gone: it is not down any more either
	}
}

// resync lists the datacenter again from index 0: new signals, every
// service fetched again, then a report of what changed (see flush).
func (w *watch) resync(d *dcWatch, reason string) {
	if d.cancel != nil {
		d.cancel()
	}
	w.m.resyncs.WithLabelValues(reason).Inc()
	d.gen++
	d.ctx, d.cancel = context.WithCancel(w.ctx)
	d.catalogSeen, d.checksSeen, d.listed = false, false, false
	d.catalogIndex = 0
	d.unexplained = map[uint64]bool{}
	d.attributing, d.attributeAgain = false, false
	d.awaiting = map[string]bool{}
	clear(d.failing)
	d.outage = false
	w.stopWatches(d)
	for _, s := range d.svcs {
		s.index = 0 // indexes of the old state mean nothing now
	}
	w.dropQueued(d.name)
	at := dcGen{d.name, d.gen}
	ctx := d.ctx
	w.goFunc(func() { w.poll(ctx, at, "catalog", 0, w.catalogQuery(at.dc)) })
	w.goFunc(func() { w.pollChecks(ctx, at) })
}

// checkListed marks the datacenter listed once the catalog, every check
// and every service the catalog named are read: a degraded one is back.
func (w *watch) checkListed(d *dcWatch) {
	if !d.listed && d.catalogSeen && d.checksSeen && len(d.awaiting) == 0 {
		d.listed = true
		d.lastSweep = time.Now()
		if d.degraded && len(d.failing) == 0 {
			w.back(d)
		}
	}
}

// answered records the outcome of a request of generation at, counted
// under source, and returns its datacenter if the answer is to be used:
// nil if the datacenter was dropped or listed again since (this answer's
// success included), or the request failed.
func (w *watch) answered(at dcGen, source string, err error) *dcWatch {
	d := w.dcs[at.dc]
	if d == nil || d.gen != at.gen {
		return nil
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			w.failed(d, source, err)
		}
		return nil
	}
	w.ok(d, source)
	if d.gen != at.gen {
		// This answer ended an outage, and the datacenter is being
		// listed again: it is the old generation's, not to be applied.
		return nil
	}
	return d
}

// failed records a failed request and reports it; nothing is removed.
// While another datacenter answers, the failure is this datacenter's
// (a WAN partition, its servers down): it is reported as a part of the
// registry degraded, and the others' changes go on being reported. Else
// the registry is unreachable (the agent down, a wrong token): nothing is
// reported until every datacenter is listed again.
func (w *watch) failed(d *dcWatch, source string, err error) {
	w.m.contact(d.name, false)
	d.failing[source] = err
	if source != "fetch" {
		d.outage = true
	}
	w.log.Debug("consul request failed", "datacenter", dcLabel(d.name), "source", source, "error", err)
	if d.degraded || w.othersAnswer(d) {
		d.degraded = true
		w.report.Degraded(dcLabel(d.name), err)
		return
	}
	w.report.Unreachable(err)
}

// othersAnswer reports whether the agent answers for another datacenter
// than d: one that answered before has no request failing now, and the
// list of datacenters (when followed) did not fail last.
func (w *watch) othersAnswer(d *dcWatch) bool {
	if w.dcsFailing {
		return false
	}
	for _, o := range w.dcs {
		if o != d && o.answered && len(o.failing) == 0 {
			return true
		}
	}
	return false
}

// ok records a successful request. Once every request to a datacenter
// whose signals failed succeeds again, it is listed again from scratch; a
// datacenter where only per-service requests failed (they are retried
// until they succeed, so they miss nothing) is back at once.
func (w *watch) ok(d *dcWatch, source string) {
	w.m.contact(d.name, true)
	d.answered = true
	if _, was := d.failing[source]; !was {
		return
	}
	delete(d.failing, source)
	if len(d.failing) > 0 {
		return
	}
	switch {
	case d.outage:
		w.resync(d, "outage") // back once listed (see checkListed)
	case d.degraded:
		w.back(d)
	}
}

// back reports a degraded datacenter up again; the reconciler tells it
// after the report of what the datacenter's relisting changed.
func (w *watch) back(d *dcWatch) {
	d.degraded = false
	w.report.Degraded(dcLabel(d.name), nil)
}
