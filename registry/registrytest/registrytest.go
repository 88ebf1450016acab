// Package registrytest checks that a registry.Registry keeps the adapter
// contract (stated once, in the package documentation of registry), against
// the real registry it watches. It is to adapters what
// testing/fstest.TestFS is to file systems.
//
// An adapter author implements Driver for their registry (register a
// service in Consul, write a file, create a ZooKeeper node) and calls
// TestRegistry from a test:
//
//	func TestConformance(t *testing.T) {
//		server := startTestServer(t) // the real registry, for this test
//		registrytest.TestRegistry(t,
//			func(t *testing.T) registry.Registry {
//				reg, err := myregistry.New(myregistry.Config{Address: server.Addr()})
//				if err != nil {
//					t.Fatal(err)
//				}
//				return reg
//			},
//			&myDriver{client: server.Client()},
//		)
//	}
//
// TestRegistry runs one subtest per clause of the contract, each with a
// fresh Registry and its own services, named "rt-<subtest>-a", "-b", "-c"
// in the namespace of WithNamespace. The Driver may also implement
// Corrupter, Breaker, PartBreaker, Staller and EventLoser; the subtests
// that need them are skipped otherwise. A registry reached over TCP gets a
// Breaker by pointing the adapter at a Proxy (NewProxy) and embedding it in
// the Driver, and a Staller with one more method (Proxy.Silence).
//
// What the subtests check:
//
//   - InitialReplace: the first state report is a Replace holding every
//     service already in the registry, each complete and correct.
//   - InitialReplaceEmpty: an empty registry is still reported, with a
//     Replace (the core becomes ready on the first one).
//   - Add, Change, Remove: each Put and Remove is followed by reports
//     (Update, Delete or Replace) after which the state equals what was
//     put: every Update carries the complete new state of the service.
//   - UnrelatedUnchanged: while other services change, an unchanged
//     service is not reported again (see AllowRedundantUpdates).
//   - Rejected, RejectedAtStart (Corrupter): a malformed record is
//     reported with Rejected under the record name the driver expects,
//     and no good service is dropped or changed because of it, neither
//     while running nor in the first Replace; fixing the record adds the
//     service.
//   - Unreachable, UnreachableAtStart, CancelWhileUnreachable (Breaker): an
//     outage is reported with Unreachable(err); while it lasts no report
//     drops or changes a service (no empty Replace), and before the first
//     listing there is no Replace at all; once the registry is back,
//     Unreachable(nil) is reported, the state is right and changes are
//     picked up again, and the registry was listed again (a Replace) before
//     Unreachable(nil), unless WithoutRelist; Run stops promptly even
//     during an outage.
//   - Degraded (PartBreaker): one part down is reported with
//     Degraded(part, err), under the part name the driver expects, and not
//     with Unreachable; no service is lost or changed meanwhile; once the
//     part is back, Degraded(part, nil) is reported and changes are picked
//     up again.
//   - Stalled (Staller): a registry that accepts connections and never
//     answers is reported with Unreachable(err), so every request must be
//     bounded by a timeout; no service is lost meanwhile; once it answers,
//     the registry was listed again (a Replace, unless WithoutRelist),
//     Unreachable(nil) is reported and the state is right.
//   - LostEvents (EventLoser): changes the adapter's watch missed are
//     learnt by listing the registry again, reported with Replace (unless
//     WithoutRelist: then as the Updates and Deletes the listing implies),
//     and the watch goes on.
//   - Cancel: Run returns ctx.Err() promptly after cancellation, also with
//     a change in flight and with a context cancelled before Run.
//
// When the kit times out waiting for a report, the failure message shows
// the stacks of Run's goroutines: where the adapter waits.
//
// And after every Run, in every subtest:
//
//   - Run returned ctx.Err() (errors.Is context.Canceled) within the stop
//     timeout of the cancellation, and not before it;
//   - every goroutine Run started, directly or through other goroutines,
//     has ended (see IgnoreGoroutines), and no Sink method was called after
//     Run returned. Run runs under a pprof label, which the goroutines it
//     starts inherit: goroutines of the driver or the test are not counted;
//   - Recorder.Check: no Update or Delete before the first Replace, no
//     value modified after it was passed to the Sink, well-formed
//     arguments;
//   - no redundant report: an Update of a service equal (by meaning) to
//     its last report, or a Delete of a service not reported. Replace is
//     always allowed: the contract lets an adapter resynchronise whenever
//     it needs to. This is an error unless AllowRedundantUpdates is given.
//
// Services are compared by meaning (see Diff) after WithNormalize and
// IgnoreFields: instances as a set matched by ID, lists as sets, defaults
// equal to their explicit value.
//
// The subtests run one after the other, sharing the registry the Driver
// drives. Other tests may use the same registry at the same time if they
// leave the kit's services alone: the kit ignores services it did not put.
package registrytest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// Driver changes the real registry an adapter watches. Its methods return
// once the change is visible to a new reader (a fresh listing); the
// adapter may see it any time later. They are called from the test's
// goroutine only, never concurrently.
type Driver interface {
	// Put creates the service, or replaces it, so that the registry holds
	// exactly svc: its fields and exactly svc.Instances as its instances.
	// A field the registry cannot hold may be dropped; say so with
	// IgnoreFields or WithNormalize.
	Put(ctx context.Context, svc model.Service) error
	// Remove deletes the service and all its instances, and any record a
	// Corrupter wrote for key. Removing what is not there is not an error.
	Remove(ctx context.Context, key model.ServiceKey) error
}

