package proc

import (
	"fmt"
	"sync"
	"testing"
)

// FailuresLast wraps a test so that its failure messages are written once more at the very end
// of its log. A failed test's log ends with the tails of its servers' logs (see Start), hundreds
// of lines that push the message itself out of sight of a reader, or of a CI page, that shows
// only the lines around "--- FAIL". Call it before starting any process, so that its cleanup
// runs after theirs, and pass the result where the test would pass t.
func FailuresLast(t *testing.T) testing.TB {
	f := &failuresLast{TB: t}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.msgs) == 0 {
			return
		}
		t.Logf("the failures above the servers' logs, again:")
		for _, m := range f.msgs {
			t.Logf("  %s", m)
		}
	})
	return f
}

// failuresLast keeps what Error, Errorf, Fatal and Fatalf reported, bounded: a test that fails
// in a loop must not double a long log.
type failuresLast struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

const maxFailuresKept = 20

func (f *failuresLast) keep(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case len(f.msgs) < maxFailuresKept:
		f.msgs = append(f.msgs, msg)
	case len(f.msgs) == maxFailuresKept:
		f.msgs = append(f.msgs, "(more failures: see above)")
	}
}

func (f *failuresLast) Error(args ...any) {
	f.TB.Helper()
	f.keep(fmt.Sprint(args...))
	f.TB.Error(args...)
}

func (f *failuresLast) Errorf(format string, args ...any) {
	f.TB.Helper()
	f.keep(fmt.Sprintf(format, args...))
	f.TB.Errorf(format, args...)
}

func (f *failuresLast) Fatal(args ...any) {
	f.TB.Helper()
	f.keep(fmt.Sprint(args...))
	f.TB.Fatal(args...)
}

func (f *failuresLast) Fatalf(format string, args ...any) {
	f.TB.Helper()
	f.keep(fmt.Sprintf(format, args...))
	f.TB.Fatalf(format, args...)
}
