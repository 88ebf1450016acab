// Package mcp serves snapshots to legacy Mesh Configuration Protocol sinks
// (istio.mcp.v1alpha1.ResourceSource, Istio 1.1 - 1.8): the sink dials the
// source and subscribes to collections by name on one stream.
//
// It follows the design of package xds: one goroutine owns a stream's state;
// each requested collection is a watch with at most one unacknowledged
// response; a NACKed state is not sent again; full-state responses are
// encoded once per collection version and the same bytes written to every
// stream (serve.Message). Sinks that ask for it (incremental=true) get
// only added, changed and removed resources after their first response.
package mcp

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	mcpv1alpha1 "github.com/galleon-mesh/galleon/proto/mcp/v1alpha1"
)

// The collections Istio's legacy sinks ask for that this server holds.
const (
	ServiceEntries  = "istio/networking/v1alpha3/serviceentries"
	WorkloadEntries = "istio/networking/v1alpha3/workloadentries"
)

var kindByCollection = map[string]snapshot.Kind{
	ServiceEntries:  snapshot.ServiceEntry,
	WorkloadEntries: snapshot.WorkloadEntry,
}

// KindOf returns the kind a collection holds; ok is false for a collection
// this server holds nothing of, which is answered with an empty full state.
func KindOf(collection string) (kind snapshot.Kind, ok bool) {
	kind, ok = kindByCollection[collection]
	return kind, ok
}

// DefaultMaxResponseBytes is the default size above which a response is
// logged and counted as oversize: Istio's legacy sink refuses received
// messages over 4 MiB unless its limit is raised.
const DefaultMaxResponseBytes = 4 << 20

// Options configures a Server.
type Options struct {
	Logger *slog.Logger
	// Registerer receives the server's metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// MaxResponseBytes is the response size above which a warning is logged
	// (once per collection version) and galleon_mcp_oversize_responses_total
	// counted. The response is sent anyway. 0 means DefaultMaxResponseBytes.
	MaxResponseBytes int
	// SendTimeout bounds how long a sink may leave one response unread
	// before its stream is closed (ResourceExhausted); default
	// serve.DefaultSendTimeout.
	SendTimeout time.Duration
	// ChangeAcks, when set, is told each stream's progress (the callout's
	// too), for the change -> every sink ACKed latency.
	ChangeAcks *serve.ChangeAcks
	// Budget bounds the streams and resume names of all sinks together;
	// share one with the xDS server of the process. Nil: a budget of this
	// server's own with the default limits. The callout takes none.
	Budget *serve.Budget
}

// Protocol is the protocol label of legacy MCP streams in
// galleon_change_acked_seconds.
const Protocol = "mcp"

// Server implements istio.mcp.v1alpha1.ResourceSource (and the callout to a
// ResourceSink): each stream is served the source its router picks for the
// stream's sink.
type Server struct {
	mcpv1alpha1.UnimplementedResourceSourceServer

	router  snapshot.Router
	log     *slog.Logger
	metrics *metrics
	maxSize int

	warnMu sync.Mutex
	warned map[string]string // collection -> last version warned about

	drainer *serve.Drainer
	// sendTimeout bounds how long a sink may leave a response unread.
	sendTimeout time.Duration
	// logBudget bounds the log lines sinks cause, all streams together.
	logBudget *serve.LogLimiter
	// changeAcks, when set, learns what each stream has answered.
	changeAcks *serve.ChangeAcks
	// budget bounds what sinks hold in total: streams and names.
	budget *serve.Budget
}

// NewServer returns a server that serves each stream the source router
// picks by the SinkNode of the stream's first request (ClientOf). A server
// with one source for everyone takes snapshot.Everyone(store).
func NewServer(router snapshot.Router, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	maxSize := opts.MaxResponseBytes
	if maxSize <= 0 {
		maxSize = DefaultMaxResponseBytes
	}
	budget := opts.Budget
	if budget == nil {
		budget = serve.NewBudget(serve.DefaultBudgetLimits(), nil, log, []string{Protocol})
	}
	return &Server{router: router, log: log, metrics: newMetrics(opts.Registerer), maxSize: maxSize,
		warned: map[string]string{}, drainer: serve.NewDrainer(), sendTimeout: opts.SendTimeout,
		logBudget: serve.NewServerLogLimiter(), changeAcks: opts.ChangeAcks, budget: budget}
}

