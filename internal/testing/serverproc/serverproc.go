// Package serverproc starts and stops the server processes tests run against (istiod, Consul,
// polaris-server, ZooKeeper, Galleon's own binaries): killed with the test binary if it dies,
// stopped with SIGTERM then SIGKILL. Process is one process (test/internal/proc builds on it);
// Server (server.go) is the kit of the real-server harnesses consultest, eurekatest and zktest: a
// server on free loopback ports, started with a readiness probe and retried on a port clash,
// restarted on the same ports, stopped, killed or paused, with the tail of its log for a failed
// test. Their binaries are found with internal/testing/toolcache's Tool.
package serverproc

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Process is a started server process.
type Process struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	once    sync.Once
	killed  bool
}

// Start starts cmd, which the caller has set up (path, arguments, directory, environment,
// output), and waits for it in the background. On Linux the process is killed if the test binary
// dies (Pdeathsig), so an interrupted run leaves no server behind.
func Start(cmd *exec.Cmd) (*Process, error) { return StartDetached(cmd, Detach{}) }

// Detach says how a server process stands to the program that starts it. The zero value is a
// test's: in the program's session, killed when it dies.
type Detach struct {
	// Session starts the process in a session of its own, so that a Ctrl-C at the terminal
	// reaches only the program, which stops its servers itself.
	Session bool
	// Outlive lets the process outlive the program (no Pdeathsig): a demo that leaves its
	// servers running for the user.
	Outlive bool
}

// StartDetached is Start with the process detached from the program as d says.
func StartDetached(cmd *exec.Cmd, d Detach) (*Process, error) {
	cmd.SysProcAttr = sysProcAttr(d)
	p := &Process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() { // ends when the process has exited
		// Linux sends Pdeathsig when the *thread* that forked the child exits, not the process,
		// and the Go runtime may retire threads: keep this goroutine on its thread until the
		// child is gone, or the child can be killed in the middle of a test.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Signal sends sig to the process (e.g. SIGSTOP to simulate a hung server).
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM, then SIGKILL after grace, and waits for the exit. It reports whether it
// had to kill. Idempotent: later calls wait for nothing and report the first call's answer.
func (p *Process) Stop(grace time.Duration) (killed bool) {
	p.once.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-p.done:
		case <-timer.C:
			p.killed = true
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p.killed
}

// RestartAttempts is how many times RestartOnSamePorts tries.
const RestartAttempts = 10

// RestartOnSamePorts starts a server again on the ports it had: it calls start until it
// succeeds, calling stop after each failure, and retries, waiting 200 ms longer each time, only
// while clash says the failure was a port still held (the old process's sockets, or another
// process). It returns start's last error. The test harnesses' Restart methods share it.
func RestartOnSamePorts(start func() error, stop func(), clash func() bool) error {
	var err error
	for attempt := 1; attempt <= RestartAttempts; attempt++ {
		if err = start(); err == nil {
			return nil
		}
		stop()
		if !clash() {
			break
		}
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
	return err
}
