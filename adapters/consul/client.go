package consul

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/prometheus/client_golang/prometheus"
)

// neverMatches is a filter no instance matches: a probe with it returns an
// empty body but the service's current X-Consul-Index, which is all a
// sweep needs to know whether the service changed since it was fetched.
const neverMatches = `Service.ID == "galleon-probe-matches-no-instance"`

// client wraps one api.Client for one Run: its transport (and so its
// keep-alive connections and their goroutines) lives and dies with the Run.
type client struct {
	api       *api.Client
	transport *http.Transport
	tokens    *tokenSource
	cfg       Config
	m         *metrics
	// protoMajor is the HTTP major version of the agent's last answer.
	protoMajor *atomic.Int32
	open       *openConns
}

// apiConfig builds the api.Config: api.DefaultConfig reads every CONSUL_*
// variable, and the flags given override it.
func apiConfig(cfg Config) (*api.Config, error) {
	ac := api.DefaultConfig()
	switch {
	case cfg.Address != "":
		ac.Address = cfg.Address
	case os.Getenv(api.HTTPAddrEnvName) == "":
		// The client's default is localhost:8500, which may resolve to
		// ::1 where the agent listens on 127.0.0.1 only.
		ac.Address = "127.0.0.1:8500"
	}
	if cfg.CAFile != "" {
		ac.TLSConfig.CAFile = cfg.CAFile
	}
	if cfg.CertFile != "" {
		ac.TLSConfig.CertFile = cfg.CertFile
	}
	if cfg.KeyFile != "" {
		ac.TLSConfig.KeyFile = cfg.KeyFile
	}
	if cfg.TLSServerName != "" {
		ac.TLSConfig.Address = cfg.TLSServerName
	}
	if cfg.ConsulNamespace != "" {
		ac.Namespace = cfg.ConsulNamespace
	}
	if cfg.Partition != "" {
		ac.Partition = cfg.Partition
	}
	tlsWanted := cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" || cfg.TLSServerName != ""
	if tlsWanted && !strings.Contains(ac.Address, "://") {
		ac.Scheme = "https"
	}
	return ac, nil
}

// usesHTTPS reports whether requests to the agent go over TLS.
func usesHTTPS(ac *api.Config) bool {
	return ac.Scheme == "https" || strings.HasPrefix(ac.Address, "https://")
}

// newClient builds the client of one Run.
func newClient(cfg Config, m *metrics) (*client, error) {
	ac, err := apiConfig(cfg)
	if err != nil {
		return nil, err
	}
	tr := cleanhttp.DefaultPooledTransport()
	// Every blocking query and fetch worker keeps a connection: allow them
	// all to stay idle between requests instead of redialling.
	tr.MaxIdleConnsPerHost = cfg.FetchConcurrency + 8
	if rest, ok := strings.CutPrefix(ac.Address, "unix://"); ok {
		// api.NewClient would replace our HTTP client (and its request
		// counting) for unix sockets: dial the socket ourselves.
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", rest)
		}
		ac.Address = "consul"
		ac.Scheme = "http"
	}
	dial := tr.DialContext
	open := &openConns{set: map[*countingConn]bool{}, gauge: m.connections}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return open.add(&countingConn{Conn: conn, m: m, open: open}), nil
	}
	if usesHTTPS(ac) {
		tlsCfg, err := api.SetupTLSConfig(&ac.TLSConfig)
		if err != nil {
			return nil, fmt.Errorf("TLS to the agent (--%s, --%s, --%s): %w", flagTLSCA, flagTLSCert, flagTLSKey, err)
		}
		tr.TLSClientConfig = tlsCfg
		// Over HTTP/2 (the HTTPS listener), a connection that went
		// silent is found by pings within 45 s, and every query on it
		// fails and is made again, whatever its wait: so service
		// watches can wait Consul's longest (see followService).
		tr.HTTP2 = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
	}
	ac.Transport = tr
	protoMajor := new(atomic.Int32)
	ac.HttpClient = &http.Client{Transport: &countingTransport{base: tr, m: m, protoMajor: protoMajor}}
	ac.WaitTime = 0
	tokens := newTokenSource(cfg.Token, cfg.TokenFile, ac.Token, os.Getenv(api.HTTPTokenFileEnvName))
	ac.Token, ac.TokenFile = "", "" // set per request from tokens
	c, err := api.NewClient(ac)
	if err != nil {
		return nil, err
	}
	return &client{api: c, transport: tr, tokens: tokens, cfg: cfg, m: m, protoMajor: protoMajor, open: open}, nil
}

