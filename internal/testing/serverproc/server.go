package serverproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The defaults of Spec.
const (
	DefaultStartTimeout = 60 * time.Second
	DefaultStopGrace    = 10 * time.Second
	DefaultAttempts     = 5
	// TailLines is how many lines of its log a server's StartT cleanup writes to a failed test's log.
	TailLines = 50
)

// Spec describes a server a test harness runs: how to configure it on free loopback ports, the
// command of one start, and how to tell that it serves.
type Spec struct {
	// Prefix names the harness ("consultest") in messages and in the start markers of the log;
	// Name names the server ("consul agent dc1").
	Prefix, Name string
	// LogPath is the file the process's stdout and stderr are appended to, start after start.
	LogPath string
	// Ports is how many loopback ports Start picks for each attempt (FreePorts), free for UDP too
	// when UDP is set, and hands to Configure. Restart keeps them.
	Ports int
	UDP   bool
	// Configure takes the ports of an attempt (the server's addresses, its config file). May be nil.
	Configure func(ports []int) error
	// Command is the command of one start, with its directory and environment; its output is
	// set to LogPath.
	Command func() *exec.Cmd
	// Ready returns nil once the server serves. Start calls it until then, the StartTimeout
	// passes or the process exits.
	Ready func(ctx context.Context) error
	// StartTimeout bounds one start (process up and Ready); default DefaultStartTimeout.
	StartTimeout time.Duration
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL; default DefaultStopGrace.
	StopGrace time.Duration
	// Attempts bounds Start's tries on fresh ports, and Restart's on the same ones, after a
	// port was taken; default DefaultAttempts.
	Attempts int
	// Clash reports whether the last start failed because a port was taken. Default: the log
	// since the last start's marker says "address already in use" (in any case).
	Clash func() bool
	// Tail returns the end of the server's logs for a failed test; default the last n lines of
	// LogPath.
	Tail func(n int) string
	// Logf, if set, is told of retries and of a server SIGTERM did not stop. StartT sets it to
	// the test's Logf.
	Logf func(format string, args ...any)
	// Detach detaches the process from the program (the zero value: a test's server).
	Detach Detach
}

// Server is a server process that a Spec describes: started, stopped, killed, paused and
// restarted on the same ports. Its methods return errors, for a program that is not a test;
// StartT and Controls are their forms for a test.
type Server struct {
	spec Spec

	mu      sync.Mutex
	proc    *Process
	logFile *os.File // the process's output; closed once it is stopped
	paused  bool     // stopped with SIGSTOP by Pause
}

// New prepares a server; nothing runs yet.
func New(spec Spec) *Server {
	spec.StartTimeout = cmp.Or(spec.StartTimeout, DefaultStartTimeout)
	spec.StopGrace = cmp.Or(spec.StopGrace, DefaultStopGrace)
	spec.Attempts = cmp.Or(spec.Attempts, DefaultAttempts)
	return &Server{spec: spec}
}

// StartT starts a server for a test: New, then its StartT.
func StartT(t testing.TB, spec Spec) *Server {
	t.Helper()
	s := New(spec)
	s.StartT(t)
	return s
}

// StartT is Start for a test, failing it if that fails. It registers t.Cleanup first, which
// stops the server and, when the test failed, writes the tail of its log to the test log; and it
// sends Spec.Logf, if not set, to the test log.
func (s *Server) StartT(t testing.TB) {
	t.Helper()
	if s.spec.Logf == nil {
		s.spec.Logf = t.Logf
	}
	t.Cleanup(func() {
		s.Controls().Stop(t)
		if t.Failed() {
			t.Logf("%s %s", s.spec.Name, s.Tail(TailLines))
		}
	})
	if err := s.Start(); err != nil {
		t.Fatalf("%s: %v", s.spec.Prefix, err)
	}
}

// Start starts the server on fresh free ports (Spec.Ports, handed to Configure) and waits until
// it is Ready. When it failed because a port was taken meanwhile, it tries again on others.
func (s *Server) Start() error { return s.StartContext(context.Background()) }

// StartContext is Start that gives up when ctx ends.
func (s *Server) StartContext(ctx context.Context) error {
	err := startAll(ctx, []*Server{s}, func() error {
		ports, err := FreePorts(s.spec.Ports, s.spec.UDP)
		if err != nil {
			return fmt.Errorf("free ports: %w", err)
		}
		if s.spec.Configure == nil {
			return nil
		}
		return s.spec.Configure(ports)
	})
	if err != nil {
		return fmt.Errorf("starting %s: %w (its log: %s)", s.spec.Name, err, s.spec.LogPath)
	}
	return nil
}

