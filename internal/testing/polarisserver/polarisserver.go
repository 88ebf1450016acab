// Package polarisserver runs PolarisMesh's polaris-server 1.18.1 (built by toolcache.Polaris) for
// the harnesses that test against one of the registry APIs it serves: its Eureka REST API
// (adapters/eureka/eurekatest) and its Nacos API, HTTP v1 and gRPC v2 (adapters/nacos/nacostest).
// It holds what they share: the configuration (polaris-server.yaml.tmpl, Config), the command, the
// free ports, the readiness probe of each API, the port-clash test and the log tail, on the kit
// every real-server harness shares (internal/testing/serverproc).
//
// Each server runs in its own directory (config, the bolt store polaris.bolt, logs under log/).
package polarisserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	// AdminUser is the administrator account every new Polaris store holds (store/boltdb's
	// default.go, mainUser), and AdminToken its token: what Polaris's Nacos login takes as the
	// password (apiserver/nacosserver/v1/auth.go, handleLogin) and its other APIs as the
	// X-Polaris-Token header. Both are public defaults of Polaris, not secrets of ours.
	AdminUser  = "polaris"
	AdminToken = "nu/0WRA4EqSR1FagrjRj0fZwPXuGlMpX+zCuWu4uMqy8xr1vRjisSbA25aAC3mtU8MeeRsKhQiDAynUR09I="
	// NacosGRPCOffset is how far above the Nacos HTTP port Polaris serves Nacos's gRPC API
	// (apiserver/nacosserver/server.go, Initialize), as Alibaba's Nacos does.
	NacosGRPCOffset = 1000
)

//go:embed polaris-server.yaml.tmpl
var configTemplate string

// Tool is the polaris-server binary toolcache.Polaris builds into the tool cache.
func Tool() toolcache.Tool { return toolcache.Polaris().Tool() }

// Ports are the ports of the apiservers a server keeps; an API whose port is 0 is not served.
// Polaris's own HTTP (api-http) and gRPC (service-grpc) APIs are always served.
type Ports struct {
	Eureka int // service-eureka
	Nacos  int // service-nacos: HTTP; its gRPC API listens on Nacos + NacosGRPCOffset
	HTTP   int
	GRPC   int
}

// Options configures a server.
type Options struct {
	// Prefix names the harness ("eurekatest") in messages, in the log's start markers and in the
	// name of a temporary directory.
	Prefix string
	// Eureka and Nacos ask for those APIs.
	Eureka, Nacos bool
	// EurekaDeltaExpireInterval is how long a change stays in /eureka/apps/delta (Polaris's
	// service-eureka deltaExpireInterval); default 60 s, Polaris's own. Whole seconds.
	EurekaDeltaExpireInterval time.Duration
	// Auth turns Polaris's client authentication on (auth.strategy clientOpen and clientStrict):
	// the client APIs, Nacos's included, then refuse a request without a valid token. The
	// console and admin APIs always need one (Polaris's default).
	Auth bool
	// NoHealthCheck turns Polaris's health checks off (healthcheck.open): an instance then keeps
	// the health it was written with. With them on, an instance registered over Nacos's HTTP API
	// turns unhealthy 25 to 40 s after its last heartbeat, and healthy again up to 15 s after a
	// heartbeat, even one sent before it was rewritten unhealthy.
	NoHealthCheck bool
	// NacosTLS, if set, serves the Nacos API, HTTP and gRPC both, over TLS with these files
	// (service-nacos's tls option); it needs Nacos. Polaris only presents the certificate: it
	// asks no client for one, trustedCAFile or not (see TLSFiles). The readiness probe then
	// speaks TLS to both ports, verifying the server with CAFile.
	NacosTLS *TLSFiles
	// Dir is the server's working directory (config, store, logs); a new temporary directory,
	// which Close removes, when empty.
	Dir string
	// Logf, if set, is told of start retries and of a kill after SIGTERM.
	Logf func(format string, args ...any)
	// Detach detaches the server's process from the program (a test's server when zero).
	Detach serverproc.Detach
}

// TLSFiles are the PEM files of a server's TLS, all three required.
type TLSFiles struct {
	// CertFile and KeyFile are the server's certificate and its key. Polaris serves plaintext,
	// silently, when either is empty (common/secure/tls.go, TLSInfo.IsEmpty): New refuses that.
	CertFile, KeyFile string
	// CAFile verifies CertFile: the readiness probe's root, and Polaris's trustedCAFile, which
	// its Nacos API reads but never uses (apiserver/nacosserver/v1/server.go, Run, calls
	// ServeTLS with the certificate and key only; v2/server.go, Run,
	// credentials.NewServerTLSFromFile likewise).
	CAFile string
}

