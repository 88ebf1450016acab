package benchrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Spec is a process to start.
type Spec struct {
	Name string   // in messages: "galleon-file"
	Log  string   // its stdout and stderr, truncated first
	Dir  string   // its working directory; empty: this one
	Env  []string // NAME=VALUE added to this process's environment
	Pin  []string // a command prefix, e.g. Pinning.Server (taskset -c 0), which execs the rest
	Path string
	Args []string
	// Grace is how long Stop waits after SIGTERM before SIGKILL; zero: 10 s.
	Grace time.Duration
}

// Proc is a process a Run started. Its pid stays the process's own through the Pin prefix
// (taskset execs the command).
type Proc struct {
	Spec
	// Started is the time just before the exec: what a "start → ready" time is measured from.
	Started time.Time

	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited and been reaped
	waitErr error         // the exit, set before done is closed
}

// Start starts s in a session of its own (so a Ctrl-C reaches this program, which stops it, and
// not the process directly), with stdin from /dev/null, and registers it for Finish.
func (r *Run) Start(s Spec) (*Proc, error) {
	log, err := os.Create(s.Log)
	if err != nil {
		return nil, fmt.Errorf("cannot create %s's log: %w", s.Name, err)
	}
	defer log.Close() // the child holds its own descriptor
	argv := append(append([]string{}, s.Pin...), s.Path)
	argv = append(argv, s.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = log, log
	if len(s.Env) > 0 {
		cmd.Env = append(os.Environ(), s.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	p := &Proc{Spec: s, cmd: cmd, done: make(chan struct{})}
	p.Started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start %s (%s): %w", s.Name, argv[0], err)
	}
	r.procs = append(r.procs, p)
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Alive reports whether the process has not exited.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop ends the process: SIGCONT (a stopped process must hear SIGTERM), SIGTERM, then SIGKILL
// after Grace. It returns once the process is reaped; stopping a stopped one does nothing.
func (p *Proc) Stop() {
	if p == nil || !p.Alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	grace := p.Grace
	if grace == 0 {
		grace = 10 * time.Second
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Signal sends sig to the process (SIGSTOP, SIGCONT).
func (p *Proc) Signal(sig syscall.Signal) error {
	if !p.Alive() {
		return fmt.Errorf("%s (pid %d) has exited", p.Name, p.Pid())
	}
	return p.cmd.Process.Signal(sig)
}

// Tail is the last line of the process's log ("" when it is empty or unreadable).
func (p *Proc) Tail() string { return FirstOrLast(p.Log, nil) }

// LogLine is the first line of the process's log that re matches, "" when none does.
func (p *Proc) LogLine(re *regexp.Regexp) string { return FirstMatch(p.Log, re) }

// Why is what the log says about an exit: its first line matching re (an ERROR line), else its
// last line.
func (p *Proc) Why(re *regexp.Regexp) string { return FirstOrLast(p.Log, re) }

// FirstMatch is the first line of file log that re matches, "" when none does (or no file).
func FirstMatch(log string, re *regexp.Regexp) string {
	f, err := os.Open(log)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if re.MatchString(sc.Text()) {
			return sc.Text()
		}
	}
	return ""
}

// FirstOrLast is what a failed command's log says: its first line that re matches (nil: none
// does), else its last line.
func FirstOrLast(log string, re *regexp.Regexp) string {
	if re != nil {
		if l := FirstMatch(log, re); l != "" {
			return l
		}
	}
	b, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return lines[len(lines)-1]
}

// ErrExited is matched (errors.Is) by the error of a wait that ended because a watched process
// exited.
var ErrExited = errors.New("exited")

// WaitLine waits, checking every `every` for up to timeout, for a line of the process's log that
// re matches and returns it. It fails when the process exits first (the error holds the log's
// last line) and after timeout (naming what and the log).
func (p *Proc) WaitLine(ctx context.Context, re *regexp.Regexp, what string, timeout, every time.Duration) (string, error) {
	var line string
	err := WaitFor(ctx, timeout, every, what, func() (bool, error) {
		line = p.LogLine(re)
		return line != "", nil
	}, p)
	return line, err
}

// WaitFor calls cond every `every` until it returns true, for up to timeout. It fails with
// "NAME exited while waiting for: WHAT: LAST LOG LINE" (errors.Is ErrExited) when one of watch
// exits first, with "timed out after Ns waiting for: WHAT (see LOG)" (the first watched
// process's log) after timeout, with cond's error, or with ctx's when it is cancelled.
func WaitFor(ctx context.Context, timeout, every time.Duration, what string, cond func() (bool, error), watch ...*Proc) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		for _, p := range watch {
			if !p.Alive() {
				return fmt.Errorf("%s %w while waiting for: %s: %s", p.Name, ErrExited, what, p.Tail())
			}
		}
		if time.Now().After(deadline) {
			if len(watch) > 0 {
				return fmt.Errorf("timed out after %vs waiting for: %s (see %s)", timeout.Seconds(), what, watch[0].Log)
			}
			return fmt.Errorf("timed out after %vs waiting for: %s", timeout.Seconds(), what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// FreeAddr is 127.0.0.1:PORT of a free loopback port: random, below Linux's ephemeral range
// (20000-31999), not handed out by this Run before and free to listen on now.
func (r *Run) FreeAddr() string {
	for {
		port := 20000 + rand.IntN(12000)
		if r.ports[port] {
			continue
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = l.Close()
		r.ports[port] = true
		return addr
	}
}

// Pinning is where the two sides of a benchmark run: Server and Load are command prefixes
// (Spec.Pin), both empty when nothing is pinned.
type Pinning struct {
	Server, Load []string
	NProc        int
	Text         string // what was done, for the report
}

// PinSides is scripts/bench-lib.sh's pin_sides: when pin is not "0" and taskset and 2 or more
// CPUs are there, the servers go on CPU 0 and galleon-load (the sinks) on CPU 1.
func PinSides(pin string) Pinning {
	p := Pinning{NProc: NProc()}
	_, err := exec.LookPath("taskset")
	switch {
	case pin != "0" && err == nil && p.NProc >= 2:
		p.Server, p.Load = []string{"taskset", "-c", "0"}, []string{"taskset", "-c", "1"}
		p.Text = "pinned (taskset): each server on CPU 0, galleon-load and its sinks on CPU 1"
	case pin == "0":
		p.Text = fmt.Sprintf("not pinned (PIN=0): servers and sinks share the %d CPUs", p.NProc)
	default:
		p.Text = fmt.Sprintf("not pinned (no taskset, or fewer than 2 CPUs): servers and sinks share the %d CPUs", p.NProc)
	}
	return p
}

// Prefix is a printed command's prefix for pin: "taskset -c 0 " or "".
func Prefix(pin []string) string {
	if len(pin) == 0 {
		return ""
	}
	return strings.Join(pin, " ") + " "
}

// ExitErr is how the process ended (exec.Cmd.Wait's error) once it has, nil before.
func (p *Proc) ExitErr() error {
	if p.Alive() {
		return nil
	}
	return p.waitErr
}
