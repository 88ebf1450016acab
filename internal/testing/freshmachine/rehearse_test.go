package freshmachine

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// makefile's targets check, inside the rehearsal, what a new user's make would see: the clone
// as its directory, empty caches that exist, no override; "readonly" leaves a read-only
// directory in the module cache, as go does; "fails" fails.
const makefile = `check:
	@test -f Makefile && test "$$(git rev-parse HEAD)" = "$$WANT_COMMIT"
	@test -d "$$GOMODCACHE" && test -d "$$GOCACHE" && test -d "$$GALLEON_CACHE" && test -d "$$STATICCHECK_CACHE"
	@test -z "$$(ls -A $$GOMODCACHE)" && test -z "$$GALLEON_CONSUL_BIN" && test "$$GOWORK" = off
	@echo "ok  	example.com/check	0.1s"
test:
	@echo "=== RUN   TestHidden"
	@echo "--- PASS: TestHidden (0.00s)"
	@echo "--- FAIL: TestShown (0.00s)"
	@echo "ok  	example.com/pkg	0.1s"
readonly:
	@mkdir -p "$$GOMODCACHE/m@v1" && touch "$$GOMODCACHE/m@v1/f.go" && chmod -R a-w "$$GOMODCACHE/m@v1"
fails:
	@echo "the reason it failed"; exit 3
`

// repo makes a git repository with makefile committed, and returns it and its commit.
func repo(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(makefile), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "Makefile"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "m"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Skipf("git %v: %v %s (the rehearsal needs git)", args, err, out)
		}
	}
	commit, err := gitOutput(context.Background(), dir, "rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	return dir, commit
}

func rehearse(t *testing.T, stages ...string) (string, string, error) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	dir, commit := repo(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("WANT_COMMIT", commit)
	t.Setenv("GALLEON_CONSUL_BIN", "/nowhere/consul")
	var progress bytes.Buffer
	err := Rehearsal{Repo: dir, Stages: stages, Progress: &progress}.Run(context.Background())
	return progress.String(), tmp, err
}

// TestRehearsalPasses: every stage runs in the clone with a new user's environment (the make
// targets check it), the test stage's go test summary lines are printed, and the table.
func TestRehearsalPasses(t *testing.T) {
	out, tmp, err := rehearse(t, "check", "readonly", "test")
	if err != nil {
		t.Fatalf("Run = %v\n%s", err, out)
	}
	for _, want := range []string{
		"fresh-machine: make check: ok in 0 min 0 s\n",
		"fresh-machine: make readonly: ok in 0 min 0 s\n",
		"fresh-machine: make test: ok in 0 min 0 s\n--- FAIL: TestShown (0.00s)\nok  \texample.com/pkg\t0.1s\n",
		"  make check ok             0 min  0 s\n",
		"  make test  ok             0 min  0 s\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the rehearsal's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "TestHidden") || strings.Contains(out, "example.com/check") {
		t.Errorf("go test's summary lines are printed for the test stage only, without passed tests:\n%s", out)
	}
	if strings.Contains(out, "kept ") {
		t.Errorf("kept %s without FRESH_KEEP and with every stage passing:\n%s", tmp, out)
	}
}

// TestRehearsalCleansUp: the temporary directory goes, read-only module cache and all (the
// latter checked only when not root).
func TestRehearsalCleansUp(t *testing.T) {
	out, tmp, err := rehearse(t, "check", "readonly")
	if err != nil {
		t.Fatalf("Run = %v\n%s", err, out)
	}
	if os.Geteuid() == 0 {
		t.Log("running as root, for whom a read-only directory is no obstacle: the chmod before the removal goes unchecked")
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left behind in TMPDIR: %v (the module cache's read-only directories too?)\n%s", left, out)
	}
	if !strings.Contains(out, "\nfresh-machine rehearsal of ") || !strings.Contains(out, "  total                     0 min  0 s\n") {
		t.Errorf("no summary:\n%s", out)
	}
}

// TestRehearsalStopsAtAFailure: a failing stage (a recipe's, or make's own) ends the rehearsal,
// its last lines are printed, the directory is kept, and the error names the stage.
func TestRehearsalStopsAtAFailure(t *testing.T) {
	for stage, want := range map[string]string{"fails": "the reason it failed\n", "missing": "No rule to make target 'missing'"} {
		out, tmp, err := rehearse(t, stage, "check")
		if err == nil || !strings.Contains(err.Error(), "make "+stage+" FAILED (exit 2)") {
			t.Fatalf("Run = %v, want make %s's failure\n%s", err, stage, out)
		}
		if !strings.Contains(out, want) {
			t.Errorf("the failing stage's last lines are not printed:\n%s", out)
		}
		if strings.Contains(out, "make check") {
			t.Errorf("a stage ran after a failure:\n%s", out)
		}
		if !strings.Contains(out, "  make "+fmt.Sprintf("%-5s", stage)+" FAILED (exit 2)   0 min  0 s\n") || !strings.Contains(out, "kept "+tmp) {
			t.Errorf("no failed row in the table, or the directory was not kept:\n%s", out)
		}
	}
}
