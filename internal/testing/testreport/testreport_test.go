package testreport

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// verbose is a go test -v log of the e2e module's shape.
const verbose = `=== RUN   TestServiceEntries
=== RUN   TestServiceEntries/istiod-1.29.2
    e2e_test.go:40: started istiod
=== RUN   TestServiceEntries/istiod-1.29.2/file
    --- PASS: TestServiceEntries/istiod-1.29.2/file (1.20s)
--- PASS: TestServiceEntries (3.00s)
    --- PASS: TestServiceEntries/istiod-1.29.2 (3.00s)
    --- SKIP: TestServiceEntries/istiod-1.31-dev (0.00s)
        --- PASS: TestConformance/adsc-1.30-b01690e/delta (0.50s)
    --- PASS: TestOther/sub (0.10s)
    --- PASS: TestServiceEntries/istiod-1.29.2/a/b (0.10s)
--- SKIP: TestNeedsServers (0.00s)
--- FAIL: TestFlaky (0.00s)
PASS
ok  	github.com/galleon-mesh/galleon/test/e2e	12.345s
?   	github.com/galleon-mesh/galleon/test/kube	[no test files]
FAIL	github.com/galleon-mesh/galleon/test/peer [build failed]
okay this is not a package line
`

// TestSummary: the lines the shell pipeline of scripts/test-report.sh printed for the same log
// (checked with its grep and sed): not TestOther/sub, the passed and skipped top-level tests,
// the bare PASS or the logged lines.
func TestSummary(t *testing.T) {
	got, err := Summary(strings.NewReader(verbose))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--- PASS: TestServiceEntries/istiod-1.29.2/file (1.20s)",
		"--- PASS: TestServiceEntries/istiod-1.29.2 (3.00s)",
		"--- SKIP: TestServiceEntries/istiod-1.31-dev (0.00s)",
		"--- PASS: TestConformance/adsc-1.30-b01690e/delta (0.50s)",
		"--- PASS: TestServiceEntries/istiod-1.29.2/a/b (0.10s)",
		"--- FAIL: TestFlaky (0.00s)",
		"ok  \tgithub.com/galleon-mesh/galleon/test/e2e\t12.345s",
		"?   \tgithub.com/galleon-mesh/galleon/test/kube\t[no test files]",
		"FAIL\tgithub.com/galleon-mesh/galleon/test/peer [build failed]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Summary =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// fakeGo writes a go command that checks it was asked for `test -v ARGS`, prints the log and
// exits with code.
func fakeGo(t *testing.T, code int) string {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	if err := os.WriteFile(log, []byte(verbose), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\n[ \"$*\" = 'test -v -count=1 ./...' ] || { echo \"args: $*\"; exit 3; }\ncat " + log + "\necho 'stderr line' >&2\nexit " + string(rune('0'+code)) + "\n"
	p := filepath.Join(dir, "go")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunPassingPrintsTheSummary(t *testing.T) {
	var out bytes.Buffer
	if err := Run(context.Background(), fakeGo(t, 0), t.TempDir(), []string{"-count=1", "./..."}, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "stderr line") || strings.Contains(out.String(), "e2e_test.go:40") {
		t.Errorf("a passing run printed more than the summary:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "--- PASS: TestServiceEntries/istiod-1.29.2 (3.00s)\n") {
		t.Errorf("the summary lacks the release's result:\n%s", out.String())
	}
}

func TestRunFailingPrintsTheWholeLog(t *testing.T) {
	var out bytes.Buffer
	dir := t.TempDir()
	err := Run(context.Background(), fakeGo(t, 1), dir, []string{"-count=1", "./..."}, &out)
	if err == nil || err.Error() != "go test in "+dir+" failed (exit 1): the full verbose log is above" {
		t.Fatalf("Run = %v, want the one-line failure", err)
	}
	if want := verbose + "stderr line\n"; out.String() != want {
		t.Errorf("printed\n%s\nwant the whole log\n%s", out.String(), want)
	}
}
