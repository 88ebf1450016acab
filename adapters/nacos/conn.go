package nacos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
)

// A session is one connection to one server, in either API: the gRPC API's connection, whose
// subscriptions push every change (Nacos 2.x, 3.x), or the HTTP OpenAPI's client with the UDP
// push it registers for (Nacos 1.x). The watch (watch.go) drives either the same way:
// list, watch each service, apply what is pushed; only the HTTP session also polls
// (session.polls), as Nacos 1's clients do.
type session interface {
	// api is APIGRPC or APIHTTP.
	api() string
	// list reads one page of the services of (namespace, group).
	list(ctx context.Context, namespace, group string, pageNo, pageSize int) (wire.ServicePage, error)
	// watch subscribes to ref (gRPC) or reads it registering for its push (HTTP), and
	// returns its state now.
	watch(ctx context.Context, ref wire.Ref) (*wire.ServiceInfo, error)
	// unwatch ends a subscription (gRPC); HTTP has nothing to end: a Nacos 1 server forgets a
	// push target that stops asking.
	unwatch(ctx context.Context, ref wire.Ref) error
	// polls says whether the state of a watched service must be read again at its
	// cacheMillis: the HTTP API's push is UDP, which may be lost.
	polls() bool
	// http is the server's HTTP client (namespaces are listed over HTTP in both APIs).
	http() *wire.HTTPClient
	// done is closed when the session is lost; err says why.
	done() <-chan struct{}
	err() error
	close()
}

// dialer makes sessions to the configured servers. It holds what outlives a session: one
// token source per server (a token is valid on its server until it expires).
type dialer struct {
	r      *Registry
	tokens []*wire.TokenSource // by server; nil without --nacos-username
	// grpcSeen: the server has answered over gRPC (a Nacos 2 or later). With --nacos-api auto
	// such a server is never watched over HTTP: its gRPC port failing is a failure, not a sign
	// of Nacos 1.x. Probes set it from their goroutines.
	grpcSeen []atomic.Bool
}

func newDialer(r *Registry) *dialer {
	d := &dialer{r: r, tokens: make([]*wire.TokenSource, len(r.servers)), grpcSeen: make([]atomic.Bool, len(r.servers))}
	if r.cfg.Username != "" {
		for i := range r.servers {
			d.tokens[i] = wire.NewTokenSource(func(ctx context.Context) (string, time.Duration, error) {
				return d.login(ctx, i)
			})
		}
	}
	return d
}

// login logs in to server i with the password as the file holds it now.
func (d *dialer) login(ctx context.Context, i int) (string, time.Duration, error) {
	password, err := d.r.cfg.password()
	if err != nil {
		return "", 0, err
	}
	d.r.redact.learn(password)
	c, err := d.httpClient(i, nil, "")
	if err != nil {
		return "", 0, err
	}
	defer c.Close()
	token, ttl, err := c.Login(ctx, d.r.cfg.Username, password)
	if err != nil {
		return "", 0, d.r.redact.error(fmt.Errorf("logging in to %s as %s (--%s, --%s): %w", d.r.servers[i].name, d.r.cfg.Username, flagUsername, flagPasswordFile, err))
	}
	// A server may echo the token in an error, in any shape.
	d.r.redact.learn(token)
	return token, ttl, nil
}

// httpClient is an HTTP client for server i, its TLS files read now.
func (d *dialer) httpClient(i int, tokens *wire.TokenSource, secretKey string) (*wire.HTTPClient, error) {
	cfg := &d.r.cfg
	s := d.r.servers[i]
	tlsConf, err := cfg.tlsConfig(s)
	if err != nil {
		return nil, err
	}
	contextPath := cfg.ContextPath
	if contextPath == "" {
		contextPath = "/" // the API at the root
	}
	return wire.NewHTTPClient(wire.HTTPConfig{
		BaseURL:      s.baseURL(),
		ContextPath:  contextPath,
		TLS:          tlsConf,
		Timeout:      cfg.Timeout,
		MaxBodyBytes: int64(cfg.MaxMessage),
		Tokens:       tokens,
		AccessKey:    cfg.AccessKey,
		SecretKey:    secretKey,
		Limits:       d.limits(),
		ClientIP:     localIPTowards(s.httpAddr()),
	}), nil
}