// Corrupter is implemented by a Driver whose registry can hold a malformed
// record (a file that is not valid YAML, a Consul service with an invalid
// port, a ZooKeeper node that is not JSON).
type Corrupter interface {
	// Corrupt writes a malformed record meant to define the service key,
	// which is not in the registry, such that the adapter must reject it.
	// It returns the record name the adapter is expected to pass to
	// Sink.Rejected, or "" to accept any. A later Put of key replaces the
	// malformed record with a good one; Remove removes it.
	Corrupt(ctx context.Context, key model.ServiceKey) (record string, err error)
}

// Breaker is implemented by a Driver that can make the registry
// unreachable for the adapter (stop the server, drop the connection,
// move the directory away) and reachable again, with its content intact.
type Breaker interface {
	// Break makes the registry unreachable.
	Break(ctx context.Context) error
	// Restore makes it reachable again, holding what it held before Break.
	Restore(ctx context.Context) error
}

// Option tunes TestRegistry. A zero value given to an option (a duration
// of 0, an empty namespace, a nil function) keeps the default.
type Option func(*options)

type options struct {
	timeout          time.Duration
	stopTimeout      time.Duration
	outage           time.Duration
	namespace        string
	fixture          func(model.ServiceKey, int) model.Service
	normalize        func(model.Service) model.Service
	ignoreFields     []string
	ignoreGoroutines []string
	allowRedundant   bool
	noRelist         bool
}

// Defaults: generous, so that the kit does not flake under -race on a
// loaded two-core machine.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultStopTimeout = 5 * time.Second
	DefaultOutage      = 2 * time.Second
	DefaultNamespace   = "registrytest"
)

// WithTimeout sets how long the kit waits for the adapter to report
// something it must report (default 10s). The kit never sleeps for this
// long when the report comes earlier.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithStopTimeout sets how long Run may take to return once its context is
// cancelled, and how long its goroutines may take to end after that
// (default 5s).
func WithStopTimeout(d time.Duration) Option { return func(o *options) { o.stopTimeout = d } }

// WithOutage sets how long the kit keeps the registry broken after the
// adapter reported it unreachable, watching for reports that drop
// services (default 2s). Make it longer than the adapter's retry interval
// so that at least one retry fails while the kit watches.
func WithOutage(d time.Duration) Option { return func(o *options) { o.outage = d } }

// WithNamespace sets the namespace of the services the kit creates
// (default "registrytest"). Use the namespace the adapter reports them in.
func WithNamespace(ns string) Option { return func(o *options) { o.namespace = ns } }

// WithFixture replaces DefaultFixture: f returns version v (0, 1, 2, ...)
// of the service key, which the kit passes to Driver.Put and expects the
// adapter to report. Consecutive versions must differ in what the adapter
// reports, keep the key, and have at least one instance (many registries
// hold no service without one). Wrapping DefaultFixture is the easy way to
// add fields a registry supports or drop those it does not.
func WithFixture(f func(key model.ServiceKey, v int) model.Service) Option {
	return func(o *options) { o.fixture = f }
}

// WithNormalize sets a function that turns a service the kit puts into the
// service the adapter is expected to report: derived host names, IDs the
// registry assigns, health states it cannot represent. It receives a copy
// and must keep Namespace and Name. It is applied to the expected side
// only; IgnoreFields applies to both.
func WithNormalize(f func(model.Service) model.Service) Option {
	return func(o *options) { o.normalize = f }
}

// IgnoreFields leaves fields out of every comparison, on both sides: a
// model.Service field ("Labels", "Annotations") or a model.Instance field
// as "Instances.<Field>" ("Instances.Weight"). Namespace, Name and
// Instances.ID identify what is compared and cannot be ignored; Registry
// is never compared.
func IgnoreFields(fields ...string) Option {
	return func(o *options) { o.ignoreFields = append(o.ignoreFields, fields...) }
}

// IgnoreGoroutines exempts goroutines from the leak check after Run
// returns: those whose stack contains any of the substrings, such as
// "net/http.(*persistConn)" for idle keep-alive connections of a shared
// HTTP client that outlive Run by design.
func IgnoreGoroutines(substrings ...string) Option {
	return func(o *options) { o.ignoreGoroutines = append(o.ignoreGoroutines, substrings...) }
}

