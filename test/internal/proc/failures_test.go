package proc

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestFailuresLast runs a failing test in a child process and checks that its message comes
// again after the last server log line, with the caller's line (helpers skipped).
func TestFailuresLast(t *testing.T) {
	if os.Getenv("GALLEON_FAILURES_LAST_CHILD") == "1" {
		tb := FailuresLast(t)
		t.Cleanup(func() { t.Log("--- end of a server's log ---") }) // what Start's cleanup writes
		failIn(tb)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFailuresLast$", "-test.v")
	cmd.Env = append(os.Environ(), "GALLEON_FAILURES_LAST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child test passed; want it to fail:\n%s", out)
	}
	log := string(out)
	end := strings.Index(log, "end of a server's log")
	again := strings.LastIndex(log, "broken widget 7")
	if end < 0 || again < end {
		t.Fatalf("the failure is not repeated after the server log:\n%s", log)
	}
	if !strings.Contains(log, "failures_test.go:") || strings.Count(log, "broken widget 7") != 2 {
		t.Errorf("want the message twice, first at the caller's line in failures_test.go:\n%s", log)
	}
}

func failIn(tb testing.TB) {
	tb.Helper()
	tb.Errorf("broken widget %d", 7)
}
