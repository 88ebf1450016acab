// Package eurekatest runs a real Eureka REST API server for the Eureka adapter's tests: PolarisMesh's
// polaris-server 1.18.1, built by scripts/eureka.sh. It uses only the standard library.
//
// No Netflix or Spring Eureka server can be installed here (no Maven repository); Polaris serves
// the same REST API (/eureka/apps, /eureka/apps/delta, /eureka/apps/{APP}[/{ID}], status
// overrides, XML and JSON) over an embedded bolt store, with differences from Netflix's a client
// must tolerate (eurekatest_test.go shows them). scripts/eureka.sh builds it with one fix: without
// it a cancelled instance stays listed until its lease expires (scripts/tools/polaris/*.patch).
//
// Each server runs in its own directory under t.TempDir() with the configuration
// polaris-server.yaml.tmpl (the module's release/conf/polaris-server.yaml, loopback only, free
// ports, the xds-v3, service-nacos and config-grpc apiservers removed, cache refresh every second).
// A change shows in /eureka/apps and /eureka/apps/delta within about 2 s: use WaitApps. The
// server is stopped in t.Cleanup and, when the test failed, the tail of its logs is written to
// the test log.
package eurekatest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// Version is the polaris-server version scripts/eureka.sh builds.
const Version = "1.18.1"

// EnvBinary names the environment variable that overrides the polaris-server binary.
const EnvBinary = "GALLEON_POLARIS_BIN"

const (
	// startTimeout bounds one start: the process up and GET /eureka/apps answering 200
	// (about 0.5 s on an idle machine).
	startTimeout = 60 * time.Second
	// stopGrace: polaris-server takes 5-15 s to stop on SIGTERM.
	stopGrace     = 30 * time.Second
	startAttempts = 5
	tailLines     = 50
)

//go:embed polaris-server.yaml.tmpl
var configTemplate string

// CachePath is where scripts/eureka.sh build puts the binary (internal/testing/toolcache, the path
// scripts/cache-dir.sh defines): <cache>/bin/polaris-server-<Version>.
func CachePath() string { return toolcache.Bin("polaris-server", Version) }