// Drain ends every stream sinks opened, now and later, with status
// Unavailable, so that a graceful stop of the gRPC server completes as soon
// as the responses being written are out, and sinks reconnect at once. The
// callout ends with the context RunCallout was given.
func (s *Server) Drain() { s.drainer.Drain() }

// Register adds the ResourceSource service to g. g must use the codec of
// xds.GRPCServerOptions (serve.Codec), which writes pre-encoded responses.
func (s *Server) Register(g *grpc.Server) {
	mcpv1alpha1.RegisterResourceSourceServer(g, s)
}

type metrics struct {
	streams       prometheus.Gauge
	subscribed    *prometheus.GaugeVec
	responses     *prometheus.CounterVec
	responseBytes *prometheus.CounterVec
	acks          *prometheus.CounterVec
	pushLatency   prometheus.Histogram
	ackLatency    prometheus.Histogram
	badRequests   *prometheus.CounterVec
	oversize      *prometheus.CounterVec

	calloutConnected  prometheus.Gauge
	calloutReconnects prometheus.Counter
	logSuppressed     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_mcp_streams", Help: "Connected legacy MCP (ResourceSource) streams.",
		}),
		subscribed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "galleon_mcp_subscribed_streams", Help: "Legacy MCP streams (the callout's included) subscribed to each collection (collections this server holds nothing of count together as \"other\"; a stream counts once per collection).",
		}, []string{"collection"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_mcp_responses_total", Help: "Legacy MCP responses sent, by collection and mode (full or incremental).",
		}, []string{"collection", "mode"}),
		responseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_mcp_response_bytes_total", Help: "Bytes of legacy MCP responses sent.",
		}, []string{"collection", "mode"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_mcp_acks_total", Help: "Legacy MCP responses acknowledged (result=ack) or rejected (result=nack) by sinks.",
		}, []string{"collection", "result"}),
		pushLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "galleon_mcp_push_latency_seconds", Help: "From a snapshot being made to its legacy MCP response being written to a stream.",
			Buckets: buckets,
		}),
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "galleon_mcp_ack_latency_seconds", Help: "From a legacy MCP response being written to its ACK or NACK arriving.",
			Buckets: buckets,
		}),
		badRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_mcp_bad_requests_total", Help: "Legacy MCP requests ignored or streams closed because a request was malformed or stale.",
		}, []string{"reason"}),
		oversize: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_mcp_oversize_responses_total", Help: "Legacy MCP responses sent although larger than the configured limit (Istio's legacy sink refuses over 4 MiB by default).",
		}, []string{"collection"}),
		calloutConnected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_mcp_callout_connected", Help: "1 while the legacy MCP callout stream to a ResourceSink is established.",
		}),
		calloutReconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "galleon_mcp_callout_reconnects_total", Help: "Legacy MCP callout streams that failed or ended and are dialed again after a backoff.",
		}),
		logSuppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "galleon_mcp_log_lines_suppressed_total", Help: "Log lines a sink caused (NACKs) that were left out because the stream exceeded its log budget (5, then one per 30 s).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.subscribed, m.responses, m.responseBytes, m.acks, m.pushLatency, m.ackLatency, m.badRequests, m.oversize,
			m.calloutConnected, m.calloutReconnects, m.logSuppressed)
	}
	return m
}

// collectionLabel bounds the label values a sink can create: collections
// this server does not hold are counted together.
func collectionLabel(collection string) string {
	if _, ok := kindByCollection[collection]; ok {
		return collection
	}
	return "other"
}

// maxCollectionsPerStream bounds the per-stream state a sink can make us
// keep. Istio's legacy sinks ask for a few dozen collections.
const maxCollectionsPerStream = 128

// maxCollectionLen bounds what a sink may name; anything longer is garbage.
const maxCollectionLen = 256

// admit checks a request's collection and, for a collection the stream does
// not watch yet, that it may watch one more. The error closes the stream.
func (s *Server) admit(collection string, watched bool, watching int) error {
	if collection == "" || len(collection) > maxCollectionLen || strings.ContainsAny(collection, " \t\n\x00") {
		s.metrics.badRequests.WithLabelValues("collection").Inc()
		return status.Errorf(codes.InvalidArgument, "request collection %.64q is empty or malformed", collection)
	}
	if !watched && watching >= maxCollectionsPerStream {
		s.metrics.badRequests.WithLabelValues("too_many_collections").Inc()
		return status.Errorf(codes.ResourceExhausted, "stream asked for more than %d collections", maxCollectionsPerStream)
	}
	return nil
}

