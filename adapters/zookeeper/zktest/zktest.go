// Package zktest runs real Apache ZooKeeper servers (the Debian package, found or installed by
// scripts/zookeeper.sh) for the ZooKeeper adapter's tests. It uses only the standard library.
//
// Each server is a standalone ZooKeeperServerMain on 127.0.0.1 with a free client port, the admin
// server off and a data directory under t.TempDir(), so Restart keeps the tree and the sessions
// (a client that reconnects within its session timeout keeps its session and watches). The server
// is stopped in t.Cleanup and, when the test failed, the tail of its log is written to the test
// log. If Java or ZooKeeper cannot be found or installed the test fails with what to do: it never
// skips.
package zktest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/serverproc"
	"github.com/galleon-mesh/galleon/internal/toolcache"
)

const (
	// mainClass runs one standalone server from a zoo.cfg.
	mainClass = "org.apache.zookeeper.server.ZooKeeperServerMain"
	// startTimeout bounds one start: JVM up, port bound, ruok answered.
	startTimeout = 60 * time.Second
	stopGrace    = 10 * time.Second
	tailLines    = 50
)

// Options configures Start. The zero value is a server as real-servers.md describes it.
type Options struct {
	// TickTime is ZooKeeper's tick (default 2s). Sessions may last 2 to 20 ticks: a shorter tick
	// allows shorter session timeouts in tests.
	TickTime time.Duration
	// MaxBuffer sets jute.maxbuffer, the largest packet (and so node) the server accepts; 0 keeps
	// ZooKeeper's default of 1 MiB - 1. Tests of oversized nodes raise it.
	MaxBuffer int
}

// Server is a running (or stopped) ZooKeeper server.
type Server struct {
	dir, dataDir, cfgPath, logPath string
	java, classpath                string
	opts                           Options
	port                           int

	mu      sync.Mutex
	proc    *serverproc.Process
	logFile *os.File // the process's output; closed once it is stopped
}

// Start starts a server (see the package comment), waits until it answers ruok with imok, and
// registers t.Cleanup to stop it. Ready means ruok answers imok
// and srvr answers with the server's state (not "not currently serving requests").
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.TickTime <= 0 {
		opts.TickTime = 2 * time.Second
	}
	java, classpath := Tools(t)
	dir := t.TempDir()
	s := &Server{
		dir:       dir,
		dataDir:   filepath.Join(dir, "data"),
		cfgPath:   filepath.Join(dir, "zoo.cfg"),
		logPath:   filepath.Join(dir, "zookeeper.log"),
		java:      java,
		classpath: classpath,
		opts:      opts,
	}
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop(t)
		if t.Failed() {
			t.Logf("zookeeper %s", s.tail(tailLines))
		}
	})
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		if s.port, err = freePort(); err != nil {
			t.Fatalf("zktest: free port: %v", err)
		}
		if err = s.writeConfig(); err != nil {
			t.Fatal(err)
		}
		if err = s.start(); err == nil {
			return s
		}
		s.Stop(t)
		if !s.bindClash() {
			break
		}
		t.Logf("zktest: port %d was taken starting zookeeper (attempt %d), retrying on another", s.port, attempt)
	}
	t.Fatalf("zktest: starting zookeeper: %v (its log: %s)", err, s.logPath)
	return nil
}

// Tools returns the java binary and the classpath that runs ZooKeeper, from
// scripts/zookeeper.sh (found by walking up from the working directory to the go.mod of
// github.com/galleon-mesh/galleon), which installs the Debian package if it is missing. It fails
// the test, never skips, when they cannot be found.
func Tools(t testing.TB) (java, classpath string) {
	t.Helper()
	root, err := toolcache.RepoRoot()
	if err != nil {
		t.Fatalf("zktest: scripts/zookeeper.sh cannot be found: %v (run the test from within the repository)", err)
	}
	script := filepath.Join(root, "scripts", "zookeeper.sh")
	run := func(arg string) string {
		cmd := exec.Command(script, arg)
		cmd.Dir = root
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("zktest: %s %s failed (%v): %s", script, arg, err, strings.TrimSpace(stderr.String()))
		}
		out := strings.TrimSpace(stdout.String())
		if out == "" {
			t.Fatalf("zktest: %s %s printed nothing: %s", script, arg, strings.TrimSpace(stderr.String()))
		}
		return out
	}
	return run("java"), run("classpath")
}

