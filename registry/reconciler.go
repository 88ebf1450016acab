package registry

import (
	"cmp"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/galleon-mesh/galleon/model"
)

// Reconciler does the bookkeeping the contract asks of every adapter, so an
// adapter only says what the registry holds and the Sink hears exactly what
// the rules require: Replace on the first report, on the first one after
// an outage and on the first after Resync, then Update for a service added or changed and Delete for one
// gone, each rejection once while it applies, and Unreachable(nil) only
// after the relisting that ends an outage.
//
// The adapter edits the state it wants served (Set, Remove, SetAll) as the
// registry tells it, and calls Flush whenever that state is consistent (a
// listing complete, a watch's answer applied). Services compare by
// model.Equal, so a service listed again unchanged, or in another order,
// is not reported. Values passed to Set and SetAll go to the Sink as they
// are: do not modify them afterwards (Clone first if the adapter keeps and
// edits its own copy).
//
// A Reconciler belongs to the goroutine that runs the adapter's loop: it is
// not safe for concurrent use.
type Reconciler struct {
	sink Sink
	// desired is what the adapter says the registry holds; reported is
	// what the Sink was last told.
	desired  map[model.ServiceKey]model.Service
	reported map[model.ServiceKey]model.Service
	// dirty are the keys Set, Removed or listed since the last Flush: only
	// they are compared, so a Flush costs what changed, not the registry.
	dirty map[model.ServiceKey]struct{}
	// synced is false until the first Replace, and again after an outage.
	synced      bool
	unreachable error
	// unreachableAt is when the outage was last reported.
	unreachableAt time.Time
	// resumable is set when the outage began after a Replace: Resumed can
	// then end it without one. resumed makes the next Flush end it.
	resumable, resumed bool
	// degraded are the parts of the registry down, with what and when was
	// last reported; back are parts up again, told at the next Flush.
	degraded map[string]outageTold
	back     map[string]bool
	// rejections apply now (record -> message); told are those reported
	// since the last Replace.
	rejections map[string]error
	told       map[string]string
}

// NewReconciler returns a Reconciler that reports to sink.
func NewReconciler(sink Sink) *Reconciler {
	return &Reconciler{
		sink:       sink,
		desired:    map[model.ServiceKey]model.Service{},
		reported:   map[model.ServiceKey]model.Service{},
		dirty:      map[model.ServiceKey]struct{}{},
		rejections: map[string]error{},
		degraded:   map[string]outageTold{},
		back:       map[string]bool{},
		told:       map[string]string{},
	}
}

// Set records the complete current state of one service.
func (r *Reconciler) Set(svc model.Service) {
	k := svc.Key()
	r.desired[k] = svc
	r.dirty[k] = struct{}{}
}

// Remove records that a service is gone.
func (r *Reconciler) Remove(key model.ServiceKey) {
	delete(r.desired, key)
	r.dirty[key] = struct{}{}
}

// SetAll records a complete listing: every service not in services is gone.
func (r *Reconciler) SetAll(services []model.Service) {
	for k := range r.desired {
		r.dirty[k] = struct{}{}
	}
	clear(r.desired)
	for _, svc := range services {
		r.Set(svc)
	}
}

// Reject records that a registry record is malformed and was skipped
// (record names it, as for Sink.Rejected). It is reported at the next
// Flush unless the same record was reported with the same message.
// A record name longer than MaxRecordLen is kept Cut.
func (r *Reconciler) Reject(record string, err error) { r.rejections[Cut(record, MaxRecordLen)] = err }

// Accept records that a record rejected before is no longer malformed (or
// no longer exists): the next Flush clears it (Sink.Rejected(record, nil)),
// and if it is rejected again later, that is reported again.
func (r *Reconciler) Accept(record string) { delete(r.rejections, Cut(record, MaxRecordLen)) }

// Rejected is the number of records rejected now: by Reject or
// SetRejections, and not accepted since. While it is 0, Accept has nothing
// to do, and an adapter whose record names cost something to build (a
// redacted URL, say) may skip building them.
func (r *Reconciler) Rejected() int { return len(r.rejections) }

// SetRejections records the complete set of records malformed now: those
// not in it are accepted.
func (r *Reconciler) SetRejections(rejections map[string]error) {
	clear(r.rejections)
	for record, err := range rejections {
		r.rejections[Cut(record, MaxRecordLen)] = err
	}
}

// Unreachable reports at once that the registry cannot be reached. While
// the outage lasts, another error is reported only if its message differs
// and unreachableRepeat has passed since the last report: transport errors
// often name an ephemeral port, so every retry's message differs, yet what
// an operator reads in /debug/status should not be an hour old. The state
// recorded and served stays as it is. Once the registry answers again, the
// adapter relists it completely (SetAll, or Set and Remove for every
// service) before the next Flush, which reports it with Replace, then
// Unreachable(nil): a Flush right after an outage without a relisting
// would report the stale state as the registry's.
func (r *Reconciler) Unreachable(err error) {
	if err == nil {
		return
	}
	now := time.Now()
	if r.unreachable == nil || (r.unreachable.Error() != err.Error() && now.Sub(r.unreachableAt) >= unreachableRepeat) {
		r.sink.Unreachable(err)
		r.unreachableAt = now
	}
	if r.unreachable == nil {
		r.resumable = r.synced
	}
	r.unreachable = err
	r.synced, r.resumed = false, false
}

