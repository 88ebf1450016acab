// Package zktest runs real Apache ZooKeeper servers (the Debian package, found or installed by
// toolcache.ZooKeeperClasspath) for the ZooKeeper adapter's tests. It uses only the standard library.
//
// Each server from Start is a standalone ZooKeeperServerMain on 127.0.0.1 with a free client port,
// the admin server off and a data directory under t.TempDir(), so Restart keeps the tree and the
// sessions (a client that reconnects within its session timeout keeps its session and watches).
// StartEnsemble runs N QuorumPeerMain members the same way (ensemble.go); Options.TLS adds a TLS
// client port with test certificates (tls.go). Servers are stopped in t.Cleanup and, when the test
// failed, the tail of each log is written to the test log. If Java or ZooKeeper cannot be found or
// installed the test fails with what to do: it never skips.
package zktest

import (
	"bytes"
	"context"
	"crypto/tls"
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

	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

const (
	// standaloneClass runs one standalone server from a zoo.cfg; quorumClass runs one member of an
	// ensemble (it also reads myid from the data directory).
	standaloneClass = "org.apache.zookeeper.server.ZooKeeperServerMain"
	quorumClass     = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
	// startTimeout bounds one start: JVM up, port bound, ruok answered (and, for an ensemble, a
	// leader elected).
	startTimeout = 60 * time.Second
	stopGrace    = 10 * time.Second
	// startAttempts bounds the retries on another free port when one was taken between FreePorts
	// and ZooKeeper's bind.
	startAttempts = 5
)

// Options configures Start and StartEnsemble. The zero value is a server as real-servers.md
// describes it.
type Options struct {
	// TickTime is ZooKeeper's tick (default 2s). Sessions may last 2 to 20 ticks: a shorter tick
	// allows shorter session timeouts in tests. An ensemble's failure detection and leader
	// election are counted in ticks too (ensemble.go), so a short tick also makes fail-over fast.
	TickTime time.Duration
	// MaxBuffer sets jute.maxbuffer, the largest packet (and so node) the server accepts; 0 keeps
	// ZooKeeper's default of 1 MiB - 1. Tests of oversized nodes raise it.
	MaxBuffer int
	// HeapMiB is the server's Java heap (-Xmx); 0 means 256. ZooKeeper holds every node in
	// memory: tests that write a few hundred MB of names raise it.
	HeapMiB int
	// TLS also serves the client protocol over TLS on a second port of 127.0.0.1 (SecureAddr),
	// with a test CA and certificates made for the server (TLS gives their PEM files). The plain
	// port stays: the harness's four-letter words use it.
	TLS bool
	// ClientAuth is ZooKeeper's ssl.clientAuth for the TLS port: "need" (a client must present a
	// certificate the test CA signed), "want" (it may) or "none" (it is not asked). "" is "need",
	// ZooKeeper's own default.
	ClientAuth string
	// Dir holds the server's zoo.cfg, data and log (Start only; an ensemble's members live in
	// t.TempDir()). Start uses t.TempDir() when empty; StartServer a new temporary directory,
	// which Close removes.
	Dir string
	// Detach detaches the server's process from the program (serverproc.Detach; a test's server
	// when zero). Start and StartServer only.
	Detach serverproc.Detach
}

// withDefaults is defaults for a test, which it fails on an error.
func (o Options) withDefaults(t testing.TB) Options {
	t.Helper()
	o, err := o.defaults()
	if err != nil {
		t.Fatalf("zktest: %v", err)
	}
	return o
}

// defaults fills in the defaults, and refuses a ClientAuth ZooKeeper does not know (it would
// exit at start with an IllegalArgumentException deep in its log).
func (o Options) defaults() (Options, error) {
	if o.TickTime <= 0 {
		o.TickTime = 2 * time.Second
	}
	switch o.ClientAuth {
	case "":
		o.ClientAuth = "need"
	case "need", "want", "none":
	default:
		return o, fmt.Errorf("Options.ClientAuth %q: want need, want or none", o.ClientAuth)
	}
	return o, nil
}

// Server is a running (or stopped) ZooKeeper server: a standalone one from Start or a member of
// an Ensemble. Its controls (serverproc.Controls) are Stop (SIGKILL 10 s after SIGTERM if it has
// not stopped), Kill (a crash, with no goodbye to clients or peers: they learn it from a reset
// connection or a timeout), Pause and Resume (SIGSTOP and SIGCONT: a long garbage collection, a
// frozen machine), Restart (same ports and data directory: the tree and the sessions are kept;
// an ensemble member serves again once it has rejoined a quorum, so the other members must be
// up), Running and Pid.
type Server struct {
	dir, dataDir, cfgPath, logPath string
	java, classpath                string
	opts                           Options
	port, securePort               int
	certs                          *tlsSetup // nil without Options.TLS
	// quorum is, for an ensemble member, the server.N lines naming every member ("" for a
	// standalone server); it selects QuorumPeerMain.
	quorum string

	srv    *serverproc.Server
	ownDir bool // made by StartServer: Close removes it
	controls
}

// controls are Stop, Kill, Pause, Resume, Restart, Running and Pid.
type controls = serverproc.Controls

// newServer prepares a server in dir (created if missing); nothing runs yet. opts has its
// defaults. A standalone server takes its ports at each start attempt; an ensemble's members
// are given theirs by the ensemble (configure). logf is told of retries.
func newServer(dir, java, classpath string, opts Options, certs *tlsSetup, name string, standalone bool, logf func(string, ...any)) (*Server, error) {
	s := &Server{
		dir:       dir,
		dataDir:   filepath.Join(dir, "data"),
		cfgPath:   filepath.Join(dir, "zoo.cfg"),
		logPath:   filepath.Join(dir, "zookeeper.log"),
		java:      java,
		classpath: classpath,
		opts:      opts,
		certs:     certs,
	}
	spec := serverproc.Spec{
		Prefix: "zktest", Name: name, LogPath: s.logPath, Command: s.command, Ready: s.ready,
		StartTimeout: startTimeout, StopGrace: stopGrace, Attempts: startAttempts, Logf: logf,
		Detach: opts.Detach,
	}
	if standalone {
		spec.Ports = 2 // client, secure client
		spec.Configure = func(ports []int) error {
			s.port, s.securePort = ports[0], ports[1]
			return s.writeConfig()
		}
	}
	s.srv = serverproc.New(spec)
	s.controls = s.srv.Controls()
	return s, os.MkdirAll(s.dataDir, 0o700)
}

// Start starts a server (see the package comment), waits until it serves, and registers
// t.Cleanup to stop it. Serving means ruok answers imok and srvr answers with the server's state
// (not "not currently serving requests"); with Options.TLS, the TLS port answers ruok too.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	opts = opts.withDefaults(t)
	java, classpath := Tools(t)
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	s, err := newStandalone(opts.Dir, java, classpath, opts, t.Logf)
	if err != nil {
		t.Fatalf("zktest: %v", err)
	}
	s.srv.StartT(t)
	return s
}