// AllowRedundantUpdates turns the redundant-report check (an Update of an
// unchanged service, a Delete of a service not reported) from an error
// into a log line. The contract does not forbid such reports and the core
// absorbs them, but each costs it a comparison, and an adapter that
// re-reports everything on every change costs it a comparison per service
// per change.
func AllowRedundantUpdates() Option { return func(o *options) { o.allowRedundant = true } }

// WithoutRelist lets an outage end without a Replace, for a registry whose
// watches survive a reconnect so that no change made meanwhile can be
// missed (ZooKeeper within its session). Without it, the Unreachable and
// Stalled subtests require a Replace between Unreachable(err) and
// Unreachable(nil), and LostEvents a Replace after the lost events.
func WithoutRelist() Option { return func(o *options) { o.noRelist = true } }

// TestRegistry checks the Registry that newRegistry returns against the
// contract of package registry, changing the registry it watches through
// driver. newRegistry is called once per Run (several times per subtest
// at most), before the kit breaks the registry in the outage subtests.
// See the package documentation for what is checked.
func TestRegistry(t *testing.T, newRegistry func(t *testing.T) registry.Registry, driver Driver, opts ...Option) {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.timeout <= 0 {
		o.timeout = DefaultTimeout
	}
	if o.stopTimeout <= 0 {
		o.stopTimeout = DefaultStopTimeout
	}
	if o.outage <= 0 {
		o.outage = DefaultOutage
	}
	if o.namespace == "" {
		o.namespace = DefaultNamespace
	}
	if o.fixture == nil {
		o.fixture = DefaultFixture
	}
	if o.normalize == nil {
		o.normalize = func(s model.Service) model.Service { return s }
	}
	if newRegistry == nil || driver == nil {
		t.Fatal("registrytest.TestRegistry: newRegistry and driver are required")
	}
	filter, err := newFieldFilter(o.ignoreFields)
	if err != nil {
		t.Fatalf("registrytest.TestRegistry: %v", err)
	}
	k := &kit{newRegistry: newRegistry, driver: driver, o: o, filter: filter}
	// A clause's failure is reported at the kit's line that checks it; say
	// once, in every subtest's log, which test of the adapter ran the kit.
	caller := "unknown"
	if _, file, line, ok := runtime.Caller(1); ok {
		caller = fmt.Sprintf("%s:%d", filepath.Base(file), line)
	}
	for _, st := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"InitialReplace", k.testInitialReplace},
		{"InitialReplaceEmpty", k.testInitialReplaceEmpty},
		{"Add", k.testAdd},
		{"Change", k.testChange},
		{"Remove", k.testRemove},
		{"UnrelatedUnchanged", k.testUnrelatedUnchanged},
		{"Rejected", k.testRejected},
		{"RejectedAtStart", k.testRejectedAtStart},
		{"Unreachable", k.testUnreachable},
		{"UnreachableAtStart", k.testUnreachableAtStart},
		{"CancelWhileUnreachable", k.testCancelWhileUnreachable},
		{"Degraded", k.testDegraded},
		{"Stalled", k.testStalled},
		{"LostEvents", k.testLostEvents},
		{"Cancel", k.testCancel},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Logf("conformance clause %s, run by registrytest.TestRegistry from %s (what it checks: the registrytest package documentation)", st.name, caller)
			st.f(t)
		})
	}
}

type kit struct {
	newRegistry func(*testing.T) registry.Registry
	driver      Driver
	o           options
	filter      *fieldFilter
}

// optional is the kit's driver as the optional interface T (named name), or skips t saying
// which clauses go unchecked without it.
func optional[T any](t *testing.T, d Driver, name, unchecked string) T {
	v, ok := d.(T)
	if !ok {
		t.Skipf("the driver (%T) does not implement registrytest.%s: %s", d, name, unchecked)
	}
	return v
}

func (k *kit) corrupter(t *testing.T) Corrupter {
	return optional[Corrupter](t, k.driver, "Corrupter", "the malformed-record clauses are not checked")
}

func (k *kit) breaker(t *testing.T) Breaker {
	return optional[Breaker](t, k.driver, "Breaker", "the outage clauses are not checked")
}

// ---------------------------------------------------------------------------
// The subtests.

func (k *kit) testInitialReplace(t *testing.T) {
	s := k.scenario(t, "initial")
	s.put("a")
	s.put("b")
	r := s.start()
	r.wait("the first Replace", func(events []Event, _ map[model.ServiceKey]model.Service) bool {
		return firstStateReport(events) >= 0
	})
	events := r.rec.Events()
	first := events[firstStateReport(events)]
	if first.Op != OpReplace {
		t.Fatalf("the first state report is %s: Run must first report the complete listing with Replace", first)
	}
	if m := s.mismatch(servicesByKey(first.Services)); len(m) > 0 {
		t.Fatalf("the first Replace is not the complete, correct listing of what the registry held:\n%s\nSink calls:\n%s", indent(m), r.rec.Dump())
	}
	r.waitState("the listing")
}