// Binary returns the polaris-server binary: $GALLEON_POLARIS_BIN if set, else the cache path
// (see CachePath). If it is missing it runs scripts/eureka.sh build (found by walking up from the
// working directory to the go.mod of github.com/galleon-mesh/galleon; about 3 min cold) and fails
// the test with a clear message if that fails. It never skips.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvBinary); p != "" {
		if err := checkExecutable(p); err != nil {
			t.Fatalf("eurekatest: $%s=%s: %v", EnvBinary, p, err)
		}
		return p
	}
	p := CachePath()
	if checkExecutable(p) == nil {
		return p
	}
	// Two tests (or test binaries) building at once is safe: the script takes a lock per
	// binary, and the second finds the first's result.
	root, err := toolcache.RepoRoot()
	if err != nil {
		t.Fatalf("eurekatest: polaris-server %s is not at %s and scripts/eureka.sh cannot be found to build it: %v (run `make eureka` in the repository, or set $%s)", Version, p, err, EnvBinary)
	}
	script := filepath.Join(root, "scripts", "eureka.sh")
	t.Logf("eurekatest: %s missing, running %s build (about 3 min the first time)...", p, script)
	start := time.Now()
	cmd := exec.Command(script, "build")
	cmd.Dir = root
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr // build progress; the test log would only show it at the end
	if err := cmd.Run(); err != nil {
		t.Fatalf("eurekatest: %s build failed: %v (see its output above; run `make eureka` to retry)", script, err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	built := strings.TrimSpace(lines[len(lines)-1])
	if err := checkExecutable(built); err != nil {
		t.Fatalf("eurekatest: %s build printed %q: %v", script, built, err)
	}
	t.Logf("eurekatest: built %s in %v", built, time.Since(start).Round(time.Second))
	return built
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// Options configures Start.
type Options struct {
	// DeltaExpireInterval is how long a change stays in /eureka/apps/delta (Polaris's
	// service-eureka deltaExpireInterval); default 60 s, Polaris's own. Whole seconds.
	DeltaExpireInterval time.Duration
}

// Server is a running (or stopped) polaris-server serving the Eureka REST API.
type Server struct {
	Dir        string // working directory: config, store (polaris.bolt), logs
	ConfigPath string
	OutPath    string // the process's stdout and stderr; the server's own logs are in Dir/log
	EurekaAddr string // "127.0.0.1:PORT"
	HTTPAddr   string // Polaris's own HTTP API (api-http), "127.0.0.1:PORT"
	GRPCAddr   string // Polaris's service-grpc API, "127.0.0.1:PORT"

	bin  string
	opts Options

	mu      sync.Mutex
	proc    *serverproc.Process
	outFile *os.File // closed once the process is stopped
}

// HTTPClient is the client the helpers use; no overall timeout: pass a context.
var HTTPClient = &http.Client{Transport: &http.Transport{
	Proxy:               nil,
	MaxIdleConnsPerHost: 16,
	IdleConnTimeout:     30 * time.Second,
	DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
}}

// Start starts a polaris-server (see the package comment) on free loopback ports, waits until
// GET <BaseURL>/apps answers 200 and registers t.Cleanup to stop it.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.DeltaExpireInterval == 0 {
		opts.DeltaExpireInterval = 60 * time.Second
	}
	if opts.DeltaExpireInterval < time.Second {
		t.Fatalf("eurekatest: Options.DeltaExpireInterval %v is under a second", opts.DeltaExpireInterval)
	}
	bin := Binary(t)
	dir := t.TempDir()
	s := &Server{
		Dir:        dir,
		ConfigPath: filepath.Join(dir, "polaris-server.yaml"),
		OutPath:    filepath.Join(dir, "polaris-server.out"),
		bin:        bin,
		opts:       opts,
	}
	t.Cleanup(func() {
		s.Stop(t)
		if t.Failed() {
			t.Logf("polaris-server %s", s.tail(tailLines))
		}
	})
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		ports, err := freePorts(3)
		if err != nil {
			t.Fatalf("eurekatest: free ports: %v", err)
		}
		s.EurekaAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		s.HTTPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
		s.GRPCAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2]))
		if err := s.writeConfig(ports[0], ports[1], ports[2]); err != nil {
			t.Fatal(err)
		}
		lastErr = s.start()
		if lastErr == nil {
			return s
		}
		s.Stop(t)
		if !s.bindClash() {
			break
		}
		t.Logf("eurekatest: port clash starting polaris-server (attempt %d), retrying on other ports", attempt)
	}
	t.Fatalf("eurekatest: starting polaris-server in %s: %v", dir, lastErr)
	return nil
}

// Config returns the polaris-server configuration for the given ports (the embedded template
// with its placeholders filled in, as `scripts/eureka.sh config` writes it) and Options.
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

func (s *Server) writeConfig(eurekaPort, httpPort, grpcPort int) error {
	cfg, err := Config(eurekaPort, httpPort, grpcPort, s.opts)
	if err != nil {
		return err
	}
	return os.WriteFile(s.ConfigPath, []byte(cfg), 0o600)
}

// start launches the process and waits until the Eureka API answers.
func (s *Server) start() error {
	out, err := os.OpenFile(s.OutPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "==== eurekatest: starting %s start -c %s in %s (%s)\n", s.bin, s.ConfigPath, s.Dir, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin, "start", "-c", s.ConfigPath)
	// Store and logs are relative paths. TZ=UTC: Polaris writes local times into instance records
	// and parses them back as UTC.
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.Dir, out, out
	cmd.Env = append(os.Environ(), "TZ=UTC")
	p, err := serverproc.Start(cmd)
	if err != nil {
		out.Close()
		return err
	}
	s.mu.Lock()
	s.proc, s.outFile = p, out
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	return s.waitReady(ctx, p)
}