// StartServer is Start for a program that is not a test: it starts a standalone server (see the
// package comment) in Options.Dir (a new temporary directory when empty, removed by Close) and
// waits until it serves, or returns why not. Close stops it.
func StartServer(ctx context.Context, opts Options) (*Server, error) {
	opts, err := opts.defaults()
	if err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	java, classpath, err := ToolPaths(ctx)
	if err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	dir, ownDir := opts.Dir, false
	if dir == "" {
		if dir, err = os.MkdirTemp("", "zktest-"); err != nil {
			return nil, err
		}
		ownDir = true
	}
	s, err := newStandalone(dir, java, classpath, opts, nil)
	if err != nil {
		if ownDir {
			os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("zktest: %w", err)
	}
	s.ownDir = ownDir
	if err := s.srv.StartContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("zktest: %w", err)
	}
	return s, nil
}

// newStandalone prepares a standalone server in dir, with test certificates under dir/tls when
// opts.TLS; nothing runs yet.
func newStandalone(dir, java, classpath string, opts Options, logf func(string, ...any)) (*Server, error) {
	var certs *tlsSetup
	if opts.TLS {
		var err error
		if certs, err = writeTLSFiles(filepath.Join(dir, "tls")); err != nil {
			return nil, fmt.Errorf("test certificates: %v", err)
		}
	}
	return newServer(dir, java, classpath, opts, certs, "zookeeper", true, logf)
}

// Close stops the server (SIGTERM, SIGKILL after 10 s) and removes the directory StartServer made
// for it. It is the Stop of a program that is not a test.
func (s *Server) Close() error {
	s.srv.Stop()
	if s.ownDir {
		return os.RemoveAll(s.dir)
	}
	return nil
}

// Proc is the server's process in its form for a program that is not a test: Kill, Pause,
// Resume, Restart and Stop return errors instead of failing a test.
func (s *Server) Proc() *serverproc.Server { return s.srv }

