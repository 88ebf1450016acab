// Package eurekatest runs a real Eureka REST API server for the Eureka adapter's tests: PolarisMesh's
// polaris-server 1.18.1, built by toolcache.Polaris, on the harness kit every real-server
// harness shares (internal/testing/serverproc), and a plain Eureka client (Client, client.go)
// that registers, renews and cancels instances for this package, the load tool and the
// end-to-end tests.
//
// No Netflix or Spring Eureka server can be installed here (no Maven repository); Polaris serves
// the same REST API (/eureka/apps, /eureka/apps/delta, /eureka/apps/{APP}[/{ID}], status
// overrides, XML and JSON) over an embedded bolt store, with differences from Netflix's a client
// must tolerate (eurekatest_test.go shows them). toolcache.Polaris builds it with one fix: without
// it a cancelled instance stays listed until its lease expires (scripts/tools/polaris/*.patch).
//
// Each server runs in its own directory under t.TempDir() with the configuration
// polaris-server.yaml.tmpl (the module's release/conf/polaris-server.yaml, loopback only, free
// ports, the xds-v3, service-nacos and config-grpc apiservers removed, cache refresh every second).
// A change shows in /eureka/apps and /eureka/apps/delta after a cache refresh or two: use
// WaitApps. The server is stopped in t.Cleanup and, when the test failed, the tail of its logs is
// written to the test log.
package eurekatest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

const (
	// Version is the polaris-server version toolcache.Polaris builds.
	Version = toolcache.PolarisVersion
	// EnvBinary names the environment variable that overrides the polaris-server binary.
	EnvBinary = "GALLEON_POLARIS_BIN"
)

// tool is the polaris-server binary toolcache.Polaris builds into the tool cache.
var tool = toolcache.Polaris().Tool()

//go:embed polaris-server.yaml.tmpl
var configTemplate string

// CachePath is where the binary is cached (internal/testing/toolcache):
// <cache>/bin/polaris-server-<Version>.
func CachePath() string { return tool.CachePath() }

// Binary returns the polaris-server binary: $GALLEON_POLARIS_BIN if set, else the cache path
// (see CachePath). If it is missing, or was built from another scripts/tools/polaris/go.sum or
// patch, it builds it (toolcache.Polaris, from the repository found by walking up from the
// working directory to the go.mod of github.com/galleon-mesh/galleon; a cold build takes minutes,
// see `make help`) and fails the test with a clear message if that fails. It never skips.
func Binary(t testing.TB) string { t.Helper(); return tool.Binary(t, "eurekatest") }

// Options configures Start.
type Options struct {
	// DeltaExpireInterval is how long a change stays in /eureka/apps/delta (Polaris's
	// service-eureka deltaExpireInterval); default 60 s, Polaris's own. Whole seconds.
	DeltaExpireInterval time.Duration
	// Dir is the server's working directory (config, store, logs). Start uses t.TempDir() when
	// empty; StartServer a new temporary directory, which Close removes.
	Dir string
	// Logf, if set, is told of start retries and of a kill after SIGTERM (Start: the test log).
	Logf func(format string, args ...any)
	// Detach detaches the server's process from the program (serverproc.Detach; a test's
	// server when zero).
	Detach serverproc.Detach
}

// Server is a running (or stopped) polaris-server serving the Eureka REST API. Its controls
// (serverproc.Controls) are Stop (SIGKILL 30 s after SIGTERM if it has not stopped: Polaris is
// slow to stop), Kill (a crash; the store survives), Restart (same ports and directory: the
// registry is kept, the bolt store; it returns once the Eureka API answers), Running and Pid.
type Server struct {
	Dir        string // working directory: config, store (polaris.bolt), logs
	ConfigPath string
	OutPath    string // the process's stdout and stderr; the server's own logs are in Dir/log
	EurekaAddr string // "127.0.0.1:PORT"
	HTTPAddr   string // Polaris's own HTTP API (api-http), "127.0.0.1:PORT"
	GRPCAddr   string // Polaris's service-grpc API, "127.0.0.1:PORT"

	bin    string
	opts   Options
	ownDir bool // made by StartServer: Close removes it

	srv *serverproc.Server
	controls
}

// controls are Stop, Kill, Restart, Running and Pid (and Pause and Resume).
type controls = serverproc.Controls

// Start starts a polaris-server (see the package comment) on free loopback ports, waits until
// GET <BaseURL>/apps answers 200 and registers t.Cleanup to stop it. It is StartServer for a
// test: the binary is Binary's.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	s, err := newServer(Binary(t), opts)
	if err != nil {
		t.Fatalf("eurekatest: %v", err)
	}
	t.Cleanup(func() {
		s.controls.Stop(t)
		if t.Failed() {
			t.Logf("polaris-server in %s %s", s.Dir, s.srv.Tail(serverproc.TailLines))
		}
	})
	if err := s.srv.StartContext(t.Context()); err != nil {
		t.Fatalf("eurekatest: %v", err)
	}
	return s
}

