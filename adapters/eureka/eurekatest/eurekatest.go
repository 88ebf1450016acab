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
// Each server runs in its own directory under t.TempDir() with the configuration of
// internal/testing/polarisserver, which starts it (the module's release/conf/polaris-server.yaml,
// loopback only, free ports, the xds-v3, service-nacos and config-grpc apiservers removed, cache
// refresh every second).
// A change shows in /eureka/apps and /eureka/apps/delta after a cache refresh or two: use
// WaitApps. The server is stopped in t.Cleanup and, when the test failed, the tail of its logs is
// written to the test log.
package eurekatest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/polarisserver"
	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
)

const (
	// Version is the polaris-server version toolcache.Polaris builds.
	Version = polarisserver.Version
	// EnvBinary names the environment variable that overrides the polaris-server binary.
	EnvBinary = "GALLEON_POLARIS_BIN"
)

// CachePath is where the binary is cached (internal/testing/toolcache):
// <cache>/bin/polaris-server-<Version>.
func CachePath() string { return polarisserver.Tool().CachePath() }

// Binary returns the polaris-server binary: $GALLEON_POLARIS_BIN if set, else the cache path
// (see CachePath). If it is missing, or was built from another scripts/tools/polaris/go.sum or
// patch, it builds it (toolcache.Polaris, from the repository found by walking up from the
// working directory to the go.mod of github.com/galleon-mesh/galleon; a cold build takes minutes,
// see `make help`) and fails the test with a clear message if that fails. It never skips.
func Binary(t testing.TB) string { t.Helper(); return polarisserver.Tool().Binary(t, "eurekatest") }

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

	ps *polarisserver.Server
	controls
}

// controls are Stop, Kill, Restart, Running and Pid (and Pause and Resume).
type controls = serverproc.Controls

// Start starts a polaris-server (see the package comment) on free loopback ports, waits until
// GET <BaseURL>/apps answers 200 and registers t.Cleanup to stop it. It is StartServer for a
// test: the binary is Binary's.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	return newServer(polarisserver.StartT(t, Binary(t), psOptions(opts)))
}

// BinaryPath is Binary for a program that is not a test: the polaris-server binary, built into
// the tool cache when it is missing, or why it cannot be had (one line that says what to do).
func BinaryPath() (string, error) { return polarisserver.Tool().Path() }

// StartServer is Start for a program that is not a test: it starts a polaris-server (see the
// package comment) in Options.Dir (a new temporary directory when empty, removed by Close) and
// waits until its Eureka API answers, or returns why not. Close stops it.
func StartServer(ctx context.Context, opts Options) (*Server, error) {
	bin, err := BinaryPath()
	if err != nil {
		return nil, fmt.Errorf("eurekatest: %w", err)
	}
	ps, err := polarisserver.Start(ctx, bin, psOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("eurekatest: %w", err)
	}
	return newServer(ps), nil
}

func psOptions(opts Options) polarisserver.Options {
	return polarisserver.Options{
		Prefix: "eurekatest", Eureka: true, EurekaDeltaExpireInterval: opts.DeltaExpireInterval,
		Dir: opts.Dir, Logf: opts.Logf, Detach: opts.Detach,
	}
}

// newServer is the Eureka view of a started polaris-server (a restart keeps its ports).
func newServer(ps *polarisserver.Server) *Server {
	return &Server{
		Dir: ps.Dir, ConfigPath: ps.ConfigPath, OutPath: ps.OutPath,
		EurekaAddr: ps.EurekaAddr, HTTPAddr: ps.HTTPAddr, GRPCAddr: ps.GRPCAddr,
		ps: ps, controls: ps.Controls(),
	}
}

// Close stops the server (SIGTERM, SIGKILL after 30 s) and removes the directory StartServer
// made for it. It is the Stop of a program that is not a test.
func (s *Server) Close() error { return s.ps.Close() }

// Proc is the server's process in its form for a program that is not a test: Kill, Pause,
// Resume, Restart and Stop return errors instead of failing a test.
func (s *Server) Proc() *serverproc.Server { return s.ps.Proc() }

// Config returns the polaris-server configuration for the given ports (the embedded template
// with its placeholders filled in) and Options.
func Config(eurekaPort, httpPort, grpcPort int, opts Options) (string, error) {
	cfg, err := polarisserver.Config(polarisserver.Ports{Eureka: eurekaPort, HTTP: httpPort, GRPC: grpcPort},
		polarisserver.Options{EurekaDeltaExpireInterval: opts.DeltaExpireInterval})
	if err != nil {
		return "", fmt.Errorf("eurekatest: %w", err)
	}
	return cfg, nil
}

// BaseURL is the Eureka service URL, "http://127.0.0.1:PORT/eureka" (what a Netflix client calls
// its serviceUrl; Polaris also answers under /eureka/v2 and /eureka/v1).
func (s *Server) BaseURL() string { return "http://" + s.EurekaAddr + "/eureka" }

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
