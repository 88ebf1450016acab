// Package e2e runs Galleon's binaries against a real istiod (see test/istiod) and real registries.
//
// Prerequisite: `go run ./internal/testing/devtool build pilot-discovery` in the repository root
// (once; the binary is cached outside the repository; `make istiod` builds every release).
// Run: cd test && GALLEON_REAL_SERVERS=1 go test ./e2e/ (without GALLEON_REAL_SERVERS=1 the tests
// that run Consul, polaris-server or ZooKeeper skip and say so; make e2e sets it).
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/internal/proc"
)

// binDir holds the Galleon binaries built for this test run (removed by TestMain).
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "galleon-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type buildResult struct {
	once sync.Once
	path string
	err  error
}

var builds sync.Map // command name -> *buildResult

// galleonBinary builds ../cmd/<name> of the main module once per test run (go build, into a
// temporary directory) and returns its path; $GALLEON_E2E_BIN_DIR/<name> is used instead when
// that variable is set. The test fails with the build output if the build fails.
func galleonBinary(t testing.TB, name string) string {
	t.Helper()
	if d := os.Getenv("GALLEON_E2E_BIN_DIR"); d != "" {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("GALLEON_E2E_BIN_DIR is set but %v", err)
		}
		return p
	}
	v, _ := builds.LoadOrStore(name, &buildResult{})
	b := v.(*buildResult)
	b.once.Do(func() { b.path, b.err = buildCommand(name) })
	if b.err != nil {
		t.Fatalf("building cmd/%s: %v", name, b.err)
	}
	return b.path
}

func buildCommand(name string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	// A command of the main module, or one of the bench module's (galleon-peer, the benchmark
	// peer the user's path runs beside galleon-file).
	dir := root
	if _, err := os.Stat(filepath.Join(root, "cmd", name)); err != nil {
		dir = filepath.Join(root, "bench")
		if _, berr := os.Stat(filepath.Join(dir, "cmd", name)); berr != nil {
			return "", fmt.Errorf("cmd/%s does not exist (yet) in %s: %w", name, root, err)
		}
	}
	out := filepath.Join(binDir, name)
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", out, "./cmd/"+name)
	cmd.Dir = dir
	cmd.Env = proc.Env(nil, []string{"GOWORK"}, nil, "GOWORK=off")
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s in %s: %v\n%s", name, dir, err, buf.String())
	}
	fmt.Fprintf(os.Stderr, "e2e: built cmd/%s in %v\n", name, time.Since(start).Round(time.Millisecond))
	return out, nil
}

// repoRoot is the main module's directory.
func repoRoot() (string, error) { return toolcache.RepoRoot() }

// galleon is a running Galleon binary.
type galleon struct {
	*proc.Process
	Addr     string // --listen: MCP over xDS, what istiod's configSources point at
	HTTPAddr string // --http: /metrics, /healthz, /readyz, /debug/status
}

// startGalleon runs the Galleon binary bin on free loopback ports with args (registry flags) and
// waits until /readyz answers 200 (the registry was listed once). GALLEON_* variables of the test
// environment are not passed on: the daemon reads its flags from them.
func startGalleon(t testing.TB, bin string, args ...string) *galleon {
	t.Helper()
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		g, err := tryStartGalleon(t, bin, attempt, args)
		if err == nil {
			return g
		}
		lastErr = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("%s did not start: %v", filepath.Base(bin), lastErr)
	return nil
}

func tryStartGalleon(t testing.TB, bin string, attempt int, args []string) (*galleon, error) {
	t.Helper()
	addrs, err := proc.FreeAddrs(2)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(bin)
	if attempt > 1 {
		name = fmt.Sprintf("%s.%d", name, attempt)
	}
	p, err := proc.Start(t, proc.Config{
		Name: name,
		Path: bin,
		Args: append([]string{"--listen", addrs[0], "--http", addrs[1], "--log-level", "debug"}, args...),
		Env:  proc.Env(nil, nil, []string{"GALLEON_"}),
	})
	if err != nil {
		return nil, err
	}
	g := &galleon{Process: p, Addr: addrs[0], HTTPAddr: addrs[1]}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = p.WaitFor(ctx, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.HTTPAddr+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, errors.New("/readyz: " + resp.Status)
		}
		return proc.DialOK(g.Addr) == nil, nil
	})
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("%w\n%s", err, p.Tail(40))
	}
	t.Logf("%s running: pid %d, xDS %s, http://%s, log %s", name, p.Pid(), g.Addr, g.HTTPAddr, p.LogPath)
	return g, nil
}
