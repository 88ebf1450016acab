package zookeeper

import (
	"time"
)

// retire reports whether served name sn of service znode name, without an instance since
// emptySince, is due to be deleted (RetireEmptyAfter has passed); when it is not, it makes
// sure the service is built again when it is. A service that just lost its instances keeps its
// (empty) ServiceEntry meanwhile: callers' connections fail fast instead of resolving
// elsewhere, and a provider that restarts finds it.
func (w *watcher) retire(name, sn string, emptySince, now time.Time) bool {
	after := w.r.cfg.RetireEmptyAfter
	if after < 0 {
		return false
	}
	due := emptySince.Add(after)
	if !now.Before(due) {
		w.r.metrics.retired.Inc()
		w.r.log.Debug("retiring a service without instances", "service", sn, "znode", name, "empty_since", emptySince)
		return true
	}
	if d, ok := w.retiring.due[name]; !ok || due.Before(d) {
		w.retiring.due[name] = due
	}
	if w.retiring.next.IsZero() || due.Before(w.retiring.next) {
		w.retiring.next = due
		w.retiring.t.Reset(time.Until(due))
	}
	return false
}

// retireNow builds again the services with a served name due to be retired, and sets retiring.t
// for the next.
func (w *watcher) retireNow() {
	w.retiring.next = time.Time{}
	now := time.Now()
	var next time.Time
	for name, due := range w.retiring.due {
		if now.Before(due) {
			if next.IsZero() || due.Before(next) {
				next = due
			}
			continue
		}
		delete(w.retiring.due, name)
		if _, ok := w.services[name]; ok {
			w.touch(name) // build retires what is due and schedules the rest
		}
	}
	if !next.IsZero() {
		w.retiring.next = next
		w.retiring.t.Reset(time.Until(next))
	}
}
