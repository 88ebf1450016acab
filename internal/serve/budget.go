package serve

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Limits on what all clients of the process's config streams can make it
// keep together. MaxNamesPerStream and the limits of one stream bound what
// one stream costs; without these a client gains the same again with every
// stream it opens (docs/reliability.md, "Bounds in total: the figures"). The
// defaults serve a control plane with a few dozen istiods and tools with
// room to spare, and keep a hostile client to a few hundred MiB.
const (
	// DefaultMaxStreams bounds the config streams (xDS SotW and Delta,
	// legacy MCP) open at once. An istiod opens one per config source, a
	// tool one while it runs.
	DefaultMaxStreams = 1000
	// DefaultMaxStreamsPerClient bounds those of one client (the identity
	// of its TLS client certificate, else its IP address): room for many
	// istiods behind one address, while no one address takes more than a
	// tenth of DefaultMaxStreams.
	DefaultMaxStreamsPerClient = 100
	// DefaultMaxConnections bounds the gRPC connections open at once. An
	// istiod keeps one.
	DefaultMaxConnections = 1000
	// DefaultMaxConnectionsPerClient bounds those from one IP address
	// (counted before TLS, so by address only), so that one address cannot
	// take every connection, e.g. with idle ones.
	DefaultMaxConnectionsPerClient = 100
	// DefaultMaxNames bounds the resource names all streams hold together
	// as subscriptions and resume versions. Wildcard subscribers (istiod)
	// hold none; an istiod resuming a Delta stream of 10,000 services x 10
	// WorkloadEntries holds 110,000, so this lets nine resume at once.
	DefaultMaxNames = 1_000_000
	// DefaultMaxNameBytes bounds the bytes of those names (and of their
	// resume versions): 1,000,000 names of 64 bytes, a typical
	// "<namespace>/<name>" and version; names of MaxNameLen bytes reach it
	// at about 130,000.
	DefaultMaxNameBytes = 64 << 20
)

// The values of the limit label of galleon_grpc_refusals_total and
// galleon_grpc_limit.
const (
	LimitStreams              = "streams"
	LimitStreamsPerClient     = "streams_per_client"
	LimitConnections          = "connections"
	LimitConnectionsPerClient = "connections_per_client"
	LimitNames                = "names"
	LimitNameBytes            = "name_bytes"
	LimitNamesPerStream       = "names_per_stream"
)

// maxLoggedClient bounds a client identity kept or logged.
const maxLoggedClient = 256

// limitFlags names the daemon flag that raises each limit, for refusals.
var limitFlags = map[string]string{
	LimitStreams:              "--max-streams",
	LimitStreamsPerClient:     "--max-streams-per-client",
	LimitConnections:          "--max-connections",
	LimitConnectionsPerClient: "--max-connections-per-client",
	LimitNames:                "--max-names",
	LimitNameBytes:            "--max-name-bytes",
}

// BudgetLimits are the limits of a Budget. A limit of 0 or less is no
// limit.
type BudgetLimits struct {
	Streams              int
	StreamsPerClient     int
	Connections          int
	ConnectionsPerClient int
	Names                int
	NameBytes            int64
}

// DefaultBudgetLimits returns the default limits.
func DefaultBudgetLimits() BudgetLimits {
	return BudgetLimits{
		Streams: DefaultMaxStreams, StreamsPerClient: DefaultMaxStreamsPerClient,
		Connections: DefaultMaxConnections, ConnectionsPerClient: DefaultMaxConnectionsPerClient,
		Names: DefaultMaxNames, NameBytes: DefaultMaxNameBytes,
	}
}

