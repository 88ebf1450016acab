// Package consultest runs real Consul agents (the binary toolcache.Consul builds) for the
// Consul adapter's integration tests. It uses only the standard library.
//
// Each agent is a single server (`consul agent -server -bootstrap-expect=1`, not -dev) on
// 127.0.0.1 with free ports and a data directory under t.TempDir(), so Restart keeps the catalog
// and its indexes. DNS and gRPC are disabled. The agent is stopped in t.Cleanup and, when the test
// failed, the tail of its log is written to the test log.
package consultest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// Version is the Consul version toolcache.Consul builds.
const Version = toolcache.ConsulVersion

// EnvBinary names the environment variable that overrides the consul binary.
const EnvBinary = "GALLEON_CONSUL_BIN"

// tool is the consul binary toolcache.Consul builds into the tool cache.
var tool = toolcache.Consul().Tool()

// CachePath is where the binary is cached (internal/testing/toolcache): <cache>/bin/consul-<Version>.
func CachePath() string { return tool.CachePath() }

// Binary returns the consul binary: $GALLEON_CONSUL_BIN if set, else the cache path (see
// CachePath). If it is missing, or was built from another scripts/tools/consul/go.sum, it builds
// it (toolcache.Consul, from the repository found by walking up from the working directory to the
// go.mod of github.com/galleon-mesh/galleon; a cold build takes minutes, see `make help`) and
// fails the test with a clear message if that fails. It never skips.
func Binary(t testing.TB) string { t.Helper(); return tool.Binary(t, "consultest") }

// Options configures Start.
type Options struct {
	Datacenter string // default "dc1"
	// ACL enables ACLs with default policy deny and an initial management token, in Agent.Token.
	// Not supported together with JoinWAN (that needs ACL replication).
	ACL bool
	// JoinWAN makes the new agent join this agent's WAN pool (multi-datacenter tests); Start
	// waits until both list both datacenters in /v1/catalog/datacenters.
	JoinWAN *Agent
	// ExtraHCL is appended to the agent's config file (e.g. `limits { http_max_conns_per_client = 1000 }`).
	ExtraHCL string
	// LogLevel is the agent's log level; default "info".
	LogLevel string
	// HTTPSCert and HTTPSKey (PEM files), when set, open the agent's HTTPS listener too, at
	// Agent.HTTPSAddr. Clients are not asked for a certificate. The agent offers HTTP/2 there
	// (ALPN h2), not on the plain listener.
	HTTPSCert, HTTPSKey string
	// Dir holds the agent's config, data and log. Start uses t.TempDir() when empty; StartAgent
	// a new temporary directory, which Close removes.
	Dir string
	// Logf, if set, is told of start retries and of a kill after SIGTERM (Start: the test log).
	Logf func(format string, args ...any)
	// Detach detaches the agent's process from the program (serverproc.Detach; a test's
	// server when zero).
	Detach serverproc.Detach
}

// Agent is a running (or stopped) Consul server agent.
type Agent struct {
	Datacenter string
	HTTPAddr   string // "127.0.0.1:PORT"
	HTTPSAddr  string // "127.0.0.1:PORT" with Options.HTTPSCert, else ""
	Token      string // management token when ACL is on, else ""
	DataDir    string
	NodeName   string
	LogPath    string
	ConfigPath string

	bin    string
	dir    string
	ownDir bool // made by StartAgent: Close removes it
	opts   Options
	ports  agentPorts

	srv      *serverproc.Server // nil on a WithToken view
	controls                    // zero on a WithToken view
}

// controls are Stop (SIGKILL 10 s after SIGTERM if it has not stopped; idempotent; nothing on a
// WithToken view), Running, Kill, Pause, Resume and Pid; Agent has its own Restart.
type controls = serverproc.Controls

type agentPorts struct{ http, https, serfLAN, serfWAN, server int }

// HTTPClient is the client Do uses. It has no overall timeout (blocking queries); pass a context.
var HTTPClient = serverproc.LoopbackClient(64)

// Start starts a single-server agent (see the package comment), waits until it has a leader,
// its own node is in the catalog and (with ACL) the token works, and registers t.Cleanup to stop
// it. The agent's log goes to <tempdir>/consul.log; its last 50 lines are written to the test log
// when the test failed. It is StartAgent for a test: the binary is Binary's.
func Start(t testing.TB, opts Options) *Agent {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	a, err := newAgent(Binary(t), opts)
	if err != nil {
		t.Fatalf("consultest: %v", err)
	}
	t.Cleanup(func() {
		a.controls.Stop(t)
		if t.Failed() {
			t.Logf("%s %s", "consul agent "+a.Datacenter, a.srv.Tail(serverproc.TailLines))
		}
	})
	if err := a.start(t.Context()); err != nil {
		t.Fatalf("consultest: %v", err)
	}
	return a
}

