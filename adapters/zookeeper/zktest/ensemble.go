package zktest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
)

// Ensemble is a running ZooKeeper ensemble of N QuorumPeerMain members on 127.0.0.1. Member i
// (0-based) has myid i+1, its own data directory, client port, quorum port and election port.
type Ensemble struct {
	members []*Server
	certs   *tlsSetup // shared by the members: one CA, one server certificate for 127.0.0.1
}

// StartEnsemble starts an ensemble of n members (Options as for Start, TLS included; 3 is the
// smallest that survives losing a member), waits until every member serves as leader or follower,
// and registers t.Cleanup to stop them all. Restart keeps each member's ports and data.
func StartEnsemble(t testing.TB, n int, opts Options) *Ensemble {
	t.Helper()
	if n < 1 {
		t.Fatalf("zktest: an ensemble of %d members", n)
	}
	opts = opts.withDefaults(t)
	java, classpath := Tools(t)
	dir := t.TempDir()
	e := &Ensemble{}
	if opts.TLS {
		var err error
		if e.certs, err = writeTLSFiles(filepath.Join(dir, "tls")); err != nil {
			t.Fatalf("zktest: test certificates: %v", err)
		}
	}
	for i := range n {
		name := "zookeeper member " + strconv.Itoa(i)
		m, err := newServer(filepath.Join(dir, "member"+strconv.Itoa(i+1)), java, classpath, opts, e.certs, name, false, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		e.members = append(e.members, m)
	}
	t.Cleanup(func() {
		serverproc.StopAll(e.servers()...)
		if t.Failed() {
			for i, m := range e.members {
				t.Logf("zookeeper member %d %s", i, m.srv.Tail(serverproc.TailLines))
			}
		}
	})
	// Every member names every other's ports, so after a port clash all of them move. (A taken
	// quorum port does not stop a start: only the leader binds it, and a member that cannot is
	// passed over at the next election, some seconds later.) None serves before a quorum has
	// elected a leader, so they are waited for together.
	if err := serverproc.StartAll(e.servers(), e.configure); err != nil {
		t.Fatalf("zktest: starting a zookeeper ensemble of %d: %v (logs: %s/member*/zookeeper.log)", n, err, dir)
	}
	return e
}

// servers are the members' processes.
func (e *Ensemble) servers() []*serverproc.Server {
	srvs := make([]*serverproc.Server, len(e.members))
	for i, m := range e.members {
		srvs[i] = m.srv
	}
	return srvs
}

// configure gives every member fresh ports and an empty data directory with its myid, and writes
// the zoo.cfg files.
func (e *Ensemble) configure() error {
	const perMember = 4 // client, secure client, quorum, election
	ports, err := serverproc.FreePorts(perMember*len(e.members), false)
	if err != nil {
		return err
	}
	var quorum strings.Builder
	for i, m := range e.members {
		p := ports[perMember*i:]
		m.port, m.securePort = p[0], p[1]
		fmt.Fprintf(&quorum, "server.%d=127.0.0.1:%d:%d\n", i+1, p[2], p[3])
	}
	for i, m := range e.members {
		m.quorum = quorum.String()
		// A failed attempt may have left an epoch or a snapshot of an ensemble on other ports.
		if err := os.RemoveAll(m.dataDir); err != nil {
			return err
		}
		if err := os.MkdirAll(m.dataDir, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(m.dataDir, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o600); err != nil {
			return err
		}
		if err := m.writeConfig(); err != nil {
			return err
		}
	}
	return nil
}

// Len is the number of members.
func (e *Ensemble) Len() int { return len(e.members) }

// Member returns member i (0-based; myid i+1), for its Server methods: Addr, SecureAddr, Stop,
// Kill, Restart, FourLetter, Mode, Watches, ExpireSession.
func (e *Ensemble) Member(i int) *Server { return e.members[i] }

// Addrs are the members' client addresses, in member order: a client's connect string.
func (e *Ensemble) Addrs() []string {
	addrs := make([]string, len(e.members))
	for i, m := range e.members {
		addrs[i] = m.Addr()
	}
	return addrs
}

// SecureAddrs are the members' TLS client addresses, in member order; nil without Options.TLS.
func (e *Ensemble) SecureAddrs() []string {
	if e.certs == nil {
		return nil
	}
	addrs := make([]string, len(e.members))
	for i, m := range e.members {
		addrs[i] = m.SecureAddr()
	}
	return addrs
}

// TLS returns the PEM files of the ensemble's test CA (one for all members) and of a client
// certificate it signed; zero without Options.TLS.
func (e *Ensemble) TLS() TLSFiles {
	if e.certs == nil {
		return TLSFiles{}
	}
	return e.certs.files
}

// Kill sends member i SIGKILL (a crash) and waits for its exit. It stays down until Restart.
func (e *Ensemble) Kill(t testing.TB, i int) {
	t.Helper()
	e.members[i].Kill(t)
}

// Stop stops member i with SIGTERM (a clean shutdown). It stays down until Restart.
func (e *Ensemble) Stop(t testing.TB, i int) {
	t.Helper()
	e.members[i].Stop(t)
}

// Restart stops member i if it runs and starts it again with its ports and data; it returns once
// the member serves again, which needs a quorum of members up (it included).
func (e *Ensemble) Restart(t testing.TB, i int) {
	t.Helper()
	e.members[i].Restart(t)
}

// FourLetter sends a four-letter word to member i (see Server.FourLetter).
func (e *Ensemble) FourLetter(i int, cmd string) (string, error) {
	return e.members[i].FourLetter(cmd)
}

// Leader returns the index of the member that srvr says leads, among the running members.
func (e *Ensemble) Leader() (int, error) {
	var errs []string
	for i, m := range e.members {
		if !m.Running() {
			continue
		}
		mode, err := m.Mode()
		if err != nil {
			errs = append(errs, fmt.Sprintf("member %d: %v", i, err))
			continue
		}
		if mode == "leader" {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no running member leads (%s)", strings.Join(errs, "; "))
}

// ConnectedMember returns the index of the running member that holds a client connection of
// session sessionID (from the client, e.g. go-zookeeper's Conn.SessionID), read from each
// member's cons. A member's cons lists only the connections of the port it is asked on, so with
// Options.TLS both ports are asked. A session moves between members when its client reconnects,
// so the answer can change; a client between two connections is on none (an error: poll).
func (e *Ensemble) ConnectedMember(sessionID int64) (int, error) {
	var errs []string
	for i, m := range e.members {
		if !m.Running() {
			continue
		}
		asks := []func(string) (string, error){m.FourLetter}
		if m.certs != nil {
			asks = append(asks, m.fourLetterTLS)
		}
		for _, ask := range asks {
			out, err := ask("cons")
			if err != nil {
				errs = append(errs, fmt.Sprintf("member %d: %v", i, err))
				continue
			}
			for _, sid := range consSessions(out) {
				if sid == sessionID {
					return i, nil
				}
			}
		}
	}
	if len(errs) > 0 {
		return -1, fmt.Errorf("session 0x%x is connected to no member that answered cons (%s)", sessionID, strings.Join(errs, "; "))
	}
	return -1, fmt.Errorf("session 0x%x is connected to no running member", sessionID)
}

// consSessions returns the session ids of the connections cons lists, one a line:
//
//	/127.0.0.1:40868[1](queued=0,recved=3,sent=3,sid=0x100007a3e0c0000,lop=PING,est=...,...)
//
// A connection without a session yet (or cons's own) has sid 0x0 or none.
func consSessions(cons string) []int64 {
	var ids []int64
	for _, line := range strings.Split(cons, "\n") {
		_, rest, ok := strings.Cut(line, "sid=0x")
		if !ok {
			continue
		}
		hex, _, _ := strings.Cut(rest, ",")
		hex, _, _ = strings.Cut(hex, ")")
		id, err := strconv.ParseUint(hex, 16, 64)
		if err != nil || id == 0 {
			continue
		}
		ids = append(ids, int64(id))
	}
	return ids
}