func (s *Server) writeConfig() error {
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\n", s.opts.TickTime.Milliseconds())
	fmt.Fprintf(&b, "dataDir=%s\n", s.dataDir)
	fmt.Fprintf(&b, "clientPort=%d\n", s.port)
	b.WriteString(`clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,wchs
maxClientCnxns=0
`)
	return os.WriteFile(s.cfgPath, []byte(b.String()), 0o600)
}

// start launches the process on s.port and waits until it answers ruok.
func (s *Server) start() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	args := []string{"-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.jmx.log4j.disable=true"}
	if s.opts.MaxBuffer > 0 {
		args = append(args, "-Djute.maxbuffer="+strconv.Itoa(s.opts.MaxBuffer))
	}
	args = append(args, "-cp", s.classpath, mainClass, s.cfgPath)
	fmt.Fprintf(logf, "==== zktest: starting %s %s (%s)\n", s.java, strings.Join(args, " "), time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.java, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.dir, logf, logf
	p, err := serverproc.Start(cmd)
	if err != nil {
		logf.Close()
		return err
	}
	s.mu.Lock()
	s.proc, s.logFile = p, logf
	s.mu.Unlock()
	deadline := time.Now().Add(startTimeout)
	delay := 20 * time.Millisecond
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("zookeeper exited: %v", err)
		}
		// ruok answers imok as soon as the process runs; srvr says whether it serves yet (after a
		// restart it first loads its snapshot and log).
		out, err := s.FourLetter("ruok")
		if err == nil && out == "imok" {
			if out, err = s.FourLetter("srvr"); err == nil && strings.Contains(out, "Zookeeper version") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no imok to ruok within %v (last: %q, %v)", startTimeout, out, err)
		}
		time.Sleep(delay)
		delay = min(delay*3/2, 200*time.Millisecond)
	}
}

// bindClash reports whether the last start failed because the port was taken.
func (s *Server) bindClash() bool {
	b, _ := os.ReadFile(s.logPath)
	text := string(b)
	if i := strings.LastIndex(text, "==== zktest: starting"); i >= 0 {
		text = text[i:]
	}
	return strings.Contains(text, "Address already in use")
}

// Addr is the client address, "127.0.0.1:PORT". It stays the same across Restart.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Stop sends SIGTERM and waits for the exit (SIGKILL after 10s). Idempotent; Restart starts the
// server again.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	p, logf := s.proc, s.logFile
	s.mu.Unlock()
	if p == nil {
		return
	}
	if p.Stop(stopGrace) {
		t.Logf("zktest: zookeeper did not stop %v after SIGTERM, killed it", stopGrace)
	}
	logf.Close() // a second Stop closes it again: harmless
}

// Restart stops the server and starts it again on the same port and data directory: the tree
// and the sessions are kept.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	var err error
	for attempt := 1; attempt <= 10; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		s.Stop(t)
		if !s.bindClash() {
			break
		}
		// The old process's socket (or someone else) still holds the port: wait and retry.
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
	t.Fatalf("zktest: restarting zookeeper: %v", err)
}

// FourLetter sends a four-letter-word command (ruok, srvr, stat, mntr, cons, wchs are allowed)
// and returns the answer, trimmed.
func (s *Server) FourLetter(cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return strings.TrimSpace(string(b)), err
}

// Watches returns the number of watches the server holds, data and children watches together
// (mntr's zk_watch_count; wchs counts data watches only).
func (s *Server) Watches() (int, error) {
	out, err := s.FourLetter("mntr")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "zk_watch_count"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("mntr answered no zk_watch_count: %q", out)
}