// BinaryPath is Binary for a program that is not a test: the consul binary, built into the tool
// cache when it is missing, or why it cannot be had (one line that says what to do).
func BinaryPath() (string, error) { return tool.Path() }

// StartAgent is Start for a program that is not a test: it starts a single-server agent (see the
// package comment) in Options.Dir (a new temporary directory when empty, removed by Close) and
// waits until it serves, or returns why not. Close stops it.
func StartAgent(ctx context.Context, opts Options) (*Agent, error) {
	bin, err := BinaryPath()
	if err != nil {
		return nil, fmt.Errorf("consultest: %w", err)
	}
	a, err := newAgent(bin, opts)
	if err != nil {
		return nil, fmt.Errorf("consultest: %w", err)
	}
	if err := a.start(ctx); err != nil {
		a.Close()
		return nil, fmt.Errorf("consultest: %w", err)
	}
	return a, nil
}

// newAgent prepares an agent of bin in opts.Dir (or a new temporary directory); nothing runs yet.
func newAgent(bin string, opts Options) (*Agent, error) {
	if opts.Datacenter == "" {
		opts.Datacenter = "dc1"
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	if opts.ACL && opts.JoinWAN != nil {
		return nil, errors.New("Options.ACL together with JoinWAN is not supported")
	}
	if opts.JoinWAN != nil && opts.JoinWAN.Datacenter == opts.Datacenter {
		return nil, fmt.Errorf("JoinWAN agent is in datacenter %q too; give the new agent another Datacenter", opts.Datacenter)
	}
	dir, ownDir := opts.Dir, false
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "consultest-"); err != nil {
			return nil, err
		}
		ownDir = true
	}
	a := &Agent{
		Datacenter: opts.Datacenter,
		DataDir:    filepath.Join(dir, "data"),
		NodeName:   "consultest-" + opts.Datacenter,
		LogPath:    filepath.Join(dir, "consul.log"),
		ConfigPath: filepath.Join(dir, "agent.hcl"),
		bin:        bin,
		dir:        dir,
		ownDir:     ownDir,
		opts:       opts,
	}
	if opts.ACL {
		a.Token = newUUID()
	}
	a.srv = serverproc.New(serverproc.Spec{
		Prefix: "consultest", Name: "consul agent " + a.Datacenter, LogPath: a.LogPath,
		Ports: 5, UDP: true, Configure: a.configure, // Serf uses TCP and UDP
		Command: func() *exec.Cmd {
			cmd := exec.Command(a.bin, "agent", "-config-file", a.ConfigPath)
			cmd.Dir = a.dir
			return cmd
		},
		Ready: a.ready, // StartTimeout and StopGrace: serverproc's defaults
		Logf:  opts.Logf, Detach: opts.Detach,
	})
	a.controls = a.srv.Controls()
	return a, os.MkdirAll(a.DataDir, 0o700)
}

// start starts the prepared agent and, with JoinWAN, waits until both agents list both
// datacenters.
func (a *Agent) start(ctx context.Context) error {
	if err := a.srv.StartContext(ctx); err != nil {
		return err
	}
	j := a.opts.JoinWAN
	if j == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, serverproc.DefaultStartTimeout)
	defer cancel()
	for _, x := range []*Agent{a, j} {
		if err := x.waitDatacenters(ctx, a.Datacenter, j.Datacenter); err != nil {
			return fmt.Errorf("WAN join of %s and %s: %v", a.Datacenter, j.Datacenter, err)
		}
	}
	return nil
}

// Close stops the agent (SIGTERM, SIGKILL after 10 s) and removes the directory StartAgent made
// for it; on a WithToken view it does nothing. It is the Stop of a program that is not a test.
func (a *Agent) Close() error {
	if a.srv == nil {
		return nil
	}
	a.srv.Stop()
	if a.ownDir {
		return os.RemoveAll(a.dir)
	}
	return nil
}

// Proc is the agent's process in its form for a program that is not a test: Kill, Pause,
// Resume, Restart and Stop return errors instead of failing a test. Nil on a WithToken view.
func (a *Agent) Proc() *serverproc.Server { return a.srv }

