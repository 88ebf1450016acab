package xds

import (
	"context"
	"log/slog"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// Server implements the ADS service: each stream is served the source its
// router picks for the stream's node.
type Server struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer

	router  snapshot.Router
	log     *slog.Logger
	metrics *Metrics
	drainer *serve.Drainer
	// sendTimeout bounds how long a client may leave a response unread.
	sendTimeout time.Duration
	// logBudget bounds the log lines clients cause, all streams together.
	logBudget *serve.LogLimiter
	// changeAcks, when set, learns what each stream has answered.
	changeAcks *serve.ChangeAcks
	// budget bounds what clients hold in total: streams and names.
	budget *serve.Budget
}

// Options configures a Server.
type Options struct {
	Logger *slog.Logger
	// Registerer receives the server's metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// SendTimeout bounds how long a client may leave one response unread
	// before its stream is closed (ResourceExhausted); default
	// serve.DefaultSendTimeout.
	SendTimeout time.Duration
	// ChangeAcks, when set, is told each stream's progress, for the change
	// -> every sink ACKed latency (galleon_change_acked_seconds).
	ChangeAcks *serve.ChangeAcks
	// Budget bounds the streams and resource names of all clients together;
	// share one with the legacy MCP server of the process. Nil: a budget of
	// this server's own with the default limits.
	Budget *serve.Budget
}

// Protocols returns the values of the protocol label of the server's
// metrics.
func Protocols() []string { return []string{protocolSotW, protocolDelta} }

// NewServer returns a server that serves each stream the source router
// picks by the node of the stream's first request (ClientOf). A server with
// one source for everyone takes snapshot.Everyone(store).
func NewServer(router snapshot.Router, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	budget := opts.Budget
	if budget == nil {
		budget = serve.NewBudget(serve.DefaultBudgetLimits(), nil, log, Protocols())
	}
	return &Server{router: router, log: log, metrics: newMetrics(opts.Registerer), drainer: serve.NewDrainer(),
		sendTimeout: opts.SendTimeout, logBudget: serve.NewServerLogLimiter(), changeAcks: opts.ChangeAcks, budget: budget}
}

// Drain ends every stream, now and later, with status Unavailable, so that
// a graceful stop of the gRPC server completes as soon as the responses
// being written are out, and clients reconnect at once.
func (s *Server) Drain() { s.drainer.Drain() }

// Register adds the ADS service to g.
func (s *Server) Register(g *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, s)
}

// GRPCServerOptions returns the options a grpc.Server serving this service
// needs: the pass-through codec that writes pre-encoded responses, and a
// keepalive policy that accepts istiod's pings. istiod pings every 30 s even
// between responses; grpc-go's default policy (5 min, no pings without
// streams) answers that with GOAWAY too_many_pings.
func GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(serve.Codec()),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             10 * time.Second,
			PermitWithoutStream: true,
		}),
		// Find sinks that vanished without closing their connection.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 60 * time.Second, Timeout: 20 * time.Second}),
	}
}