// BinaryPath is Binary for a program that is not a test: the polaris-server binary, built into
// the tool cache when it is missing, or why it cannot be had (one line that says what to do).
func BinaryPath() (string, error) { return tool.Path() }

// StartServer is Start for a program that is not a test: it starts a polaris-server (see the
// package comment) in Options.Dir (a new temporary directory when empty, removed by Close) and
// waits until its Eureka API answers, or returns why not. Close stops it.
func StartServer(ctx context.Context, opts Options) (*Server, error) {
	bin, err := BinaryPath()
	if err != nil {
		return nil, fmt.Errorf("eurekatest: %w", err)
	}
	s, err := newServer(bin, opts)
	if err != nil {
		return nil, fmt.Errorf("eurekatest: %w", err)
	}
	if err := s.srv.StartContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("eurekatest: %w", err)
	}
	return s, nil
}

// newServer prepares a polaris-server of bin in opts.Dir (or a new temporary directory);
// nothing runs yet.
func newServer(bin string, opts Options) (*Server, error) {
	if opts.DeltaExpireInterval == 0 {
		opts.DeltaExpireInterval = 60 * time.Second
	}
	if opts.DeltaExpireInterval < time.Second {
		return nil, fmt.Errorf("Options.DeltaExpireInterval %v is under a second", opts.DeltaExpireInterval)
	}
	dir, ownDir := opts.Dir, false
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "eurekatest-"); err != nil {
			return nil, err
		}
		ownDir = true
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Server{
		Dir:        dir,
		ConfigPath: filepath.Join(dir, "polaris-server.yaml"),
		OutPath:    filepath.Join(dir, "polaris-server.out"),
		bin:        bin,
		opts:       opts,
		ownDir:     ownDir,
	}
	s.srv = serverproc.New(serverproc.Spec{
		Prefix: "eurekatest", Name: "polaris-server in " + dir, LogPath: s.OutPath,
		Ports: 3, Configure: s.configure, Command: s.command, Ready: s.ready,
		Clash: s.bindClash, Tail: s.tail,
		// The grace is generous: polaris-server is slow to stop on SIGTERM (see
		// docs/benchmarks.md, eurekatest's Restart).
		StopGrace: 30 * time.Second,
		Logf:      opts.Logf, Detach: opts.Detach,
	})
	s.controls = s.srv.Controls()
	return s, nil
}

// Close stops the server (SIGTERM, SIGKILL after 30 s) and removes the directory StartServer
// made for it. It is the Stop of a program that is not a test.
func (s *Server) Close() error {
	s.srv.Stop()
	if s.ownDir {
		return os.RemoveAll(s.Dir)
	}
	return nil
}

// Proc is the server's process in its form for a program that is not a test: Kill, Pause,
// Resume, Restart and Stop return errors instead of failing a test.
func (s *Server) Proc() *serverproc.Server { return s.srv }

// Config returns the polaris-server configuration for the given ports (the embedded template
// with its placeholders filled in) and Options.
func Config(eurekaPort, httpPort, grpcPort int, opts Options) (string, error) {
	cfg := strings.NewReplacer(
		"@LISTEN_IP@", "127.0.0.1",
		"@EUREKA_PORT@", strconv.Itoa(eurekaPort),
		"@HTTP_PORT@", strconv.Itoa(httpPort),
		"@GRPC_PORT@", strconv.Itoa(grpcPort),
	).Replace(configTemplate)
	if d := opts.DeltaExpireInterval; d != 0 && d != 60*time.Second {
		const def = "      deltaExpireInterval: 60\n"
		if !strings.Contains(cfg, def) {
			return "", errors.New("eurekatest: polaris-server.yaml.tmpl has no `deltaExpireInterval: 60` line to change")
		}
		cfg = strings.Replace(cfg, def, fmt.Sprintf("      deltaExpireInterval: %d\n", int(d.Round(time.Second)/time.Second)), 1)
	}
	return cfg, nil
}

// configure gives the server the ports of a start attempt and writes its configuration.
func (s *Server) configure(ports []int) error {
	s.EurekaAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	s.HTTPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	s.GRPCAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2]))
	cfg, err := Config(ports[0], ports[1], ports[2], s.opts)
	if err != nil {
		return err
	}
	return os.WriteFile(s.ConfigPath, []byte(cfg), 0o600)
}

// command is the server's command: the store and logs are relative paths, under Dir. TZ=UTC:
// Polaris writes local times into instance records and parses them back as UTC.
func (s *Server) command() *exec.Cmd {
	cmd := exec.Command(s.bin, "start", "-c", s.ConfigPath)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), "TZ=UTC")
	return cmd
}