// configure gives the agent the ports of a start attempt (HTTPS only with Options.HTTPSCert) and
// writes its config file.
func (a *Agent) configure(ports []int) error {
	a.ports = agentPorts{http: ports[0], serfLAN: ports[1], serfWAN: ports[2], server: ports[3], https: -1}
	a.HTTPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports.http))
	if a.opts.HTTPSCert != "" {
		a.ports.https = ports[4]
		a.HTTPSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports.https))
	}
	return a.writeConfig()
}

func (a *Agent) writeConfig() error {
	var b strings.Builder
	fmt.Fprintf(&b, "datacenter = %q\n", a.Datacenter)
	fmt.Fprintf(&b, "node_name = %q\n", a.NodeName)
	fmt.Fprintf(&b, "data_dir = %q\n", a.DataDir)
	fmt.Fprintf(&b, "log_level = %q\n", a.opts.LogLevel)
	b.WriteString(`server = true
bootstrap_expect = 1
bind_addr = "127.0.0.1"
advertise_addr = "127.0.0.1"
advertise_addr_wan = "127.0.0.1"
client_addr = "127.0.0.1"
disable_update_check = true
disable_remote_exec = true
leave_on_terminate = false
skip_leave_on_interrupt = true
ui_config { enabled = true }
performance { raft_multiplier = 1 }
connect { enabled = false }
peering { enabled = false }
`)
	fmt.Fprintf(&b, "ports {\n  http = %d\n  https = %d\n  grpc = -1\n  grpc_tls = -1\n  dns = -1\n  serf_lan = %d\n  serf_wan = %d\n  server = %d\n}\n",
		a.ports.http, a.ports.https, a.ports.serfLAN, a.ports.serfWAN, a.ports.server)
	if a.opts.HTTPSCert != "" {
		fmt.Fprintf(&b, "tls {\n  https {\n    cert_file = %q\n    key_file = %q\n    verify_incoming = false\n  }\n}\n", a.opts.HTTPSCert, a.opts.HTTPSKey)
	}
	if a.opts.ACL {
		fmt.Fprintf(&b, "acl {\n  enabled = true\n  default_policy = \"deny\"\n  down_policy = \"extend-cache\"\n  enable_token_persistence = true\n  tokens {\n    initial_management = %q\n  }\n}\n", a.Token)
	}
	if j := a.opts.JoinWAN; j != nil {
		fmt.Fprintf(&b, "retry_join_wan = [\"127.0.0.1:%d\"]\nretry_interval_wan = \"1s\"\n", j.ports.serfWAN)
	}
	if a.opts.ExtraHCL != "" {
		b.WriteString("\n# Options.ExtraHCL\n")
		b.WriteString(a.opts.ExtraHCL)
		b.WriteString("\n")
	}
	return os.WriteFile(a.ConfigPath, []byte(b.String()), 0o600)
}

// ready returns nil once the agent has a leader, lists its own node in the catalog (so the
// leader has established itself and writes work) and, with ACL, accepts its token.
func (a *Agent) ready(ctx context.Context) error {
	var leader string
	if err := a.Do(ctx, "GET", "/v1/status/leader", nil, &leader); err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader yet")
	}
	if a.Token != "" {
		var self struct{ AccessorID string }
		if err := a.Do(ctx, "GET", "/v1/acl/token/self", nil, &self); err != nil {
			return err
		}
	}
	var nodes []struct{ Node string }
	if err := a.Do(ctx, "GET", "/v1/catalog/nodes", nil, &nodes); err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Node == a.NodeName {
			return nil
		}
	}
	return errors.New("own node not in the catalog yet")
}

func (a *Agent) waitDatacenters(ctx context.Context, dcs ...string) error {
	return serverproc.Poll(ctx, a.srv.Process(), func(ctx context.Context) error {
		var got []string
		if err := a.Do(ctx, "GET", "/v1/catalog/datacenters", nil, &got); err != nil {
			return err
		}
		for _, dc := range dcs {
			if !slices.Contains(got, dc) {
				return fmt.Errorf("%s lists datacenters %v", a.Datacenter, got)
			}
		}
		return nil
	})
}

// Restart stops the agent and starts it again on the same ports and data directory (catalog
// and indexes are kept), then waits for the leader.
func (a *Agent) Restart(t testing.TB) {
	t.Helper()
	if a.srv == nil {
		t.Fatalf("consultest: Restart on a WithToken view of agent %s", a.Datacenter)
	}
	a.controls.Restart(t)
}