// Dir is the server's directory: zoo.cfg, the data directory and zookeeper.log.
func (s *Server) Dir() string { return s.dir }

// Tools returns the java binary and the classpath that runs ZooKeeper (toolcache.Java and
// toolcache.ZooKeeperClasspath, which installs the Debian package if it is missing). It skips
// the test unless GALLEON_REAL_SERVERS=1 (toolcache.RequireRealServers); with it, it fails the
// test, never skips, when they cannot be found.
func Tools(t testing.TB) (java, classpath string) {
	t.Helper()
	toolcache.RequireRealServers(t, "ZooKeeper")
	java, classpath, err := ToolPaths(t.Context())
	if err != nil {
		t.Fatalf("zktest: %v", err)
	}
	return java, classpath
}

// ToolPaths is Tools for a program that is not a test: the java binary and the classpath that
// runs ZooKeeper (installing the Debian package if it is missing), or why they cannot be had.
func ToolPaths(ctx context.Context) (java, classpath string, err error) {
	// The classpath first: the package it installs when ZooKeeper is missing brings a JRE.
	if classpath, err = toolcache.ZooKeeperClasspath(ctx); err != nil {
		return "", "", fmt.Errorf("%v (run `make zookeeper`)", err)
	}
	if java, err = toolcache.Java(); err != nil {
		return "", "", fmt.Errorf("%v (run `make zookeeper`)", err)
	}
	return java, classpath, nil
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
	if s.certs != nil {
		// Only the Netty connection factory speaks TLS: with the default NIO one, 3.8.0 serves
		// the plain port, then exits on "java.lang.UnsupportedOperationException: SSL isn't
		// supported in NIOServerCnxn". Keys zoo.cfg does not know (serverCnxnFactory, ssl.*)
		// become "zookeeper."-prefixed system properties, which is where ZooKeeper reads them.
		// The x509 authentication provider a client certificate is checked with is registered
		// without an authProvider.x509 line (checked: the log says "Authenticated Id
		// 'CN=zktest-client' for Scheme 'x509'"). ZooKeeper 3.8 speaks TLS 1.2 here.
		fmt.Fprintf(&b, "secureClientPort=%d\n", s.securePort)
		fmt.Fprintf(&b, "secureClientPortAddress=127.0.0.1\n")
		fmt.Fprintf(&b, "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n")
		fmt.Fprintf(&b, "ssl.keyStore.location=%s\nssl.keyStore.type=PEM\n", s.certs.keyStore)
		fmt.Fprintf(&b, "ssl.trustStore.location=%s\nssl.trustStore.type=PEM\n", s.certs.files.CA)
		fmt.Fprintf(&b, "ssl.clientAuth=%s\n", s.opts.ClientAuth)
	}
	if s.quorum != "" {
		// initLimit and syncLimit are required in quorum mode (in ticks): a follower that hears
		// nothing from the leader for syncLimit ticks starts an election, so with a test tick of
		// 500ms a killed leader is replaced within a few seconds. standaloneEnabled=false makes
		// even a one-member ensemble run QuorumPeerMain's quorum code (Mode: leader);
		// reconfigEnabled stays off so ZooKeeper does not rewrite zoo.cfg.
		b.WriteString(`initLimit=10
syncLimit=5
standaloneEnabled=false
reconfigEnabled=false
`)
		b.WriteString(s.quorum)
	}
	return os.WriteFile(s.cfgPath, []byte(b.String()), 0o600)
}

func (s *Server) mainClass() string {
	if s.quorum != "" {
		return quorumClass
	}
	return standaloneClass
}

// command is the server's command: the JVM running mainClass on the zoo.cfg. Times in the log
// (slf4j-simple prints none by default) line a member's log up with the others' and with the
// test's.
func (s *Server) command() *exec.Cmd {
	heap := s.opts.HeapMiB
	if heap <= 0 {
		heap = 256
	}
	args := []string{"-Xmx" + strconv.Itoa(heap) + "m", "-XX:+UseSerialGC", "-Dzookeeper.jmx.log4j.disable=true",
		"-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS"}
	if s.opts.MaxBuffer > 0 {
		args = append(args, "-Djute.maxbuffer="+strconv.Itoa(s.opts.MaxBuffer))
	}
	args = append(args, "-cp", s.classpath, s.mainClass(), s.cfgPath)
	cmd := exec.Command(s.java, args...)
	cmd.Dir = s.dir
	return cmd
}

