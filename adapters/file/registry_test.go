package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	"github.com/galleon-mesh/galleon/model"
)

// recordingSink records every report and keeps the state a core would
// hold, so tests can assert both on what was said and on the outcome.
type recordingSink struct {
	mu          sync.Mutex
	events      []string // "replace N", "update ns/name", "delete ns/name", "rejected record: err", "unreachable err|nil"
	state       map[model.ServiceKey]model.Service
	unreachable error
}

func newRecordingSink() *recordingSink {
	return &recordingSink{state: map[model.ServiceKey]model.Service{}}
}

func (s *recordingSink) Replace(services []model.Service) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, fmt.Sprintf("replace %d", len(services)))
	s.state = map[model.ServiceKey]model.Service{}
	for _, svc := range services {
		s.state[svc.Key()] = svc
	}
}

func (s *recordingSink) Update(svc model.Service) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, "update "+svc.Key().String())
	s.state[svc.Key()] = svc
}

func (s *recordingSink) Delete(key model.ServiceKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, "delete "+key.String())
	delete(s.state, key)
}

func (s *recordingSink) Rejected(record string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.events = append(s.events, "cleared "+record)
		return
	}
	s.events = append(s.events, "rejected "+record+": "+err.Error())
}

func (s *recordingSink) Degraded(part string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, fmt.Sprintf("degraded %s: %v", part, err))
}

func (s *recordingSink) Unreachable(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.events = append(s.events, "unreachable nil")
	} else {
		s.events = append(s.events, "unreachable "+err.Error())
	}
	s.unreachable = err
}

// snapshot returns a copy of the events so far and the state.
func (s *recordingSink) snapshot() ([]string, map[model.ServiceKey]model.Service) {
	s.mu.Lock()
	defer s.mu.Unlock()
	state := make(map[model.ServiceKey]model.Service, len(s.state))
	for k, v := range s.state {
		state[k] = v
	}
	return append([]string(nil), s.events...), state
}

