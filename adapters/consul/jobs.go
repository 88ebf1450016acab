package consul

import "context"

// job is one per-service request: a fetch, or a probe of its index.
type job struct {
	key   jobKey
	probe bool
	gen   int
	ctx   context.Context // the datacenter's: a resync cancels it
}

type jobKey struct{ dc, name string }

// enqueue asks for a fetch (full) or a probe of one service, unless the
// service has its own watch, which answers every change.
func (w *watch) enqueue(d *dcWatch, name string, full bool) {
	if d.watching(name) {
		return
	}
	k := jobKey{d.name, name}
	if w.inflight[k] {
		w.again[k] = w.again[k] || full
		return
	}
	if was, ok := w.pending[k]; ok {
		w.pending[k] = was || full
		return
	}
	w.pending[k] = full
	w.queue = append(w.queue, k)
}

// dropQueued drops the queued jobs of a datacenter (those in flight end
// with its context).
func (w *watch) dropQueued(dc string) {
	q := w.queue[:0]
	for _, k := range w.queue {
		if k.dc == dc {
			delete(w.pending, k)
			continue
		}
		q = append(q, k)
	}
	w.queue = q
}

// worker runs per-service jobs until the Run ends.
func (w *watch) worker() {
	for {
		var j job
		select {
		case j = <-w.work:
		case <-w.ctx.Done():
			return
		}
		if !w.runJob(j) {
			return
		}
	}
}

// runJob runs one job, retrying it until it succeeds or its datacenter's
// context ends, and reports whether the Run goes on.
func (w *watch) runJob(j job) bool {
	at := dcGen{j.key.dc, j.gen}
	kind := "fetch"
	if j.probe {
		kind = "probe"
	}
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	for {
		w.m.refetched.WithLabelValues(kind).Inc()
		entries, idx, err := w.c.service(j.ctx, j.key.dc, j.key.name, 0, 0, j.probe)
		ev := fetchEvent{dcGen: at, name: j.key.name, probe: j.probe, index: idx, entries: entries, err: err, final: true}
		if err == nil || j.ctx.Err() != nil {
			return w.send(ev)
		}
		ev.final = false
		if w.send(ev) && sleep(j.ctx, bo.next()) {
			continue
		}
		if w.ctx.Err() != nil {
			return false
		}
		// The datacenter is being listed again: give the job back.
		w.send(fetchEvent{dcGen: at, name: j.key.name, probe: j.probe, final: true, err: j.ctx.Err()})
		return true
	}
}

func (w *watch) onFetch(ev fetchEvent) {
	if ev.watch != nil {
		w.onWatchAnswer(ev)
		return
	}
	if ev.final {
		k := jobKey{ev.dc, ev.name}
		delete(w.inflight, k)
		w.idle++
		if full, ok := w.again[k]; ok {
			delete(w.again, k)
			if d := w.dcs[k.dc]; d != nil {
				w.enqueue(d, k.name, full)
			}
		}
	}
	d := w.answered(ev.dcGen, "fetch", ev.err)
	if d == nil {
		return
	}
	w.handleFetch(d, ev)
}

// handleFetch applies a fetch: the service's part and rejected records;
// or a probe: a fetch if its index moved.
func (w *watch) handleFetch(d *dcWatch, ev fetchEvent) {
	s := d.svcs[ev.name]
	if ev.probe {
		if s == nil || ev.index != s.index {
			w.enqueue(d, ev.name, true)
		}
		return
	}
	defer w.checkListed(d)
	delete(d.awaiting, ev.name)
	if _, listed := d.names[ev.name]; !listed {
		return // the catalog is the authority on which services exist
	}
	if ev.watch == nil && s != nil && s.index != 0 && ev.index <= s.index {
		// Not newer than what is held (a stale read). A watch's
		// answers come in order, from the index held: each is the
		// service as it is, even one whose index went backwards.
		return
	}
	if s == nil {
		s = &dcService{}
		d.svcs[ev.name] = s
	}
	s.index = ev.index
	p, rejections := w.mapper.mapService(d.dcName(ev.entries), ev.name, ev.entries)
	s.nodes = s.nodes[:0]
	for _, e := range ev.entries {
		if e.Node != nil {
			s.nodes = append(s.nodes, e.Node.Node)
		}
	}
	w.setRejected(s, rejections)
	w.setPart(d, ev.name, p)
	w.startWatch(d, ev.name, s)
}

// setRejected hands the reconciler the records of a service its last
// fetch rejected, and accepts those it rejected before and no longer does.
func (w *watch) setRejected(s *dcService, rejections []rejection) {
	rejected := make(map[string]bool, len(rejections))
	for _, rj := range rejections {
		rejected[rj.record] = true
		w.report.Reject(rj.record, rj.err)
	}
	for record := range s.rejected {
		if !rejected[record] {
			w.report.Accept(record)
		}
	}
	s.rejected = rejected
}