// ExpireSession ends a client's session the way the ZooKeeper test suites do: it connects a
// second client with the same session id and password (which makes the server drop the first
// client's connection) and closes the session from there. The first client learns that its
// session expired when it reconnects. A session that has expired already is not an error.
func (s *Server) ExpireSession(sessionID int64, passwd []byte) error {
	c, err := net.DialTimeout("tcp", s.Addr(), 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd.
	var req bytes.Buffer
	_ = binary.Write(&req, binary.BigEndian, int32(0))
	_ = binary.Write(&req, binary.BigEndian, int64(0))
	_ = binary.Write(&req, binary.BigEndian, int32(30000))
	_ = binary.Write(&req, binary.BigEndian, sessionID)
	_ = binary.Write(&req, binary.BigEndian, int32(len(passwd)))
	req.Write(passwd)
	if err := writeFrame(c, req.Bytes()); err != nil {
		return err
	}
	resp, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("connect with session 0x%x: %w", sessionID, err)
	}
	// ConnectResponse: protocolVersion, timeOut, sessionId, passwd.
	if len(resp) < 16 {
		return fmt.Errorf("connect with session 0x%x: short answer (%d bytes)", sessionID, len(resp))
	}
	if int64(binary.BigEndian.Uint64(resp[8:16])) == 0 {
		return nil // expired already
	}
	// closeSession: RequestHeader{xid, type=-11}.
	var closeReq bytes.Buffer
	_ = binary.Write(&closeReq, binary.BigEndian, int32(1))
	_ = binary.Write(&closeReq, binary.BigEndian, int32(-11))
	if err := writeFrame(c, closeReq.Bytes()); err != nil {
		return err
	}
	// ReplyHeader{xid, zxid, err}.
	reply, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("closeSession 0x%x: %w", sessionID, err)
	}
	if len(reply) >= 16 {
		if code := int32(binary.BigEndian.Uint32(reply[12:16])); code != 0 {
			return fmt.Errorf("closeSession 0x%x: error code %d", sessionID, code)
		}
	}
	return nil
}

func writeFrame(w io.Writer, body []byte) error {
	frame := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	copy(frame[4:], body)
	_, err := w.Write(frame)
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", size)
	}
	body := make([]byte, size)
	_, err := io.ReadFull(r, body)
	return body, err
}

// Sessions records the session a ZooKeeper client is given, by reading the server's answer to
// the client's connect request on every connection its Dial opens. Pass Dial to the client as
// its dialer (go-zookeeper's zk.WithDialer), then Last gives what ExpireSession needs.
type Sessions struct {
	mu     sync.Mutex
	id     int64
	passwd []byte
}

// Dial dials like net.DialTimeout and records the session of the connection.
func (s *Sessions) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, sessions: s}, nil
}

// Last returns the session of the last connection that was given one.
func (s *Sessions) Last() (id int64, passwd []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, append([]byte(nil), s.passwd...), s.id != 0
}

// sniffConn reads the first frame the server sends (the ConnectResponse) on its way to the client.
type sniffConn struct {
	net.Conn
	sessions *Sessions
	buf      []byte
	done     bool
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.buf = append(c.buf, p[:n]...)
		if len(c.buf) >= 4 {
			size := int(binary.BigEndian.Uint32(c.buf))
			if len(c.buf) >= 4+size {
				c.done = true
				c.parse(c.buf[4 : 4+size])
				c.buf = nil
			}
		}
	}
	return n, err
}

func (c *sniffConn) parse(resp []byte) {
	if len(resp) < 20 {
		return
	}
	id := int64(binary.BigEndian.Uint64(resp[8:16]))
	plen := int(binary.BigEndian.Uint32(resp[16:20]))
	if id == 0 || plen < 0 || len(resp) < 20+plen {
		return
	}
	c.sessions.mu.Lock()
	c.sessions.id, c.sessions.passwd = id, append([]byte(nil), resp[20:20+plen]...)
	c.sessions.mu.Unlock()
}

// Log returns the server's log so far (all runs).
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

func (s *Server) tail(n int) string {
	lines := strings.Split(strings.TrimRight(s.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last %d lines of %s ---\n%s\n--- end of zookeeper log ---", len(lines), s.logPath, strings.Join(lines, "\n"))
}

// freePort returns a TCP port free on 127.0.0.1 now; another process can take it before
// ZooKeeper binds it, so Start retries.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
