package consul

import "time"

// startSweep probes every service of a datacenter for its index, but
// those with a watch of their own (Config.ServiceWatches), which sees
// every change to its service, node changes included.
func (w *watch) startSweep(d *dcWatch, reason string) {
	d.lastSweep, d.sweepDue = time.Now(), false
	if d.watchedAll() {
		return
	}
	w.m.sweeps.WithLabelValues(reason).Inc()
	for name := range d.names {
		w.enqueue(d, name, false)
	}
}

// sweep starts a sweep for an unattributed change, or schedules one when
// the last was less than SweepInterval ago.
func (w *watch) sweep(d *dcWatch, reason string) {
	if !d.listed {
		return // the listing in progress fetches everything anyway
	}
	if wait := w.cfg.SweepInterval - time.Since(d.lastSweep); wait > 0 {
		if !d.sweepDue {
			d.sweepDue = true
			w.armSweepTimer()
		}
		return
	}
	w.startSweep(d, reason)
}

// armSweepTimer sets the sweep timer to the earliest datacenter due.
func (w *watch) armSweepTimer() {
	var next time.Duration = -1
	for _, d := range w.dcs {
		if d.sweepDue {
			wait := max(w.cfg.SweepInterval-time.Since(d.lastSweep), 0)
			if next < 0 || wait < next {
				next = wait
			}
		}
	}
	if next >= 0 {
		w.sweepTimer.Reset(next)
	}
}