func (k *kit) testInitialReplaceEmpty(t *testing.T) {
	s := k.scenario(t, "empty")
	r := s.start()
	r.wait("a Replace of a registry that holds none of the kit's services (Replace must come even when the listing is empty: the core becomes ready on it)",
		func(events []Event, _ map[model.ServiceKey]model.Service) bool {
			return slices.ContainsFunc(events, func(e Event) bool { return e.Op == OpReplace })
		})
	r.waitState("the listing")
}

func (k *kit) testAdd(t *testing.T) {
	s := k.scenario(t, "add")
	s.put("a")
	r := s.start()
	r.waitState("the listing")
	s.put("b")
	r.waitState("the new service b")
	s.put("c")
	r.waitState("the new service c")
}

func (k *kit) testChange(t *testing.T) {
	s := k.scenario(t, "change")
	s.put("a")
	s.put("b")
	r := s.start()
	r.waitState("the listing")
	for v := 1; v <= 3; v++ {
		s.put("a")
		r.waitState(fmt.Sprintf("version %d of a (every Update carries the complete new state)", v))
	}
}

func (k *kit) testRemove(t *testing.T) {
	s := k.scenario(t, "remove")
	s.put("a")
	s.put("b")
	r := s.start()
	r.waitState("the listing")
	s.remove("b")
	r.waitState("the removal of b")
	s.put("b")
	r.waitState("b added back")
	s.remove("a")
	s.remove("b")
	r.waitState("the removal of every service")
}

// testUnrelatedUnchanged provokes redundant reports: services change next
// to one that does not. The check is the redundant-report check run after
// Run returns.
func (k *kit) testUnrelatedUnchanged(t *testing.T) {
	s := k.scenario(t, "unrelated")
	s.put("a")
	s.put("b")
	r := s.start()
	r.waitState("the listing")
	s.put("c")
	r.waitState("the new service c")
	s.put("a")
	r.waitState("version 1 of a")
	s.remove("c")
	r.waitState("the removal of c")
	r.stop()
}

func (k *kit) testRejected(t *testing.T) {
	k.corrupter(t)
	s := k.scenario(t, "rejected")
	s.put("a")
	r := s.start()
	r.waitState("the listing")
	mark := r.rec.Len()
	kept := s.wantKeys()
	record := s.corrupt("c")
	r.waitRejected(mark, record)
	// A barrier rather than a sleep: once a later change is reported, any
	// report the malformed record caused has come.
	s.put("b")
	loss := func() string {
		if msg := s.firstLoss(r.rec.Events(), mark, kept); msg != "" {
			return "A malformed record cost a good service: " + msg
		}
		return ""
	}
	r.waitStateOr("the new service b, put after the malformed record", loss)
	if msg := loss(); msg != "" {
		t.Error(msg)
	}
	s.put("c")
	r.waitState("c, once its record is fixed")
}

func (k *kit) testRejectedAtStart(t *testing.T) {
	k.corrupter(t)
	s := k.scenario(t, "rejected-start")
	s.put("a")
	s.put("b")
	record := s.corrupt("c")
	r := s.start()
	r.waitRejected(0, record)
	r.wait("the first Replace", func(events []Event, _ map[model.ServiceKey]model.Service) bool {
		return firstStateReport(events) >= 0
	})
	events := r.rec.Events()
	if first := events[firstStateReport(events)]; first.Op == OpReplace {
		if m := s.mismatch(servicesByKey(first.Services)); len(m) > 0 {
			t.Fatalf("with a malformed record in the registry, the first Replace is not the complete listing of the good ones:\n%s\nSink calls:\n%s", indent(m), r.rec.Dump())
		}
	}
	r.waitState("the good services")
}

func (k *kit) testUnreachable(t *testing.T) {
	k.breaker(t)
	s := k.scenario(t, "outage")
	s.put("a")
	s.put("b")
	r := s.start()
	r.waitState("the listing")
	mark := r.rec.Len()
	kept := s.wantKeys()
	s.brk()
	down := r.waitUnreachable(mark)
	r.hold()
	s.restore()
	up := r.waitReachable(down)
	r.checkRelisted(down, up)
	loss := func() string {
		if msg := s.firstLoss(r.rec.Events(), mark, kept); msg != "" {
			return "A service was lost or changed during the outage (the core must keep serving the last good state): " + msg
		}
		return ""
	}
	r.waitStateOr("the services after the outage", loss)
	if msg := loss(); msg != "" {
		t.Error(msg)
	}
	s.put("c")
	r.waitState("the new service c, put after the outage (the watch must resume)")
}