// WithToken returns a client-only view of the agent that sends token instead of a.Token ("" =
// anonymous) in Do. Stop and Restart on it do nothing.
func (a *Agent) WithToken(token string) *Agent {
	return &Agent{Datacenter: a.Datacenter, HTTPAddr: a.HTTPAddr, Token: token, DataDir: a.DataDir,
		NodeName: a.NodeName, LogPath: a.LogPath, ConfigPath: a.ConfigPath, ports: a.ports}
}

// URL is "http://" + HTTPAddr.
func (a *Agent) URL() string { return "http://" + a.HTTPAddr }

// SerfWANAddr is the agent's Serf WAN address ("127.0.0.1:PORT").
func (a *Agent) SerfWANAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports.serfWAN))
}

// Log returns the agent's log so far (all runs).
func (a *Agent) Log() string {
	b, _ := os.ReadFile(a.LogPath)
	return string(b)
}

// HTTPError is a non-2xx answer from the agent.
type HTTPError struct {
	Method, Path string
	StatusCode   int
	Body         string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("consul %s %s: %d %s: %s", e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode), strings.TrimSpace(e.Body))
}

// Do performs an HTTP request against the agent's API (path like "/v1/catalog/services?dc=dc2")
// with the agent's token, JSON-encoding body (if non-nil) and decoding the response into out (if
// non-nil). A non-2xx answer is an *HTTPError naming status and body.
func (a *Agent) Do(ctx context.Context, method, path string, body, out any) error {
	_, err := a.DoIndex(ctx, method, path, body, out)
	return err
}

// DoIndex is Do that also returns the X-Consul-Index header (0 if absent).
func (a *Agent) DoIndex(ctx context.Context, method, path string, body, out any) (uint64, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.URL()+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.Token != "" {
		req.Header.Set("X-Consul-Token", a.Token)
	}
	resp, err := HTTPClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	idx, _ := strconv.ParseUint(resp.Header.Get("X-Consul-Index"), 10, 64)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return idx, &HTTPError{Method: method, Path: path, StatusCode: resp.StatusCode, Body: string(b)}
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return idx, err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return idx, fmt.Errorf("consul %s %s: decoding response: %w", method, path, err)
	}
	return idx, nil
}

// Weights are a service instance's DNS SRV weights (Consul's default is passing 1, warning 1).
type Weights struct {
	Passing int
	Warning int
}

// Instance is one service instance for Register.
type Instance struct {
	Node        string            // catalog node; instances may share nodes
	NodeAddress string            // node address; default "127.0.0.1"
	NodeMeta    map[string]string // node metadata (taken from the node's first instance)
	ID          string            // service ID, unique per node; default Service
	Service     string            // service name
	Address     string            // service address; "" = the node's address
	Port        int
	Tags        []string
	Meta        map[string]string
	Weights     *Weights // nil = Consul's default (passing 1, warning 1)
	// Check is the status of a check attached to the instance ("passing", "warning",
	// "critical"); "" registers no check. The check's ID is "service:<ID>".
	Check string
}

// CheckID is the check ID Register gives an instance's check.
func (in Instance) CheckID() string { return "service:" + in.serviceID() }

func (in Instance) serviceID() string {
	if in.ID != "" {
		return in.ID
	}
	return in.Service
}

// TxnOpsPerRequest is how many operations Register puts in one /v1/txn request (Consul's limit).
const TxnOpsPerRequest = 64

// RegisterConcurrency is how many /v1/txn requests Register keeps in flight.
var RegisterConcurrency = 4