// StartAll starts servers that need each other (an ensemble) together: configure (which gives
// them fresh ports), then launch every one, then wait until all are Ready. When one failed
// because a port was taken, all are stopped and it tries again, configure included, up to the
// first server's Spec.Attempts times. An error of configure is final.
func StartAll(servers []*Server, configure func() error) error {
	return startAll(context.Background(), servers, configure)
}

func startAll(ctx context.Context, servers []*Server, configure func() error) error {
	first := servers[0].spec
	var err error
	for attempt := 1; attempt <= first.Attempts; attempt++ {
		if err = configure(); err != nil {
			return err
		}
		if err = launchAll(ctx, servers); err == nil {
			return nil
		}
		StopAll(servers...)
		if ctx.Err() != nil || !anyClash(servers) {
			break
		}
		first.logf("%s: a port was taken starting %s (attempt %d), retrying on others", first.Prefix, first.Name, attempt)
	}
	return err
}

func launchAll(ctx context.Context, servers []*Server) error {
	for _, s := range servers {
		if err := s.Launch(); err != nil {
			return err
		}
	}
	return waitAll(ctx, servers)
}

func anyClash(servers []*Server) bool {
	for _, s := range servers {
		if s.clash() {
			return true
		}
	}
	return false
}

// Launch starts the process, appending its output to Spec.LogPath after a start marker; it does
// not wait for it to serve (WaitAll does).
func (s *Server) Launch() error {
	logf, err := os.OpenFile(s.spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := s.spec.Command()
	fmt.Fprintf(logf, "%s %s in %s (%s)\n", s.marker(), strings.Join(cmd.Args, " "), cmd.Dir, time.Now().Format(time.RFC3339Nano))
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := StartDetached(cmd, s.spec.Detach)
	if err != nil {
		logf.Close()
		return err
	}
	s.mu.Lock()
	s.proc, s.logFile, s.paused = p, logf, false
	s.mu.Unlock()
	return nil
}

func (s *Server) marker() string { return "==== " + s.spec.Prefix + ": starting" }

// WaitAll waits until every one of servers (launched) is Ready, each polled on its own goroutine
// (a probe is slow while several servers start on few cores: a JVM, a first TLS handshake). It
// gives up on all as soon as one fails, so that a server that exited on a port clash is retried
// at once, and returns that first failure. The servers' Spec.StartTimeout bounds the wait.
func WaitAll(servers ...*Server) error { return waitAll(context.Background(), servers) }

func waitAll(ctx context.Context, servers []*Server) error {
	ctx, cancel := context.WithTimeout(ctx, servers[0].spec.StartTimeout)
	defer cancel()
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() {
			if err := Poll(ctx, s.Process(), s.spec.Ready); err != nil {
				if len(servers) > 1 {
					err = fmt.Errorf("%s: %w", s.spec.Name, err)
				}
				once.Do(func() { first = err })
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}

// Poll calls probe every 20 to 200 ms until it returns nil, ctx ends or p (if not nil) exits; the
// error then quotes probe's last error.
func Poll(ctx context.Context, p *Process, probe func(context.Context) error) error {
	delay := 20 * time.Millisecond
	var last error
	for {
		if p != nil {
			if exited, err := p.Exited(); exited {
				return fmt.Errorf("exited: %v (last: %v)", err, last)
			}
		}
		if last = probe(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(delay):
		}
		delay = min(delay*3/2, 200*time.Millisecond)
	}
}

// clash reports whether the last start failed because a port was taken (Spec.Clash).
func (s *Server) clash() bool {
	if s.spec.Clash != nil {
		return s.spec.Clash()
	}
	text := s.Log()
	if i := strings.LastIndex(text, s.marker()); i >= 0 {
		text = text[i:]
	}
	return strings.Contains(strings.ToLower(text), "address already in use")
}

// Restart stops the server if it runs and starts it again on the same ports and configuration,
// then waits until it is Ready. While the old process's ports are still held it retries (see
// RestartOnSamePorts).
func (s *Server) Restart() error {
	s.Stop()
	once := func() error {
		if err := s.Launch(); err != nil {
			return err
		}
		return WaitAll(s)
	}
	if err := RestartOnSamePorts(once, func() { s.Stop() }, s.clash); err != nil {
		return fmt.Errorf("restarting %s: %w (its log: %s)", s.spec.Name, err, s.spec.LogPath)
	}
	return nil
}

// Stop sends SIGTERM, and SIGKILL after Spec.StopGrace, and waits for the exit (a paused server
// is continued first). It reports whether it had to kill, and says so to Spec.Logf. Idempotent;
// Restart starts the server again.
func (s *Server) Stop() (killed bool) {
	s.mu.Lock()
	p, logf, paused := s.proc, s.logFile, s.paused
	s.paused = false
	s.mu.Unlock()
	if p == nil {
		return false
	}
	if paused {
		_ = p.Signal(syscall.SIGCONT) // else SIGTERM waits for it, and the grace ends in SIGKILL
	}
	killed = p.Stop(s.spec.StopGrace)
	if killed {
		s.spec.logf("%s: %s did not stop %v after SIGTERM, killed it", s.spec.Prefix, s.spec.Name, s.spec.StopGrace)
	}
	logf.Close() // a second Stop closes it again: harmless
	return killed
}

// StopAll stops servers in parallel (a clean shutdown is not instant, and they add up).
func StopAll(servers ...*Server) {
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() { s.Stop() })
	}
	wg.Wait()
}

// Kill ends the server with SIGKILL, a crash with no goodbye to clients or peers, and waits for
// the exit. The server stays down until Restart.
func (s *Server) Kill() error {
	s.mu.Lock()
	p, logf := s.proc, s.logFile
	s.paused = false
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	err := p.Signal(syscall.SIGKILL)
	<-p.Done()
	if exited, _ := p.Exited(); exited {
		err = nil // the signal failed only because it had exited already
	}
	p.Stop(0) // marks it stopped, so that a later Stop signals nothing
	logf.Close()
	return err
}

// Pause stops the process with SIGSTOP: its sockets stay open and it answers nothing, as a
// server in a long garbage collection or on a frozen machine. Resume continues it; Stop and
// Restart continue it first.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("pause of %s, which is not running", s.spec.Name)
	}
	if err := s.proc.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP %s: %w", s.spec.Name, err)
	}
	s.paused = true
	return nil
}