// maxLoggedSink bounds a sink node id quoted in a log line.
const maxLoggedSink = 256

// admitResume applies serve.AdmitNames to a request's resume versions,
// counting a refusal, and takes them from the process's budget (lease):
// the stream holds them until it ends.
func (s *Server) admitResume(lease *serve.Lease, held int, resume map[string]string) error {
	reason, err := serve.AdmitNames(held, nil, nil, resume)
	if err != nil {
		s.metrics.badRequests.WithLabelValues(reason).Inc()
		if reason == "too_many_names" {
			lease.RefusedPerStream()
		}
		return err
	}
	return lease.Add(serve.NamesCost(nil, nil, resume))
}

// EstablishResourceStream serves one sink's stream. One goroutine (this
// one) owns the stream's state: it applies requests and, after each request
// or snapshot change, sends every watched collection what the sink lacks. A
// second goroutine only receives; it ends with the stream, whose context is
// cancelled when this handler returns.
func (s *Server) EstablishResourceStream(stream mcpv1alpha1.ResourceSource_EstablishResourceStreamServer) error {
	lease, err := s.budget.Open(stream.Context(), Protocol)
	if err != nil {
		return err
	}
	defer lease.Close()
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()
	sender := serve.NewSender(stream.SendMsg, s.sendTimeout)
	defer sender.Close()
	defer func() {
		// gRPC would keep the unwritten response of a sink that stopped
		// reading, and the stream's place on the connection, for as long
		// as the sink wants: end its connection.
		if sender.TimedOut() {
			s.budget.Disconnect(stream.Context())
		}
	}()
	st := newStreamState(sender.Send, s.logBudget, lease)
	ctx, stop := s.drainer.Context(stream.Context())
	defer stop()
	return s.serve(ctx, nil, st, stream.Recv)
}

// serve runs the protocol on one stream, whichever side dialed: requests
// come from recv, responses go out through st.send. For a stream the sink
// dialed (ResourceSource) cancel is nil; for one this process dialed
// (ResourceSink, the callout) cancel cancels the stream's context ctx, and
// serve returns only once its receiving goroutine has ended.
func (s *Server) serve(ctx context.Context, cancel context.CancelFunc, st *streamState,
	recv func() (*mcpv1alpha1.RequestResources, error)) error {
	defer st.releaseCollections(s.metrics)
	onRequest := func(req *mcpv1alpha1.RequestResources) error { return s.request(st, req) }
	var first *mcpv1alpha1.RequestResources
	first, recv = serve.Peek(recv)
	client := ClientOf(first.GetSinkNode())
	client.LocalPort = serve.LocalPort(ctx)
	name, source := s.router.Route(client)
	if name != "" {
		s.log.Info("mcp stream routed", "sink", serve.ClientText(client.ID, maxLoggedSink), "subset", name)
	}
	acks := s.changeAcks.Stream(Protocol, source)
	defer acks.Close()
	push := func(snap *snapshot.Snapshot) error {
		// upTo: the stream has answered everything of its source up to
		// this snapshot sequence (for ChangeAcks).
		upTo := snap.Seq
		for _, w := range st.order {
			wasPending := w.pending
			if err := s.push(st, w, snap); err != nil {
				return err
			}
			switch {
			case !w.pending:
				w.upTo = snap.Seq // nothing outstanding, nothing to send
			case !wasPending:
				w.sentFrom = snap.Seq // a response built from snap went out
			}
			upTo = min(upTo, w.upTo)
		}
		acks.Update(upTo)
		return nil
	}
	if cancel == nil {
		return serve.ServeStream(ctx, source, recv, onRequest, push)
	}
	return serve.ServeClientStream(ctx, cancel, source, recv, onRequest, push)
}

// ClientOf is what a router sees of a legacy MCP sink: its node id and
// annotations.
func ClientOf(node *mcpv1alpha1.SinkNode) snapshot.Client {
	return snapshot.Client{ID: node.GetId(), Labels: node.GetAnnotations()}
}

func newStreamState(send func(any) error, logBudget *serve.LogLimiter, lease *serve.Lease) *streamState {
	return &streamState{send: send, watches: map[string]*watch{}, logBudget: logBudget.ForStream(), lease: lease}
}