// Register registers service instances directly in the catalog through /v1/txn, 64 operations
// per transaction: first every distinct node, then each instance's service and (if Check is set)
// its check, kept in the same transaction. Transactions run RegisterConcurrency at a time.
// Registering an existing ID again updates it.
func Register(ctx context.Context, a *Agent, instances []Instance) error {
	type node struct {
		Node    string
		Address string
		Meta    map[string]string `json:",omitempty"`
	}
	var nodeOps []any
	seen := map[string]bool{}
	for _, in := range instances {
		if in.Node == "" || in.Service == "" {
			return fmt.Errorf("consultest.Register: instance %+v needs Node and Service", in)
		}
		if seen[in.Node] {
			continue
		}
		seen[in.Node] = true
		addr := in.NodeAddress
		if addr == "" {
			addr = "127.0.0.1"
		}
		nodeOps = append(nodeOps, map[string]any{"Node": map[string]any{
			"Verb": "set", "Node": node{Node: in.Node, Address: addr, Meta: in.NodeMeta},
		}})
	}
	if err := runTxns(ctx, a, chunk(nodeOps, TxnOpsPerRequest)); err != nil {
		return err
	}
	var batches [][]any
	var cur []any
	for _, in := range instances {
		ops := setOps(in)
		if len(cur)+len(ops) > TxnOpsPerRequest {
			batches = append(batches, cur)
			cur = nil
		}
		cur = append(cur, ops...)
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	return runTxns(ctx, a, batches)
}

// setOps are the /v1/txn operations that register instance in: its service, and its check if
// it has one.
func setOps(in Instance) []any {
	ops := []any{map[string]any{"Service": map[string]any{
		"Verb": "set", "Node": in.Node, "Service": serviceBody(in),
	}}}
	if in.Check != "" {
		ops = append(ops, map[string]any{"Check": map[string]any{
			"Verb": "set", "Check": map[string]any{
				"Node": in.Node, "CheckID": in.CheckID(), "Name": "Service '" + in.Service + "' check",
				"Status": in.Check, "ServiceID": in.serviceID(), "ServiceName": in.Service,
				"Output": "registered by consultest",
			},
		}})
	}
	return ops
}

// Replace deregisters instance old (its service, and with it its checks) and registers in, in
// one /v1/txn: what a replaced instance does to the catalog, seen by watchers as one change.
// Both instances' nodes must exist already (Register made them).
func Replace(ctx context.Context, a *Agent, old, in Instance) error {
	del := map[string]any{"Service": map[string]any{
		"Verb": "delete", "Node": old.Node, "Service": map[string]any{"ID": old.serviceID(), "Service": old.Service},
	}}
	if err := txn(ctx, a, append([]any{del}, setOps(in)...)); err != nil {
		return fmt.Errorf("consultest.Replace: %w", err)
	}
	return nil
}

// Deregister removes a service instance, and its checks, from the catalog (PUT
// /v1/catalog/deregister), as an operator or a leaving VM's agent does.
func Deregister(ctx context.Context, a *Agent, node, serviceID string) error {
	body := map[string]string{"Node": node, "ServiceID": serviceID}
	if err := a.Do(ctx, "PUT", "/v1/catalog/deregister", body, nil); err != nil {
		return fmt.Errorf("consultest.Deregister: %w", err)
	}
	return nil
}

func serviceBody(in Instance) map[string]any {
	s := map[string]any{
		"ID": in.serviceID(), "Service": in.Service, "Address": in.Address, "Port": in.Port,
	}
	if len(in.Tags) > 0 {
		s["Tags"] = in.Tags
	}
	if len(in.Meta) > 0 {
		s["Meta"] = in.Meta
	}
	if in.Weights != nil {
		s["Weights"] = in.Weights
	}
	return s
}

func chunk(ops []any, n int) [][]any {
	var out [][]any
	for len(ops) > 0 {
		k := min(n, len(ops))
		out = append(out, ops[:k])
		ops = ops[k:]
	}
	return out
}

func runTxns(ctx context.Context, a *Agent, batches [][]any) error {
	if len(batches) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan []any)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range max(1, RegisterConcurrency) {
		wg.Go(func() { txnWorker(ctx, cancel, a, work, errc) })
	}
feed:
	for _, b := range batches {
		select {
		case work <- b:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
	}
	return ctx.Err()
}

// txnWorker runs the transactions it receives until work is closed or one
// fails: then it reports the error (the first of all workers' only) and
// cancels the others.
func txnWorker(ctx context.Context, cancel context.CancelFunc, a *Agent, work <-chan []any, errc chan<- error) {
	for ops := range work {
		if err := txn(ctx, a, ops); err != nil {
			select {
			case errc <- err:
			default:
			}
			cancel()
			return
		}
	}
}

func txn(ctx context.Context, a *Agent, ops []any) error {
	var lastErr error
	for attempt := range 5 {
		err := a.Do(ctx, "PUT", "/v1/txn", ops, nil)
		if err == nil {
			return nil
		}
		lastErr = err
		// Retry only transient trouble (leader election, rate limiting), not rejected operations.
		var he *HTTPError
		if errors.As(err, &he) && he.StatusCode != http.StatusInternalServerError && he.StatusCode != http.StatusTooManyRequests && he.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("consultest.Register: %w", err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
	}
	return fmt.Errorf("consultest.Register: %w", lastErr)
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