// Budget is what clients of the process's config streams may hold in total:
// streams (all, and per client), connections (Listener), and resource
// names with their bytes. The xDS and legacy MCP servers of a process share
// one; each stream a client opens takes a Lease, and everything it holds
// is returned when the lease closes, so a refused client frees nothing
// others hold and costs nothing once its stream ends.
type Budget struct {
	limits BudgetLimits
	log    *slog.Logger
	// logBudget bounds the refusal lines clients cause, all together.
	logBudget *LogLimiter
	metrics   budgetMetrics

	mu          sync.Mutex
	streams     int
	perClient   map[string]int // streams by client; no entry at 0
	conns       int
	connsPerIP  map[string]int        // connections by IP address; no entry at 0
	connsByAddr map[string]*limitConn // open connections by remote address, for Disconnect
	names       int
	nameBytes   int64
}

type budgetMetrics struct {
	streams   *prometheus.GaugeVec
	names     prometheus.Gauge
	nameBytes prometheus.Gauge
	conns     prometheus.Gauge
	refusals  *prometheus.CounterVec
	limits    *prometheus.GaugeVec
}

// NewBudget returns a budget with limits. Its metrics go to reg (nil keeps
// them unregistered), with protocols the values of galleon_grpc_streams'
// protocol label shown as 0 before the first stream; refusals are logged to
// log (nil: not logged) within a log budget.
func NewBudget(limits BudgetLimits, reg prometheus.Registerer, log *slog.Logger, protocols []string) *Budget {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := budgetMetrics{
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "galleon_grpc_streams", Help: "Config streams clients hold open (xDS and legacy MCP), by protocol; at most --max-streams in all.",
		}, []string{"protocol"}),
		names: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_grpc_names_held", Help: "Resource names all config streams hold as subscriptions and resume versions; at most --max-names.",
		}),
		nameBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_grpc_name_bytes_held", Help: "Bytes of the resource names (and resume versions) all config streams hold; at most --max-name-bytes.",
		}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_grpc_connections", Help: "gRPC connections open on the listener; at most --max-connections.",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_grpc_refusals_total", Help: "Connections, streams and requests refused because a client would exceed a limit, by limit (streams, streams_per_client, connections, connections_per_client, names, name_bytes, names_per_stream).",
		}, []string{"limit"}),
		limits: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "galleon_grpc_limit", Help: "The configured limits of what gRPC clients may hold, by limit (0: none); compare with galleon_grpc_streams, _connections, _names_held and _name_bytes_held.",
		}, []string{"limit"}),
	}
	for _, p := range protocols {
		m.streams.WithLabelValues(p)
	}
	for _, l := range []string{LimitStreams, LimitStreamsPerClient, LimitConnections, LimitConnectionsPerClient, LimitNames, LimitNameBytes, LimitNamesPerStream} {
		m.refusals.WithLabelValues(l)
	}
	m.limits.WithLabelValues(LimitStreams).Set(float64(limits.Streams))
	m.limits.WithLabelValues(LimitStreamsPerClient).Set(float64(limits.StreamsPerClient))
	m.limits.WithLabelValues(LimitConnections).Set(float64(limits.Connections))
	m.limits.WithLabelValues(LimitConnectionsPerClient).Set(float64(limits.ConnectionsPerClient))
	m.limits.WithLabelValues(LimitNames).Set(float64(limits.Names))
	m.limits.WithLabelValues(LimitNameBytes).Set(float64(limits.NameBytes))
	m.limits.WithLabelValues(LimitNamesPerStream).Set(MaxNamesPerStream)
	if reg != nil {
		reg.MustRegister(m.streams, m.names, m.nameBytes, m.conns, m.refusals, m.limits)
	}
	return &Budget{limits: limits, log: log, logBudget: NewServerLogLimiter(), metrics: m,
		perClient: map[string]int{}, connsPerIP: map[string]int{}, connsByAddr: map[string]*limitConn{}}
}

// Limits returns the budget's limits.
func (b *Budget) Limits() BudgetLimits { return b.limits }

// over says whether n more than held exceeds limit (0: none).
func over[T int | int64](held, n, limit T) bool { return limit > 0 && held+n > limit }