// Metrics are the server's Prometheus metrics.
type Metrics struct {
	streams       *prometheus.GaugeVec
	subscribed    *prometheus.GaugeVec
	responses     *prometheus.CounterVec
	responseBytes *prometheus.CounterVec
	acks          *prometheus.CounterVec
	pushLatency   *prometheus.HistogramVec
	ackLatency    *prometheus.HistogramVec
	badRequests   *prometheus.CounterVec
	logSuppressed *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	m := &Metrics{
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "galleon_xds_streams", Help: "Connected xDS streams.",
		}, []string{"protocol"}),
		subscribed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "galleon_xds_subscribed_streams", Help: "Connected xDS streams subscribed to each type URL (types this server holds nothing of count together as \"other\"; a stream counts once per type).",
		}, []string{"protocol", "type"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_xds_responses_total", Help: "xDS responses sent, by protocol and type URL (types this server holds nothing of count as \"other\").",
		}, []string{"protocol", "type"}),
		responseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_xds_response_bytes_total", Help: "Bytes of xDS responses sent.",
		}, []string{"protocol", "type"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_xds_acks_total", Help: "Responses acknowledged (result=ack) or rejected (result=nack) by clients.",
		}, []string{"protocol", "type", "result"}),
		pushLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "galleon_xds_push_latency_seconds", Help: "From a snapshot being made to its response being written to a stream.",
			Buckets: buckets,
		}, []string{"protocol"}),
		ackLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "galleon_xds_ack_latency_seconds", Help: "From a response being written to its ACK or NACK arriving.",
			Buckets: buckets,
		}, []string{"protocol"}),
		badRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_xds_bad_requests_total", Help: "Requests ignored or streams closed because a request was malformed or stale.",
		}, []string{"protocol", "reason"}),
		logSuppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_xds_log_lines_suppressed_total", Help: "Log lines a client caused (NACKs) that were left out because the stream exceeded its log budget (5, then one per 30 s).",
		}, []string{"protocol"}),
	}
	for _, p := range Protocols() {
		m.streams.WithLabelValues(p) // 0, not absent, before the first stream
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.subscribed, m.responses, m.responseBytes, m.acks, m.pushLatency, m.ackLatency, m.badRequests, m.logSuppressed)
	}
	return m
}

// disconnectIfStuck ends the connection of a stream whose client stopped
// reading: gRPC would otherwise keep the unwritten response, and the
// stream's place on the connection, for as long as the client wants.
func (s *Server) disconnectIfStuck(ctx context.Context, sender *serve.Sender) {
	if sender.TimedOut() {
		s.budget.Disconnect(ctx)
	}
}

// maxTypesPerStream bounds the per-stream state a client can make us keep.
// istiod asks for about twenty types.
const maxTypesPerStream = 128

// admitType checks a request's type URL and, for a type the stream does not
// watch yet, that it may watch one more. The error closes the stream with a
// status that says why.
func (s *Server) admitType(protocol, typeURL string, watched bool, watching int) error {
	if !validTypeURL(typeURL) {
		s.metrics.badRequests.WithLabelValues(protocol, "type_url").Inc()
		return status.Errorf(codes.InvalidArgument, "request type_url %.64q is empty or malformed (ADS needs the type URL on every request)", typeURL)
	}
	if !watched && watching >= maxTypesPerStream {
		s.metrics.badRequests.WithLabelValues(protocol, "too_many_types").Inc()
		return status.Errorf(codes.ResourceExhausted, "stream asked for more than %d type URLs", maxTypesPerStream)
	}
	return nil
}

// admitNames applies serve.AdmitNames, counting a refusal, then takes
// what the request may add from the process's budget (lease). Once the
// request is applied, what it did not add goes back (lease.Remove).
func (s *Server) admitNames(lease *serve.Lease, protocol string, held int, subscribed map[string]struct{}, subscribe []string, resume map[string]string) (names int, bytes int64, err error) {
	reason, err := serve.AdmitNames(held, subscribed, subscribe, resume)
	if err != nil {
		s.metrics.badRequests.WithLabelValues(protocol, reason).Inc()
		if reason == "too_many_names" {
			lease.RefusedPerStream()
		}
		return 0, 0, err
	}
	names, bytes = serve.NamesCost(subscribed, subscribe, resume)
	if err := lease.Add(names, bytes); err != nil {
		return 0, 0, err
	}
	return names, bytes, nil
}

// logRejected logs a client's NACK within its stream's log budget, quoting
// no more of the client's text than serve.MaxLoggedText: a client
// chooses how often it NACKs and what the NACK says.
func (s *Server) logRejected(budget *serve.LogLimiter, protocol, typeURL, node, nonce, message string) {
	ok, suppressed := budget.Allow(time.Now())
	if !ok {
		s.metrics.logSuppressed.WithLabelValues(protocol).Inc()
		return
	}
	attrs := []any{"protocol", protocol, "type", typeURL, "node", serve.ClientText(node, maxLoggedNode),
		"nonce", nonce, "error", serve.ClientText(message, serve.MaxLoggedText)}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	s.log.Warn("xds response rejected", attrs...)
}