func (s *Server) waitReady(ctx context.Context, p *serverproc.Process) error {
	delay := 20 * time.Millisecond
	var lastErr error
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("polaris-server exited: %v (last: %v)", err, lastErr)
		}
		r, err := s.Do(ctx, "GET", "/apps", "application/json", nil)
		if err == nil && r.Status == http.StatusOK {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("GET /apps answered %d", r.Status)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), lastErr)
		case <-time.After(delay):
		}
		if delay < 200*time.Millisecond {
			delay = delay * 3 / 2
		}
	}
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

// Stop sends SIGTERM and waits for the exit (SIGKILL after 30 s; Polaris takes 5-15 s).
// Idempotent; a stopped server can be started again with Restart.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	p, out := s.proc, s.outFile
	s.mu.Unlock()
	if p == nil {
		return
	}
	if killed := p.Stop(stopGrace); killed {
		t.Logf("eurekatest: polaris-server did not stop %v after SIGTERM, killed it", stopGrace)
	}
	out.Close() // a second Stop closes it again: harmless
}

// Kill ends the server with SIGKILL (a crash: no clean shutdown) and waits for it. The store
// survives; Restart starts it again.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	p, out := s.proc, s.outFile
	s.mu.Unlock()
	if p == nil {
		return
	}
	if exited, _ := p.Exited(); !exited {
		if err := p.Signal(syscall.SIGKILL); err != nil {
			t.Logf("eurekatest: SIGKILL: %v", err)
		}
		<-p.Done()
	}
	out.Close()
}

// Restart stops the server (if it runs) and starts it again on the same ports and directory:
// the registry is kept (the bolt store), then waits until the Eureka API answers.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	if err := serverproc.RestartOnSamePorts(s.start, func() { s.Stop(t) }, s.bindClash); err != nil {
		t.Fatalf("eurekatest: restarting polaris-server in %s: %v", s.Dir, err)
	}
}

// Running reports whether the server's process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return false
	}
	exited, _ := p.Exited()
	return !exited
}

// Pid is the server's process id (0 before the first start).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid()
}

// tail is the end of the process output and of Polaris's own logs that matter when a test
// fails: the error logs and the default log (Eureka requests and cache builds).
func (s *Server) tail(n int) string {
	var b strings.Builder
	tailFile(&b, s.OutPath, n, isConfigDump)
	errs, _ := filepath.Glob(filepath.Join(s.Dir, "log", "runtime", "*-error.log"))
	sort.Strings(errs)
	for _, f := range errs {
		if st, err := os.Stat(f); err == nil && st.Size() > 0 {
			tailFile(&b, f, n/2, nil)
		}
	}
	tailFile(&b, filepath.Join(s.Dir, "log", "runtime", "polaris-default.log"), n/2, nil)
	return b.String()
}

// configDumpKey matches the lines of the YAML configuration polaris-server prints at every start.
var configDumpKey = regexp.MustCompile(`^(\s|- |[A-Za-z0-9_-]+:(\s|$))`)

func isConfigDump(line string) bool { return configDumpKey.MatchString(line) }

