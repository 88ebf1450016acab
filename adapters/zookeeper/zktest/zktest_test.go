package zktest

import (
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// TestServer starts a real server, restarts it on the same port with its data, and expires a
// client's session through ExpireSession.
func TestServer(t *testing.T) {
	s := Start(t, Options{TickTime: 200 * time.Millisecond})
	var sessions Sessions
	events := make(chan zk.Event, 100)
	c, _, err := zk.Connect([]string{s.Addr()}, 4*time.Second, zk.WithDialer(sessions.Dial),
		zk.WithLogInfo(false), zk.WithLogger(testLogger{t}),
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
	defer c.Close()
	waitState(t, events, zk.StateHasSession)
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

type testLogger struct{ t *testing.T }

func (l testLogger) Printf(format string, args ...any) { l.t.Logf(format, args...) }