// Resumed says the registry answers again and nothing was missed while it
// did not: the adapter's watches survived (ZooKeeper's do within a
// session), so what it holds is current. The next Flush reports what
// changed, if anything, and ends the outage with Unreachable(nil), without
// a Replace. After an outage in which changes may have been missed, or one
// that began before the first listing, relist instead: then Resumed does
// nothing, and the Flush after the relisting is a Replace.
func (r *Reconciler) Resumed() {
	if r.unreachable != nil && r.resumable {
		r.synced, r.resumed = true, true
	}
}

// Resync makes the next Flush a Replace of the complete state, as after an
// outage, for an adapter that knows its view may have missed changes while
// the registry stayed reachable: its watch lost events (a gap in a stream,
// an index or revision the server no longer holds, an expired session). List
// the registry again (SetAll, or Set and Remove for every service) before
// that Flush, which also reports again every rejection that applies. Resync
// reports nothing by itself, and ends no outage: after Unreachable, the
// Flush that ends it is a Replace anyway.
func (r *Reconciler) Resync() {
	r.synced, r.resumed = false, false
}

// Degraded reports at once that one part of the registry cannot be reached
// (then a different error at most every unreachableRepeat, as Unreachable
// does), or, with a nil err, that it answers again: that is told at the next
// Flush, after the adapter has relisted the part (Set and Remove for its
// services) and the Flush has reported what changed.
func (r *Reconciler) Degraded(part string, err error) {
	last, down := r.degraded[part]
	if err == nil {
		if down {
			delete(r.degraded, part)
			r.back[part] = true
		}
		return
	}
	delete(r.back, part)
	if !down || (last.msg != err.Error() && time.Since(last.at) >= unreachableRepeat) {
		r.sink.Degraded(part, err)
		r.degraded[part] = outageTold{msg: err.Error(), at: time.Now()}
	}
}

// outageTold is what was last reported of an outage, and when.
type outageTold struct {
	msg string
	at  time.Time
}

// unreachableRepeat is the least time between two reports of one outage.
const unreachableRepeat = 30 * time.Second

// Flush reports what changed since the last Flush: first the rejections
// cleared and those not yet reported, then either a Replace of everything (the first Flush, and
// the first after an outage, which also reports the outage over) or, in
// key order, an Update per service added or changed and a Delete per
// service gone.
func (r *Reconciler) Flush() {
	r.flushRejections()
	if !r.synced {
		// Sort the keys, not the services: a model.Service is a large value to swap.
		all := make([]model.Service, 0, len(r.desired))
		for _, k := range slices.SortedFunc(maps.Keys(r.desired), compareKeys) {
			all = append(all, r.desired[k])
		}
		r.sink.Replace(all)
		r.reported = maps.Clone(r.desired)
		clear(r.dirty)
		r.synced = true
		if r.unreachable != nil {
			r.unreachable = nil
			r.sink.Unreachable(nil)
		}
		r.flushBack()
		return
	}
	for _, k := range slices.SortedFunc(maps.Keys(r.dirty), compareKeys) {
		old, had := r.reported[k]
		svc, has := r.desired[k]
		switch {
		case has && (!had || !model.Equal(old, svc)):
			r.sink.Update(svc)
			r.reported[k] = svc
		case !has && had:
			r.sink.Delete(k)
			delete(r.reported, k)
		}
	}
	clear(r.dirty)
	if r.resumed {
		r.unreachable, r.resumed = nil, false
		r.sink.Unreachable(nil)
	}
	r.flushBack()
}

// flushBack tells the parts that answer again, now that what they hold is
// reported.
func (r *Reconciler) flushBack() {
	for _, part := range slices.Sorted(maps.Keys(r.back)) {
		r.sink.Degraded(part, nil)
	}
	clear(r.back)
}

// flushRejections clears the rejections told before that no longer apply
// (Rejected(record, nil)) and reports those that apply and were not told
// with the same message; after an outage (a Replace to come) every one that
// applies is reported again.
func (r *Reconciler) flushRejections() {
	resync := !r.synced
	for _, record := range slices.Sorted(maps.Keys(r.told)) {
		if _, ok := r.rejections[record]; !ok {
			r.sink.Rejected(record, nil)
			delete(r.told, record)
		}
	}
	for _, record := range slices.Sorted(maps.Keys(r.rejections)) {
		err := r.rejections[record]
		if err == nil {
			err = errors.New("malformed")
		}
		if msg, ok := r.told[record]; ok && msg == err.Error() && !resync {
			continue
		}
		r.sink.Rejected(record, err)
		r.told[record] = err.Error()
	}
}

func compareKeys(a, b model.ServiceKey) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}
