// Package nacostest runs a real Nacos API server for the Nacos adapter's tests: PolarisMesh's
// polaris-server 1.18.1 with its service-nacos apiserver (Nacos's HTTP v1 OpenAPI on one port,
// its gRPC v2 API on that port + 1000, as Alibaba's Nacos 2), built by toolcache.Polaris and run
// by internal/testing/polarisserver; a plain writer over the Nacos 1.x HTTP OpenAPI (Client,
// client.go), as a Nacos user's scripts and the 1.x clients write; and the registrytest Driver
// of the conformance kit (driver.go).
//
// No Alibaba Nacos server can be installed here (a Java server, no Maven repository); Polaris
// serves the same APIs over its own model, with differences a client must tolerate (see the
// tests of this package and docs/adapters/nacos.md): most visibly, it has no service or
// namespace management in the Nacos API (Client creates those through Polaris's own API), its
// Nacos login takes a Polaris token as the password, and an instance registered over HTTP v1 is
// persistent unless it says ephemeral=true.
//
// Each server runs in its own directory under t.TempDir() with the configuration of
// internal/testing/polarisserver (loopback only, free ports, cache refresh every second). The
// server is stopped in t.Cleanup and, when the test failed, the tail of its logs is written to
// the test log.
package nacostest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/polarisserver"
	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
)

// Version is the polaris-server version the harness runs.
const Version = polarisserver.Version

// Binary returns the polaris-server binary ($GALLEON_POLARIS_BIN, or the tool cache's, built
// when missing; see eurekatest.Binary), failing the test with a clear message if it cannot be had.
func Binary(t testing.TB) string { t.Helper(); return polarisserver.Tool().Binary(t, "nacostest") }

// BinaryPath is Binary for a program that is not a test: the binary, or why it cannot be had.
func BinaryPath() (string, error) { return polarisserver.Tool().Path() }

// Options configures Start.
type Options struct {
	// Auth turns Polaris's client authentication on: the Nacos API then wants a login
	// (Server.Username, Server.Password) and the token it gives.
	Auth bool
	// NoHealthCheck turns Polaris's health checks off: an instance keeps the health it was
	// written with, and needs no heartbeats (the conformance Driver's server). With them on (the
	// default, as a Nacos server runs), an instance written over HTTP v1, persistent or not,
	// turns unhealthy 25 to 40 s after its last heartbeat (Client.Beat, KeepAlive), and healthy
	// again up to 15 s after a heartbeat, even one sent before it was rewritten unhealthy.
	NoHealthCheck bool
	// TLS, if set, serves the Nacos API, HTTP and gRPC, over TLS with these files
	// (polarisserver.Options.NacosTLS: Polaris presents the certificate and asks for none).
	// BaseURL is then https:// and Client trusts TLS.CAFile.
	TLS *polarisserver.TLSFiles
	// Dir is the server's working directory (config, store, logs). Start uses t.TempDir() when
	// empty; StartServer a new temporary directory, which Close removes.
	Dir string
	// Logf, if set, is told of start retries and of a kill after SIGTERM (Start: the test log).
	Logf func(format string, args ...any)
	// Detach detaches the server's process from the program (serverproc.Detach; a test's
	// server when zero).
	Detach serverproc.Detach
}

// Server is a running (or stopped) polaris-server serving the Nacos API. Its controls
// (serverproc.Controls) are Stop (SIGKILL 30 s after SIGTERM), Kill (a crash; the store
// survives), Restart (same ports and directory, the bolt store kept; it returns once the Nacos
// API answers), Pause and Resume (SIGSTOP, SIGCONT: a hung server), Running and Pid.
type Server struct {
	Dir        string // working directory: config, store (polaris.bolt), logs
	ConfigPath string
	OutPath    string // the process's stdout and stderr; the server's own logs are in Dir/log
	// HTTPAddr is the Nacos HTTP API, "127.0.0.1:P" (what a Nacos client calls its server
	// address); GRPCAddr its gRPC API, "127.0.0.1:P+1000".
	HTTPAddr, GRPCAddr string
	// PolarisHTTPAddr is Polaris's own HTTP API (api-http), where Client creates namespaces and
	// services; PolarisGRPCAddr its service-grpc API.
	PolarisHTTPAddr, PolarisGRPCAddr string
	// Auth says client authentication is on; Username and Password are then what the Nacos
	// login wants (Polaris's default administrator and its token: public defaults, not secrets).
	Auth               bool
	Username, Password string
	// TLS says the Nacos API speaks TLS (Options.TLS); TLSConfig then verifies its certificate.
	TLS bool

	noHealthCheck bool

	ps *polarisserver.Server
	controls
}

