package registrytest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// Op names the Sink method an Event records.
type Op int

// The Sink methods.
const (
	OpReplace Op = iota + 1
	OpUpdate
	OpDelete
	OpRejected
	OpUnreachable
	OpDegraded
)

func (o Op) String() string {
	switch o {
	case OpReplace:
		return "Replace"
	case OpUpdate:
		return "Update"
	case OpDelete:
		return "Delete"
	case OpRejected:
		return "Rejected"
	case OpUnreachable:
		return "Unreachable"
	case OpDegraded:
		return "Degraded"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Event is one Sink call. Its Services belong to the Recorder (the Sink owns
// what it is passed): read them, never modify them.
type Event struct {
	Op Op
	// Services holds the services passed to Replace, or the one passed to
	// Update.
	Services []model.Service
	// Key is the key passed to Delete, or the key of the service passed to
	// Update.
	Key model.ServiceKey
	// Record is Rejected's record, or Degraded's part.
	Record string
	// Err is Rejected's error, Unreachable's or Degraded's (nil: reachable
	// again).
	Err error
	// Late is set on a call that came after Recorder.Close, that is after
	// Run returned.
	Late bool
}

// String describes the call, e.g. "Update(ns/name)".
func (e Event) String() string {
	var s string
	switch e.Op {
	case OpReplace:
		keys := make([]string, 0, len(e.Services))
		for i, svc := range e.Services {
			if i == 8 {
				keys = append(keys, fmt.Sprintf("... %d more", len(e.Services)-i))
				break
			}
			keys = append(keys, svc.Key().String())
		}
		s = fmt.Sprintf("Replace(%d services: %s)", len(e.Services), strings.Join(keys, ", "))
	case OpUpdate:
		s = "Update(" + e.Key.String() + ")"
	case OpDelete:
		s = "Delete(" + e.Key.String() + ")"
	case OpRejected:
		s = fmt.Sprintf("Rejected(%q, %v)", e.Record, e.Err)
	case OpUnreachable:
		s = fmt.Sprintf("Unreachable(%v)", e.Err)
	case OpDegraded:
		s = fmt.Sprintf("Degraded(%q, %v)", e.Record, e.Err)
	default:
		s = e.Op.String()
	}
	if e.Late {
		s += " [after Run returned]"
	}
	return s
}

// Recorder is a registry.Sink for tests. It records every call, safely for
// concurrent use, and maintains the state a core would hold (applying
// Replace, Update and Delete), so that a test can wait for an outcome
// instead of sleeping. Its zero value is ready to use.
//
// Check reports the contract violations that the calls alone reveal: a
// state report before the first Replace, a value modified by the adapter
// after it was passed in, a call after Close, malformed arguments.
type Recorder struct {
	mu          sync.Mutex
	events      []Event
	copies      [][]model.Service // deep copies of events[i].Services, taken at call time
	state       map[model.ServiceKey]model.Service
	synced      bool
	unreachable error
	closed      bool
	changed     chan struct{} // closed and replaced on every call
}

var _ registry.Sink = (*Recorder)(nil)

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// record appends e and wakes waiters; r.mu is held.
func (r *Recorder) record(e Event) {
	if r.state == nil {
		r.state = map[model.ServiceKey]model.Service{}
	}
	e.Late = r.closed
	r.events = append(r.events, e)
	r.copies = append(r.copies, cloneServices(e.Services))
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// Replace implements registry.Sink.
func (r *Recorder) Replace(services []model.Service) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(Event{Op: OpReplace, Services: services})
	r.state = make(map[model.ServiceKey]model.Service, len(services))
	for _, svc := range services {
		r.state[svc.Key()] = svc
	}
	r.synced = true
}

// Update implements registry.Sink.
func (r *Recorder) Update(service model.Service) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(Event{Op: OpUpdate, Services: []model.Service{service}, Key: service.Key()})
	r.state[service.Key()] = service
}

// Delete implements registry.Sink.
func (r *Recorder) Delete(key model.ServiceKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(Event{Op: OpDelete, Key: key})
	delete(r.state, key)
}

// Rejected implements registry.Sink.
func (r *Recorder) Rejected(record string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(Event{Op: OpRejected, Record: record, Err: err})
}

// Unreachable implements registry.Sink.
func (r *Recorder) Unreachable(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(Event{Op: OpUnreachable, Err: err})
	r.unreachable = err
}

// Degraded implements registry.Sink.
func (r *Recorder) Degraded(part string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(Event{Op: OpDegraded, Record: part, Err: err})
}

// Events returns the calls so far, oldest first.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Len returns the number of calls so far; Events()[Len():] after later
// calls are the calls since.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// State returns a copy of the services the calls so far add up to.
func (r *Recorder) State() map[model.ServiceKey]model.Service {
	r.mu.Lock()
	defer r.mu.Unlock()
	return copyState(r.state)
}

// Synced reports whether Replace was called.
func (r *Recorder) Synced() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced
}

// UnreachableError returns the error of the last Unreachable call: nil if
// there was none or the last one reported the registry reachable again.
func (r *Recorder) UnreachableError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unreachable
}

// Close marks the end of Run: calls after it are flagged as Late and
// reported by Check.
func (r *Recorder) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
}

// WaitFor waits until cond holds for the current state, re-evaluating it
// after every call, and fails t with the calls so far if timeout passes
// first. cond runs with the Recorder locked: it must not keep or modify
// the map, nor call the Recorder.
func (r *Recorder) WaitFor(t testing.TB, timeout time.Duration, cond func(state map[model.ServiceKey]model.Service) bool) {
	t.Helper()
	ok := r.wait(time.Now().Add(timeout), nil, func(_ []Event, state map[model.ServiceKey]model.Service) bool {
		return cond(state)
	})
	if !ok {
		t.Fatalf("registrytest: the state did not reach the expected condition within %v; Sink calls:\n%s", timeout, r.Dump())
	}
}