// localIPTowards is this host's address on the route to addr: where a Nacos 1.x server sends
// the UDP push of an instance/list that names a udpPort (its clientIP; without one, Alibaba's
// server falls back to the request's source address, which a proxy or NAT hides). A UDP
// "connection" sends nothing: it only asks the kernel for the route. "" when there is none
// (the server then uses the source address).
func localIPTowards(addr string) string {
	// Bounded: a host name is resolved first.
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).Dial("udp", addr)
	if err != nil {
		return ""
	}
	defer c.Close()
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
		return a.IP.String()
	}
	return ""
}

// limits bound what one answer may hold.
func (d *dialer) limits() wire.Limits {
	return wire.Limits{MaxInstances: d.r.cfg.MaxInstances, MaxServiceNames: d.r.cfg.MaxServices + 1}
}

// dial makes a session to server i with the API asked for (APIAuto: gRPC, else HTTP when the
// server has no gRPC port). Pushes go to in.
func (d *dialer) dial(ctx context.Context, i int, in *inbox) (session, error) {
	cfg := &d.r.cfg
	secretKey, err := cfg.secretKey()
	if err != nil {
		return nil, err
	}
	d.r.redact.learn(secretKey)
	hc, err := d.httpClient(i, d.tokens[i], secretKey)
	if err != nil {
		return nil, err
	}
	if cfg.API == APIHTTP {
		return d.dialHTTP(ctx, i, hc, in)
	}
	s, err := d.dialGRPC(ctx, i, hc, secretKey, in)
	if err == nil {
		return s, nil
	}
	if !d.mayFallBack(i, err) || ctx.Err() != nil {
		hc.Close()
		return nil, err
	}
	// auto: no gRPC API on the port. A Nacos 1.x server, if its HTTP API answers.
	hs, herr := d.dialHTTP(ctx, i, hc, in)
	if herr != nil {
		return nil, errors.Join(err, herr)
	}
	d.r.log.Info("no gRPC API on the Nacos server's gRPC port: watching over its HTTP API (Nacos 1.x)",
		"server", d.r.servers[i].name, "grpc", d.r.servers[i].grpcAddr(), "err", d.r.redact.error(err))
	return hs, nil
}

// mayFallBack says whether a failed gRPC dial to server i is to be followed by the HTTP API:
// with --nacos-api auto, to a server never seen answering over gRPC, for want of a gRPC API.
func (d *dialer) mayFallBack(i int, err error) bool {
	return d.r.cfg.API == APIAuto && !d.grpcSeen[i].Load() && noGRPCPort(err)
}

// noGRPCPort says whether a gRPC dial failed for want of a gRPC API (nothing listens on the
// port, or something that is no gRPC server does: a Nacos 1.x server) rather than with an
// answer of the server (an error, an undecodable reply) that the HTTP API would share.
func noGRPCPort(err error) bool {
	if _, ok := errors.AsType[*wire.ServerError](err); ok {
		return false
	}
	if _, ok := errors.AsType[*wire.DecodeError](err); ok {
		return false
	}
	return true
}

func (d *dialer) dialGRPC(ctx context.Context, i int, hc *wire.HTTPClient, secretKey string, in *inbox) (session, error) {
	cfg := &d.r.cfg
	s := d.r.servers[i]
	tlsConf, err := cfg.tlsConfig(s)
	if err != nil {
		return nil, err
	}
	conn, err := wire.Dial(ctx, wire.DialConfig{
		Address:         s.grpcAddr(),
		TLS:             tlsConf,
		Timeout:         cfg.Timeout,
		MaxMessageBytes: cfg.MaxMessage,
		Tokens:          d.tokens[i],
		AccessKey:       cfg.AccessKey,
		SecretKey:       secretKey,
		ClientVersion:   clientVersion,
		Logger:          d.r.log.With("server", s.name),
		OnPush:          in.put,
		Limits:          d.limits(),
	})
	if err != nil {
		return nil, err
	}
	d.grpcSeen[i].Store(true)
	return &grpcSession{conn: conn, hc: hc}, nil
}

