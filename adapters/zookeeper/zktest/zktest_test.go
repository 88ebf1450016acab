package zktest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// TestServer starts a real server, restarts it on the same port with its data, and expires a
// client's session through ExpireSession.
func TestServer(t *testing.T) {
	s := Start(t, Options{TickTime: 200 * time.Millisecond})
	var sessions Sessions
	c, events := connect(t, []string{s.Addr()}, 4*time.Second, sessions.Dial)
	if _, err := c.Create("/zktest", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	first := c.SessionID()

	s.Restart(t)
	if out, err := s.FourLetter("srvr"); err != nil || !strings.Contains(out, "Zookeeper version") {
		t.Fatalf("srvr after restart: %q, %v", out, err)
	}
	waitState(t, events, zk.StateHasSession)
	if got := c.SessionID(); got != first {
		t.Errorf("session after a restart: 0x%x, want 0x%x (kept)", got, first)
	}
	if data, _, err := c.Get("/zktest"); err != nil || string(data) != "x" {
		t.Fatalf("after restart: %q, %v", data, err)
	}

	id, passwd, ok := sessions.Last()
	if !ok || id != first {
		t.Fatalf("Sessions.Last: 0x%x, %v; want 0x%x", id, ok, first)
	}
	if err := s.ExpireSession(id, passwd); err != nil {
		t.Fatal(err)
	}
	waitState(t, events, zk.StateExpired)
	waitState(t, events, zk.StateHasSession)
	if got := c.SessionID(); got == first || got == 0 {
		t.Errorf("session after expiry: 0x%x, want a new one", got)
	}
	if n, err := s.Watches(); err != nil || n < 0 {
		t.Errorf("Watches: %d, %v", n, err)
	}
}

func waitState(t *testing.T, events <-chan zk.Event, want zk.State) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e := <-events:
			if e.State == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %v within 20s", want)
		}
	}
}

// testLogger sends a client's log to the test log until the test ends: go-zookeeper's goroutines
// outlive Conn.Close, and t.Logf after the end of a test panics.
type testLogger struct {
	t    *testing.T
	mu   *sync.Mutex
	done *bool
}

func newTestLogger(t *testing.T) testLogger {
	l := testLogger{t: t, mu: new(sync.Mutex), done: new(bool)}
	t.Cleanup(func() {
		l.mu.Lock()
		*l.done = true
		l.mu.Unlock()
	})
	return l
}

func (l testLogger) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !*l.done {
		l.t.Logf(format, args...)
	}
}

// connect connects a client (dial: its dialer) and waits for its session. The client is closed
// in t.Cleanup; its session events go to the channel.
func connect(t *testing.T, servers []string, sessionTimeout time.Duration, dial zk.Dialer) (*zk.Conn, <-chan zk.Event) {
	t.Helper()
	c, events := connectNoWait(t, servers, sessionTimeout, dial)
	waitState(t, events, zk.StateHasSession)
	return c, events
}