// WaitForEvents is WaitFor on the calls so far (oldest first) rather than
// the state. cond runs with the Recorder locked: it must not keep or
// modify the slice, nor call the Recorder.
func (r *Recorder) WaitForEvents(t testing.TB, timeout time.Duration, cond func(events []Event) bool) {
	t.Helper()
	ok := r.wait(time.Now().Add(timeout), nil, func(events []Event, _ map[model.ServiceKey]model.Service) bool {
		return cond(events)
	})
	if !ok {
		t.Fatalf("registrytest: the Sink calls did not meet the expected condition within %v; Sink calls:\n%s", timeout, r.Dump())
	}
}

// wait evaluates cond now and after every call until it holds (true), the
// deadline passes or abort is closed (false).
func (r *Recorder) wait(deadline time.Time, abort <-chan struct{}, cond func([]Event, map[model.ServiceKey]model.Service) bool) bool {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		r.mu.Lock()
		if r.state == nil {
			r.state = map[model.ServiceKey]model.Service{}
		}
		if cond(r.events, r.state) {
			r.mu.Unlock()
			return true
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			return false
		case <-abort:
			// One last look: the call that made cond true may have come
			// just before Run returned.
			r.mu.Lock()
			defer r.mu.Unlock()
			return cond(r.events, r.state)
		}
	}
}

// Dump lists the calls so far, one a line, for failure messages. Long
// histories are shortened to their first and last calls.
func (r *Recorder) Dump() string {
	events := r.Events()
	if len(events) == 0 {
		return "  (none)"
	}
	const head, tail = 10, 40
	var b strings.Builder
	for i, e := range events {
		if len(events) > head+tail && i == head {
			fmt.Fprintf(&b, "  ... %d calls ...\n", len(events)-head-tail)
		}
		if len(events) > head+tail && i >= head && i < len(events)-tail {
			continue
		}
		fmt.Fprintf(&b, "  #%d %s\n", i, e)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Check returns the contract violations the calls reveal, nil if none:
//   - a state report (Update, Delete) before the first Replace;
//   - a service without Namespace or Name, a key twice in one Replace, an
//     instance ID twice in one service;
//   - Rejected with an empty record, or with a nil error (which clears a
//     rejection) for a record not rejected before; Degraded with an empty
//     part, or back (nil) for a part not down;
//   - a value modified after it was passed to the Sink (the Sink owns it);
//   - a call after Close (after Run returned).
//
// Check reads every recorded value: call it once the adapter has stopped,
// or expect the race detector to flag the adapter's later writes.
func (r *Recorder) Check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	fail := func(i int, e Event, format string, args ...any) {
		errs = append(errs, fmt.Errorf("call #%d %s: %s", i, e, fmt.Sprintf(format, args...)))
	}
	synced := false
	rejected := map[string]bool{} // records rejected and not cleared
	degraded := map[string]bool{} // parts down
	for i, e := range r.events {
		if e.Late {
			fail(i, e, "Sink called after Run returned: Run must stop every goroutine it started before returning")
		}
		switch e.Op {
		case OpReplace:
			synced = true
		case OpUpdate, OpDelete:
			if !synced {
				fail(i, e, "state reported before the first Replace: Run must report the complete listing with Replace first")
				synced = true // once is enough
			}
		case OpRejected:
			if e.Record == "" {
				fail(i, e, "empty record: name the record so that an operator can find it")
			}
			if e.Err == nil && !rejected[e.Record] {
				fail(i, e, "nil error for a record never rejected: Rejected(record, nil) clears a rejection reported before; to reject, say what is wrong with the record")
			}
			rejected[e.Record] = e.Err != nil
		case OpDegraded:
			if e.Record == "" {
				fail(i, e, "empty part: name the part of the registry that cannot be reached")
			}
			if e.Err == nil && !degraded[e.Record] {
				fail(i, e, "Degraded(part, nil) for a part never reported down")
			}
			degraded[e.Record] = e.Err != nil
		}
		seen := map[model.ServiceKey]bool{}
		for _, svc := range e.Services {
			k := svc.Key()
			if svc.Namespace == "" || svc.Name == "" {
				fail(i, e, "service %q has an empty Namespace or Name", k.String())
			}
			if seen[k] {
				fail(i, e, "service %s is listed twice", k)
			}
			seen[k] = true
			ids := map[string]bool{}
			for _, inst := range svc.Instances {
				if ids[inst.ID] {
					fail(i, e, "service %s has two instances with ID %q (IDs are unique within a service)", k, inst.ID)
				}
				ids[inst.ID] = true
			}
		}
		if !reflect.DeepEqual(e.Services, r.copies[i]) {
			fail(i, e, "the adapter modified the services after passing them to the Sink (they belong to the Sink from then on):\n%s",
				indent(fieldDiffs("services", r.copies[i], e.Services)))
		}
	}
	return errors.Join(errs...)
}

func copyState(m map[model.ServiceKey]model.Service) map[model.ServiceKey]model.Service {
	out := make(map[model.ServiceKey]model.Service, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// cloneServices deep-copies services, keeping nil and empty apart so that
// reflect.DeepEqual sees any later modification.
func cloneServices(services []model.Service) []model.Service {
	if services == nil {
		return nil
	}
	out := make([]model.Service, len(services))
	for i, s := range services {
		out[i] = s.Clone()
	}
	return out
}