// ready returns nil once the server serves (serving), else why not.
func (s *Server) ready(context.Context) error {
	ok, out, err := s.serving()
	if ok {
		return nil
	}
	return fmt.Errorf("zookeeper on port %d not serving (last: %q, %v)", s.port, out, err)
}

// serving reports whether the server serves clients, with the last answer. ruok answers imok as
// soon as the process runs; srvr says whether it serves yet (after a restart it first loads its
// snapshot and log; an ensemble member first needs a quorum that has elected a leader).
func (s *Server) serving() (bool, string, error) {
	out, err := s.FourLetter("ruok")
	if err != nil || out != "imok" {
		return false, out, err
	}
	if out, err = s.FourLetter("srvr"); err != nil || !strings.Contains(out, "Zookeeper version") {
		return false, out, err
	}
	if s.quorum != "" {
		if mode := modeOf(out); mode != "leader" && mode != "follower" {
			return false, out, nil
		}
	}
	if s.certs != nil {
		// A standalone server serves on its plain port before it binds the TLS one (and exits
		// if that bind fails), so the TLS port is asked too: a handshake with the client
		// certificate, then ruok.
		if out, err := s.fourLetterTLS("ruok"); err != nil || out != "imok" {
			return false, "TLS port: " + out, err
		}
	}
	return true, out, nil
}

// Addr is the client address, "127.0.0.1:PORT". It stays the same across Restart.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// SecureAddr is the TLS client address, "127.0.0.1:PORT", or "" without Options.TLS. It stays
// the same across Restart.
func (s *Server) SecureAddr() string {
	if s.certs == nil {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.securePort))
}

// TLS returns the PEM files of the server's test CA and of a client certificate it signed; zero
// without Options.TLS.
func (s *Server) TLS() TLSFiles {
	if s.certs == nil {
		return TLSFiles{}
	}
	return s.certs.files
}

// Mode is the server's role from srvr: "standalone", or "leader" or "follower" in an ensemble.
func (s *Server) Mode() (string, error) {
	out, err := s.FourLetter("srvr")
	if err != nil {
		return "", err
	}
	if mode := modeOf(out); mode != "" {
		return mode, nil
	}
	return "", fmt.Errorf("srvr answered no mode: %q", out)
}

func modeOf(srvr string) string {
	for _, line := range strings.Split(srvr, "\n") {
		if v, ok := strings.CutPrefix(line, "Mode:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// FourLetter sends a four-letter-word command (ruok, srvr, stat, mntr, cons, wchs are allowed)
// to the plain client port and returns the answer, trimmed.
func (s *Server) FourLetter(cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), 2*time.Second)
	if err != nil {
		return "", err
	}
	return fourLetter(c, cmd)
}

// fourLetterTLS sends a four-letter word to the TLS port, with the client certificate. Needed
// for cons: a server lists only the connections of the port it is asked on.
func (s *Server) fourLetterTLS(cmd string) (string, error) {
	cfg, err := s.certs.files.ClientConfig()
	if err != nil {
		return "", err
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", s.SecureAddr(), cfg)
	if err != nil {
		return "", err
	}
	return fourLetter(c, cmd)
}

func fourLetter(c net.Conn, cmd string) (string, error) {
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

// HandshakeTimeout bounds a test client's session handshake when it dials with ClientDial.
const HandshakeTimeout = 5 * time.Second

// ClientDial dials like net.DialTimeout for a test's own ZooKeeper client (go-zookeeper's
// zk.WithDialer), and bounds the session handshake to HandshakeTimeout. go-zookeeper waits for
// the server's answer to its connect request for ten read timeouts (66 s with a 10 s session),
// and a server still loading its database after a restart holds the connection open without
// answering: CI saw a test's writer give up after 68 s of that. With ClientDial the client
// gives up after HandshakeTimeout and tries again, and gets the session as soon as the server
// serves.
func ClientDial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: c}, nil
}

// handshakeConn clamps the read deadlines the client sets until the length of the first frame,
// the answer to its connect request, has arrived (the client reads the rest without a deadline,
// and every later frame with its ordinary read timeout).
type handshakeConn struct {
	net.Conn
	mu  sync.Mutex
	got int // bytes read so far, up to 4
}

func (c *handshakeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	if c.got < 4 && !t.IsZero() {
		if limit := time.Now().Add(HandshakeTimeout); t.After(limit) {
			t = limit
		}
	}
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *handshakeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.got = min(c.got+n, 4)
	c.mu.Unlock()
	return n, err
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
func (s *Server) Log() string { return s.srv.Log() }