// streamState is one stream's state, owned by its handler goroutine.
type streamState struct {
	send    func(any) error // writes a response (a *serve.Message) to the stream
	acks    int             // responses acknowledged on this stream
	sink    string          // the sink node id, for logs
	watches map[string]*watch
	order   []*watch // in the order first asked: responses follow it
	nonces  uint64   // numbers incremental responses
	// resumed counts the names the sink gave in initial_resource_versions,
	// every collection together, for serve.MaxNamesPerStream.
	resumed int
	// collections are the labels the stream counts under in
	// galleon_mcp_subscribed_streams.
	collections map[string]struct{}
	// logBudget bounds the log lines this sink can cause with NACKs.
	logBudget *serve.LogLimiter
	// lease holds the stream's resume versions in the process's budget;
	// nil for the callout, which this process dialed.
	lease *serve.Lease
}

// watch is one collection's state on one stream.
type watch struct {
	collection string
	kind       snapshot.Kind
	known      bool // a collection this server holds; others get one empty answer

	// incremental is what the sink's latest request asked for.
	incremental bool
	// held is what an incremental sink holds, while known (synced): what it
	// sent in initial_resource_versions or what we sent since.
	held   snapshot.Holdings
	synced bool

	sent    bool   // a response went out for this collection on this stream
	sentSeq uint64 // collection Seq of the last response
	sentVer string // collection Version of the last response
	nonce   string // nonce of the last response
	sentAt  time.Time
	pending bool // the last response is not acknowledged yet
	resend  bool // the sink subscribed again (empty nonce): send the full state

	// For ChangeAcks: the sink has answered everything of its source up to
	// snapshot upTo; the outstanding response was built from sentFrom.
	upTo, sentFrom uint64
}

// subscribed counts the stream under collection's label, once.
func (st *streamState) subscribed(m *metrics, collection string) {
	l := collectionLabel(collection)
	if _, ok := st.collections[l]; ok {
		return
	}
	if st.collections == nil {
		st.collections = map[string]struct{}{}
	}
	st.collections[l] = struct{}{}
	m.subscribed.WithLabelValues(l).Inc()
}

// releaseCollections takes the stream off galleon_mcp_subscribed_streams.
func (st *streamState) releaseCollections(m *metrics) {
	for l := range st.collections {
		m.subscribed.WithLabelValues(l).Dec()
	}
}

// request applies one request to the stream's watches. The error closes the
// stream, for a request no sink should send.
func (s *Server) request(st *streamState, req *mcpv1alpha1.RequestResources) error {
	if id := req.GetSinkNode().GetId(); id != "" {
		st.sink = serve.ClientText(id, maxLoggedSink)
	}
	w, exists := st.watches[req.GetCollection()]
	if err := s.admit(req.GetCollection(), exists, len(st.watches)); err != nil {
		return err
	}
	if !exists {
		if err := s.admitResume(st.lease, st.resumed, req.InitialResourceVersions); err != nil {
			return err
		}
		st.resumed += len(req.InitialResourceVersions)
		w = &watch{collection: req.Collection, incremental: req.Incremental}
		w.kind, w.known = KindOf(req.Collection)
		if req.Incremental && len(req.InitialResourceVersions) > 0 && w.known {
			// A sink resuming: the first response holds only what it lacks.
			w.held = snapshot.Holdings{}
			for name, version := range req.InitialResourceVersions {
				w.held.Hold(name, version)
			}
			w.synced = true
		}
		st.watches[req.Collection] = w
		st.order = append(st.order, w)
		st.subscribed(s.metrics, req.Collection)
		s.log.Debug("mcp subscribe", "collection", req.Collection, "sink", st.sink,
			"incremental", req.Incremental, "resume", len(req.InitialResourceVersions))
		return nil
	}
	if w.incremental != req.Incremental {
		w.incremental = req.Incremental
		w.held, w.synced = snapshot.Holdings{}, false // the next response is full state
	}
	switch {
	case !w.sent:
		// Still a subscription: nothing to acknowledge yet.
	case req.ResponseNonce == "":
		// The sink subscribes again on the same stream: answer with the
		// current full state.
		w.pending, w.resend = false, true
		w.held, w.synced = snapshot.Holdings{}, false
	case req.ResponseNonce != w.nonce:
		// An answer to an older response: the newer one is on its way.
		s.metrics.badRequests.WithLabelValues("stale_nonce").Inc()
	case req.ErrorDetail != nil:
		w.pending = false
		// An answer all the same, for ChangeAcks (NACKs have their counter).
		w.upTo = max(w.upTo, w.sentFrom)
		// The sink keeps what it had; the rejected state (w.sentVer) is not
		// sent again. What an incremental sink holds is no longer known, so
		// the next, newer state goes out in full.
		w.held, w.synced = snapshot.Holdings{}, false
		s.metrics.acks.WithLabelValues(collectionLabel(w.collection), "nack").Inc()
		s.metrics.ackLatency.Observe(time.Since(w.sentAt).Seconds())
		if ok, suppressed := st.logBudget.Allow(time.Now()); ok {
			attrs := []any{"collection", w.collection, "sink", st.sink, "nonce", w.nonce, "version", w.sentVer,
				"error", serve.ClientText(req.ErrorDetail.GetMessage(), serve.MaxLoggedText)}
			if suppressed > 0 {
				attrs = append(attrs, "suppressed", suppressed)
			}
			s.log.Warn("mcp response rejected", attrs...)
		} else {
			s.metrics.logSuppressed.Inc()
		}
	default:
		w.pending = false
		w.upTo = max(w.upTo, w.sentFrom)
		st.acks++
		s.metrics.acks.WithLabelValues(collectionLabel(w.collection), "ack").Inc()
		s.metrics.ackLatency.Observe(time.Since(w.sentAt).Seconds())
	}
	return nil
}

