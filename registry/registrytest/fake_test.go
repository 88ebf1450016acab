package registrytest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// memStore is an in-memory service registry: what the fake adapter
// watches and the driver changes.
type memStore struct {
	mu       sync.Mutex
	services map[model.ServiceKey]model.Service
	corrupt  map[model.ServiceKey]bool
	down     bool
	partDown bool // one part of the store (which holds no kit service) is down
	// gaps counts the times the watch lost events: the adapter must list
	// again and report it with Replace.
	gaps    int
	losing  bool          // changes do not wake the watch (events lost)
	changed chan struct{} // closed and replaced on every change
}

func newMemStore() *memStore {
	return &memStore{services: map[model.ServiceKey]model.Service{}, corrupt: map[model.ServiceKey]bool{}, changed: make(chan struct{})}
}

func (m *memStore) change(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
	if m.losing {
		return
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

// memDriver implements Driver, Corrupter, Breaker, PartBreaker and
// EventLoser for a memStore.
type memDriver struct{ st *memStore }

func (d memDriver) Put(_ context.Context, svc model.Service) error {
	d.st.change(func() {
		d.st.services[svc.Key()] = svc
		delete(d.st.corrupt, svc.Key())
	})
	return nil
}

func (d memDriver) Remove(_ context.Context, key model.ServiceKey) error {
	d.st.change(func() {
		delete(d.st.services, key)
		delete(d.st.corrupt, key)
	})
	return nil
}

func (d memDriver) Corrupt(_ context.Context, key model.ServiceKey) (string, error) {
	d.st.change(func() { d.st.corrupt[key] = true })
	return "mem:" + key.String(), nil
}

func (d memDriver) Break(context.Context) error {
	d.st.change(func() { d.st.down = true })
	return nil
}

func (d memDriver) Restore(context.Context) error {
	d.st.change(func() { d.st.down = false })
	return nil
}

func (d memDriver) BreakPart(context.Context) (string, error) {
	d.st.change(func() { d.st.partDown = true })
	return "mem-2", nil
}

func (d memDriver) RestorePart(context.Context) error {
	d.st.change(func() { d.st.partDown = false })
	return nil
}

// LoseEvents makes the changes without waking the watch, then wakes it
// with a gap, as a watch told "the index you resume from is gone".
func (d memDriver) LoseEvents(ctx context.Context, change func(context.Context) error) error {
	d.st.mu.Lock()
	d.st.losing = true
	d.st.mu.Unlock()
	err := change(ctx)
	d.st.mu.Lock()
	d.st.losing = false
	d.st.mu.Unlock()
	d.st.change(func() { d.st.gaps++ })
	return err
}

// memRegistry is a correct adapter for a memStore, unless bug names a
// defect to inject.
type memRegistry struct {
	st  *memStore
	bug string
}

func (r *memRegistry) Run(ctx context.Context, sink registry.Sink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.bug == "leak" {
		go func() { select {} }()
	}
	reported := map[model.ServiceKey]model.Service{}
	rejected := map[model.ServiceKey]bool{}
	synced, down, partDown := false, false, false
	gaps := 0
	for {
		r.st.mu.Lock()
		services := maps(r.st.services)
		corrupt := maps(r.st.corrupt)
		isDown, isPartDown, nowGaps := r.st.down, r.st.partDown, r.st.gaps
		changed := r.st.changed
		r.st.mu.Unlock()
		if nowGaps != gaps && r.bug != "ignore-lost" {
			synced = false // events lost: list again, with Replace
		}
		gaps = nowGaps
		switch {
		case isPartDown && !partDown && r.bug == "degraded-as-outage":
			sink.Unreachable(errors.New("mem-2: connection refused"))
		case isPartDown && !partDown:
			sink.Degraded("mem-2", errors.New("connection refused"))
		}
		partBack := partDown && !isPartDown
		partDown = isPartDown

		switch {
		case isDown && r.bug == "give-up":
			return errors.New("mem: registry down")
		case isDown:
			if !down {
				sink.Unreachable(errors.New("mem: registry down"))
				down = true
			}
			if r.bug == "empty-replace-on-outage" {
				sink.Replace(nil)
			}
		default:
			for k := range corrupt {
				if !rejected[k] {
					record := "mem:" + k.String()
					if r.bug == "wrong-record" {
						record = "mem"
					}
					sink.Rejected(record, errors.New("malformed"))
				}
			}
			rejected = corrupt
			if r.bug == "drop-on-reject" && len(corrupt) > 0 {
				services = map[model.ServiceKey]model.Service{}
			}
			keys := sortedKeys(services)
			if down && synced && r.bug == "no-relist" {
				// Back, and says so without listing again.
				sink.Unreachable(nil)
				down = false
			}
			if !synced || down {
				if r.bug == "update-before-replace" && !synced {
					for _, k := range keys {
						sink.Update(services[k])
					}
				}
				all := make([]model.Service, 0, len(keys))
				for _, k := range keys {
					all = append(all, services[k])
				}
				sink.Replace(all)
				if r.bug == "mutate" && len(all) > 0 {
					all[0].Hosts = []string{"mutated.test"}
				}
				if down && r.bug != "no-recovery-signal" {
					sink.Unreachable(nil)
				}
				synced, down = true, false
			} else {
				for _, k := range keys {
					svc := services[k]
					if old, ok := reported[k]; ok && reflect.DeepEqual(old, svc) && r.bug != "redundant" {
						continue
					}
					if r.bug == "partial-update" {
						svc.Instances = svc.Instances[:1]
					}
					sink.Update(svc)
				}
				for _, k := range sortedKeys(reported) {
					if _, ok := services[k]; !ok {
						sink.Delete(k)
					}
				}
			}
			reported = services
			if partBack {
				sink.Degraded("mem-2", nil)
			}
		}

		select {
		case <-ctx.Done():
			switch r.bug {
			case "ignore-cancel":
				select {}
			case "late-call":
				// Calls after Run has returned. Not the moment it returns:
				// close(returned) runs in Run's deferred calls, still inside
				// Run, and a call made then, before Run's caller has control
				// back, is not late by the contract (a stress run of this
				// self-test under load caught the kit "missing" exactly that;
				// see docs/benchmarks.md, TestKitCatchesBugs/late-call under
				// stress). 50 ms later it is late by any clock.
				returned := make(chan struct{})
				defer close(returned)
				go func() {
					<-returned
					time.Sleep(50 * time.Millisecond)
					sink.Unreachable(nil)
				}()
			case "wrong-error":
				return nil
			}
			return ctx.Err()
		case <-changed:
		}
	}
}

func maps[V any](m map[model.ServiceKey]V) map[model.ServiceKey]V {
	out := make(map[model.ServiceKey]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](m map[model.ServiceKey]V) []model.ServiceKey {
	keys := make([]model.ServiceKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b model.ServiceKey) int { return strings.Compare(a.String(), b.String()) })
	return keys
}

func runFake(t *testing.T, bug string, opts ...registrytest.Option) {
	st := newMemStore()
	registrytest.TestRegistry(t,
		func(*testing.T) registry.Registry { return &memRegistry{st: st, bug: bug} },
		memDriver{st: st}, opts...)
}

// TestFakeConforms: a correct adapter passes every subtest, none skipped
// but Stalled (an in-memory registry cannot stall; TestTCPFakeConforms
// plays it).
func TestFakeConforms(t *testing.T) {
	runFake(t, "", registrytest.WithOutage(200*time.Millisecond))
}

// TestOptionalInterfaces: a driver with only Put and Remove skips the
// subtests that need more.
func TestOptionalInterfaces(t *testing.T) {
	st := newMemStore()
	type plain struct{ registrytest.Driver }
	registrytest.TestRegistry(t,
		func(*testing.T) registry.Registry { return &memRegistry{st: st} },
		plain{memDriver{st: st}})
	// The skips are visible with -v; the subtests passing is the check.
}

// TestNormalizeAndIgnore: an adapter that cannot hold labels or draining
// instances passes with the options that say so.
func TestNormalizeAndIgnore(t *testing.T) {
	st := newMemStore()
	lossy := &lossyDriver{memDriver{st: st}}
	registrytest.TestRegistry(t,
		func(*testing.T) registry.Registry { return &memRegistry{st: st} },
		lossy,
		registrytest.WithOutage(100*time.Millisecond),
		registrytest.IgnoreFields("Labels", "Instances.Labels"),
		registrytest.WithNormalize(func(s model.Service) model.Service {
			s.Hosts = []string{s.Name + ".mem"}
			for i := range s.Instances {
				if s.Instances[i].Health == model.Draining {
					s.Instances[i].Health = model.Unhealthy
				}
			}
			return s
		}))
}

// lossyDriver stores no labels, derives hosts and has no draining state.
type lossyDriver struct{ memDriver }

func (d *lossyDriver) Put(ctx context.Context, svc model.Service) error {
	svc.Labels = nil
	svc.Hosts = []string{svc.Name + ".mem"}
	insts := slices.Clone(svc.Instances)
	for i := range insts {
		insts[i].Labels = nil
		if insts[i].Health == model.Draining {
			insts[i].Health = model.Unhealthy
		}
	}
	svc.Instances = insts
	return d.memDriver.Put(ctx, svc)
}

// TestDriverGoroutinesAreNotLeaks: goroutines a driver leaves running (a
// client's keep-alive connections) are not blamed on Run.
func TestDriverGoroutinesAreNotLeaks(t *testing.T) {
	st := newMemStore()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	registrytest.TestRegistry(t,
		func(*testing.T) registry.Registry { return &memRegistry{st: st} },
		&busyDriver{memDriver: memDriver{st: st}, stop: stop},
		registrytest.WithOutage(50*time.Millisecond))
}

// busyDriver starts a goroutine on every Put that lives until the test ends.
type busyDriver struct {
	memDriver
	stop chan struct{}
}

func (d *busyDriver) Put(ctx context.Context, svc model.Service) error {
	go func() { <-d.stop }()
	return d.memDriver.Put(ctx, svc)
}

const bugEnv = "REGISTRYTEST_FAKE_BUG"

// TestFakeWithBug is run by TestKitCatchesBugs in a child process, with
// the bug to inject in the environment.
func TestFakeWithBug(t *testing.T) {
	bug := os.Getenv(bugEnv)
	if bug == "" {
		t.Skip("run by TestKitCatchesBugs")
	}
	opts := []registrytest.Option{registrytest.WithTimeout(time.Second), registrytest.WithStopTimeout(time.Second),
		registrytest.WithOutage(100 * time.Millisecond)}
	if strings.HasPrefix(bug, "tcp-") {
		runTCPFake(t, bug, opts...)
		return
	}
	runFake(t, bug, opts...)
}

// TestKitCatchesBugs runs the kit against adapters with one defect each and
// checks that the right subtest fails with the right explanation.
func TestKitCatchesBugs(t *testing.T) {
	if os.Getenv(bugEnv) != "" {
		t.Skip("in a child process")
	}
	for _, tc := range []struct {
		bug, subtest, want string
	}{
		{"update-before-replace", "InitialReplace", "the first state report is Update"},
		{"update-before-replace", "Add", "state reported before the first Replace"},
		{"redundant", "UnrelatedUnchanged", "unchanged since it was last reported"},
		{"partial-update", "Change", `instance "rt-change-a-3": missing`},
		{"mutate", "InitialReplace", "modified the services after passing them to the Sink"},
		{"drop-on-reject", "Rejected", "A malformed record cost a good service"},
		{"drop-on-reject", "RejectedAtStart", "the first Replace is not the complete listing of the good ones"},
		{"wrong-record", "Rejected", `waiting for Rejected("mem:registrytest/rt-rejected-c", ...)`},
		{"empty-replace-on-outage", "Unreachable", "an empty Replace"},
		{"empty-replace-on-outage", "UnreachableAtStart", "while the registry could not be listed"},
		{"no-recovery-signal", "Unreachable", "waiting for Unreachable(nil)"},
		{"give-up", "Unreachable", "Run returned mem: registry down while the kit waited"},
		{"no-relist", "Unreachable", "the outage ended (Unreachable(nil)) without a Replace before it"},
		{"leak", "Cancel", "still running"},
		{"late-call", "Cancel", "Sink called after Run returned"},
		{"ignore-cancel", "CancelWhileUnreachable", "did not return within 1s of its context being cancelled"},
		{"wrong-error", "Cancel", "want ctx.Err()"},
		{"degraded-as-outage", "Degraded", "not Unreachable"},
		{"ignore-lost", "LostEvents", "reported without a Replace"},
		{"tcp-no-timeout", "Stalled", "accepts connections and never answers"},
		{"tcp-no-timeout", "Stalled", "registrytest_test.(*tcpRegistry).list"},
	} {
		t.Run(tc.bug+"/"+tc.subtest, func(t *testing.T) {
			// One child at a time: the kit's waits are bounded (1 s for a
			// cancelled Run), and sixteen children at once on two busy
			// cores once made a child fail for another reason than its bug.
			cmd := exec.Command(os.Args[0], "-test.run=^TestFakeWithBug$/^"+tc.subtest+"$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), bugEnv+"="+tc.bug)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the kit did not fail (err %v):\n%s", err, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestFakeWithBug/"+tc.subtest) || !strings.Contains(string(out), tc.want) {
				t.Errorf("want subtest %s to fail with %q; output:\n%s", tc.subtest, tc.want, out)
			}
		})
	}
}