// count returns how many events start with prefix.
func (s *recordingSink) count(prefix string) int {
	events, _ := s.snapshot()
	n := 0
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds or 5 s pass: fs events and debouncing
// take a variable time under -race on a loaded machine.
func waitFor(t *testing.T, what string, sink *recordingSink, cond func(events []string, state map[model.ServiceKey]model.Service) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		events, state := sink.snapshot()
		if cond(events, state) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; events:\n  %s", what, strings.Join(events, "\n  "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settle waits until no new event arrived for a while, for assertions that
// something was NOT reported.
func settle(t *testing.T, sink *recordingSink) []string {
	t.Helper()
	last := -1
	for stable := 0; stable < 5; {
		time.Sleep(50 * time.Millisecond)
		events, _ := sink.snapshot()
		if len(events) == last {
			stable++
		} else {
			stable, last = 0, len(events)
		}
	}
	events, _ := sink.snapshot()
	return events
}

type harness struct {
	dir    string
	sink   *recordingSink
	cancel context.CancelFunc
	done   chan error
}

func startRegistry(t *testing.T, dir string) *harness {
	t.Helper()
	// Removals are held until the directory is quiet; a short hold keeps
	// the tests quick (the hold itself has tests of its own).
	return startRegistryWith(t, Config{Dir: dir, RemovalDelay: 50 * time.Millisecond})
}

func startRegistryWith(t *testing.T, cfg Config) *harness {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	reg, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{dir: reg.cfg.Dir, sink: newRecordingSink(), cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- reg.Run(ctx, h.sink) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return h
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// svc renders one minimal service entry.
func svc(name string, addresses ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- name: %s\n  namespace: ns\n  ports: [{number: 80, protocol: HTTP}]\n", name)
	if len(addresses) > 0 {
		b.WriteString("  instances:\n")
		for _, a := range addresses {
			fmt.Fprintf(&b, "  - address: %s\n", a)
		}
	}
	return b.String()
}

func services(entries ...string) string { return "services:\n" + strings.Join(entries, "") }

// firstAddress is the address of ns/name's first instance, or "".
func firstAddress(st map[model.ServiceKey]model.Service, name string) string {
	if inst := st[key(name)].Instances; len(inst) > 0 {
		return inst[0].Address
	}
	return ""
}

func key(name string) model.ServiceKey { return model.ServiceKey{Namespace: "ns", Name: name} }

func hasEvent(prefix string) func([]string, map[model.ServiceKey]model.Service) bool {
	return func(events []string, _ map[model.ServiceKey]model.Service) bool {
		for _, e := range events {
			if strings.HasPrefix(e, prefix) {
				return true
			}
		}
		return false
	}
}

func TestNewChecksDir(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "x.yaml", "")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Dir is empty"},
		{Config{Dir: filepath.Join(dir, "missing")}, "does not exist"},
		{Config{Dir: file}, "is a file, not a directory"},
		{Config{Dir: dir, Namespace: "Not_A_Namespace"}, "Namespace"},
		{Config{Dir: dir, Resync: -time.Second}, "negative"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	reg, err := New(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if reg.cfg.Namespace != "default" || reg.cfg.Resync != 30*time.Second {
		t.Errorf("defaults: %+v", reg.cfg)
	}
}

func TestInitialReplace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1"), svc("two")))
	writeFile(t, dir, "b.yml", "services:\n- name: three\n  ports: [{number: 80}]\n")
	h := startRegistry(t, dir)

	waitFor(t, "the initial Replace", h.sink, hasEvent("replace"))
	events, state := h.sink.snapshot()
	if events[0] != "replace 3" {
		t.Fatalf("first event = %q, want replace 3; events %v", events[0], events)
	}
	three := state[model.ServiceKey{Namespace: "default", Name: "three"}]
	if len(three.Hosts) != 1 || three.Hosts[0] != "three.default.internal" {
		t.Errorf("defaults not applied: %+v", three)
	}
	if one := state[key("one")]; len(one.Instances) != 1 || one.Instances[0].ID != "10.0.0.1" {
		t.Errorf("one = %+v", one)
	}
	if extra := settle(t, h.sink); len(extra) != 1 {
		t.Errorf("events after the initial sync: %v", extra)
	}
}

func TestAddModifyRemoveService(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1"), svc("two", "10.0.0.2")))
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 2"))

	// Add a service: only it is reported.
	writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1"), svc("two", "10.0.0.2"), svc("three", "10.0.0.3")))
	waitFor(t, "update of three", h.sink, hasEvent("update ns/three"))

	// Change one instance of one service: only it is reported.
	writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1", "10.0.0.9"), svc("two", "10.0.0.2"), svc("three", "10.0.0.3")))
	waitFor(t, "update of one", h.sink, func(_ []string, st map[model.ServiceKey]model.Service) bool {
		return len(st[key("one")].Instances) == 2
	})

	// Remove a service.
	writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1", "10.0.0.9"), svc("three", "10.0.0.3")))
	waitFor(t, "delete of two", h.sink, hasEvent("delete ns/two"))

	events := settle(t, h.sink)
	want := []string{"replace 2", "update ns/three", "update ns/one", "delete ns/two"}
	if strings.Join(events, "|") != strings.Join(want, "|") {
		t.Errorf("events = %q, want %q", events, want)
	}
}

func TestRemoveFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", services(svc("one")))
	b := writeFile(t, dir, "b.yaml", services(svc("two"), svc("three")))
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 3"))

	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deletes", h.sink, func(_ []string, st map[model.ServiceKey]model.Service) bool {
		_, ok := st[key("one")]
		return len(st) == 1 && ok
	})
	if n := h.sink.count("delete"); n != 2 {
		t.Errorf("%d deletes, want 2", n)
	}
}

func TestMalformedFileKeepsLastGood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1"), svc("two")))
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 2"))

	// Line 4 is indented too far: a syntax error there.
	writeFile(t, dir, "a.yaml", "services:\n- name: one\n  namespace: ns\n      ports: [{number: 80}]\n")
	waitFor(t, "the rejection", h.sink, hasEvent("rejected "+path+":4: "))
	events := settle(t, h.sink)
	for _, e := range events {
		if strings.HasPrefix(e, "delete") || strings.HasPrefix(e, "update") {
			t.Errorf("a malformed file changed the state: %v", events)
		}
	}
	if !strings.Contains(events[len(events)-1], "last good content is still served") {
		t.Errorf("rejection does not say the last good content stays: %q", events[len(events)-1])
	}

	// A periodic-style rescan of the same bad content says nothing new.
	writeFile(t, dir, "unrelated.yaml", "")
	if got := settle(t, h.sink); len(got) != len(events) {
		t.Errorf("unchanged bad file reported again: %v", got[len(events):])
	}

	// Fixing the file applies the new content.
	writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.5")))
	waitFor(t, "the fix", h.sink, hasEvent("delete ns/two"))
	_, state := h.sink.snapshot()
	if got := state[key("one")].Instances; len(got) != 1 || got[0].Address != "10.0.0.5" {
		t.Errorf("one after the fix = %+v", got)
	}
}

func TestNeverGoodFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", services(svc("one")))
	bad := writeFile(t, dir, "b.yaml", "services:\n- name: two\n  ports: [{number: 80}\n")
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 1"))
	events, state := h.sink.snapshot()
	if _, ok := state[key("one")]; !ok || len(state) != 1 {
		t.Errorf("state = %v", state)
	}
	if !hasEvent("rejected "+bad+":3: invalid YAML")(events, nil) {
		t.Errorf("no rejection of %s:3 in %v", bad, events)
	}
}

func TestBadServiceInGoodFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "a.yaml", services(svc("one"), svc("two", "10.0.0.2"), svc("three")))
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 3"))

	// Break "two" (its instance's health, line 9) and add a never-good
	// "four" (no ports, line 14): both are rejected alone; "two" keeps its
	// previous version, "four" contributes nothing, "five" is added.
	writeFile(t, dir, "a.yaml", `services:
- name: one
  namespace: ns
  ports: [{number: 80, protocol: HTTP}]
- name: two
  namespace: ns
  ports: [{number: 80, protocol: HTTP}]
  instances:
  - address: 10.0.0.2
    health: sick
- name: three
  namespace: ns
  ports: [{number: 80, protocol: HTTP}]
- name: four
  namespace: ns
- name: five
  namespace: ns
  ports: [{number: 80, protocol: HTTP}]
`)
	waitFor(t, "five", h.sink, hasEvent("update ns/five"))
	waitFor(t, "rejections", h.sink, func(events []string, _ map[model.ServiceKey]model.Service) bool {
		return hasEvent("rejected "+path+":9: service ns/two: instances[0]: health \"sick\" is not one of healthy, unhealthy, draining (its previous version is still served)")(events, nil) &&
			hasEvent("rejected "+path+":14: service ns/four: at least one port is required")(events, nil)
	})
	events, state := h.sink.snapshot()
	if got := state[key("two")]; len(got.Instances) != 1 || got.Instances[0].Health != model.Healthy {
		t.Errorf("two lost its previous version: %+v", got)
	}
	if _, ok := state[key("four")]; ok {
		t.Error("malformed four is served")
	}
	if n := len(settle(t, h.sink)); n != len(events) {
		t.Errorf("more events: %v", events)
	}
	if h.sink.count("update") != 1 || h.sink.count("delete") != 0 {
		t.Errorf("events = %v, want only the update of five", events)
	}
}

func TestDuplicateAcrossFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := writeFile(t, dir, "a.yaml", services(svc("dup", "10.0.0.1")))
	b := writeFile(t, dir, "b.yaml", services(svc("other"), svc("dup", "10.0.0.2")))
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 2"))
	events, state := h.sink.snapshot()
	if got := firstAddress(state, "dup"); got != "10.0.0.1" {
		t.Errorf("dup served from the wrong file: %s", got)
	}
	want := "rejected " + b + ":5: service ns/dup is already defined in " + a + ":2"
	if !hasEvent(want)(events, nil) {
		t.Errorf("no %q in %v", want, events)
	}

	// When the winning file goes, the other definition takes over.
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the takeover", h.sink, func(_ []string, st map[model.ServiceKey]model.Service) bool {
		return firstAddress(st, "dup") == "10.0.0.2"
	})
}

func TestTempFileRenameSave(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1")))
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 1"))

	// How editors and config-management tools save atomically.
	tmp := writeFile(t, dir, ".a.yaml.tmp.12345", services(svc("one", "10.0.0.7")))
	if err := os.Rename(tmp, filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new content", h.sink, func(_ []string, st map[model.ServiceKey]model.Service) bool {
		return firstAddress(st, "one") == "10.0.0.7"
	})
	if n := h.sink.count("update"); n != 1 {
		t.Errorf("%d updates, want 1", n)
	}
}

