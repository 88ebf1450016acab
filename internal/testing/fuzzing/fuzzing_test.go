package fuzzing

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTargetsFindsWhatGoTestRuns: the functions -fuzz runs are found, and nothing else: not a
// helper with another signature, not a lower-case name, not a non-test file, not another
// module's package, not testdata, not a file for another platform.
func TestTargetsFindsWhatGoTestRuns(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "go.mod"), "module example.com/m\n")
	write(t, filepath.Join(root, "a_test.go"), `package m
import "testing"
func FuzzRoot(f *testing.F) {}
`)
	write(t, filepath.Join(root, "p", "q", "x_test.go"), `package q
import tt "testing"
func FuzzB(f *tt.F) {}
func FuzzA(f *tt.F) {}
func Fuzz(f *tt.F) {}
func Fuzzy(f *tt.F) {}
func FuzzTwo(f *tt.F, n int) {}
func FuzzT(t *tt.T) {}
func FuzzValue(f tt.F) {}
func (x) FuzzMethod(f *tt.F) {}
type x struct{}
`)
	write(t, filepath.Join(root, "p", "q", "a_test.go"), `package q
import "testing"
func FuzzFirstFile(f *testing.F) {}
`)
	write(t, filepath.Join(root, "p", "q", "notest.go"), `package q
import "testing"
func FuzzNotATest(f *testing.F) {}
`)
	write(t, filepath.Join(root, "p", "q", "other_test.go"), `//go:build neverthisplatform

package q
import "testing"
func FuzzConstrained(f *testing.F) {}
`)
	write(t, filepath.Join(root, "p", "q", "noimport_test.go"), `package q
func FuzzNoTesting(f *testing.F) {}
`)
	write(t, filepath.Join(root, "nested", "go.mod"), "module example.com/nested\n")
	write(t, filepath.Join(root, "nested", "n_test.go"), "package n\nimport \"testing\"\nfunc FuzzNested(f *testing.F) {}\n")
	write(t, filepath.Join(root, "p", "testdata", "t_test.go"), "package t\nimport \"testing\"\nfunc FuzzData(f *testing.F) {}\n")
	write(t, filepath.Join(root, ".hidden", "h_test.go"), "package h\nimport \"testing\"\nfunc FuzzHidden(f *testing.F) {}\n")

	got, err := Targets(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{
		{".", "FuzzRoot"},
		{"./p/q", "FuzzFirstFile"},
		{"./p/q", "FuzzB"},
		{"./p/q", "FuzzA"},
		{"./p/q", "Fuzz"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Targets =\n%v\nwant\n%v", got, want)
	}
}

// TestTargetsOfThisModule: the product module's targets include every one that scripts/fuzz.sh
// listed by hand, and none from another module (test/, bench/).
func TestTargetsOfThisModule(t *testing.T) {
	root, err := toolcache.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Targets(root)
	if err != nil {
		t.Fatal(err)
	}
	listed := []Target{
		{"./adapters/file", "FuzzParseFile"},
		{"./adapters/file", "FuzzFastDocuments"},
		{"./adapters/file", "FuzzDecodeService"},
		{"./adapters/consul", "FuzzMapService"},
		{"./adapters/eureka/internal/wire", "FuzzDecode"},
		{"./adapters/eureka/internal/wire", "FuzzDecodeLimits"},
		{"./adapters/zookeeper", "FuzzProviderURL"},
		{"./adapters/zookeeper", "FuzzCuratorInstance"},
		{"./adapters/zookeeper", "FuzzDubbo3Instance"},
		{"./internal/serve/xds", "FuzzRequests"},
		{"./internal/serve/mcp", "FuzzRequest"},
	}
	for _, w := range listed {
		if !slices.Contains(got, w) {
			t.Errorf("%s in %s not found; found %v", w.Name, w.Pkg, got)
		}
	}
	for _, g := range got {
		if first, _, _ := strings.Cut(strings.TrimPrefix(g.Pkg, "./"), "/"); first == "test" || first == "bench" || first == "docs" || first == "scripts" {
			t.Errorf("%s in %s belongs to another module", g.Name, g.Pkg)
		}
	}
}

func TestDeadlineRace(t *testing.T) {
	race := "fuzz: elapsed: 30s, execs: 1000 (33/sec), new interesting: 0 (total: 10)\n--- FAIL: FuzzX (30.01s)\n    context deadline exceeded\nFAIL\n"
	cases := []struct {
		name, fuzzTime, log string
		want                bool
	}{
		{"bare deadline, duration", "30s", race, true},
		{"bare deadline, count of inputs", "3000x", race, false},
		{"failing input written", "30s", race + "    Failing input written to testdata/fuzz/FuzzX/abc\n", false},
		{"a test's error line", "30s", race + "        x_test.go:12: got 1, want 2\n", false},
		{"a test file name not at a line's start", "30s", race + "see x_test.go:12: here\n", true},
		{"a panic", "30s", race + "panic: runtime error: index out of range\n", false},
		{"another failure", "30s", "--- FAIL: FuzzX\n    x_test.go:9: bad\n", false},
	}
	for _, c := range cases {
		if got := DeadlineRace(c.fuzzTime, []byte(c.log)); got != c.want {
			t.Errorf("%s: DeadlineRace = %v, want %v", c.name, got, c.want)
		}
	}
}