// Open takes a stream of protocol for the client of ctx (a gRPC server
// stream's context: ClientIdentity), or refuses it with ResourceExhausted,
// saying which limit and the flag that raises it. Close the lease when the
// stream ends.
func (b *Budget) Open(ctx context.Context, protocol string) (*Lease, error) {
	client := ClientIdentity(ctx)
	b.mu.Lock()
	var limit string
	var held, max int
	switch {
	case over(b.streams, 1, b.limits.Streams):
		limit, held, max = LimitStreams, b.streams, b.limits.Streams
	case over(b.perClient[client], 1, b.limits.StreamsPerClient):
		limit, held, max = LimitStreamsPerClient, b.perClient[client], b.limits.StreamsPerClient
	default:
		b.streams++
		b.perClient[client]++
		b.mu.Unlock()
		b.metrics.streams.WithLabelValues(protocol).Inc()
		return &Lease{b: b, client: client, protocol: protocol}, nil
	}
	b.mu.Unlock()
	var err error
	if limit == LimitStreams {
		err = status.Errorf(codes.ResourceExhausted, "this server has %d config streams open, its limit (%s %d): try again later, or raise %s",
			held, limitFlags[limit], max, limitFlags[limit])
	} else {
		err = status.Errorf(codes.ResourceExhausted, "client %s has %d config streams open on this server, its limit (%s %d): close streams it does not use, or raise %s",
			ClientText(client, maxLoggedClient), held, limitFlags[limit], max, limitFlags[limit])
	}
	b.refuse(limit, client, protocol, err)
	return nil, err
}

// refuse counts a refusal and logs it within the log budget.
func (b *Budget) refuse(limit, client, protocol string, err error) {
	b.metrics.refusals.WithLabelValues(limit).Inc()
	ok, suppressed := b.logBudget.Allow(time.Now())
	if !ok {
		return
	}
	attrs := []any{"limit", limit, "client", ClientText(client, maxLoggedClient), "error", status.Convert(err).Message()}
	if protocol != "" {
		attrs = append(attrs, "protocol", protocol)
	}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	b.log.Warn("grpc client refused: over a limit", attrs...)
}

// Lease is what one stream holds of a Budget. It is owned by the stream's
// goroutine. A nil *Lease holds and limits nothing: a stream this process
// opened itself (the legacy MCP callout) takes none.
type Lease struct {
	b        *Budget
	client   string
	protocol string
	names    int
	bytes    int64
	closed   bool
}

// Add takes names more resource names of bytes in all for the stream, or
// refuses them with ResourceExhausted, taking nothing: the stream should
// then end, as it does for the per-stream bound (AdmitNames).
func (l *Lease) Add(names int, bytes int64) error {
	if l == nil || (names == 0 && bytes == 0) {
		return nil
	}
	b := l.b
	b.mu.Lock()
	var limit string
	switch {
	case over(b.names, names, b.limits.Names):
		limit = LimitNames
	case over(b.nameBytes, bytes, b.limits.NameBytes):
		limit = LimitNameBytes
	default:
		b.names += names
		b.nameBytes += bytes
		l.names += names
		l.bytes += bytes
		heldN, heldB := b.names, b.nameBytes
		b.mu.Unlock()
		b.metrics.names.Set(float64(heldN))
		b.metrics.nameBytes.Set(float64(heldB))
		return nil
	}
	heldN, heldB := b.names, b.nameBytes
	b.mu.Unlock()
	var err error
	if limit == LimitNames {
		err = status.Errorf(codes.ResourceExhausted,
			"this server holds %d resource names for all streams (subscriptions and resume versions) and the request would add %d, over its limit (%s %d): subscribe with a wildcard instead, or raise %s",
			heldN, names, limitFlags[limit], b.limits.Names, limitFlags[limit])
	} else {
		err = status.Errorf(codes.ResourceExhausted,
			"this server holds %d bytes of resource names for all streams (subscriptions and resume versions) and the request would add %d, over its limit (%s %d): subscribe with a wildcard instead, or raise %s",
			heldB, bytes, limitFlags[limit], b.limits.NameBytes, limitFlags[limit])
	}
	b.refuse(limit, l.client, l.protocol, err)
	return err
}