func TestEditorFilesIgnored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", services(svc("one")))
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 1"))

	for _, name := range []string{".#a.yaml", "a.yaml~", ".a.yaml.swp", "a.yaml.swp", "#a.yaml#", ".hidden.yaml", "a.json", "4913"} {
		writeFile(t, dir, name, services(svc("ghost-"+strings.NewReplacer(".", "", "#", "", "~", "").Replace(name))))
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub.yaml"), "b.yaml", services(svc("nested")))
	// A real change afterwards proves the adapter did scan since.
	writeFile(t, dir, "z.yaml", services(svc("real")))
	waitFor(t, "real", h.sink, hasEvent("update ns/real"))
	events := settle(t, h.sink)
	if want := []string{"replace 1", "update ns/real"}; strings.Join(events, "|") != strings.Join(want, "|") {
		t.Errorf("events = %q, want %q", events, want)
	}
}

// TestConfigMapSwap mimics the kubelet's atomic writer: files are symlinks
// through "..data", which is swapped to a new timestamped directory.
func TestConfigMapSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mustSym := func(target, link string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	v1 := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	if err := os.Mkdir(v1, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, v1, "svc.yaml", services(svc("one", "10.0.0.1")))
	mustSym(filepath.Base(v1), "..data")
	mustSym("..data/svc.yaml", "svc.yaml")
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 1"))

	v2 := filepath.Join(dir, "..2026_01_01_00_01_00.2")
	if err := os.Mkdir(v2, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, v2, "svc.yaml", services(svc("one", "10.0.0.2")))
	mustSym(filepath.Base(v2), "..data_tmp")
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(v1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the swapped content", h.sink, func(_ []string, st map[model.ServiceKey]model.Service) bool {
		return firstAddress(st, "one") == "10.0.0.2"
	})
}

func TestDirDisappearsAndComesBack(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "registry")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "a.yaml", services(svc("one"), svc("two")))
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 2"))

	// Moving the directory away is atomic: no file-by-file deletes first.
	moved := filepath.Join(parent, "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Unreachable", h.sink, hasEvent("unreachable registry directory"))
	// Changes in the moved directory are not this registry's any more.
	writeFile(t, moved, "a.yaml", services(svc("one")))

	// A different directory appears at the path, with other content.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "a.yaml", services(svc("one"), svc("three")))
	waitFor(t, "recovery", h.sink, hasEvent("unreachable nil"))
	events, state := h.sink.snapshot()
	want := []string{"replace 2", "unreachable", "replace 2", "unreachable nil"}
	if len(events) != len(want) {
		t.Fatalf("events = %q", events)
	}
	for i := range want {
		if !strings.HasPrefix(events[i], want[i]) {
			t.Fatalf("events = %q, want prefixes %q", events, want)
		}
	}
	if _, ok := state[key("three")]; !ok || len(state) != 2 {
		t.Errorf("state after recovery = %v", state)
	}

	// The new directory is watched.
	writeFile(t, dir, "b.yaml", services(svc("four")))
	waitFor(t, "four", h.sink, hasEvent("update ns/four"))
}

func TestBurstIsDebounced(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", services(svc("one")))
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 1"))

	for i := range 50 {
		writeFile(t, dir, "a.yaml", services(svc("one", fmt.Sprintf("10.0.0.%d", i+1))))
	}
	waitFor(t, "the last content", h.sink, func(_ []string, st map[model.ServiceKey]model.Service) bool {
		return firstAddress(st, "one") == "10.0.0.50"
	})
	if n := h.sink.count("update"); n > 5 {
		t.Errorf("%d updates for one burst of 50 writes", n)
	}
}

// TestRunStopsOnCancel checks that Run returns ctx.Err() and leaves no
// goroutine behind. It is not parallel: it counts goroutines.
func TestRunStopsOnCancel(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", services(svc("one")))
	before := runtime.NumGoroutine()

	reg, err := New(Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sink := newRecordingSink()
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx, sink) }()
	waitFor(t, "the initial Replace", sink, hasEvent("replace 1"))
	writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1"))) // a pending debounce
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines before Run, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A cancelled context returns at once.
	if err := reg.Run(ctx, sink); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context = %v", err)
	}
}

