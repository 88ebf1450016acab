package procstat

import (
	"os"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	// A command name with spaces and parentheses, as a process may set it.
	got, err := Parse("4242 (go (build) x) S 17 4242 4242 0 -1 4194304 100 0 0 0 30 12 5 3 20 0 8 0 1000 0 0\n")
	want := Stat{PPID: 17, UTime: 30, STime: 12, CUTime: 5, CSTime: 3}
	if err != nil || got != want {
		t.Errorf("Parse = %+v, %v; want %+v", got, err, want)
	}
	if cpu := got.CPU(); cpu != 420*time.Millisecond {
		t.Errorf("CPU() = %v, want 420ms", cpu)
	}
	for _, bad := range []string{"garbage", "4242 (x) S 1 2", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 x 5 3 20"} {
		if st, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %+v, no error", bad, st)
		}
	}
}

func TestReadSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: not Linux")
	}
	st, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != os.Getppid() {
		t.Errorf("PPID = %d, want %d", st.PPID, os.Getppid())
	}
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	if again, err := Read(os.Getpid()); err != nil || again.CPU() <= 0 {
		t.Errorf("CPU after 50ms of spinning: %v, %v", again.CPU(), err)
	}
}