func (k *kit) testUnreachableAtStart(t *testing.T) {
	k.breaker(t)
	s := k.scenario(t, "outage-start")
	s.put("a")
	r := s.startWith(startOptions{beforeRun: s.brk})
	down := r.waitUnreachable(0)
	r.hold()
	for i, e := range r.rec.Events() {
		if e.Op == OpReplace || e.Op == OpUpdate || e.Op == OpDelete {
			t.Errorf("call #%d %s while the registry could not be listed: report nothing but Unreachable until the first complete listing", i, e)
			break
		}
	}
	s.restore()
	r.waitState("the listing once the registry is reachable")
	r.waitReachable(down)
}

func (k *kit) testCancelWhileUnreachable(t *testing.T) {
	k.breaker(t)
	s := k.scenario(t, "outage-cancel")
	s.put("a")
	r := s.start()
	r.waitState("the listing")
	mark := r.rec.Len()
	s.brk()
	r.waitUnreachable(mark)
	r.stop() // checks that Run returns promptly while it retries
	s.restore()
}

func (k *kit) testCancel(t *testing.T) {
	s := k.scenario(t, "cancel")
	s.put("a")
	r := s.start()
	r.waitState("the listing")
	s.put("b") // a change in flight while Run is cancelled
	r.stop()

	// A context cancelled before Run.
	s.startWith(startOptions{cancelled: true}).stop()
}

// ---------------------------------------------------------------------------
// Scenarios: the services of one subtest and what the adapter must report.

type scenario struct {
	k    *kit
	t    *testing.T
	slug string
	// want holds the expected value, filtered and canonical, of each
	// service that is in the registry; absent the keys that must not be
	// reported (removed, or malformed).
	want    map[model.ServiceKey]model.Service
	absent  map[model.ServiceKey]bool
	version map[model.ServiceKey]int
	broken  bool
	// partBroken: a PartBreaker's part is down, to restore in the cleanup.
	partBroken bool
}

// letters are the services a scenario may use.
var letters = []string{"a", "b", "c"}

// scenario starts a subtest's scenario. It removes the subtest's services
// first, in case an earlier test run against the same registry was
// interrupted, and again (restoring the registry first) when the subtest
// ends.
func (k *kit) scenario(t *testing.T, slug string) *scenario {
	s := &scenario{k: k, t: t, slug: slug, want: map[model.ServiceKey]model.Service{},
		absent: map[model.ServiceKey]bool{}, version: map[model.ServiceKey]int{}}
	for _, l := range letters {
		s.driverCall("Remove (cleaning up before the subtest)", func(ctx context.Context) error { return k.driver.Remove(ctx, s.key(l)) })
	}
	t.Cleanup(func() {
		if s.partBroken {
			if err := s.call(k.driver.(PartBreaker).RestorePart); err != nil {
				t.Errorf("driver RestorePart (cleanup): %v", err)
				return
			}
		}
		if s.broken {
			// A Breaker's or a Staller's Restore.
			restorer := k.driver.(interface{ Restore(context.Context) error })
			if err := s.call(restorer.Restore); err != nil {
				t.Errorf("driver Restore (cleanup): %v", err)
				return
			}
		}
		for _, l := range letters {
			if err := s.call(func(ctx context.Context) error { return k.driver.Remove(ctx, s.key(l)) }); err != nil {
				t.Errorf("driver Remove(%s) (cleanup): %v", s.key(l), err)
			}
		}
	})
	return s
}

func (s *scenario) key(letter string) model.ServiceKey {
	return model.ServiceKey{Namespace: s.k.o.namespace, Name: "rt-" + s.slug + "-" + letter}
}

// call runs a driver call with the kit's timeout.
func (s *scenario) call(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.k.o.timeout)
	defer cancel()
	return f(ctx)
}

func (s *scenario) driverCall(what string, f func(ctx context.Context) error) {
	s.t.Helper()
	if err := s.call(f); err != nil {
		s.t.Fatalf("driver %s: %v", what, err)
	}
}

// put puts the next version of the service.
func (s *scenario) put(letter string) {
	s.t.Helper()
	k := s.key(letter)
	svc := s.k.o.fixture(k, s.version[k])
	if svc.Key() != k {
		s.t.Fatalf("the fixture returned %s for %s", svc.Key(), k)
	}
	s.version[k]++
	s.driverCall(fmt.Sprintf("Put(%s)", k), func(ctx context.Context) error { return s.k.driver.Put(ctx, svc) })
	want := s.k.o.normalize(svc.Clone())
	if want.Key() != k {
		s.t.Fatalf("WithNormalize turned %s into %s: it must keep Namespace and Name", k, want.Key())
	}
	s.want[k] = canonical(s.k.filter.apply(want))
	delete(s.absent, k)
}