// ready returns nil once the Eureka API answers.
func (s *Server) ready(ctx context.Context) error {
	r, err := s.Do(ctx, "GET", "/apps", "application/json", nil)
	if err != nil {
		return err
	}
	if r.Status != http.StatusOK {
		return fmt.Errorf("GET /apps answered %d", r.Status)
	}
	return nil
}

// bindClash reports whether the last start failed because a port was taken. Polaris writes that
// to its own logs (log/runtime/*-error.log), not to stdout.
func (s *Server) bindClash() bool {
	files, _ := filepath.Glob(filepath.Join(s.Dir, "log", "runtime", "*.log"))
	for _, f := range append(files, s.OutPath) {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte("address already in use")) {
			return true
		}
	}
	return false
}

// BaseURL is the Eureka service URL, "http://127.0.0.1:PORT/eureka" (what a Netflix client calls
// its serviceUrl; Polaris also answers under /eureka/v2 and /eureka/v1).
func (s *Server) BaseURL() string { return "http://" + s.EurekaAddr + "/eureka" }

// tail is the end of the process output and of Polaris's own logs that matter when a test
// fails: the error logs and the default log (Eureka requests and cache builds).
func (s *Server) tail(n int) string {
	var b strings.Builder
	serverproc.TailFile(&b, s.OutPath, n, isConfigDump)
	errs, _ := filepath.Glob(filepath.Join(s.Dir, "log", "runtime", "*-error.log"))
	sort.Strings(errs)
	for _, f := range errs {
		if st, err := os.Stat(f); err == nil && st.Size() > 0 {
			serverproc.TailFile(&b, f, n/2, nil)
		}
	}
	serverproc.TailFile(&b, filepath.Join(s.Dir, "log", "runtime", "polaris-default.log"), n/2, nil)
	return b.String()
}

// configDumpKey matches the lines of the YAML configuration polaris-server prints at every start.
var configDumpKey = regexp.MustCompile(`^(\s|- |[A-Za-z0-9_-]+:(\s|$))`)

func isConfigDump(line string) bool { return configDumpKey.MatchString(line) }

// Client is a client of the server's Eureka API.
func (s *Server) Client() *Client { return NewClient(s.BaseURL(), nil) }

// Do sends one request to BaseURL()+path: see Client.Do.
func (s *Server) Do(ctx context.Context, method, path, accept string, body []byte) (*Response, error) {
	return s.Client().Do(ctx, method, path, accept, body)
}

// Register registers (or re-registers) an instance: see Client.Register. It shows in /apps
// after the next cache refresh (WaitApps).
func (s *Server) Register(ctx context.Context, in Instance) error {
	return s.Client().Register(ctx, in)
}

// Cancel deregisters an instance: see Client.Cancel.
func (s *Server) Cancel(ctx context.Context, app, id string) error {
	return s.Client().Cancel(ctx, app, id)
}

// Renew is a heartbeat: see Client.Renew. An answer other than 200 is an error. (Polaris answers
// 200 even for an unknown instance, where Eureka answers 404.)
func (s *Server) Renew(ctx context.Context, app, id string) error {
	found, err := s.Client().Renew(ctx, app, id)
	if err == nil && !found {
		err = &StatusError{Method: http.MethodPut, Path: instancePath(app, id), Status: http.StatusNotFound}
	}
	return err
}

// SetStatus sets a status override: see Client.SetStatus.
func (s *Server) SetStatus(ctx context.Context, app, id, status string) error {
	return s.Client().SetStatus(ctx, app, id, status)
}

// ClearStatus removes a status override: see Client.ClearStatus.
func (s *Server) ClearStatus(ctx context.Context, app, id string) error {
	return s.Client().ClearStatus(ctx, app, id)
}

// Apps reads path ("/apps" or "/apps/delta") as JSON.
func (s *Server) Apps(ctx context.Context, path string) (*Applications, error) {
	return s.Client().Apps(ctx, path)
}

// WaitApps polls path ("/apps" or "/apps/delta") every 100 ms until cond holds, and returns that
// listing; on timeout (ctx) the error says what the last listing was.
func (s *Server) WaitApps(ctx context.Context, path string, cond func(*Applications) bool) (*Applications, error) {
	var last *Applications
	var lastErr error
	for {
		a, err := s.Apps(ctx, path)
		if err == nil && cond(a) {
			return a, nil
		}
		if err == nil {
			last = a
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				b, _ := json.Marshal(last)
				return nil, fmt.Errorf("eurekatest: %s never matched: %w (last listing %.2000s)", path, ctx.Err(), b)
			}
			return nil, fmt.Errorf("eurekatest: %s never matched: %w (last error %v)", path, ctx.Err(), lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
