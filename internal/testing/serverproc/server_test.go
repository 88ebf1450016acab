package serverproc

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// envHelper makes the test binary a tiny server: it listens on the loopback port the variable
// names and accepts connections until it is killed.
const envHelper = "GALLEON_SERVERPROC_HELPER_PORT"

func TestMain(m *testing.M) {
	if port := os.Getenv(envHelper); port != "" {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
		if err != nil {
			fmt.Println(err) // "bind: address already in use" when the port is taken
			os.Exit(1)
		}
		fmt.Println("helper listening on", l.Addr())
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(1)
			}
			fmt.Fprintln(c, "helper")
			c.Close()
		}
	}
	os.Exit(m.Run())
}

// helperSpec is a Spec of the helper server on one free port; *port is the port it got.
func helperSpec(t *testing.T, port *int) Spec {
	dir := t.TempDir()
	return Spec{
		Prefix: "serverproctest", Name: "helper", LogPath: filepath.Join(dir, "helper.log"),
		Ports:     1,
		Configure: func(ports []int) error { *port = ports[0]; return nil },
		Command: func() *exec.Cmd {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envHelper+"="+strconv.Itoa(*port))
			return cmd
		},
		Ready: func(ctx context.Context) error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)), time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Second))
			b, err := io.ReadAll(c) // the helper says who it is; another listener on the port would not
			if string(b) != "helper\n" {
				return fmt.Errorf("answer %q, %v", b, err)
			}
			return nil
		},
		StopGrace: 5 * time.Second,
	}
}

func TestServerStartRestartKill(t *testing.T) {
	var port int
	s := StartT(t, helperSpec(t, &port))
	if !s.Running() || s.Pid() == 0 || port == 0 {
		t.Fatalf("after Start: running %v, pid %d, port %d", s.Running(), s.Pid(), port)
	}
	first := port
	pid := s.Pid()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Fatal("running after Kill")
	}
	s.Controls().Restart(t)
	if !s.Running() || s.Pid() == pid || port != first {
		t.Fatalf("after Restart: running %v, pid %d (was %d), port %d (was %d)", s.Running(), s.Pid(), pid, port, first)
	}
	if n := strings.Count(s.Log(), "==== serverproctest: starting"); n != 2 {
		t.Errorf("log has %d start markers, want 2:\n%s", n, s.Log())
	}
	if killed := s.Stop(); killed {
		t.Error("the helper needed SIGKILL")
	}
	if s.Running() {
		t.Fatal("running after Stop")
	}
	if tail := s.Tail(1); !strings.Contains(tail, "helper listening on") {
		t.Errorf("Tail(1) = %q", tail)
	}
}

func TestServerStartRetriesOnAPortClash(t *testing.T) {
	var port int
	spec := helperSpec(t, &port)
	// The first attempt gets a port that something else holds.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	attempts := 0
	spec.Configure = func(ports []int) error {
		attempts++
		port = ports[0]
		if attempts == 1 {
			port = taken.Addr().(*net.TCPAddr).Port
		}
		return nil
	}
	var notes []string
	spec.Logf = func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	s := New(spec)
	defer s.Stop()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 || len(notes) != 1 || !strings.Contains(notes[0], "a port was taken") {
		t.Errorf("attempts %d, notes %q", attempts, notes)
	}
}

func TestServerStartFailsWithTheProbesError(t *testing.T) {
	var port int
	spec := helperSpec(t, &port)
	spec.Ready = func(context.Context) error { return fmt.Errorf("not yet") }
	spec.StartTimeout = 300 * time.Millisecond
	s := New(spec)
	defer s.Stop()
	err := s.Start()
	if err == nil || !strings.Contains(err.Error(), "starting helper") || !strings.Contains(err.Error(), "not yet") {
		t.Fatalf("Start = %v", err)
	}
	if s.Running() {
		t.Error("running after a failed Start")
	}
}

func TestServerPauseResume(t *testing.T) {
	var port int
	s := StartT(t, helperSpec(t, &port))
	s.Controls().Pause(t)
	s.Controls().Resume(t)
	s.Controls().Pause(t)
	if killed := s.Stop(); killed { // Stop continues a paused server before SIGTERM
		t.Error("a paused server needed SIGKILL")
	}
	if err := New(Spec{Name: "idle"}).Pause(); err == nil {
		t.Error("Pause of a server never started succeeded")
	}
}

func TestFreePorts(t *testing.T) {
	for _, udp := range []bool{false, true} {
		ports, err := FreePorts(4, udp)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, p := range ports {
			if p <= 0 || seen[p] {
				t.Fatalf("FreePorts(4, %v) = %v", udp, ports)
			}
			seen[p] = true
		}
	}
}