func (s *scenario) remove(letter string) {
	s.t.Helper()
	k := s.key(letter)
	s.driverCall(fmt.Sprintf("Remove(%s)", k), func(ctx context.Context) error { return s.k.driver.Remove(ctx, k) })
	delete(s.want, k)
	s.absent[k] = true
}

// corrupt writes a malformed record for the service and returns the record
// name expected in Rejected ("" for any).
func (s *scenario) corrupt(letter string) string {
	s.t.Helper()
	k := s.key(letter)
	var record string
	s.driverCall(fmt.Sprintf("Corrupt(%s)", k), func(ctx context.Context) error {
		var err error
		record, err = s.k.driver.(Corrupter).Corrupt(ctx, k)
		return err
	})
	delete(s.want, k)
	s.absent[k] = true
	return record
}

func (s *scenario) brk() {
	s.t.Helper()
	s.broken = true // restore in the cleanup even if Break half failed
	s.driverCall("Break", func(ctx context.Context) error { return s.k.driver.(Breaker).Break(ctx) })
}

func (s *scenario) restore() {
	s.t.Helper()
	s.driverCall("Restore", func(ctx context.Context) error { return s.k.driver.(Breaker).Restore(ctx) })
	s.broken = false
}

// got returns a reported service in the form wanted services are kept in.
func (s *scenario) got(svc model.Service) model.Service {
	return canonical(s.k.filter.apply(svc))
}

func (s *scenario) wantKeys() []model.ServiceKey {
	keys := make([]model.ServiceKey, 0, len(s.want))
	for k := range s.want {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b model.ServiceKey) int { return strings.Compare(a.String(), b.String()) })
	return keys
}

// mismatch describes how state differs from what the scenario expects, for
// the scenario's services only (a shared registry may hold others).
func (s *scenario) mismatch(state map[model.ServiceKey]model.Service) []string {
	var out []string
	for _, k := range s.wantKeys() {
		got, ok := state[k]
		if !ok {
			out = append(out, k.String()+": not reported")
			continue
		}
		if d := diffCanonical(s.want[k], s.got(got)); d != "" {
			out = append(out, k.String()+" differs from what was put:\n"+indent(strings.Split(d, "\n")))
		}
	}
	for _, l := range letters {
		k := s.key(l)
		if _, ok := state[k]; ok && s.absent[k] {
			out = append(out, k.String()+": reported, but it was removed or its record is malformed")
		}
	}
	return out
}

// firstLoss replays events and describes the first call from index from
// on after which one of keys is missing or differs from what is expected
// ("" if none).
func (s *scenario) firstLoss(events []Event, from int, keys []model.ServiceKey) string {
	state := map[model.ServiceKey]model.Service{}
	for i, e := range events {
		apply(state, e)
		if i < from {
			continue
		}
		for _, k := range keys {
			got, ok := state[k]
			switch {
			case !ok && e.Op == OpReplace && len(e.Services) == 0:
				return fmt.Sprintf("call #%d %s: an empty Replace", i, e)
			case !ok:
				return fmt.Sprintf("call #%d %s: %s is gone", i, e, k)
			}
			if d := diffCanonical(s.want[k], s.got(got)); d != "" {
				return fmt.Sprintf("call #%d %s: %s changed:\n%s", i, e, k, indent(strings.Split(d, "\n")))
			}
		}
	}
	return ""
}

// apply applies a state report to state.
func apply(state map[model.ServiceKey]model.Service, e Event) {
	switch e.Op {
	case OpReplace:
		clear(state)
		for _, svc := range e.Services {
			state[svc.Key()] = svc
		}
	case OpUpdate:
		state[e.Key] = e.Services[0]
	case OpDelete:
		delete(state, e.Key)
	}
}

// ---------------------------------------------------------------------------
// Runners: one Run of a fresh Registry, recorded.

type runner struct {
	s      *scenario
	rec    *Recorder
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // what Run returned, once done is closed
	label  string        // the pprof label of Run's goroutines
	// precancelled: Run was given a cancelled context, so returning at
	// once is right.
	precancelled bool
	stopped      bool
}

type startOptions struct {
	beforeRun func() // called after newRegistry, before Run
	cancelled bool   // Run gets a context cancelled beforehand
}

func (s *scenario) start() *runner {
	s.t.Helper()
	return s.startWith(startOptions{})
}

// lateCallWindow is how long after Run returned (and its goroutines were
// gone) the kit still listens for Sink calls before checking them.
const lateCallWindow = 200 * time.Millisecond