// Resume continues a server stopped by Pause (and does nothing to one that is not paused).
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || !s.paused {
		return nil
	}
	if err := s.proc.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT %s: %w", s.spec.Name, err)
	}
	s.paused = false
	return nil
}

// Process is the last started process (nil before the first start).
func (s *Server) Process() *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Running reports whether the process runs (it may not serve yet).
func (s *Server) Running() bool {
	p := s.Process()
	if p == nil {
		return false
	}
	exited, _ := p.Exited()
	return !exited
}

// Pid is the process id (0 before the first start).
func (s *Server) Pid() int {
	if p := s.Process(); p != nil {
		return p.Pid()
	}
	return 0
}

// Log returns the server's output so far (all starts).
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.spec.LogPath)
	return string(b)
}

// Tail returns the end of the server's logs (Spec.Tail), for a failed test's log.
func (s *Server) Tail(n int) string {
	if s.spec.Tail != nil {
		return s.spec.Tail(n)
	}
	var b strings.Builder
	TailFile(&b, s.spec.LogPath, n, nil)
	fmt.Fprintf(&b, "--- end of %s log ---", s.spec.Name)
	return b.String()
}

// TailFile writes the last n lines of path to w under a header, leaving out the lines skip
// matches (if skip is not nil).
func TailFile(w io.Writer, path string, n int, skip func(string) bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(w, "--- %s: %v ---\n", path, err)
		return
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if skip == nil || !skip(l) {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	fmt.Fprintf(w, "--- last %d lines of %s ---\n%s\n", len(lines), path, strings.Join(lines, "\n"))
}

func (spec Spec) logf(format string, args ...any) {
	if spec.Logf != nil {
		spec.Logf(format, args...)
	}
}

// FreePorts returns n distinct TCP ports free on 127.0.0.1 now, and free for UDP too when udp is
// set (Serf uses both). All are held open together, so none repeats; another process can take
// one before the server binds it, which is why Start retries.
func FreePorts(n int, udp bool) ([]int, error) {
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 100+n {
			return nil, errors.New("could not find free ports")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		closers = append(closers, l)
		port := l.Addr().(*net.TCPAddr).Port
		if udp {
			u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				continue
			}
			closers = append(closers, u)
		}
		out = append(out, port)
	}
	return out, nil
}

// LoopbackClient is an HTTP client for a harness's requests to its servers on 127.0.0.1: no
// proxy, dials that give up after 5 s, up to maxIdlePerHost idle connections kept, and no overall
// timeout (a blocking query can wait long): pass a context.
func LoopbackClient(maxIdlePerHost int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: maxIdlePerHost,
		IdleConnTimeout:     30 * time.Second,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
}

// Get is the body of a 2xx answer to GET url within timeout, else an error quoting the status and
// the start of the body: the one HTTP read of a server's /metrics, /readyz or /debug/status that
// the tests, the demo and the benchmarks share. A nil client is http.DefaultClient.
func Get(ctx context.Context, client *http.Client, url string, timeout time.Duration) ([]byte, error) {
	if client == nil {
		client = http.DefaultClient
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("GET %s: %s: %.300s", url, resp.Status, body)
	}
	return body, nil
}