// Server is a polaris-server, running or not. The addresses are those of the last start; a
// restart keeps them.
type Server struct {
	Dir        string // working directory: config, store (polaris.bolt), logs
	ConfigPath string
	OutPath    string // the process's stdout and stderr; the server's own logs are in Dir/log
	Ports      Ports
	EurekaAddr string // "127.0.0.1:PORT" of the Eureka API, "" without it
	NacosAddr  string // "127.0.0.1:PORT" of the Nacos HTTP API, "" without it
	NacosGRPC  string // "127.0.0.1:PORT" of the Nacos gRPC API (NacosAddr's port + 1000)
	HTTPAddr   string // Polaris's own HTTP API (api-http)
	GRPCAddr   string // Polaris's service-grpc API

	bin    string
	opts   Options
	ownDir bool
	srv    *serverproc.Server
	probe  *http.Client // the readiness probe's: loopback, no proxy, no connection kept
	// nacosTLS verifies the Nacos API's certificate (Options.NacosTLS's CA); nil without TLS.
	nacosTLS *tls.Config
}

// New prepares a polaris-server of bin; nothing runs yet.
func New(bin string, opts Options) (*Server, error) {
	if opts.Prefix == "" {
		opts.Prefix = "polarisserver"
	}
	if opts.EurekaDeltaExpireInterval == 0 {
		opts.EurekaDeltaExpireInterval = 60 * time.Second
	}
	if opts.EurekaDeltaExpireInterval < time.Second {
		return nil, fmt.Errorf("Options.DeltaExpireInterval %v is under a second", opts.EurekaDeltaExpireInterval)
	}
	nacosTLS, err := nacosClientTLS(opts)
	if err != nil {
		return nil, err
	}
	dir, ownDir := opts.Dir, false
	if dir == "" {
		if dir, err = os.MkdirTemp("", opts.Prefix+"-"); err != nil {
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
		probe:      &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, TLSClientConfig: nacosTLS}},
		nacosTLS:   nacosTLS,
	}
	s.srv = serverproc.New(serverproc.Spec{
		Prefix: opts.Prefix, Name: "polaris-server in " + dir, LogPath: s.OutPath,
		Ports: 4, Configure: s.configure, Command: s.command, Ready: s.ready,
		Clash: s.bindClash, Tail: s.Tail,
		// The grace is generous: polaris-server is slow to stop on SIGTERM (see
		// docs/benchmarks.md, eurekatest's Restart).
		StopGrace: 30 * time.Second,
		Logf:      opts.Logf, Detach: opts.Detach,
	})
	return s, nil
}