// startWith creates a Registry and runs it in a goroutine. The runner is
// stopped, and checked, when the subtest ends if not before.
func (s *scenario) startWith(so startOptions) *runner {
	s.t.Helper()
	reg := s.k.newRegistry(s.t)
	if reg == nil {
		s.t.Fatal("newRegistry returned nil")
	}
	if so.beforeRun != nil {
		so.beforeRun()
	}
	ctx, cancel := context.WithCancel(context.Background())
	if so.cancelled {
		cancel()
	}
	r := &runner{s: s, rec: NewRecorder(), cancel: cancel, done: make(chan struct{}),
		label: newRunLabel(), precancelled: so.cancelled}
	go func() {
		defer close(r.done)
		withRunLabel(ctx, r.label, func(ctx context.Context) { r.err = reg.Run(ctx, r.rec) })
		// Close here, on Run's own goroutine, the moment Run returns: closed
		// later by the goroutine that notices done, a call made in between
		// would count as on time (seen under load).
		r.rec.Close()
	}()
	s.t.Cleanup(r.stop)
	return r
}

// wait waits until cond holds, failing the subtest if Run returns first or
// the timeout passes.
func (r *runner) wait(what string, cond func([]Event, map[model.ServiceKey]model.Service) bool) {
	r.s.t.Helper()
	r.waitDetail(what, cond, nil)
}

func (r *runner) waitDetail(what string, cond func([]Event, map[model.ServiceKey]model.Service) bool, detail func() string) {
	t := r.s.t
	t.Helper()
	if r.rec.wait(time.Now().Add(r.s.k.o.timeout), r.done, cond) {
		return
	}
	var why string
	select {
	case <-r.done:
		why = fmt.Sprintf("Run returned %v while the kit waited for %s: Run must keep running until its context is cancelled, retrying transient errors", r.err, what)
	default:
		// What Run's goroutines are doing says where the adapter hangs: a
		// call without a timeout, a channel no one sends on.
		why = fmt.Sprintf("timed out after %v waiting for %s\nGoroutines of this Run (it runs under the pprof label %s=%s):\n%s",
			r.s.k.o.timeout, what, labelKey, r.label, indent([]string{stacks(labelled(r.label, nil))}))
	}
	if detail != nil {
		if d := detail(); d != "" {
			why += "\n" + d
		}
	}
	t.Fatalf("%s\nSink calls:\n%s", why, r.rec.Dump())
}

// waitState waits until the state holds exactly what the scenario put.
func (r *runner) waitState(what string) {
	r.s.t.Helper()
	r.waitStateOr(what, nil)
}

// waitStateOr is waitState with more explanation on failure.
func (r *runner) waitStateOr(what string, explain func() string) {
	r.s.t.Helper()
	r.waitDetail(what, func(_ []Event, state map[model.ServiceKey]model.Service) bool {
		return len(r.s.mismatch(state)) == 0
	}, func() string {
		d := "The state differs:\n" + indent(r.s.mismatch(r.rec.State()))
		if explain != nil {
			if e := explain(); e != "" {
				d = e + "\n" + d
			}
		}
		return d
	})
}

// waitRejected waits for Rejected(record) among the calls from index from
// on (any record if record is "").
func (r *runner) waitRejected(from int, record string) {
	r.s.t.Helper()
	what := fmt.Sprintf("Rejected(%q, ...)", record)
	if record == "" {
		what = "Rejected(...)"
	}
	r.waitDetail(what+" for a malformed record", func(events []Event, _ map[model.ServiceKey]model.Service) bool {
		return slices.ContainsFunc(events[from:], func(e Event) bool {
			return e.Op == OpRejected && (record == "" || e.Record == record)
		})
	}, nil)
}

// waitUnreachable waits for Unreachable(err != nil) among the calls from
// index from on and returns its index.
func (r *runner) waitUnreachable(from int) int {
	r.s.t.Helper()
	return r.waitUnreachableWhy(from, "Unreachable(err) once the registry is broken")
}

// waitUnreachableWhy is waitUnreachable, saying what the kit waits for.
func (r *runner) waitUnreachableWhy(from int, what string) int {
	r.s.t.Helper()
	idx := -1
	r.wait(what, func(events []Event, _ map[model.ServiceKey]model.Service) bool {
		for i := from; i < len(events); i++ {
			if events[i].Op == OpUnreachable && events[i].Err != nil {
				idx = i
				return true
			}
		}
		return false
	})
	return idx
}

// waitReachable waits for Unreachable(nil) after the call at index down and
// returns its index.
func (r *runner) waitReachable(down int) int {
	r.s.t.Helper()
	idx := -1
	r.wait("Unreachable(nil) once the registry is reachable again", func(events []Event, _ map[model.ServiceKey]model.Service) bool {
		for i := down + 1; i < len(events); i++ {
			if events[i].Op == OpUnreachable && events[i].Err == nil {
				idx = i
				return true
			}
		}
		return false
	})
	return idx
}