// maxLoggedNode bounds a node id quoted in a log line.
const maxLoggedNode = 256

// serveStream runs one ADS stream on the shared loop, counting it. The
// stream is served the source the router picks for its first request's node.
// push sends what the client lacks of a snapshot and returns the sequence
// up to which the stream has answered everything (see watchProgress).
func serveStream[Req interface{ GetNode() *core.Node }](s *Server, ctx context.Context, protocol string, recv func() (Req, error),
	onRequest func(Req) error, push func(*snapshot.Snapshot) (uint64, error)) error {
	s.metrics.streams.WithLabelValues(protocol).Inc()
	defer s.metrics.streams.WithLabelValues(protocol).Dec()
	ctx, stop := s.drainer.Context(ctx)
	defer stop()
	var first Req
	first, recv = serve.Peek(recv)
	client := ClientOf(first.GetNode())
	client.LocalPort = serve.LocalPort(ctx)
	name, source := s.router.Route(client)
	if name != "" {
		s.log.Info("xds stream routed", "protocol", protocol, "node", serve.ClientText(client.ID, maxLoggedNode), "subset", name)
	}
	acks := s.changeAcks.Stream(protocol, source)
	defer acks.Close()
	return serve.ServeStream(ctx, source, recv, onRequest, func(snap *snapshot.Snapshot) error {
		upTo, err := push(snap)
		if err == nil {
			acks.Update(upTo)
		}
		return err
	})
}

// watchProgress is what one watch has answered, for ChangeAcks: the
// client holds everything of its source up to snapshot upTo, and the
// response outstanding, if any, was built from snapshot sentFrom.
type watchProgress struct {
	upTo, sentFrom uint64
}

// pushed records a push of snap to a watch, pending before and after it.
func (p *watchProgress) pushed(snap *snapshot.Snapshot, wasPending, pending bool) {
	switch {
	case !pending:
		p.upTo = snap.Seq // nothing outstanding, nothing to send: it has all of snap
	case !wasPending:
		p.sentFrom = snap.Seq // a response built from snap went out
	}
}

// answered records an ACK or NACK of the outstanding response: a NACK is
// an answer too (it has its own counter and log line), so a sink that
// rejects a change does not hold the latency of every later one.
func (p *watchProgress) answered() { p.upTo = max(p.upTo, p.sentFrom) }

// streamTypes counts one stream in galleon_xds_subscribed_streams, once per
// type label, until release.
type streamTypes struct {
	m        *Metrics
	protocol string
	labels   map[string]struct{}
}

func (st *streamTypes) add(typeURL string) {
	l := typeLabel(typeURL)
	if _, ok := st.labels[l]; ok {
		return
	}
	if st.labels == nil {
		st.labels = map[string]struct{}{}
	}
	st.labels[l] = struct{}{}
	st.m.subscribed.WithLabelValues(st.protocol, l).Inc()
}

func (st *streamTypes) release() {
	for l := range st.labels {
		st.m.subscribed.WithLabelValues(st.protocol, l).Dec()
	}
}

// ClientOf is what a router sees of an xDS node: its id, and its metadata
// fields that hold strings.
func ClientOf(node *core.Node) snapshot.Client {
	sink := snapshot.Client{ID: node.GetId()}
	for k, v := range node.GetMetadata().GetFields() {
		if sv, ok := v.GetKind().(*structpb.Value_StringValue); ok {
			if sink.Labels == nil {
				sink.Labels = map[string]string{}
			}
			sink.Labels[k] = sv.StringValue
		}
	}
	return sink
}