// nacosClientTLS checks opts.NacosTLS and returns the client configuration that verifies the
// Nacos API with its CA; nil without TLS.
func nacosClientTLS(opts Options) (*tls.Config, error) {
	f := opts.NacosTLS
	if f == nil {
		return nil, nil
	}
	if !opts.Nacos {
		return nil, errors.New("polarisserver: Options.NacosTLS without Options.Nacos")
	}
	if f.CertFile == "" || f.KeyFile == "" || f.CAFile == "" {
		return nil, errors.New("polarisserver: Options.NacosTLS needs CertFile, KeyFile and CAFile")
	}
	ca, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("polarisserver: Options.NacosTLS.CAFile: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("polarisserver: Options.NacosTLS.CAFile %s holds no PEM certificate", f.CAFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// NacosTLSConfig is a client TLS configuration that verifies the Nacos API's certificate
// (Options.NacosTLS's CA; the server name is the host dialled), nil when it speaks plaintext.
func (s *Server) NacosTLSConfig() *tls.Config {
	if s.nacosTLS == nil {
		return nil
	}
	return s.nacosTLS.Clone()
}

// NacosScheme is the Nacos HTTP API's URL scheme, "https" with Options.NacosTLS, else "http".
func (s *Server) NacosScheme() string {
	if s.nacosTLS != nil {
		return "https"
	}
	return "http"
}

// StartT starts a polaris-server of bin for a test: in t.TempDir() unless opts.Dir is set, told
// to t.Logf unless opts.Logf is set, stopped in t.Cleanup (which writes the tail of its logs to
// the log of a failed test). It fails the test if the server does not serve.
func StartT(t testing.TB, bin string, opts Options) *Server {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	s, err := New(bin, opts)
	if err != nil {
		t.Fatalf("%s: %v", opts.Prefix, err)
	}
	t.Cleanup(func() {
		s.Controls().Stop(t)
		if t.Failed() {
			t.Logf("polaris-server in %s %s", s.Dir, s.srv.Tail(serverproc.TailLines))
		}
	})
	if err := s.srv.StartContext(t.Context()); err != nil {
		t.Fatalf("%s: %v", s.opts.Prefix, err)
	}
	return s
}

// Start starts a polaris-server of bin for a program that is not a test and waits until it
// serves; on failure it has stopped it (and removed the directory it made). Close stops it.
func Start(ctx context.Context, bin string, opts Options) (*Server, error) {
	s, err := New(bin, opts)
	if err != nil {
		return nil, err
	}
	if err := s.srv.StartContext(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close stops the server (SIGTERM, SIGKILL after 30 s) and removes the directory New made for it.
func (s *Server) Close() error {
	s.srv.Stop()
	if s.ownDir {
		return os.RemoveAll(s.Dir)
	}
	return nil
}

// Proc is the server's process in its form for a program that is not a test.
func (s *Server) Proc() *serverproc.Server { return s.srv }

// Controls are the server's controls in their form for a test.
func (s *Server) Controls() serverproc.Controls { return s.srv.Controls() }

// Config returns the polaris-server configuration for the given ports (the embedded template
// with its placeholders filled in, the blocks of the APIs whose port is 0 dropped, the Nacos
// API's tls block kept with Options.NacosTLS only) and Options.
func Config(p Ports, opts Options) (string, error) {
	var tlsFiles TLSFiles
	if opts.NacosTLS != nil {
		tlsFiles = *opts.NacosTLS
	}
	cfg := strings.NewReplacer(
		"@LISTEN_IP@", "127.0.0.1",
		"@EUREKA_PORT@", strconv.Itoa(p.Eureka),
		"@NACOS_PORT@", strconv.Itoa(p.Nacos),
		"@HTTP_PORT@", strconv.Itoa(p.HTTP),
		"@GRPC_PORT@", strconv.Itoa(p.GRPC),
		"@CLIENT_AUTH@", strconv.FormatBool(opts.Auth),
		"@HEALTHCHECK@", strconv.FormatBool(!opts.NoHealthCheck),
		// Quoted: a path may hold what YAML reads otherwise (": ", "#").
		"@NACOS_TLS_CERT@", strconv.Quote(tlsFiles.CertFile),
		"@NACOS_TLS_KEY@", strconv.Quote(tlsFiles.KeyFile),
		"@NACOS_TLS_CA@", strconv.Quote(tlsFiles.CAFile),
	).Replace(configTemplate)
	cfg, err := keepBlocks(cfg, map[string]bool{
		"eureka": p.Eureka != 0, "nacos": p.Nacos != 0, "nacos-tls": p.Nacos != 0 && opts.NacosTLS != nil,
	})
	if err != nil {
		return "", err
	}
	if d := opts.EurekaDeltaExpireInterval; d != 0 && d != 60*time.Second && p.Eureka != 0 {
		const def = "      deltaExpireInterval: 60\n"
		if !strings.Contains(cfg, def) {
			return "", errors.New("polarisserver: polaris-server.yaml.tmpl has no `deltaExpireInterval: 60` line to change")
		}
		cfg = strings.Replace(cfg, def, fmt.Sprintf("      deltaExpireInterval: %d\n", int(d.Round(time.Second)/time.Second)), 1)
	}
	return cfg, nil
}

// keepBlocks drops the "# @BEGIN name@" and "# @END name@" lines, and the lines between them
// when keep[name] is false.
func keepBlocks(cfg string, keep map[string]bool) (string, error) {
	var b strings.Builder
	open := ""
	sc := bufio.NewScanner(strings.NewReader(cfg))
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "# @BEGIN "); ok {
			name = strings.TrimSuffix(name, "@")
			if _, known := keep[name]; !known || open != "" {
				return "", fmt.Errorf("polarisserver: template line %q: unknown or nested block", line)
			}
			open = name
			continue
		}
		if strings.HasPrefix(line, "# @END ") {
			open = ""
			continue
		}
		if open == "" || keep[open] {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	if open != "" {
		return "", fmt.Errorf("polarisserver: template block %s is not closed", open)
	}
	return b.String(), sc.Err()
}

// configure gives the server the ports of a start attempt and writes its configuration. The
// Nacos port P needs P+1000 free as well: if ports[1]'s is taken, it looks for another P.
func (s *Server) configure(ports []int) error {
	p := Ports{HTTP: ports[2], GRPC: ports[3]}
	if s.opts.Eureka {
		p.Eureka = ports[0]
	}
	if s.opts.Nacos {
		nacos, err := nacosPort(ports[1], ports)
		if err != nil {
			return err
		}
		p.Nacos = nacos
	}
	s.Ports = p
	s.EurekaAddr, s.NacosAddr, s.NacosGRPC = addr(p.Eureka), addr(p.Nacos), ""
	if p.Nacos != 0 {
		s.NacosGRPC = addr(p.Nacos + NacosGRPCOffset)
	}
	s.HTTPAddr, s.GRPCAddr = addr(p.HTTP), addr(p.GRPC)
	cfg, err := Config(p, s.opts)
	if err != nil {
		return err
	}
	return os.WriteFile(s.ConfigPath, []byte(cfg), 0o600)
}

func addr(port int) string {
	if port == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// nacosPort returns a free port P, first, if fits, with P+NacosGRPCOffset free too and neither
// among taken. A port can be taken between this test and the server's bind: serverproc then
// retries on fresh ports (bindClash).
func nacosPort(first int, taken []int) (int, error) {
	fits := func(p int) bool {
		g := p + NacosGRPCOffset
		if g > 65535 || slices.Contains(taken, g) {
			return false
		}
		l, err := net.Listen("tcp", addr(g))
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	if fits(first) {
		return first, nil
	}
	for range 50 {
		ps, err := serverproc.FreePorts(1, false)
		if err != nil {
			return 0, err
		}
		if !slices.Contains(taken, ps[0]) && fits(ps[0]) {
			return ps[0], nil
		}
	}
	return 0, errors.New("no free port P with P+1000 free for the Nacos API")
}

// command is the server's command: the store and logs are relative paths, under Dir. TZ=UTC:
// Polaris writes local times into instance records and parses them back as UTC.
func (s *Server) command() *exec.Cmd {
	cmd := exec.Command(s.bin, "start", "-c", s.ConfigPath)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), "TZ=UTC")
	return cmd
}

// ready returns nil once every API asked for answers: Polaris's own HTTP API (any answer: the
// Nacos API can serve before it), the Eureka listing, the Nacos service list and a connection to
// the Nacos gRPC port. With Options.NacosTLS both Nacos probes speak TLS and verify the server
// with its CA: a plaintext probe of the HTTP port would get a 400 from Go's TLS server, and one
// of api-http instead would not say that the Nacos API serves.
func (s *Server) ready(ctx context.Context) error {
	const timeout = 5 * time.Second
	if err := s.answers(ctx, "http://"+s.HTTPAddr+"/", timeout); err != nil {
		return err
	}
	if s.EurekaAddr != "" {
		if _, err := s.getJSON(ctx, "http://"+s.EurekaAddr+"/eureka/apps", timeout); err != nil {
			return err
		}
	}
	if s.NacosAddr != "" {
		return s.nacosReady(ctx, timeout)
	}
	return nil
}

// nacosReady returns nil once the Nacos HTTP API lists services and the gRPC port takes a
// connection (with TLS, a completed handshake: the certificate served and verified).
func (s *Server) nacosReady(ctx context.Context, timeout time.Duration) error {
	q := url.Values{"pageNo": {"1"}, "pageSize": {"1"}}
	body, err := s.getJSON(ctx, s.NacosScheme()+"://"+s.NacosAddr+"/nacos/v1/ns/service/list?"+q.Encode(), timeout)
	if err != nil {
		return err
	}
	if !bytes.Contains(body, []byte(`"count"`)) {
		return fmt.Errorf("GET /nacos/v1/ns/service/list answered %.200s", body)
	}
	d := net.Dialer{Timeout: timeout}
	if s.nacosTLS == nil {
		c, err := d.DialContext(ctx, "tcp", s.NacosGRPC)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	}
	conf := s.NacosTLSConfig()
	conf.NextProtos = []string{"h2"} // as a gRPC client asks
	c, err := (&tls.Dialer{NetDialer: &d, Config: conf}).DialContext(ctx, "tcp", s.NacosGRPC)
	if err != nil {
		return fmt.Errorf("the Nacos gRPC API over TLS: %w", err)
	}
	c.Close()
	return nil
}

// answers returns nil once a GET of u gets any HTTP answer.
func (s *Server) answers(ctx context.Context, u string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := s.probe.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// getJSON is a GET with Accept: application/json that must answer 2xx.
func (s *Server) getJSON(ctx context.Context, u string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.probe.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(nil, resp.Body, 1<<20)); err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("GET %s answered %s: %.200s", req.URL.Path, resp.Status, buf.Bytes())
	}
	return buf.Bytes(), nil
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

// Tail is the end of the process output and of Polaris's own logs that matter when a test
// fails: the error logs, the default log (requests and cache builds) and the Nacos API's log.
func (s *Server) Tail(n int) string {
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
	if s.NacosAddr != "" {
		serverproc.TailFile(&b, filepath.Join(s.Dir, "log", "runtime", "nacos-apiserver.log"), n/2, nil)
	}
	return b.String()
}

// configDumpKey matches the lines of the YAML configuration polaris-server prints at every start.
var configDumpKey = regexp.MustCompile(`^(\s|- |[A-Za-z0-9_-]+:(\s|$))`)

func isConfigDump(line string) bool { return configDumpKey.MatchString(line) }
