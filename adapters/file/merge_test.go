package file

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/model"
)

// fullMerge is the merge every scan did before it was incremental: every file, in name order,
// the first definition of a service winning. The test holds the incremental one to it.
func fullMerge(s *runState) (map[model.ServiceKey]served, map[string]string) {
	names := make([]string, 0, len(s.files))
	for name := range s.files {
		names = append(names, name)
	}
	sort.Strings(names)
	desired := map[model.ServiceKey]served{}
	rejected := map[string]string{}
	for _, name := range names {
		fs := s.files[name]
		if fs.fileErr != nil {
			rejected[fs.fileErr.record()] = fs.fileErr.err.Error()
		}
		for _, r := range fs.rejected {
			rejected[r.record()] = r.err.Error()
		}
		for i := range fs.good {
			ps := &fs.good[i]
			k := ps.svc.Key()
			if first, dup := desired[k]; dup {
				owner := rejection{path: filepath.Join(s.cfg.Dir, first.file), line: first.line}.record()
				r := rejection{path: filepath.Join(s.cfg.Dir, name), line: ps.line}
				rejected[r.record()] = fmt.Sprintf("service %s is already defined in %s; the definition in the file whose name sorts first wins", k, owner)
				continue
			}
			desired[k] = served{parsedService: ps, file: name}
		}
	}
	return desired, rejected
}

// TestIncrementalMergeMatchesAFullMerge writes, rewrites, breaks and removes four files that
// define overlapping services, 300 random steps, and after every scan compares what is served
// (and what the sink holds) and the rejections with a full merge of the files.
func TestIncrementalMergeMatchesAFullMerge(t *testing.T) {
	dir := t.TempDir()
	s, sink := newScanState(t, dir)
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a.yaml", "b.yaml", "c.yaml", "d.yaml"}
	for step := range 300 {
		name := names[rng.IntN(len(names))]
		path := filepath.Join(dir, name)
		switch op := rng.IntN(10); {
		case op < 6: // (re)write with some of six services
			var b strings.Builder
			for i := range 6 {
				if rng.IntN(2) == 0 {
					b.WriteString(svc(fmt.Sprintf("s%d", i), fmt.Sprintf("10.0.%d.%d", i, rng.IntN(3)+1)))
				}
			}
			writeFile(t, dir, name, services(b.String()))
		case op < 8:
			// Never the last file: an empty directory is an outage that
			// keeps the last state (TestEmptyDirectoryKeepsTheLastState).
			if left, _ := filepath.Glob(filepath.Join(dir, "*.yaml")); len(left) > 1 {
				if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
		default: // malformed: its last good content stays
			writeFile(t, dir, name, "services: [\n")
		}
		s.forceRemovals = true // no removal held back: every scan is reported
		s.sync()

		want, wantRejected := fullMerge(s)
		if len(s.served) != len(want) {
			t.Fatalf("step %d: %d services served, a full merge serves %d", step, len(s.served), len(want))
		}
		for k, w := range want {
			if got, ok := s.served[k]; !ok || got.parsedService != w.parsedService || got.file != w.file {
				t.Fatalf("step %d: %s served from %q, a full merge serves it from %q", step, k, got.file, w.file)
			}
		}
		_, state := sink.snapshot()
		if len(state) != len(want) {
			t.Fatalf("step %d: the sink holds %d services, want %d", step, len(state), len(want))
		}
		for k, w := range want {
			if got := state[k]; len(got.Instances) != len(w.svc.Instances) || (len(got.Instances) > 0 && got.Instances[0].Address != w.svc.Instances[0].Address) {
				t.Fatalf("step %d: the sink holds %s as %+v, want %+v", step, k, got.Instances, w.svc.Instances)
			}
		}
		gotRejected := map[string]string{}
		for _, r := range s.rejections() {
			gotRejected[r.record()] = r.err.Error()
		}
		if fmt.Sprint(gotRejected) != fmt.Sprint(wantRejected) {
			t.Fatalf("step %d: rejections %v, a full merge has %v", step, gotRejected, wantRejected)
		}
		if len(s.dirty) != 0 {
			t.Fatalf("step %d: %d keys still dirty after a report", step, len(s.dirty))
		}
	}
}
