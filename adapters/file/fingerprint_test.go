package file

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// newScanState returns the state of a Run on dir whose scans the test
// drives itself with sync, so that it knows exactly which scan saw what.
func newScanState(t *testing.T, dir string) (*runState, *recordingSink) {
	t.Helper()
	reg, err := New(Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	sink := newRecordingSink()
	return &runState{
		cfg:     reg.cfg,
		log:     reg.log,
		report:  registry.NewReconciler(sink),
		watcher: w,
		files:   map[string]*fileState{},
		served:  map[model.ServiceKey]served{},

		statRacy: racyStat,
	}, sink
}

// goodOf returns the first parsed entry of a file, to tell whether a scan
// parsed the file again (a new entry) or skipped it (the same one).
func goodOf(t *testing.T, s *runState, name string) *parsedService {
	t.Helper()
	fs := s.files[name]
	if fs == nil || len(fs.good) == 0 {
		t.Fatalf("%s contributes no service", name)
	}
	return &fs.good[0]
}

// TestRewriteWithSameContent: a file written again with the same bytes
// (a configuration-management run, a ConfigMap swap) is neither parsed nor
// reported again, even though its modification time changed.
func TestRewriteWithSameContent(t *testing.T) {
	dir := t.TempDir()
	content := services(svc("one", "10.0.0.1"), svc("two", "10.0.0.2"))
	path := writeFile(t, dir, "a.yaml", content)
	s, sink := newScanState(t, dir)
	s.sync()
	first := goodOf(t, s, "a.yaml")

	writeFile(t, dir, "a.yaml", content)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	s.sync()
	if goodOf(t, s, "a.yaml") != first {
		t.Error("a file rewritten with the same content was parsed again")
	}
	events, _ := sink.snapshot()
	if want := []string{"replace 2"}; strings.Join(events, "|") != strings.Join(want, "|") {
		t.Errorf("events = %q, want %q", events, want)
	}
}

// TestChangeWithSameSizeAndMtime: a change that keeps the size and lands
// within the same modification-time tick (coarse file-system timestamps,
// tools that preserve mtimes) is still picked up: the content hash, not
// the metadata, decides.
func TestChangeWithSameSizeAndMtime(t *testing.T) {
	dir := t.TempDir()
	// Explicit instance ids: a new address under the same id is a change,
	// not a removal that the adapter would hold back.
	content := func(addr string) string {
		return services(svc("one")+"  instances:\n  - {id: one-1, address: "+addr+"}\n", svc("two", "10.0.0.2"))
	}
	path := writeFile(t, dir, "a.yaml", content("10.0.0.1"))
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	s, sink := newScanState(t, dir)
	s.sync()

	writeFile(t, dir, "a.yaml", content("10.0.0.7"))
	if err := os.Chtimes(path, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("setup: size %d -> %d, mtime %v -> %v", before.Size(), after.Size(), before.ModTime(), after.ModTime())
	}
	s.sync()
	events, state := sink.snapshot()
	if want := []string{"replace 2", "update ns/one"}; strings.Join(events, "|") != strings.Join(want, "|") {
		t.Errorf("events = %q, want %q", events, want)
	}
	if got := firstAddress(state, "one"); got != "10.0.0.7" {
		t.Errorf("one is served at %s, want 10.0.0.7", got)
	}
}

// TestUnreadableFileIsParsedAgain: a file that could not be read is parsed
// again once it can, even if its content is what was last parsed, so that
// its read error is cleared.
func TestUnreadableFileIsParsedAgain(t *testing.T) {
	dir := t.TempDir()
	content := services(svc("one", "10.0.0.1"))
	path := writeFile(t, dir, "a.yaml", content)
	s, sink := newScanState(t, dir)
	s.sync()

	// A link to itself cannot be read, whoever runs the test.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.yaml", path); err != nil {
		t.Fatal(err)
	}
	s.sync()
	if s.files["a.yaml"].fileErr == nil {
		t.Fatal("no read error for a link to itself")
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "a.yaml", content)
	s.sync()
	if fs := s.files["a.yaml"]; fs.fileErr != nil || !fs.parsed {
		t.Errorf("state once the file is readable again: parsed %v, error %v", fs.parsed, fs.fileErr)
	}
	events, _ := sink.snapshot()
	record := filepath.Join(s.cfg.Dir, "a.yaml")
	if len(events) != 3 || !strings.HasPrefix(events[1], "rejected "+record+": cannot read file") || events[2] != "cleared "+record {
		t.Errorf("events = %q, want the Replace, one read rejection and, once the file reads again, its clearing", events)
	}
}

// TestUnchangedStatIsNotRead: once a file's stat is older than the racy margin (shortened here),
// a scan does not open it while its stat is unchanged, and a rewrite of the same size that sets
// the modification time back is still seen, by its status-change time.
func TestUnchangedStatIsNotRead(t *testing.T) {
	if _, ok := statKeyOf(mustStat(t, t.TempDir())); !ok {
		t.Skip("no stat key on this platform: every scan fingerprints every file")
	}
	dir := t.TempDir()
	content := func(addr string) string {
		return services(svc("one")+"  instances:\n  - {id: one-1, address: "+addr+"}\n", svc("two", "10.0.0.2"))
	}
	path := writeFile(t, dir, "a.yaml", content("10.0.0.1"))
	writeFile(t, dir, "b.yaml", services(svc("three", "10.0.0.3")))
	before := mustStat(t, path)
	s, sink := newScanState(t, dir)
	s.statRacy = 0
	time.Sleep(20 * time.Millisecond) // past the file system's timestamp tick
	s.sync()
	opened := s.opened
	s.sync()
	if s.opened != opened {
		t.Errorf("a scan of two unchanged files opened %d files", s.opened-opened)
	}

	writeFile(t, dir, "a.yaml", content("10.0.0.7"))
	if err := os.Chtimes(path, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	if after := mustStat(t, path); after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("setup: size %d -> %d, mtime %v -> %v", before.Size(), after.Size(), before.ModTime(), after.ModTime())
	}
	s.sync()
	if _, state := sink.snapshot(); firstAddress(state, "one") != "10.0.0.7" {
		t.Errorf("one is served at %s after a same-size rewrite with the old mtime, want 10.0.0.7", firstAddress(state, "one"))
	}
}

func mustStat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}