// clientVersion is what the adapter calls itself in ConnectionSetupRequest (a server's
// console lists it per connection).
const clientVersion = "Galleon:v1"

type grpcSession struct {
	conn *wire.Conn
	hc   *wire.HTTPClient
}

func (g *grpcSession) api() string { return APIGRPC }
func (g *grpcSession) list(ctx context.Context, namespace, group string, pageNo, pageSize int) (wire.ServicePage, error) {
	return g.conn.ListServices(ctx, namespace, group, pageNo, pageSize)
}
func (g *grpcSession) watch(ctx context.Context, ref wire.Ref) (*wire.ServiceInfo, error) {
	return g.conn.Subscribe(ctx, ref)
}
func (g *grpcSession) unwatch(ctx context.Context, ref wire.Ref) error {
	return g.conn.Unsubscribe(ctx, ref)
}
func (g *grpcSession) polls() bool            { return false }
func (g *grpcSession) http() *wire.HTTPClient { return g.hc }
func (g *grpcSession) done() <-chan struct{}  { return g.conn.Done() }
func (g *grpcSession) err() error             { return g.conn.Err() }
func (g *grpcSession) close()                 { _ = g.conn.Close(); g.hc.Close() }

// dialHTTP makes an HTTP session: it checks that the server answers (one page of one entry).
// The UDP push listeners start with the first service of each namespace watched.
func (d *dialer) dialHTTP(ctx context.Context, i int, hc *wire.HTTPClient, in *inbox) (session, error) {
	ns := ""
	if len(d.r.scope.namespaces) > 0 {
		ns = d.r.scope.namespaces[0]
	}
	if _, err := hc.ListServices(ctx, ns, DefaultGroup, 1, 1); err != nil {
		hc.Close()
		return nil, err
	}
	return &httpSession{
		d: d, hc: hc, in: in, from: d.serverAddrs(ctx, i),
		push: map[string]*wire.PushListener{},
		stop: make(chan struct{}),
	}, nil
}

// serverAddrs are the addresses of server i, from which a UDP push is accepted (nil: from
// anyone, when the name does not resolve). The push is unauthenticated: without this check
// anyone who reaches the port could make the adapter serve a state of their choosing until
// the next poll. Behind a load balancer a push comes from a member's own address, is dropped,
// and the poll picks the change up.
func (d *dialer) serverAddrs(ctx context.Context, i int) map[netip.Addr]bool {
	host := d.r.servers[i].host
	if a, err := netip.ParseAddr(host); err == nil {
		return map[netip.Addr]bool{a.Unmap(): true}
	}
	ctx, cancel := context.WithTimeout(ctx, d.r.cfg.Timeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return nil
	}
	m := map[netip.Addr]bool{}
	for _, a := range addrs {
		m[a.Unmap()] = true
	}
	return m
}

type httpSession struct {
	d    *dialer
	hc   *wire.HTTPClient
	in   *inbox
	from map[netip.Addr]bool

	mu sync.Mutex
	// push are the UDP push listeners, by namespace (a push does not name its namespace:
	// Nacos 1's clients run one receiver per namespace), nil in the map when the push is off.
	push   map[string]*wire.PushListener
	closed bool
	once   sync.Once
	stop   chan struct{}
}

func (h *httpSession) api() string { return APIHTTP }
func (h *httpSession) list(ctx context.Context, namespace, group string, pageNo, pageSize int) (wire.ServicePage, error) {
	return h.hc.ListServices(ctx, namespace, group, pageNo, pageSize)
}
func (h *httpSession) watch(ctx context.Context, ref wire.Ref) (*wire.ServiceInfo, error) {
	port, err := h.udpPort(ctx, ref.Namespace)
	if err != nil {
		return nil, err
	}
	return h.hc.Instances(ctx, ref, port)
}