// Remove returns names of bytes the stream no longer holds, at most what
// it holds.
func (l *Lease) Remove(names int, bytes int64) {
	if l == nil {
		return
	}
	names, bytes = min(names, l.names), min(bytes, l.bytes)
	if names <= 0 && bytes <= 0 {
		return
	}
	l.names -= names
	l.bytes -= bytes
	b := l.b
	b.mu.Lock()
	b.names -= names
	b.nameBytes -= bytes
	heldN, heldB := b.names, b.nameBytes
	b.mu.Unlock()
	b.metrics.names.Set(float64(heldN))
	b.metrics.nameBytes.Set(float64(heldB))
}

// Held returns the names, and their bytes, the stream holds.
func (l *Lease) Held() (names int, bytes int64) {
	if l == nil {
		return 0, 0
	}
	return l.names, l.bytes
}

// RefusedPerStream counts a refusal by the per-stream bound on names
// (AdmitNames' "too_many_names") under galleon_grpc_refusals_total.
func (l *Lease) RefusedPerStream() {
	if l == nil {
		return
	}
	l.b.metrics.refusals.WithLabelValues(LimitNamesPerStream).Inc()
}

// Close returns everything the stream holds. It may be called more than
// once.
func (l *Lease) Close() {
	if l == nil || l.closed {
		return
	}
	l.Remove(l.names, l.bytes)
	l.closed = true
	b := l.b
	b.mu.Lock()
	b.streams--
	if b.perClient[l.client]--; b.perClient[l.client] <= 0 {
		delete(b.perClient, l.client)
	}
	b.mu.Unlock()
	b.metrics.streams.WithLabelValues(l.protocol).Dec()
}

// NamesCost returns at most how many names, of how many bytes, a request
// adds to what a stream holds (Lease.Add): the names in subscribe not in
// subscribed, and every resume entry (name and version). A name repeated
// within subscribe is counted each time; Lease.Remove returns the excess
// once the request is applied.
func NamesCost(subscribed map[string]struct{}, subscribe []string, resume map[string]string) (names int, bytes int64) {
	for _, name := range subscribe {
		if _, already := subscribed[name]; !already {
			names++
			bytes += int64(len(name))
		}
	}
	for name, version := range resume {
		names++
		bytes += int64(len(name) + len(version))
	}
	return names, bytes
}

// ClientIdentity is who a stream's client is, for the per-client limits:
// the first URI SAN (else DNS SAN, else subject) of the client certificate
// verified by mutual TLS, else the IP address the connection comes from.
// A node id is chosen by the client, so it is no identity.
func ClientIdentity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "unknown"
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
		return "tls:" + certIdentity(info.State.PeerCertificates[0])
	}
	return "ip:" + addrIP(p.Addr)
}

func certIdentity(c *x509.Certificate) string {
	var id string
	switch {
	case len(c.URIs) > 0:
		id = c.URIs[0].String()
	case len(c.DNSNames) > 0:
		id = c.DNSNames[0]
	default:
		id = c.Subject.String()
	}
	// Verified, but still the CA's choice: cut it, it is kept as a map key
	// and logged.
	if len(id) > maxLoggedClient {
		id = id[:maxLoggedClient]
	}
	return id
}