// TestLogsNameTheRegistryOnce: the daemon passes a logger that carries
// registry=<kind> already; the adapter must not add it again.
func TestLogsNameTheRegistryOnce(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", services(svc("one")))
	var buf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("registry", "file")
	reg, err := New(Config{Dir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sink := newRecordingSink()
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx, sink) }()
	waitFor(t, "the initial Replace", sink, hasEvent("replace 1"))
	cancel()
	<-done
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if n := strings.Count(line, "registry="); n != 1 {
			t.Errorf("%d registry attributes in %q", n, line)
		}
	}
	// The listing is said at debug level only: the core says "registry
	// synced" once it is served, and galleon-file used to say it twice.
	if !strings.Contains(buf.String(), "level=DEBUG msg=\"directory listed\"") || strings.Contains(buf.String(), "registry synced") {
		t.Errorf("want the listing at debug level and no second \"registry synced\":\n%s", buf.String())
	}
}

// A named pipe called p.yaml once blocked the watcher forever (new files
// ignored, /readyz still ready, SIGTERM hanging); a link to /dev/zero took
// the adapter to 3 GB. Neither is read: each is rejected, naming the file.
func TestSpecialFilesAreRejectedNotRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "good.yaml", services(svc("one", "10.0.0.1")))
	fifo := filepath.Join(dir, "p.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 1"))
	waitFor(t, "the pipe rejected", h.sink, hasEvent("rejected "+fifo+": cannot read file: not a regular file"))
	waitFor(t, "the device rejected", h.sink, hasEvent("rejected "+zero+": cannot read file: not a regular file"))
	// The watcher is not stuck: a new file still arrives.
	writeFile(t, dir, "later.yaml", services(svc("two", "10.0.0.2")))
	waitFor(t, "a file written after them", h.sink, hasEvent("update ns/two"))
}

func TestFileSizeIsBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1")))
	h := startRegistryWith(t, Config{Dir: dir, MaxFileSize: 1024})
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 1"))

	// The file grows over the limit: rejected, and its last good content
	// stays served.
	var entries []string
	for i := range 40 {
		entries = append(entries, svc(fmt.Sprintf("s%d", i), "10.0.1.1"))
	}
	writeFile(t, dir, "a.yaml", services(entries...))
	waitFor(t, "the oversize rejection", h.sink, hasEvent("rejected "+path+": cannot read file: file is "))
	events := settle(t, h.sink)
	last := events[len(events)-1]
	if !strings.Contains(last, "over the limit of 1024 (--file-max-size)") || !strings.Contains(last, "last good content is still served") {
		t.Errorf("rejection does not say the limit and what is served: %q", last)
	}
	if _, state := h.sink.snapshot(); len(state) != 1 || firstAddress(state, "one") != "10.0.0.1" {
		t.Errorf("an oversize file changed the state: %v", state)
	}
}

func TestMaxFileSizeChecked(t *testing.T) {
	if _, err := New(Config{Dir: t.TempDir(), MaxFileSize: -1}); err == nil || !strings.Contains(err.Error(), "MaxFileSize -1 is negative") {
		t.Errorf("New with a negative MaxFileSize: %v", err)
	}
}

// noDeletes fails if any event removes a service or shrinks one's
// instances to fewer than want addresses of name.
func noLoss(t *testing.T, what string, sink *recordingSink, keys ...string) {
	t.Helper()
	events, state := sink.snapshot()
	for _, e := range events {
		if strings.HasPrefix(e, "delete ") {
			t.Errorf("%s removed a service: %v", what, events)
		}
	}
	for _, k := range keys {
		if _, ok := state[key(k)]; !ok {
			t.Errorf("%s: ns/%s is no longer served: %v", what, k, events)
		}
	}
}

