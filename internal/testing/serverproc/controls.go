package serverproc

import "testing"

// Controls are a Server's controls in their form for a test: each takes the test, and fails it
// or logs to it. A harness embeds them in its server type (`type controls =
// serverproc.Controls`, then an embedded `controls` field) so that the type has Stop, Kill,
// Restart, Pause, Resume, Running and Pid without writing them again. The zero Controls control
// no server: Stop and Kill do nothing, Running is false, Restart, Pause and Resume fail.
type Controls struct{ srv *Server }

// Controls returns the server's controls for a test.
func (s *Server) Controls() Controls { return Controls{s} }

// Stop is Server.Stop: SIGTERM, SIGKILL after the grace, and a wait for the exit; a kill is
// logged to the test. Idempotent; Restart starts the server again.
func (c Controls) Stop(t testing.TB) {
	t.Helper()
	if c.srv == nil {
		return
	}
	if c.srv.Stop() && c.srv.spec.Logf == nil {
		t.Logf("%s: %s did not stop %v after SIGTERM, killed it", c.srv.spec.Prefix, c.srv.spec.Name, c.srv.spec.StopGrace)
	}
}

// Kill is Server.Kill: SIGKILL, a crash with no goodbye to clients or peers, and a wait for the
// exit. The server stays down until Restart.
func (c Controls) Kill(t testing.TB) {
	t.Helper()
	if c.srv == nil {
		return
	}
	if err := c.srv.Kill(); err != nil {
		t.Logf("%s: SIGKILL %s: %v", c.srv.spec.Prefix, c.srv.spec.Name, err)
	}
}

// Restart is Server.Restart: the server stopped if it runs and started again on the same ports
// and data. It fails the test if the server does not serve again.
func (c Controls) Restart(t testing.TB) {
	t.Helper()
	c.must(t, (*Server).Restart)
}

// Pause is Server.Pause: SIGSTOP, so that the server holds its sockets and answers nothing (a
// long garbage collection, a frozen machine). Resume continues it; Stop and Restart continue it
// first.
func (c Controls) Pause(t testing.TB) {
	t.Helper()
	c.must(t, (*Server).Pause)
}

// Resume is Server.Resume: it continues a server stopped by Pause.
func (c Controls) Resume(t testing.TB) {
	t.Helper()
	c.must(t, (*Server).Resume)
}

func (c Controls) must(t testing.TB, op func(*Server) error) {
	t.Helper()
	if c.srv == nil {
		t.Fatal("serverproc: no server to control")
	}
	if err := op(c.srv); err != nil {
		t.Fatalf("%s: %v", c.srv.spec.Prefix, err)
	}
}

// Running reports whether the server's process runs (it may not serve yet).
func (c Controls) Running() bool { return c.srv != nil && c.srv.Running() }

// Pid is the server's process id (0 before the first start).
func (c Controls) Pid() int {
	if c.srv == nil {
		return 0
	}
	return c.srv.Pid()
}