// push sends w's collection if the sink may receive it and lacks it.
func (s *Server) push(st *streamState, w *watch, snap *snapshot.Snapshot) error {
	if w.pending {
		return nil
	}
	if !w.known {
		if w.sent && !w.resend {
			return nil
		}
		msg := emptyEncoded(w.collection)
		return s.send(st, w, msg, 0, emptyVersion, nonceOf(0), "full", nil)
	}
	if !snap.Ready {
		// An empty answer before the registry was listed would make the
		// sink delete everything it holds from us.
		return nil
	}
	col := snap.Collection(w.kind)
	if w.sent && !w.resend && (col.Seq == w.sentSeq || col.Version == w.sentVer) {
		// Nothing new: either what the sink has (ACKed), or what it
		// rejected (NACKed), which is not sent again.
		return nil
	}
	if !w.incremental || !w.synced {
		msg := fullEncoded(col, w.collection)
		if w.incremental {
			w.held = snapshot.HoldingAll(col)
			w.synced = true
		}
		s.checkSize(col.Version, w.collection, msg.Size)
		return s.send(st, w, msg, col.Seq, col.Version, nonceOf(col.Seq), "full", snap)
	}
	changed, removed := w.held.CatchUp(col, snapshot.Scope{All: true}, nil)
	if w.sent && len(changed) == 0 && len(removed) == 0 {
		// The content came back to what the sink holds.
		w.sentSeq, w.sentVer = col.Seq, col.Version
		return nil
	}
	st.nonces++
	nonce := nonceOf(col.Seq) + "." + nonceOf(st.nonces)
	msg := incrementalEncoded(col.Version, w.collection, nonce, changed, removed)
	s.checkSize(col.Version, w.collection, msg.Size)
	return s.send(st, w, msg, col.Seq, col.Version, nonce, "incremental", snap)
}

func (s *Server) send(st *streamState, w *watch, msg *wireMessage,
	seq uint64, version, nonce, mode string, snap *snapshot.Snapshot) error {
	if err := st.send(msg); err != nil {
		return err
	}
	w.sent, w.sentSeq, w.sentVer, w.nonce, w.pending, w.resend = true, seq, version, nonce, true, false
	w.sentAt = time.Now()
	label := collectionLabel(w.collection)
	s.metrics.responses.WithLabelValues(label, mode).Inc()
	s.metrics.responseBytes.WithLabelValues(label, mode).Add(float64(msg.Size))
	if snap != nil {
		s.metrics.pushLatency.Observe(w.sentAt.Sub(snap.Time).Seconds())
	}
	return nil
}

// checkSize counts a response over the limit and warns once per collection
// version. It is still sent: a sink with a raised limit takes it.
func (s *Server) checkSize(version, collection string, size int) {
	if size <= s.maxSize {
		return
	}
	s.metrics.oversize.WithLabelValues(collectionLabel(collection)).Inc()
	s.warnMu.Lock()
	first := s.warned[collection] != version
	s.warned[collection] = version
	s.warnMu.Unlock()
	if first {
		s.log.Warn("mcp response exceeds the sink message size limit", "collection", collection, "version", version,
			"bytes", size, "limit", s.maxSize,
			"hint", "raise the sink's gRPC max receive message size, or have it ask for incremental updates")
	}
}