// Writers that do not rename atomically (shell '>', Ansible copy without
// atomic rename, editors saving in place) once removed services for as
// long as the write took. Nothing may be removed while they write; a
// genuine removal still arrives, once the directory is quiet.
func TestNonAtomicWritesRemoveNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	full := services(svc("one", "10.0.0.1", "10.0.0.2"), svc("two", "10.0.0.3"), svc("three", "10.0.0.4"))
	path := writeFile(t, dir, "a.yaml", full)
	h := startRegistryWith(t, Config{Dir: dir, RemovalDelay: 700 * time.Millisecond})
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 3"))

	// Truncate, then write 300 ms later.
	writeFile(t, dir, "a.yaml", "")
	time.Sleep(300 * time.Millisecond)
	writeFile(t, dir, "a.yaml", full)
	// Half a file (it parses: two services, one of them with one instance
	// of two), the rest 200 ms later.
	half := full[:strings.Index(full, "  - address: 10.0.0.2")]
	writeFile(t, dir, "a.yaml", half)
	time.Sleep(200 * time.Millisecond)
	writeFile(t, dir, "a.yaml", full)
	// Renamed away, written back 100 ms later.
	if err := os.Rename(path, filepath.Join(dir, ".a.yaml.bak")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	writeFile(t, dir, "a.yaml", full)
	settle(t, h.sink)
	time.Sleep(time.Second) // past the removal delay: a held removal would be out
	noLoss(t, "non-atomic writes", h.sink, "one", "two", "three")
	_, state := h.sink.snapshot()
	if n := len(state[key("one")].Instances); n != 2 {
		t.Errorf("ns/one has %d instances after the writes, want 2", n)
	}

	// A genuine removal arrives once the directory was quiet for the delay.
	start := time.Now()
	writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1"), svc("two", "10.0.0.3")))
	waitFor(t, "the genuine removal", h.sink, hasEvent("delete ns/three"))
	if took := time.Since(start); took < 700*time.Millisecond {
		t.Errorf("the removal was reported after %v, before the directory was quiet for the delay", took)
	}
	_, state = h.sink.snapshot()
	if n := len(state[key("one")].Instances); n != 1 {
		t.Errorf("ns/one has %d instances after the genuine edit, want 1", n)
	}
}

// A file rewritten over and over must not hold removals back for ever.
func TestRemovalsAreHeldAtMostAFewDelays(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1"), svc("two", "10.0.0.2")))
	writeFile(t, dir, "busy.yaml", services(svc("busy", "10.0.1.1")))
	h := startRegistryWith(t, Config{Dir: dir, RemovalDelay: 200 * time.Millisecond})
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 3"))
	writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1")))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				writeFile(t, dir, "busy.yaml", services(svc("busy", fmt.Sprintf("10.0.1.%d", 1+i%2))))
			}
		}
	}()
	defer func() { close(stop); <-done }()
	waitFor(t, "the removal despite a busy directory", h.sink, hasEvent("delete ns/two"))
}

// A directory deleted and recreated empty (or a volume mounted empty) was
// served as 0 services: istiod would delete every one. The last state is
// kept and the outage reported; a file saying "services: []" removes
// everything on purpose.
func TestEmptyDirectoryKeepsTheLastState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1")))
	h := startRegistry(t, dir)
	waitFor(t, "the initial Replace", h.sink, hasEvent("replace 1"))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the outage", h.sink, hasEvent("unreachable the registry directory holds no *.yaml or *.yml file"))
	settle(t, h.sink)
	noLoss(t, "an empty directory", h.sink, "one")

	writeFile(t, dir, "a.yaml", "services: []\n")
	waitFor(t, "the removal on purpose", h.sink, func(events []string, state map[model.ServiceKey]model.Service) bool {
		return len(state) == 0 && events[len(events)-1] == "unreachable nil"
	})
}