// addrIP is the IP address of a connection's remote address, or the whole
// address for one that has none (a Unix socket).
func addrIP(a net.Addr) string {
	if a == nil {
		return "unknown"
	}
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// Listener returns l limited to the budget's connections: a connection
// over Connections in all, or over ConnectionsPerClient from one IP
// address, is closed as soon as it is accepted (the client sees the
// connection fail and retries with its backoff), counted and logged; the
// others are counted until closed. Accepting goes on meanwhile, so a
// refused client keeps no one else out.
func (b *Budget) Listener(l net.Listener) net.Listener {
	return &limitListener{Listener: l, b: b}
}

type limitListener struct {
	net.Listener
	b *Budget
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := addrIP(c.RemoteAddr())
		lc := &limitConn{Conn: c, b: l.b, ip: ip, addr: c.RemoteAddr().String()}
		if limit := l.b.openConn(lc); limit != "" {
			_ = c.Close()
			var err error
			if limit == LimitConnections {
				err = fmt.Errorf("%d gRPC connections open, the limit (%s %d): connection closed", l.b.limits.Connections, limitFlags[limit], l.b.limits.Connections)
			} else {
				err = fmt.Errorf("%d gRPC connections open from %s, the limit (%s %d): connection closed", l.b.limits.ConnectionsPerClient, ip, limitFlags[limit], l.b.limits.ConnectionsPerClient)
			}
			l.b.refuse(limit, "ip:"+ip, "", err)
			continue
		}
		return lc, nil
	}
}

// openConn takes a place for c, or returns the limit it would exceed.
func (b *Budget) openConn(c *limitConn) (limit string) {
	b.mu.Lock()
	switch {
	case over(b.conns, 1, b.limits.Connections):
		limit = LimitConnections
	case over(b.connsPerIP[c.ip], 1, b.limits.ConnectionsPerClient):
		limit = LimitConnectionsPerClient
	default:
		b.conns++
		b.connsPerIP[c.ip]++
		b.connsByAddr[c.addr] = c
	}
	n := b.conns
	b.mu.Unlock()
	b.metrics.conns.Set(float64(n))
	return limit
}

func (b *Budget) closeConn(c *limitConn) {
	b.mu.Lock()
	b.conns--
	if b.connsPerIP[c.ip]--; b.connsPerIP[c.ip] <= 0 {
		delete(b.connsPerIP, c.ip)
	}
	if b.connsByAddr[c.addr] == c {
		delete(b.connsByAddr, c.addr)
	}
	n := b.conns
	b.mu.Unlock()
	b.metrics.conns.Set(float64(n))
}

// limitConn returns its place in the budget when closed, once.
type limitConn struct {
	net.Conn
	b    *Budget
	ip   string
	addr string // the remote address, as gRPC's peer.Addr says it
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.b.closeConn(c) })
	return err
}

// Disconnect closes the connection of a server stream's context (ctx) if
// it came through the budget's Listener, ending every stream on it. A
// stream whose client stopped reading (Sender.TimedOut) ends, but gRPC
// keeps its unwritten response, and its place on the connection, until the
// client reads: only the end of the connection frees them.
func (b *Budget) Disconnect(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return false
	}
	b.mu.Lock()
	c := b.connsByAddr[p.Addr.String()]
	b.mu.Unlock()
	if c == nil {
		return false
	}
	_ = c.Close()
	if ok, suppressed := b.logBudget.Allow(time.Now()); ok {
		attrs := []any{"client", c.addr}
		if suppressed > 0 {
			attrs = append(attrs, "suppressed", suppressed)
		}
		b.log.Warn("grpc connection closed: its client stopped reading a config stream (--send-timeout)", attrs...)
	}
	return true
}

// Held returns what all streams hold now: streams, names and bytes of
// names, and the connections open (for tests and status).
func (b *Budget) Held() (streams, names int, nameBytes int64, conns int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.streams, b.names, b.nameBytes, b.conns
}

// String describes the limits, for the start log line.
func (l BudgetLimits) String() string {
	return fmt.Sprintf("streams=%d per_client=%d connections=%d per_client=%d names=%d name_bytes=%d",
		l.Streams, l.StreamsPerClient, l.Connections, l.ConnectionsPerClient, l.Names, l.NameBytes)
}