func connectNoWait(t *testing.T, servers []string, sessionTimeout time.Duration, dial zk.Dialer) (*zk.Conn, <-chan zk.Event) {
	t.Helper()
	events := make(chan zk.Event, 100)
	c, _, err := zk.Connect(servers, sessionTimeout, zk.WithDialer(dial),
		zk.WithLogInfo(false), zk.WithLogger(newTestLogger(t)),
		zk.WithEventCallback(func(e zk.Event) {
			if e.Type == zk.EventSession {
				select {
				case events <- e:
				default:
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, events
}

// tlsDialer is a go-zookeeper dialer that speaks TLS with cfg.
func tlsDialer(cfg *tls.Config) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, address, cfg)
	}
}

// waitConnectedMember polls ConnectedMember until it finds the session (a client that has just
// reconnected may not be listed yet).
func waitConnectedMember(t *testing.T, e *Ensemble, sessionID int64) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		i, err := e.ConnectedMember(sessionID)
		if err == nil {
			return i
		}
		if time.Now().After(deadline) {
			t.Fatalf("ConnectedMember(0x%x) for 10s: %v", sessionID, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEnsembleFailover starts three members, connects a client to all of them, kills the member
// the client is on and checks that the client goes on with the same session through another
// member within the session timeout; then the killed member rejoins with the data.
func TestEnsembleFailover(t *testing.T) {
	began := time.Now()
	e := StartEnsemble(t, 3, Options{TickTime: 500 * time.Millisecond})
	t.Logf("ensemble of 3 serving after %v", time.Since(began).Round(time.Millisecond))
	addrs := e.Addrs()
	if len(addrs) != 3 || addrs[0] == addrs[1] || addrs[1] == addrs[2] || addrs[0] == addrs[2] {
		t.Fatalf("Addrs: %v, want 3 distinct addresses", addrs)
	}
	leaders := 0
	for i := range e.Len() {
		mode, err := e.Member(i).Mode()
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		switch mode {
		case "leader":
			leaders++
		case "follower":
		default:
			t.Errorf("member %d: mode %q, want leader or follower", i, mode)
		}
	}
	if leader, err := e.Leader(); leaders != 1 || err != nil {
		t.Fatalf("%d members lead (Leader: %d, %v), want 1", leaders, leader, err)
	}

	// The longest session a 500ms tick allows is 20 ticks.
	const sessionTimeout = 10 * time.Second
	c, events := connect(t, addrs, sessionTimeout, net.DialTimeout)
	if _, err := c.Create("/failover", []byte("before"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	id := c.SessionID()
	from := waitConnectedMember(t, e, id)
	if addrs[from] != c.Server() {
		t.Fatalf("ConnectedMember says member %d (%s), the client is on %s", from, addrs[from], c.Server())
	}
	if i, err := e.ConnectedMember(id + 1); err == nil {
		t.Fatalf("ConnectedMember found session 0x%x, which nobody opened, on member %d", id+1, i)
	}
	mode, _ := e.Member(from).Mode()
	t.Logf("client (session 0x%x) on member %d, the %s: killing it", id, from, mode)

	killed := time.Now()
	e.Kill(t, from)
	if out, err := e.FourLetter(from, "ruok"); err == nil {
		t.Fatalf("killed member %d still answers ruok: %q", from, out)
	}
	writeWithin(t, c, "/failover", "after", sessionTimeout)
	t.Logf("client writes again %v after the kill, through %s", time.Since(killed).Round(time.Millisecond), c.Server())
	if got := c.SessionID(); got != id {
		t.Fatalf("session after fail-over: 0x%x, want 0x%x (kept)", got, id)
	}
	if data, _, err := c.Get("/failover"); err != nil || string(data) != "after" {
		t.Fatalf("read after fail-over: %q, %v", data, err)
	}
	to := waitConnectedMember(t, e, id)
	if to == from {
		t.Fatalf("ConnectedMember reports the killed member %d", from)
	}
	if addrs[to] != c.Server() {
		t.Fatalf("ConnectedMember says member %d (%s), the client is on %s", to, addrs[to], c.Server())
	}
	for drained := false; !drained; {
		select {
		case ev := <-events:
			if ev.State == zk.StateExpired {
				t.Fatalf("the session expired during the fail-over")
			}
		default:
			drained = true
		}
	}

	// The killed member rejoins on its ports and catches up with the write it missed.
	e.Restart(t, from)
	if mode, err := e.Member(from).Mode(); err != nil || (mode != "follower" && mode != "leader") {
		t.Fatalf("member %d after Restart: mode %q, %v", from, mode, err)
	}
	only, _ := connect(t, []string{addrs[from]}, sessionTimeout, net.DialTimeout)
	if data, _, err := only.Get("/failover"); err != nil || string(data) != "after" {
		t.Fatalf("read from the restarted member %d: %q, %v", from, data, err)
	}

	// Killing the leader stops every member serving until the other two have elected one: the
	// client's session survives that too.
	leader, err := e.Leader()
	if err != nil {
		t.Fatal(err)
	}
	killed = time.Now()
	e.Kill(t, leader)
	writeWithin(t, c, "/failover", "after the leader", sessionTimeout)
	t.Logf("client writes again %v after killing the leader (member %d), through %s", time.Since(killed).Round(time.Millisecond), leader, c.Server())
	if got := c.SessionID(); got != id {
		t.Fatalf("session after the leader's death: 0x%x, want 0x%x (kept)", got, id)
	}
	if next, err := e.Leader(); err != nil || next == leader {
		t.Fatalf("Leader after killing member %d: %d, %v", leader, next, err)
	}
	if to := waitConnectedMember(t, e, id); to == leader {
		t.Fatalf("ConnectedMember reports the killed leader %d", leader)
	}
}

// writeWithin sets path to value, retrying while the client reconnects, and fails the test if
// that takes longer than limit.
func writeWithin(t *testing.T, c *zk.Conn, path, value string, limit time.Duration) {
	t.Helper()
	began := time.Now()
	for {
		_, err := c.Set(path, []byte(value), -1)
		if err == nil {
			return
		}
		if time.Since(began) > limit {
			t.Fatalf("no write within %v: %v", limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEnsembleTLS checks that an ensemble's members serve TLS with one CA and that
// ConnectedMember finds a session connected over TLS (cons lists one port's connections).
func TestEnsembleTLS(t *testing.T) {
	began := time.Now()
	e := StartEnsemble(t, 3, Options{TickTime: 500 * time.Millisecond, TLS: true})
	t.Logf("ensemble of 3 with TLS serving after %v", time.Since(began).Round(time.Millisecond))
	secure := e.SecureAddrs()
	if len(secure) != 3 || secure[0] == e.Addrs()[0] {
		t.Fatalf("SecureAddrs: %v (Addrs %v)", secure, e.Addrs())
	}
	cfg, err := e.TLS().ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, _ := connect(t, secure, 4*time.Second, tlsDialer(cfg))
	if _, err := c.Create("/tls", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	i := waitConnectedMember(t, e, c.SessionID())
	if secure[i] != c.Server() {
		t.Fatalf("ConnectedMember says member %d (%s), the client is on %s", i, secure[i], c.Server())
	}
}

// TestTLS checks the TLS port of a server that needs client certificates (the default): a client
// that trusts the test CA and presents the client certificate works and is known by it; a client
// that trusts another CA, or presents no certificate, gets no connection.
func TestTLS(t *testing.T) {
	s := Start(t, Options{TickTime: 500 * time.Millisecond, TLS: true})
	files := s.TLS()
	for _, f := range []string{files.CA, files.ClientCert, files.ClientKey} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("TLS files %+v: %v", files, err)
		}
	}
	if s.SecureAddr() == "" || s.SecureAddr() == s.Addr() {
		t.Fatalf("SecureAddr %q (Addr %q)", s.SecureAddr(), s.Addr())
	}
	cfg, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}

	c, _ := connect(t, []string{s.SecureAddr()}, 4*time.Second, tlsDialer(cfg))
	// A node only the client certificate's subject may use: proof that the server took the
	// certificate as the client's identity (x509 scheme).
	acl := []zk.ACL{{Perms: zk.PermAll, Scheme: "x509", ID: "CN=zktest-client"}}
	if _, err := c.Create("/tls", []byte("secret"), 0, acl); err != nil {
		t.Fatal(err)
	}
	if data, _, err := c.Get("/tls"); err != nil || string(data) != "secret" {
		t.Fatalf("read over TLS: %q, %v", data, err)
	}
	plain, _ := connect(t, []string{s.Addr()}, 4*time.Second, net.DialTimeout)
	if _, _, err := plain.Get("/tls"); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("read of the x509-only node without the certificate: %v, want %v", err, zk.ErrNoAuth)
	}

	// The server certificate names localhost as well as 127.0.0.1.
	byName := cfg.Clone()
	byName.ServerName = "localhost"
	if err := roundTrip(s.SecureAddr(), byName); err != nil {
		t.Fatalf("TLS with ServerName localhost: %v", err)
	}

	other, err := writeTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	otherCfg, err := other.files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if err := roundTrip(s.SecureAddr(), otherCfg); !errors.As(err, &unknown) {
		t.Fatalf("a client trusting another CA: %v, want x509.UnknownAuthorityError", err)
	}
	noCert := cfg.Clone()
	noCert.Certificates = nil
	if err := roundTrip(s.SecureAddr(), noCert); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client without a certificate: %v, want a certificate error from the server", err)
	}
	// The same refusals through go-zookeeper: it tries the one server and gives up.
	for name, bad := range map[string]*tls.Config{"another CA": otherCfg, "no certificate": noCert} {
		refused, _ := connectNoWait(t, []string{s.SecureAddr()}, 4*time.Second, tlsDialer(bad))
		if _, err := refused.Create("/refused", nil, 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoServer) {
			t.Errorf("client with %s: create: %v, want %v", name, err, zk.ErrNoServer)
		}
		refused.Close()
	}
}

// TestTLSClientAuthNone checks that with ClientAuth "none" a client without a certificate works.
func TestTLSClientAuthNone(t *testing.T) {
	s := Start(t, Options{TickTime: 500 * time.Millisecond, TLS: true, ClientAuth: "none"})
	cfg, err := s.TLS().ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certificates = nil
	c, _ := connect(t, []string{s.SecureAddr()}, 4*time.Second, tlsDialer(cfg))
	if _, err := c.Create("/open", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if data, _, err := c.Get("/open"); err != nil || string(data) != "x" {
		t.Fatalf("read: %q, %v", data, err)
	}
}

// roundTrip connects over TLS and sends a ConnectRequest, returning the first error: with TLS 1.2
// (what ZooKeeper 3.8 speaks) a refused client certificate fails the handshake, with TLS 1.3 the
// first read.
func roundTrip(addr string, cfg *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd (16 zero bytes).
	var req bytes.Buffer
	_ = binary.Write(&req, binary.BigEndian, int32(0))
	_ = binary.Write(&req, binary.BigEndian, int64(0))
	_ = binary.Write(&req, binary.BigEndian, int32(4000))
	_ = binary.Write(&req, binary.BigEndian, int64(0))
	_ = binary.Write(&req, binary.BigEndian, int32(16))
	req.Write(make([]byte, 16))
	if err := writeFrame(c, req.Bytes()); err != nil {
		return err
	}
	_, err = readFrame(c)
	return err
}

// TestConsSessions checks the parsing of cons against a line of ZooKeeper 3.8.
func TestConsSessions(t *testing.T) {
	const cons = ` /127.0.0.1:40868[1](queued=0,recved=3,sent=3,sid=0x100007a3e0c0000,lop=PING,est=1763870302000,to=10000,lcxid=0x1,lzxid=0x100000002,lresp=1,llat=0,minlat=0,avglat=0.5,maxlat=1)
 /127.0.0.1:40870[0](queued=0,recved=1,sent=0)
 /127.0.0.1:40872[1](queued=0,recved=1,sent=1,sid=0x0,lop=NA)`
	got := consSessions(cons)
	if len(got) != 1 || got[0] != 0x100007a3e0c0000 {
		t.Fatalf("consSessions: %x, want [100007a3e0c0000]", got)
	}
}