// close closes every connection, so that their goroutines end with Run.
// Closing the idle ones is not enough over HTTP/2: a connection whose
// streams were just cancelled may not count as idle yet.
func (c *client) close() {
	c.transport.CloseIdleConnections()
	c.open.closeAll()
}

// openConns is the set of connections to the agent not closed yet.
type openConns struct {
	mu    sync.Mutex
	set   map[*countingConn]bool
	gauge prometheus.Gauge
}

func (o *openConns) add(c *countingConn) *countingConn {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.set[c] = true
	o.gauge.Set(float64(len(o.set)))
	return c
}

func (o *openConns) remove(c *countingConn) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.set, c)
	o.gauge.Set(float64(len(o.set)))
}

func (o *openConns) closeAll() {
	o.mu.Lock()
	conns := make([]*countingConn, 0, len(o.set))
	for c := range o.set {
		conns = append(conns, c)
	}
	o.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// query returns the options of one request to datacenter dc, bounded in
// time: a blocking query (index above 0) waits Config.Wait at most, and
// answers after at most wait + wait/16 (Consul's jitter), so anything much
// longer is a dead connection.
func (c *client) query(ctx context.Context, dc string, index uint64) (*api.QueryOptions, context.CancelFunc) {
	return c.queryWaiting(ctx, dc, index, c.cfg.Wait)
}

// queryWaiting is query with a blocking query's wait of its own.
func (c *client) queryWaiting(ctx context.Context, dc string, index uint64, wait time.Duration) (*api.QueryOptions, context.CancelFunc) {
	q := &api.QueryOptions{
		Datacenter: dc,
		Namespace:  c.cfg.ConsulNamespace,
		Partition:  c.cfg.Partition,
		Token:      c.tokens.token(),
		WaitIndex:  index,
	}
	timeout := 30 * time.Second
	if index > 0 {
		q.WaitTime = wait
		timeout += wait + wait/16
	}
	switch c.cfg.Consistency {
	case ConsistencyStale:
		q.AllowStale = true
	case ConsistencyConsistent:
		q.RequireConsistent = true
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return q.WithContext(ctx), cancel
}

// services lists the service names and their tags, and whether ACLs hid
// some of them.
func (c *client) services(ctx context.Context, dc string, index uint64) (map[string][]string, uint64, bool, error) {
	q, cancel := c.query(ctx, dc, index)
	defer cancel()
	out, meta, err := c.api.Catalog().Services(q)
	if err != nil {
		return nil, 0, false, explain("GET /v1/catalog/services", dc, err)
	}
	return out, meta.LastIndex, meta.ResultsFilteredByACLs, nil
}

// checks lists the checks in one state: api.HealthAny (every check), or
// api.HealthCritical or api.HealthWarning, which Consul answers from its
// status index, much faster than a filter evaluated on every check (see
// docs/notes-consul-blocking.md, "/v1/health/state/critical and
// /v1/health/state/warning at 10,000 services x 5 instances"). Whatever the
// state, the index is the whole checks table's.
func (c *client) checks(ctx context.Context, dc string, index uint64, state string) (api.HealthChecks, uint64, error) {
	q, cancel := c.query(ctx, dc, index)
	defer cancel()
	out, meta, err := c.api.Health().State(state, q)
	if err != nil {
		return nil, 0, explain("GET /v1/health/state/"+state, dc, err)
	}
	return out, meta.LastIndex, nil
}

// service fetches every instance of one service, healthy or not (health
// is filtered here, so that the panic threshold can see them all). With
// probe, it fetches none: only the service's index. An index above 0 makes
// it a blocking query that answers once the service's index moves past it,
// or after wait.
func (c *client) service(ctx context.Context, dc, name string, index uint64, wait time.Duration, probe bool) ([]*api.ServiceEntry, uint64, error) {
	q, cancel := c.queryWaiting(ctx, dc, index, wait)
	defer cancel()
	if probe {
		q.Filter = neverMatches
	}
	out, meta, err := c.api.Health().Service(name, "", false, q)
	if err != nil {
		return nil, 0, explain("GET /v1/health/service/"+name, dc, err)
	}
	return out, meta.LastIndex, nil
}

// multiplexed reports whether the agent's last answer came over HTTP/2,
// where many queries share one connection.
func (c *client) multiplexed() bool { return c.protoMajor.Load() >= 2 }

// datacenters lists the datacenters the agent knows.
func (c *client) datacenters(ctx context.Context) ([]string, error) {
	q, cancel := c.query(ctx, "", 0)
	defer cancel()
	q.Datacenter, q.Namespace, q.Partition = "", "", ""
	var dcs []string
	if _, err := c.api.Raw().Query("/v1/catalog/datacenters", &dcs, q); err != nil {
		return nil, explain("GET /v1/catalog/datacenters", "", err)
	}
	return dcs, nil
}

// explain turns an api error into one an operator can act on.
func explain(what, dc string, err error) error {
	where := "consul " + what
	if dc != "" {
		where += " (datacenter " + dc + ")"
	}
	var se api.StatusError
	if errors.As(err, &se) {
		switch se.Code {
		case http.StatusForbidden, http.StatusUnauthorized:
			return fmt.Errorf("%s: permission denied (HTTP %d: %s): check the ACL token (--%s, --%s, CONSUL_HTTP_TOKEN) and its policy (service:read and node:read on everything watched)", where, se.Code, strings.TrimSpace(se.Body), flagToken, flagTokenFile)
		}
		return fmt.Errorf("%s: HTTP %d: %s", where, se.Code, strings.TrimSpace(se.Body))
	}
	return fmt.Errorf("%s: %w", where, err)
}

// countingTransport counts requests by endpoint and result, and keeps
// the HTTP version of the last answer.
type countingTransport struct {
	base       http.RoundTripper
	m          *metrics
	protoMajor *atomic.Int32
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	endpoint := endpointOf(req.URL.Path)
	resp, err := t.base.RoundTrip(req)
	result := "error"
	if err == nil {
		result = strconv.Itoa(resp.StatusCode/100) + "xx"
	}
	t.m.request(endpoint, result)
	if err == nil {
		t.protoMajor.Store(int32(resp.ProtoMajor))
	}
	if err == nil && resp.Body != nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, c: t.m.bodyBytes.WithLabelValues(endpoint)}
	}
	return resp, err
}