// kill -9 while a file is malformed, then a restart: that file's services
// were removed, since its last good content lived in memory only. With a
// state directory it is kept across restarts.
func TestStateDirKeepsLastGoodAcrossRestarts(t *testing.T) {
	t.Parallel()
	dir, state := t.TempDir(), t.TempDir()
	good := services(svc("one", "10.0.0.1"), svc("two", "10.0.0.2"))
	path := writeFile(t, dir, "a.yaml", good)
	writeFile(t, dir, "b.yaml", services(svc("other", "10.0.1.1")))
	cfg := Config{Dir: dir, StateDir: state, RemovalDelay: 50 * time.Millisecond}

	first := startRegistryWith(t, cfg)
	waitFor(t, "the first run's Replace", first.sink, hasEvent("replace 3"))
	first.cancel()
	<-first.done
	first.done <- nil // for the cleanup

	writeFile(t, dir, "a.yaml", "services:\n- name: one\n  ports: [\n") // malformed
	second := startRegistryWith(t, cfg)
	waitFor(t, "the restarted run's Replace", second.sink, hasEvent("replace 3"))
	waitFor(t, "the rejection naming the state directory", second.sink,
		hasEvent("rejected "+path+":3: invalid YAML"))
	events, st := second.sink.snapshot()
	if firstAddress(st, "two") != "10.0.0.2" {
		t.Errorf("ns/two is not served from the kept content: %v", events)
	}
	found := false
	for _, e := range events {
		found = found || strings.Contains(e, "kept in "+state+", is served")
	}
	if !found {
		t.Errorf("the rejection does not say the kept content is served: %v", events)
	}

	// A file removed on purpose is forgotten by the state directory too.
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removal of b.yaml", second.sink, hasEvent("delete ns/other"))
	waitForFile := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(state, "b.yaml")); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(waitForFile) {
			t.Fatal("b.yaml's kept copy is still in the state directory after its removal")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// After a restart, a directory with no file while the state directory kept
// some is the empty-volume case: nothing is reported as the full listing.
func TestRestartOnAnEmptyDirectoryWithStateHoldsBack(t *testing.T) {
	t.Parallel()
	dir, state := t.TempDir(), t.TempDir()
	writeFile(t, state, "a.yaml", services(svc("one", "10.0.0.1")))
	h := startRegistryWith(t, Config{Dir: dir, StateDir: state})
	waitFor(t, "the outage", h.sink, hasEvent("unreachable the registry directory holds no"))
	if n := h.sink.count("replace"); n != 0 {
		t.Errorf("an empty directory after a restart was reported as the full listing (%d Replace)", n)
	}
}

func TestStateDirChecked(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(Config{Dir: dir, StateDir: dir}); err == nil || !strings.Contains(err.Error(), "is the registry directory") {
		t.Errorf("StateDir = Dir: %v", err)
	}
	if _, err := New(Config{Dir: dir, RemovalDelay: -time.Second}); err == nil || !strings.Contains(err.Error(), "RemovalDelay -1s is negative") {
		t.Errorf("negative RemovalDelay: %v", err)
	}
	for _, quiet := range []time.Duration{-time.Millisecond, MaxScanQuiet + time.Millisecond} {
		if _, err := New(Config{Dir: dir, ScanQuiet: quiet}); err == nil || !strings.Contains(err.Error(), "ScanQuiet "+quiet.String()+" is not in 0 to 250ms") {
			t.Errorf("ScanQuiet %v: %v", quiet, err)
		}
	}
}

// schedule waits quiet after each event of a burst, but no longer than MaxScanQuiet after the
// burst's first event.
func TestScheduleBoundsTheBurst(t *testing.T) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	now := time.Now()
	if got := schedule(timer, time.Time{}, time.Millisecond); got.Before(now) || got.After(time.Now()) {
		t.Errorf("a first event starts the burst now, got %v (now %v)", got, now)
	}
	start := now.Add(-MaxScanQuiet + 5*time.Millisecond) // the burst's limit is 5 ms away
	if got := schedule(timer, start, time.Minute); !got.Equal(start) {
		t.Errorf("a later event keeps the burst's start: got %v, want %v", got, start)
	}
	select {
	case <-timer.C: // within the burst's limit, not after the minute asked
	case <-time.After(time.Minute / 2):
		t.Fatal("the timer did not fire by the burst's limit")
	}
}

// A directory deleted and recreated at the same path may get the same
// inode number; the adapter must still watch the new one (it once kept a
// dead watch, so edits waited for the periodic re-scan).
func TestRecreatedDirectoryIsWatchedAgain(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "registry")
	for i := range 3 { // several rounds: inode reuse is likely, not certain
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1")))
		h := startRegistryWith(t, Config{Dir: dir, RemovalDelay: 50 * time.Millisecond, Resync: time.Hour})
		waitFor(t, "the initial Replace", h.sink, hasEvent("replace 1"))
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1")))
		time.Sleep(300 * time.Millisecond) // the directory is found again
		writeFile(t, dir, "a.yaml", services(svc("one", "10.0.0.1"), svc(fmt.Sprintf("two%d", i), "10.0.0.2")))
		waitFor(t, "an edit in the recreated directory (the periodic re-scan is an hour away)", h.sink, hasEvent(fmt.Sprintf("update ns/two%d", i)))
		h.cancel()
		<-h.done
		h.done <- nil
	}
}