// tailFile writes the last n lines of path to b, leaving out those skip matches (if not nil).
func tailFile(b *strings.Builder, path string, n int, skip func(string) bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(b, "--- %s: %v ---\n", path, err)
		return
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if skip == nil || !skip(l) {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	fmt.Fprintf(b, "--- last %d lines of %s ---\n%s\n", len(lines), path, strings.Join(lines, "\n"))
}

// Response is an answer of the Eureka API.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends one request to BaseURL()+path (path like "/apps" or "/apps/APP/ID/status?value=UP")
// with Accept: accept (none if ""). A body that starts with '<' is sent as application/xml,
// any other as application/json. Any status is returned, not an error.
func (s *Server) Do(ctx context.Context, method, path, accept string, body []byte) (*Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.BaseURL()+path, rd)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if body != nil {
		ct := "application/json"
		if len(bytes.TrimSpace(body)) > 0 && bytes.TrimSpace(body)[0] == '<' {
			ct = "application/xml"
		}
		req.Header.Set("Content-Type", ct)
	}
	resp, err := HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("eureka %s %s: reading the answer: %w", method, path, err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// StatusError is an answer with an unexpected status.
type StatusError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("eureka %s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), strings.TrimSpace(e.Body))
}

func (s *Server) expect(ctx context.Context, method, path string, body []byte, ok ...int) error {
	r, err := s.Do(ctx, method, path, "", body)
	if err != nil {
		return err
	}
	for _, c := range ok {
		if r.Status == c {
			return nil
		}
	}
	return &StatusError{Method: method, Path: path, Status: r.Status, Body: string(r.Body)}
}

// Instance is one instance for Register, in Netflix's terms.
type Instance struct {
	App              string // application name; Eureka upper-cases it
	ID               string // instanceId
	HostName         string // default IPAddr
	IPAddr           string
	VIPAddress       string // default lower-case App
	SecureVIPAddress string
	Port             int // 0: no (non-secure) port
	SecurePort       int // 0: no secure port
	Status           string
	Metadata         map[string]string
	// LeaseDuration is leaseInfo.durationInSecs, default 1 h (Eureka's default is 90 s). It does
	// not keep an instance listed on its own: Polaris's heartbeat TTL is
	// min(ceil(durationInSecs/3), renewalIntervalInSecs), 30 s here, and an instance nobody
	// renews leaves /apps about 90-100 s after it registered, whatever this is. A test that
	// runs longer must Renew its instances (adapters/eureka's TestPolarisRealServer does).
	LeaseDuration time.Duration
}

// JSON is the registration body, Netflix's {"instance": {...}}.
func (in Instance) JSON() []byte {
	host := in.HostName
	if host == "" {
		host = in.IPAddr
	}
	vip := in.VIPAddress
	if vip == "" {
		vip = strings.ToLower(in.App)
	}
	status := in.Status
	if status == "" {
		status = "UP"
	}
	lease := in.LeaseDuration
	if lease == 0 {
		lease = time.Hour
	}
	type port struct {
		Value   int    `json:"$"`
		Enabled string `json:"@enabled"`
	}
	body := map[string]any{
		"instanceId": in.ID, "app": strings.ToUpper(in.App), "hostName": host, "ipAddr": in.IPAddr,
		"vipAddress": vip, "secureVipAddress": in.SecureVIPAddress, "status": status,
		"port":       port{in.Port, strconv.FormatBool(in.Port != 0)},
		"securePort": port{in.SecurePort, strconv.FormatBool(in.SecurePort != 0)},
		"dataCenterInfo": map[string]string{
			"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn",
		},
		"leaseInfo": map[string]int{"renewalIntervalInSecs": 30, "durationInSecs": int(lease / time.Second)},
	}
	if len(in.Metadata) > 0 {
		body["metadata"] = in.Metadata
	}
	b, _ := json.Marshal(map[string]any{"instance": body})
	return b
}

// Register registers (or re-registers) an instance: POST /apps/{APP} with Netflix JSON. Polaris
// answers 204 like Eureka. It shows in /apps after the next cache refresh (WaitApps).
func (s *Server) Register(ctx context.Context, in Instance) error {
	if in.App == "" || in.ID == "" || in.IPAddr == "" {
		return fmt.Errorf("eurekatest.Register: instance %+v needs App, ID and IPAddr", in)
	}
	return s.expect(ctx, "POST", "/apps/"+url.PathEscape(strings.ToUpper(in.App)), in.JSON(), http.StatusNoContent, http.StatusOK)
}

// Cancel deregisters an instance: DELETE /apps/{APP}/{ID}. (Polaris answers 200 even for an
// unknown instance.)
func (s *Server) Cancel(ctx context.Context, app, id string) error {
	return s.expect(ctx, "DELETE", instancePath(app, id), nil, http.StatusOK)
}

// Renew is a heartbeat: PUT /apps/{APP}/{ID}. (Polaris answers 200 even for an unknown instance,
// where Eureka answers 404.)
func (s *Server) Renew(ctx context.Context, app, id string) error {
	return s.expect(ctx, "PUT", instancePath(app, id), nil, http.StatusOK)
}

// SetStatus sets a status override: PUT /apps/{APP}/{ID}/status?value=STATUS (e.g.
// OUT_OF_SERVICE).
func (s *Server) SetStatus(ctx context.Context, app, id, status string) error {
	return s.expect(ctx, "PUT", instancePath(app, id)+"/status?value="+url.QueryEscape(status), nil, http.StatusOK)
}

// ClearStatus removes a status override: DELETE /apps/{APP}/{ID}/status (the instance is UP
// again on Polaris).
func (s *Server) ClearStatus(ctx context.Context, app, id string) error {
	return s.expect(ctx, "DELETE", instancePath(app, id)+"/status", nil, http.StatusOK)
}

func instancePath(app, id string) string {
	return "/apps/" + url.PathEscape(strings.ToUpper(app)) + "/" + url.PathEscape(id)
}

// Applications is the JSON listing of /apps and /apps/delta, as far as the tests read it.
type Applications struct {
	VersionsDelta string        `json:"versions__delta"`
	AppsHashcode  string        `json:"apps__hashcode"`
	Application   []Application `json:"application"`
}

// Application is one application of a listing.
type Application struct {
	Name     string         `json:"name"`
	Instance []InstanceInfo `json:"instance"`
}

// InstanceInfo is one instance of a listing, as far as the tests read it.
type InstanceInfo struct {
	InstanceID       string            `json:"instanceId"`
	App              string            `json:"app"`
	HostName         string            `json:"hostName"`
	IPAddr           string            `json:"ipAddr"`
	VIPAddress       string            `json:"vipAddress"`
	Status           string            `json:"status"`
	OverriddenStatus string            `json:"overriddenStatus"`
	Port             PortInfo          `json:"port"`
	SecurePort       PortInfo          `json:"securePort"`
	Metadata         map[string]string `json:"metadata"`
	ActionType       string            `json:"actionType"`
}

// PortInfo is {"$": 8080, "@enabled": "true"}; number and flag are accepted as JSON strings
// (Netflix) or as a number and a boolean (Polaris).
type PortInfo struct {
	Port    int
	Enabled bool
}

// UnmarshalJSON accepts both spellings.
func (p *PortInfo) UnmarshalJSON(b []byte) error {
	var raw struct {
		Port    json.RawMessage `json:"$"`
		Enabled json.RawMessage `json:"@enabled"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw.Port) > 0 {
		n, err := strconv.Atoi(strings.Trim(string(raw.Port), `"`))
		if err != nil {
			return fmt.Errorf("port %s: %w", raw.Port, err)
		}
		p.Port = n
	}
	if len(raw.Enabled) > 0 {
		e, err := strconv.ParseBool(strings.Trim(string(raw.Enabled), `"`))
		if err != nil {
			return fmt.Errorf("port @enabled %s: %w", raw.Enabled, err)
		}
		p.Enabled = e
	}
	return nil
}

// Find returns the instance app/id of the listing, or nil.
func (a *Applications) Find(app, id string) *InstanceInfo {
	for i := range a.Application {
		if !strings.EqualFold(a.Application[i].Name, app) {
			continue
		}
		for j := range a.Application[i].Instance {
			if a.Application[i].Instance[j].InstanceID == id {
				return &a.Application[i].Instance[j]
			}
		}
	}
	return nil
}

// Count is the number of instances in the listing.
func (a *Applications) Count() int {
	n := 0
	for _, app := range a.Application {
		n += len(app.Instance)
	}
	return n
}

// Apps reads path ("/apps" or "/apps/delta") as JSON.
func (s *Server) Apps(ctx context.Context, path string) (*Applications, error) {
	r, err := s.Do(ctx, "GET", path, "application/json", nil)
	if err != nil {
		return nil, err
	}
	if r.Status != http.StatusOK {
		return nil, &StatusError{Method: "GET", Path: path, Status: r.Status, Body: string(r.Body)}
	}
	var doc struct {
		Applications Applications `json:"applications"`
	}
	if err := json.Unmarshal(r.Body, &doc); err != nil {
		return nil, fmt.Errorf("eureka GET %s: %w in %.300s", path, err, r.Body)
	}
	return &doc.Applications, nil
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

// freePorts returns n distinct free TCP ports on 127.0.0.1. Another process can take one before
// polaris-server binds it: Start retries.
func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