// countingBody counts the decoded bytes of a response body.
type countingBody struct {
	io.ReadCloser
	c prometheus.Counter
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.c.Add(float64(n))
	}
	return n, err
}

// countingConn counts the bytes read from a connection to the agent: what
// crossed the wire, compressed bodies and headers included.
type countingConn struct {
	net.Conn
	m    *metrics
	open *openConns
}

func (c *countingConn) Close() error {
	c.open.remove(c)
	return c.Conn.Close()
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.m.wireBytes.Add(float64(n))
	}
	return n, err
}

// endpointOf names the endpoint of a path without the service name, so
// that the metric's cardinality stays fixed.
func endpointOf(path string) string {
	switch {
	case strings.HasPrefix(path, "/v1/catalog/services"):
		return "catalog_services"
	case strings.HasPrefix(path, "/v1/health/state/"):
		return "health_state"
	case strings.HasPrefix(path, "/v1/health/service/"):
		return "health_service"
	case strings.HasPrefix(path, "/v1/catalog/datacenters"):
		return "catalog_datacenters"
	}
	return "other"
}

// tokenSource gives the ACL token of each request. Precedence follows the
// consul CLI: -token-file, -token, CONSUL_HTTP_TOKEN_FILE,
// CONSUL_HTTP_TOKEN. A token file is stat'ed before each request and read
// again when its size or modification time changed, so that a rotated
// token (a Vault agent template, a Kubernetes secret volume) is used
// without a restart; if it cannot be read, the last token read is kept.
type tokenSource struct {
	static string
	file   string

	mu      sync.Mutex
	current string
	modTime time.Time
	size    int64
}

func newTokenSource(flagToken, flagFile, envToken, envFile string) *tokenSource {
	ts := &tokenSource{}
	switch {
	case flagFile != "":
		ts.file = flagFile
	case flagToken != "":
		ts.static = flagToken
	case envFile != "":
		ts.file = envFile
	default:
		ts.static = envToken
	}
	return ts
}

func (ts *tokenSource) token() string {
	if ts.file == "" {
		return ts.static
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	fi, err := os.Stat(ts.file)
	if err != nil || (fi.ModTime().Equal(ts.modTime) && fi.Size() == ts.size) {
		return ts.current
	}
	data, err := os.ReadFile(ts.file)
	if err != nil {
		return ts.current
	}
	ts.current = strings.TrimSpace(string(data))
	ts.modTime, ts.size = fi.ModTime(), fi.Size()
	return ts.current
}
