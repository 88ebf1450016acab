package benchrun

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRunStartWaitStop(t *testing.T) {
	ctx := context.Background()
	var out, errOut bytes.Buffer
	r := New("bench-test", &out, &errOut)
	if err := r.WorkDirs("benchrun-test"); err != nil {
		t.Fatal(err)
	}
	dir := r.Dir
	// A server that says it is ready, then ignores SIGTERM: Stop must SIGKILL it after Grace.
	p, err := r.Start(Spec{Name: "stubborn", Log: filepath.Join(r.LogDir, "stubborn.log"), Path: "sh",
		Args: []string{"-c", `trap "" TERM; echo "$FOO ready: serving"; while :; do sleep 0.05; done`},
		Env:  []string{"FOO=env-reached"}, Grace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	line, err := p.WaitLine(ctx, regexp.MustCompile(`ready: `), "ready", 10*time.Second, 20*time.Millisecond)
	if err != nil || line != "env-reached ready: serving" {
		t.Fatalf("WaitLine = %q, %v", line, err)
	}
	if kb, err := ProcKB(p.Pid(), "VmRSS"); err != nil || kb <= 0 {
		t.Errorf("ProcKB(VmRSS) = %d, %v", kb, err)
	}
	start := time.Now()
	p.Stop()
	if p.Alive() || time.Since(start) < 300*time.Millisecond {
		t.Errorf("Stop: alive %v after %v; want it killed after the grace", p.Alive(), time.Since(start))
	}
	if err := p.Signal(syscall.SIGCONT); err == nil {
		t.Error("Signal to an exited process: no error")
	}

	// A process that exits while it is waited for.
	q, err := r.Start(Spec{Name: "quitter", Log: filepath.Join(r.LogDir, "quitter.log"), Path: "sh",
		Args: []string{"-c", "echo first; echo level=ERROR bad config; echo last; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.WaitLine(ctx, regexp.MustCompile(`never`), "never", 10*time.Second, 20*time.Millisecond)
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "quitter exited while waiting for: never: last") {
		t.Errorf("WaitLine on an exiting process: %v", err)
	}
	if got := q.Why(regexp.MustCompile(`level=ERROR`)); got != "level=ERROR bad config" {
		t.Errorf("Why = %q", got)
	}
	if q.ExitErr() == nil {
		t.Error("ExitErr of exit 3: nil")
	}

	// A timeout names the log.
	err = WaitFor(ctx, 50*time.Millisecond, 10*time.Millisecond, "nothing", func() (bool, error) { return false, nil })
	if err == nil || err.Error() != "timed out after 0.05s waiting for: nothing" {
		t.Errorf("WaitFor timeout: %v", err)
	}

	// A failure keeps the logs, not bin/, and says where they are.
	if err := r.Finish(ctx, errors.New("boom")); ExitCode(err) != 1 {
		t.Errorf("Finish(failure) = %v, want exit 1", err)
	}
	if want := "bench-test: FAILED: boom (logs kept in " + r.LogDir + ")\n"; errOut.String() != want {
		t.Errorf("failure line %q, want %q", errOut.String(), want)
	}
	if _, err := os.Stat(r.LogDir); err != nil {
		t.Errorf("logs removed after a failure: %v", err)
	}
	if _, err := os.Stat(r.BinDir); !os.IsNotExist(err) {
		t.Errorf("bin/ kept after a failure: %v", err)
	}
	_ = os.RemoveAll(dir)
}

func TestFinishInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	r := New("bench-test", &out, &errOut)
	if err := r.WorkDirs("benchrun-test"); err != nil {
		t.Fatal(err)
	}
	p, err := r.Start(Spec{Name: "sleeper", Log: filepath.Join(r.LogDir, "sleeper.log"), Path: "sleep", Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	r.Step("waiting")
	cancel()
	err = WaitFor(ctx, time.Minute, 10*time.Millisecond, "forever", func() (bool, error) { return false, nil }, p)
	if ExitCode(r.Finish(ctx, err)) != 130 {
		t.Errorf("Finish after an interruption: want exit 130")
	}
	if p.Alive() {
		t.Error("Finish left a process running")
	}
	if errOut.String() != "bench-test: FAILED: interrupted during \"waiting\"\n" {
		t.Errorf("interruption line %q", errOut.String())
	}
	if _, err := os.Stat(r.Dir); !os.IsNotExist(err) {
		t.Errorf("work directory kept after an interruption: %v", err)
	}
	if out.String() != "\n== waiting\n" {
		t.Errorf("step output %q", out.String())
	}
}

func TestFreeAddr(t *testing.T) {
	r := New("bench-test", &bytes.Buffer{}, &bytes.Buffer{})
	seen := map[string]bool{}
	for range 20 {
		a := r.FreeAddr()
		if seen[a] || !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("FreeAddr gave %q twice or not on loopback", a)
		}
		seen[a] = true
	}
}
