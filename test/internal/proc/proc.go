// Package proc runs the server processes of Galleon's tests (istiod, Galleon binaries, registry
// servers): output captured in a log file, the log's tail written to the test log when the test
// failed, SIGTERM then SIGKILL in t.Cleanup, and polling helpers instead of fixed sleeps.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
)

// DefaultStopGrace is how long Stop waits after SIGTERM before SIGKILL.
const DefaultStopGrace = 10 * time.Second

// Config describes a process to start.
type Config struct {
	Name string   // short name for messages and the log file name ("istiod", "galleon-file")
	Path string   // executable
	Args []string // arguments (without argv[0])
	Env  []string // full environment; nil means os.Environ()
	Dir  string   // working directory; default: a new t.TempDir()
	// LogPath is where stdout and stderr go; default <Dir>/<Name>.log.
	LogPath string
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL; default DefaultStopGrace.
	StopGrace time.Duration
	// TailLines is how many log lines are dumped when the test failed; default 200.
	TailLines int
	// Logf is told of a process that SIGTERM did not stop; Start sets it to the test's Logf.
	Logf func(format string, args ...any)
	// Detach detaches the process from the program (a test's process when zero).
	Detach serverproc.Detach
}

// Process is a started process.
type Process struct {
	Config
	*serverproc.Process // Pid, Done, Exited, Signal
	logFile             *os.File
}

// Start starts the process. It is stopped in t.Cleanup, after which, if the test failed, the
// tail of its log is written to the test log.
func Start(t testing.TB, c Config) (*Process, error) {
	t.Helper()
	if c.Dir == "" {
		c.Dir = t.TempDir()
	}
	if c.Logf == nil {
		c.Logf = t.Logf
	}
	p, err := Launch(c)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s (pid %d) %s", p.Name, p.Pid(), p.Tail(p.TailLines))
		}
	})
	return p, nil
}

// Launch is Start for a program that is not a test: nothing stops the process but Stop (or, unless
// Config.Detach says otherwise, the program's death). Config.Dir must be set.
func Launch(c Config) (*Process, error) {
	if c.Dir == "" {
		return nil, errors.New("proc.Launch: Config.Dir is empty")
	}
	if c.Name == "" {
		c.Name = filepath.Base(c.Path)
	}
	if c.LogPath == "" {
		c.LogPath = filepath.Join(c.Dir, c.Name+".log")
	}
	if c.StopGrace == 0 {
		c.StopGrace = DefaultStopGrace
	}
	if c.TailLines == 0 {
		c.TailLines = 200
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	logFile, err := os.Create(c.LogPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Dir = c.Dir
	cmd.Env = c.Env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	sp, err := serverproc.StartDetached(cmd, c.Detach)
	if err != nil {
		logFile.Close()
		return nil, err
	}
	return &Process{Config: c, Process: sp, logFile: logFile}, nil
}

// Stop sends SIGTERM, then SIGKILL after StopGrace, and waits for the exit. Idempotent.
func (p *Process) Stop() {
	if p.Process.Stop(p.StopGrace) && p.Logf != nil {
		p.Logf("%s did not stop %v after SIGTERM, killed it", p.Name, p.StopGrace)
	}
	p.logFile.Close() // a second Stop closes it again: harmless
}

// Log returns the whole log so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// LogContains reports whether the log contains substr.
func (p *Process) LogContains(substr string) bool { return strings.Contains(p.Log(), substr) }

// LogOffset is the current size of the log; pass it to LogSince to look only at what the
// process logs after this point.
func (p *Process) LogOffset() int64 {
	st, err := os.Stat(p.LogPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// LogSince returns what was logged after offset (see LogOffset). It reads only that part of the
// file, so polling a growing log with it costs what was added, not the whole log.
func (p *Process) LogSince(offset int64) string {
	if offset < 0 {
		return ""
	}
	f, err := os.Open(p.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// Tail returns the last n lines of the log, framed for a test log. PEM blocks (istiod logs its
// self-signed certificates) are elided.
func (p *Process) Tail(n int) string {
	var lines []string
	inPEM := false
	for _, l := range strings.Split(strings.TrimRight(p.Log(), "\n"), "\n") {
		switch {
		case strings.Contains(l, "-----BEGIN "):
			inPEM = true
			lines = append(lines, l, "[PEM block omitted]")
		case strings.Contains(l, "-----END "):
			inPEM = false
		case !inPEM:
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last %d lines of %s ---\n%s\n--- end of %s log ---", len(lines), p.LogPath, strings.Join(lines, "\n"), p.Name)
}

// WaitFor polls cond like the package-level WaitFor, but stops at once if the process exits.
func (p *Process) WaitFor(ctx context.Context, cond func() (bool, error)) error {
	return WaitFor(ctx, func() (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, Permanent(fmt.Errorf("%s exited: %v", p.Name, err))
		}
		return cond()
	})
}

// DefaultWaitTimeout is the deadline WaitFor applies when its context has none.
const DefaultWaitTimeout = 30 * time.Second

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that WaitFor returns it at once instead of polling on.
func Permanent(err error) error { return &permanentError{err} }

// WaitFor polls cond (every 10ms, backing off to 250ms) until it returns true or ctx ends;
// without a deadline on ctx it gives up after DefaultWaitTimeout. An error from cond counts as
// "not yet" (connection refused while a server starts, ...) and the last one is included in the
// timeout error; an error wrapped with Permanent stops the wait at once.
func WaitFor(ctx context.Context, cond func() (bool, error)) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultWaitTimeout)
		defer cancel()
	}
	start := time.Now()
	delay := 10 * time.Millisecond
	var lastErr error
	for {
		ok, err := cond()
		if ok && err == nil {
			return nil
		}
		var perm *permanentError
		if errors.As(err, &perm) {
			return perm.err
		}
		if err != nil {
			lastErr = err
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			waited := time.Since(start).Round(time.Millisecond)
			if lastErr != nil {
				return fmt.Errorf("condition not met after %v: %w (last error: %v)", waited, ctx.Err(), lastErr)
			}
			return fmt.Errorf("condition not met after %v: %w", waited, ctx.Err())
		case <-timer.C:
		}
		if delay < 250*time.Millisecond {
			delay = delay * 3 / 2
		}
	}
}

// FreeAddrs returns n distinct free 127.0.0.1 TCP addresses. They are found by binding port 0
// and closing, so another process may take one before it is used: callers retry on "address
// already in use".
func FreeAddrs(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// DialOK reports whether a TCP connection to addr succeeds within a second.
func DialOK(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// Env returns base (os.Environ() when nil) without the variables named in drop and without any
// variable whose name starts with one of dropPrefixes, plus extra.
func Env(base []string, drop []string, dropPrefixes []string, extra ...string) []string {
	if base == nil {
		base = os.Environ()
	}
	out := make([]string, 0, len(base)+len(extra))
next:
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		for _, d := range drop {
			if k == d {
				continue next
			}
		}
		for _, pfx := range dropPrefixes {
			if strings.HasPrefix(k, pfx) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}