// controls are Stop, Kill, Restart, Running and Pid (and Pause and Resume).
type controls = serverproc.Controls

// Start starts a polaris-server with the Nacos API on free loopback ports, waits until the Nacos
// API answers (GET /nacos/v1/ns/service/list, and a connection to the gRPC port) and registers
// t.Cleanup to stop it.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	ps := polarisserver.StartT(t, Binary(t), psOptions(opts))
	return newServer(ps, opts)
}

// StartServer is Start for a program that is not a test: it starts a polaris-server in
// Options.Dir (a new temporary directory when empty, removed by Close) and waits until its Nacos
// API answers, or returns why not. Close stops it.
func StartServer(ctx context.Context, opts Options) (*Server, error) {
	bin, err := BinaryPath()
	if err != nil {
		return nil, fmt.Errorf("nacostest: %w", err)
	}
	ps, err := polarisserver.Start(ctx, bin, psOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("nacostest: %w", err)
	}
	return newServer(ps, opts), nil
}

func psOptions(opts Options) polarisserver.Options {
	return polarisserver.Options{
		Prefix: "nacostest", Nacos: true, Auth: opts.Auth, NoHealthCheck: opts.NoHealthCheck,
		NacosTLS: opts.TLS, Dir: opts.Dir, Logf: opts.Logf, Detach: opts.Detach,
	}
}

func newServer(ps *polarisserver.Server, opts Options) *Server {
	s := &Server{
		Dir: ps.Dir, ConfigPath: ps.ConfigPath, OutPath: ps.OutPath,
		HTTPAddr: ps.NacosAddr, GRPCAddr: ps.NacosGRPC,
		PolarisHTTPAddr: ps.HTTPAddr, PolarisGRPCAddr: ps.GRPCAddr,
		Auth: opts.Auth, TLS: opts.TLS != nil, noHealthCheck: opts.NoHealthCheck,
		ps: ps, controls: ps.Controls(),
	}
	if opts.Auth {
		s.Username, s.Password = polarisserver.AdminUser, polarisserver.AdminToken
	}
	return s
}

// Close stops the server (SIGTERM, SIGKILL after 30 s) and removes the directory StartServer
// made for it. It is the Stop of a program that is not a test.
func (s *Server) Close() error { return s.ps.Close() }

// Proc is the server's process in its form for a program that is not a test.
func (s *Server) Proc() *serverproc.Server { return s.ps.Proc() }

// BaseURL is the Nacos HTTP server's URL, "http://127.0.0.1:P" ("https://" with Options.TLS;
// the context path /nacos is the client's to add).
func (s *Server) BaseURL() string { return s.ps.NacosScheme() + "://" + s.HTTPAddr }

// TLSConfig is a client TLS configuration that verifies the Nacos API's certificate with
// Options.TLS's CA; nil when the API speaks plaintext.
func (s *Server) TLSConfig() *tls.Config { return s.ps.NacosTLSConfig() }

// Client is a writer over the server's Nacos HTTP API (over https, trusting Options.TLS's CA,
// when it speaks TLS); its namespaces and services go through Polaris's own API (with the
// administrator's token), and so do its instance writes when auth is on (Client.ViaPolaris:
// Polaris's Nacos HTTP API cannot authenticate a write). It does not log in: Polaris's Nacos
// reads need no token, and its Nacos login fails when auth is on (see docs/adapters/nacos.md).
func (s *Server) Client() *Client {
	var hc *http.Client // NewClient's default
	if s.TLS {
		// Polaris's own API (api-http) stays plaintext: the transport's TLS is for the Nacos API.
		hc = &http.Client{Transport: &http.Transport{
			Proxy: nil, MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second, TLSClientConfig: s.TLSConfig(),
		}}
	}
	c := NewClient(s.BaseURL(), "http://"+s.PolarisHTTPAddr, hc)
	c.PolarisToken = polarisserver.AdminToken
	c.ViaPolaris = s.Auth
	return c
}

// Tail is the end of the server's logs (for a failure message).
func (s *Server) Tail(n int) string { return s.ps.Tail(n) }