// checkRelisted fails unless a Replace came between the outage report at
// index down and the end of the outage at index up: what changed while the
// registry could not be reached is learnt only by listing it again.
func (r *runner) checkRelisted(down, up int) {
	r.s.t.Helper()
	if r.s.k.o.noRelist {
		return
	}
	events := r.rec.Events()
	for i := down + 1; i < up && i < len(events); i++ {
		if events[i].Op == OpReplace {
			return
		}
	}
	r.s.t.Errorf("the outage ended (Unreachable(nil)) without a Replace before it: list the registry again after an outage, since changes made while it could not be reached may be missed otherwise (a registry whose watches survive a reconnect, such as ZooKeeper within its session, says so with WithoutRelist)\nSink calls:\n%s", r.rec.Dump())
}

// hold keeps the outage going while the adapter retries. This is the one
// fixed wait of the kit: what it checks is that nothing bad is reported.
func (r *runner) hold() {
	timer := time.NewTimer(r.s.k.o.outage)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-r.done:
	}
}

// stop cancels Run and checks how it ends: promptly, with ctx.Err(), with
// no goroutine left and no Sink call after it, and with Sink calls that
// keep the contract.
func (r *runner) stop() {
	t := r.s.t
	t.Helper()
	if r.stopped {
		return
	}
	r.stopped = true
	o := r.s.k.o
	early := false
	if !r.precancelled {
		select {
		case <-r.done:
			early = true
			t.Errorf("Run returned %v before its context was cancelled: Run must keep running until then, retrying transient errors", r.err)
		default:
		}
	}
	r.cancel()
	timer := time.NewTimer(o.stopTimeout)
	defer timer.Stop()
	select {
	case <-r.done:
	case <-timer.C:
		r.rec.Close()
		t.Errorf("Run did not return within %v of its context being cancelled. Goroutines of this Run:\n%s",
			o.stopTimeout, stacks(labelled(r.label, nil)))
		return
	}
	if !early && !errors.Is(r.err, context.Canceled) {
		t.Errorf("Run returned %v after its context was cancelled, want ctx.Err() (context.Canceled)", r.err)
	}
	if left := waitLabelled(r.label, o.ignoreGoroutines, o.stopTimeout); len(left) > 0 {
		t.Errorf("goroutines started by Run are still running %v after it returned: Run must return only after every goroutine it started has stopped (see IgnoreGoroutines for ones that outlive Run by design):\n%s",
			o.stopTimeout, stacks(left))
	}
	// A goroutine that escaped the label accounting (seen, rarely, under
	// load: the late-call self-test once passed with its late goroutine
	// unseen) still gets caught if it calls within this window.
	time.Sleep(lateCallWindow)
	if err := r.rec.Check(); err != nil {
		t.Errorf("the Sink calls break the contract:\n%s\nSink calls:\n%s", indent(strings.Split(err.Error(), "\n")), r.rec.Dump())
	}
	if msgs := redundantReports(r.rec.Events()); len(msgs) > 0 {
		report := t.Errorf
		if o.allowRedundant {
			report = t.Logf
		}
		report("services were reported again although they had not changed (report only what changed; Replace to resynchronise is fine):\n%s\nSink calls:\n%s",
			indent(msgs), r.rec.Dump())
	}
}

// redundantReports lists the Updates of a service equal by meaning to its
// last report and the Deletes of a service not reported.
func redundantReports(events []Event) []string {
	var out []string
	state := map[model.ServiceKey]model.Service{}
	for i, e := range events {
		switch e.Op {
		case OpUpdate:
			if old, ok := state[e.Key]; ok && Diff(old, e.Services[0]) == "" {
				why := "unchanged since it was last reported"
				if !reflect.DeepEqual(old, e.Services[0]) {
					why += " (only the order of instances or lists, or nil against empty, differs: sort and normalise before comparing)"
				}
				out = append(out, fmt.Sprintf("call #%d %s: %s", i, e, why))
			}
		case OpDelete:
			if _, ok := state[e.Key]; !ok {
				out = append(out, fmt.Sprintf("call #%d %s: not reported before, or already deleted", i, e))
			}
		}
		apply(state, e)
	}
	return out
}

// firstStateReport returns the index of the first Replace, Update or
// Delete, or -1.
func firstStateReport(events []Event) int {
	return slices.IndexFunc(events, func(e Event) bool {
		return e.Op == OpReplace || e.Op == OpUpdate || e.Op == OpDelete
	})
}

func servicesByKey(services []model.Service) map[model.ServiceKey]model.Service {
	m := make(map[model.ServiceKey]model.Service, len(services))
	for _, svc := range services {
		m[svc.Key()] = svc
	}
	return m
}

func indent(lines []string) string {
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("  " + strings.ReplaceAll(l, "\n", "\n  "))
	}
	return b.String()
}

// stacks formats goroutine stacks, at most five.
func stacks(list []string) string {
	const most = 5
	out := list
	if len(out) > most {
		out = out[:most]
	}
	s := strings.Join(out, "\n\n")
	if len(list) > most {
		s += fmt.Sprintf("\n\n... and %d more", len(list)-most)
	}
	return s
}