// udpPort is the port of namespace's push listener, started now if need be; 0 with the push
// off.
func (h *httpSession) udpPort(ctx context.Context, namespace string) (int, error) {
	cfg := &h.d.r.cfg
	if cfg.UDPPort < 0 {
		return 0, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, errSessionClosed
	}
	if l := h.push[namespace]; l != nil {
		return l.Port(), nil
	}
	port := cfg.UDPPort
	if len(h.push) > 0 {
		port = 0 // the port given is the first namespace's; the others take free ones
	}
	opts := []wire.PushOption{
		wire.PushNamespace(namespace),
		wire.PushLimits(h.d.limits()),
		wire.PushMaxBytes(int64(cfg.MaxMessage)),
	}
	if h.from != nil {
		opts = append(opts, wire.PushAcceptFrom(func(a netip.Addr) bool { return h.from[a.Unmap()] }))
	}
	// The listener lives as long as the session (close stops it), not the request.
	l, err := wire.ListenPush(context.WithoutCancel(ctx), net.JoinHostPort("", strconv.Itoa(port)), h.in.put, opts...)
	if err != nil {
		return 0, fmt.Errorf("listening for the UDP push (--%s %d): %w", flagUDPPort, port, err)
	}
	h.push[namespace] = l
	return l.Port(), nil
}

// errSessionClosed is a request on a session closed meanwhile.
var errSessionClosed = errors.New("nacos: session closed")

func (h *httpSession) unwatch(context.Context, wire.Ref) error { return nil }
func (h *httpSession) polls() bool                             { return true }
func (h *httpSession) http() *wire.HTTPClient                  { return h.hc }

// done is never closed: HTTP has no connection to lose; a failed request ends the session.
func (h *httpSession) done() <-chan struct{} { return h.stop }
func (h *httpSession) err() error            { return nil }
func (h *httpSession) close() {
	h.once.Do(func() {
		close(h.stop)
		h.mu.Lock()
		h.closed = true
		listeners := h.push
		h.push = nil
		h.mu.Unlock()
		for _, l := range listeners {
			_ = l.Close()
		}
		h.hc.Close()
	})
}

// inbox holds what the server pushed and the watch has not applied yet: the latest state of
// each service, so a burst of pushes for one service costs one mapping. put is called from
// the connection's reader goroutine and never blocks.
type inbox struct {
	mu      sync.Mutex
	pending map[wire.Ref]*wire.ServiceInfo
	// max bounds pending: a server can push services never subscribed. Over it, pushes are
	// dropped and overflow is set: the watch then subscribes everything again.
	max      int
	overflow bool
	signal   chan struct{}
}

func newInbox(max int) *inbox {
	return &inbox{pending: map[wire.Ref]*wire.ServiceInfo{}, max: max, signal: make(chan struct{}, 1)}
}

// put records a push.
func (b *inbox) put(ref wire.Ref, info *wire.ServiceInfo) {
	if info == nil {
		return
	}
	b.mu.Lock()
	old, had := b.pending[ref]
	switch {
	case had && newer(old, info):
		// An older state delivered after a newer one: keep the newer.
	case !had && len(b.pending) >= b.max:
		b.overflow = true
	default:
		b.pending[ref] = info
	}
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// take returns what was pushed since the last take, and whether pushes were dropped.
func (b *inbox) take() (map[wire.Ref]*wire.ServiceInfo, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 && !b.overflow {
		return nil, false
	}
	p, o := b.pending, b.overflow
	b.pending, b.overflow = map[wire.Ref]*wire.ServiceInfo{}, false
	return p, o
}

// newer says whether a is a strictly newer state than b by the server's lastRefTime; states
// without one are not ordered.
func newer(a, b *wire.ServiceInfo) bool {
	return a.LastRefTime > 0 && b.LastRefTime > 0 && a.LastRefTime > b.LastRefTime
}
