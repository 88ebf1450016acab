package toolcache

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/procstat"
)

// progressTicks is how much CPU (in clock ticks, 1/100 s on Linux) a go process tree must use
// between two looks to count as working: a quarter of a second.
const progressTicks = 25

// killGrace is how long go gets after an interrupt to stop its own children before whatever is
// left of its process tree is killed.
const killGrace = 2 * time.Second

// runGoWatched runs go once (see RunGo) and stops it when it stalls for stall; the error wraps
// ErrStalled then, and ctx.Err() when ctx ended it. Without /proc it just runs go.
func runGoWatched(ctx context.Context, stall time.Duration, log, dir string, env, args []string) error {
	out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cannot write go's log: %v (set GALLEON_CACHE to a writable directory)", err)
	}
	defer out.Close()
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot run go: %v (is go on PATH?)", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }() // ends when go does: every path below waits for it

	var w *watch
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		w = newWatch(cmd.Process.Pid, modDownloadDir(dir, env), stall)
	}
	step := 5 * time.Second
	if stall < 10*time.Second {
		step = time.Second
	}
	tick := time.NewTicker(step)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return goExitError(args, err)
		case <-ctx.Done():
			stopTree(cmd.Process.Pid, done)
			return ctx.Err()
		case <-tick.C:
			if w == nil || !w.stalled(step) {
				continue
			}
			fmt.Fprintf(out, "gofetch: go %s made no progress for %d s (a request to the module proxy that is never answered); stopping it\n",
				args[0], int(w.idle.Seconds()))
			stopTree(cmd.Process.Pid, done)
			return fmt.Errorf("go %s: %w", args[0], ErrStalled)
		}
	}
}

func goExitError(args []string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("go %s failed: %v", strings.Join(args, " "), err)
}

// stopTree interrupts go (which stops its own children on an interrupt), kills whatever is left
// of its process tree after killGrace, and waits for go.
func stopTree(pid int, done <-chan error) {
	left := treePids(pid, readProcs())
	_ = syscall.Kill(pid, syscall.SIGINT)
	exited := false
	select {
	case <-done:
		exited = true
	case <-time.After(killGrace):
	}
	for _, p := range left { // go's children too: a child that ignored the interrupt outlives go
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	if !exited {
		<-done
	}
}

// modDownloadDir is $(go env GOMODCACHE)/cache/download for go's environment, created if missing:
// where a fetch writes the files whose arrival counts as progress. "" if go cannot say.
func modDownloadDir(dir string, env []string) string {
	cmd := exec.Command("go", "env", "GOMODCACHE")
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		return ""
	}
	d := filepath.Join(strings.TrimSpace(string(out)), "cache", "download")
	_ = os.MkdirAll(d, 0o755) // a missing directory is only no progress seen
	return d
}

// watch is the stall watchdog's view of one go process tree.
type watch struct {
	pid      int
	modcache string
	stall    time.Duration
	lastCPU  int64
	lastLook time.Time
	idle     time.Duration
}

func newWatch(pid int, modcache string, stall time.Duration) *watch {
	return &watch{pid: pid, modcache: modcache, stall: stall, lastCPU: treeCPU(pid, readProcs()), lastLook: time.Now()}
}

// stalled looks once more, step after the last look: progress is more than progressTicks of CPU
// or a new file in the module cache; it reports whether there was none for stall.
func (w *watch) stalled(step time.Duration) bool {
	cpu := treeCPU(w.pid, readProcs())
	if cpu-w.lastCPU > progressTicks || newerFile(w.modcache, w.lastLook) {
		w.idle = 0
	} else {
		w.idle += step
	}
	w.lastCPU, w.lastLook = cpu, time.Now()
	return w.idle >= w.stall
}

// newerFile reports whether anything under dir was modified after since.
func newerFile(dir string, since time.Time) bool {
	if dir == "" {
		return false
	}
	found := false
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished meanwhile: go on looking
		}
		if info, err := d.Info(); err == nil && info.ModTime().After(since) {
			found = true
			return fs.SkipAll
		}
		return nil
	})
	return found
}

// proc is one process as /proc/<pid>/stat tells: its parent and the CPU ticks it used so far, its
// own plus those of the children it has waited for (so a finished compile counts in go's).
type proc struct {
	ppid  int
	ticks int64
}

// readProcs reads every process's stat; the ones that vanish meanwhile are left out.
func readProcs() map[int]proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	procs := make(map[int]proc, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if p, ok := parseStat(string(b)); ok {
			procs[pid] = p
		}
	}
	return procs
}

// parseStat reads a /proc/<pid>/stat line: the parent and the CPU the process and its waited-for
// children used.
func parseStat(s string) (proc, bool) {
	st, err := procstat.Parse(s)
	if err != nil {
		return proc{}, false
	}
	return proc{ppid: st.PPID, ticks: st.UTime + st.STime + st.CUTime + st.CSTime}, true
}

// treePids is root and its descendants.
func treePids(root int, procs map[int]proc) []int {
	var pids []int
	for pid := range procs {
		if inTree(pid, root, procs) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// treeCPU is the CPU ticks root and its descendants used so far.
func treeCPU(root int, procs map[int]proc) int64 {
	var sum int64
	for pid, p := range procs {
		if inTree(pid, root, procs) {
			sum += p.ticks
		}
	}
	return sum
}

func inTree(pid, root int, procs map[int]proc) bool {
	for depth := 0; pid > 1 && depth < len(procs); depth++ { // depth: a cycle of reused pids ends
		if pid == root {
			return true
		}
		p, ok := procs[pid]
		if !ok {
			return false
		}
		pid = p.ppid
	}
	return false
}
