package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	mcp "istio.io/api/mcp/v1alpha1"

	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/internal/pipeline"
	"github.com/galleon-mesh/galleon/internal/serve/xds"
	"github.com/galleon-mesh/galleon/internal/server/rungroup"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/vip"
)

// Config is what a peer serves and how.
type Config struct {
	// Dir is the file registry (galleon-load generate), read as galleon-file reads it.
	Dir string
	// Namespace is the namespace of services whose file gives none: galleon-file's --namespace.
	Namespace string
	// TypeURLs are the type URLs served, each from a LinearCache of its own holding the
	// ServiceEntry collection.
	TypeURLs []string
	// AnyTypeURL, when set, is the type URL of the Any around every resource of TypeURLs in a
	// SotW response, in place of go-control-plane's: it stamps the request's type URL on each
	// (cachev3.RawResponse), and istiod's MCP client decodes each Any as an mcp.Resource with
	// anypb's UnmarshalTo, which refuses any other type URL (pkg/adsc/adsc.go, handleMCP). So a
	// go-control-plane server feeds istiod only with this set to
	// type.googleapis.com/istio.mcp.v1alpha1.Resource: what a partner building on it would add.
	AnyTypeURL string
	// Quiet and MaxDelay are the core's debounce, galleon-file's --debounce-quiet and
	// --debounce-max: the peer's front end is Galleon's own, so both wait the same.
	Quiet, MaxDelay time.Duration
	// ScanQuiet is galleon-file's --file-scan-quiet (0: its default).
	ScanQuiet time.Duration
	Logger    *slog.Logger
}

// Peer serves a file registry from go-control-plane's LinearCache and ADS servers (SotW and
// Delta). Its front end is galleon-file's, unchanged: the file adapter (fsnotify, its 20 ms burst
// window, the periodic re-scan), the pipeline (debounce, conversion, validation) and the
// snapshot store, so the resources are galleon-file's to the byte. What differs is the serving:
// on every new snapshot the peer re-puts the whole ServiceEntry collection into each LinearCache
// with SetResources, and go-control-plane's servers take it from there. That is the peer's
// documented behaviour, what the benchmark measures against Galleon's snapshot and server.
type Peer struct {
	cfg    Config
	log    *slog.Logger
	store  *snapshot.Store
	pipe   *pipeline.Pipeline
	reg    *file.Registry
	caches map[string]*cachev3.LinearCache
	mux    *cachev3.MuxCache

	metrics      *prometheus.Registry
	reputs       prometheus.Counter
	reputSeconds prometheus.Histogram
	resources    prometheus.Gauge

	// ready is closed once the first full set is in every cache; /readyz answers 200 from then
	// on, and gRPC is served from then on.
	ready     chan struct{}
	readyOnce sync.Once
}

// New checks cfg and builds a peer; Run serves it.
func New(cfg Config) (*Peer, error) {
	if len(cfg.TypeURLs) == 0 {
		return nil, errors.New("no type URL to serve")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg, err := file.New(file.Config{Dir: cfg.Dir, Namespace: cfg.Namespace, ScanQuiet: cfg.ScanQuiet, Logger: log})
	if err != nil {
		return nil, err
	}
	vips, err := defaultVIPs()
	if err != nil {
		return nil, err
	}
	metrics := prometheus.NewRegistry()
	// The process collector gives process_resident_memory_bytes, which galleon-load --metrics
	// reads, as it reads galleon-file's.
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	store := snapshot.NewStore()
	p := &Peer{
		cfg:   cfg,
		log:   log,
		store: store,
		// As daemon builds galleon-file's pipeline, so that names, labels and bytes are
		// the same: registry "file", ServiceEntry output, no panic threshold, and an
		// address for every host from galleon-file's default --vip-ranges.
		pipe: pipeline.New(store, pipeline.Config{
			VIPs: vips, Registry: "file", Convert: convert.Options{Mode: convert.ModeServiceEntry},
			Quiet: cfg.Quiet, MaxDelay: cfg.MaxDelay, Logger: log, Registerer: metrics,
		}),
		reg:     reg,
		caches:  map[string]*cachev3.LinearCache{},
		metrics: metrics,
		reputs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "galleon_peer_reputs_total", Help: "Full sets put into the LinearCaches (one per snapshot).",
		}),
		reputSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "galleon_peer_reput_seconds", Help: "Time of one full re-put: the set built and SetResources on every LinearCache, which also computes the response of every open watch.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		resources: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_peer_resources", Help: "Resources in each LinearCache.",
		}),
		ready: make(chan struct{}),
	}
	metrics.MustRegister(p.reputs, p.reputSeconds, p.resources)
	for _, t := range cfg.TypeURLs {
		if _, dup := p.caches[t]; dup {
			return nil, fmt.Errorf("type URL %s given twice", t)
		}
		p.caches[t] = cachev3.NewLinearCache(t)
	}
	// A SotW request for a type no cache holds gets an empty set, as Galleon answers it: istiod
	// asks for every config type on its stream and serves nothing until each was answered. A
	// Delta request for one fails its stream: go-control-plane's own answer.
	p.mux = &cachev3.MuxCache{
		Classify: func(r *cachev3.Request) string {
			if _, ok := p.caches[r.GetTypeUrl()]; ok {
				return r.GetTypeUrl()
			}
			return otherTypes
		},
		ClassifyDelta: func(r *cachev3.DeltaRequest) string { return r.GetTypeUrl() },
		Caches:        map[string]cachev3.Cache{otherTypes: emptyCache{}},
	}
	for t, c := range p.caches {
		p.mux.Caches[t] = c
	}
	return p, nil
}

// defaultVIPs is the allocator galleon-file runs with by default (--vip-allocate, with the
// default --vip-ranges and --vip-exclude): every generated host has no address of its own, so
// each gets one, and a peer without them would serve smaller resources than galleon-file.
func defaultVIPs() (*vip.Allocator, error) {
	ranges, err := vip.ParsePrefixes(vip.DefaultRanges)
	if err != nil {
		return nil, err
	}
	exclude, err := vip.ParsePrefixes(vip.DefaultExclude)
	if err != nil {
		return nil, err
	}
	return vip.New(ranges, exclude)
}

// Run serves gRPC on grpcLis (once the first full set is in the caches) and HTTP on httpLis
// (/metrics, /healthz, /readyz) until ctx is done or a part fails, then stops every part and
// returns. It closes both listeners.
func (p *Peer) Run(ctx context.Context, grpcLis, httpLis net.Listener) error {
	parts, ctx := rungroup.WithContext(ctx)
	// galleon-file's own options (codec, keepalive), so that transport settings are not a
	// difference: the codec passes Galleon's pre-encoded messages through and marshals every
	// other message, all of go-control-plane's, with the proto codec.
	opts := xds.GRPCServerOptions()
	if p.cfg.AnyTypeURL != "" {
		opts = append(opts, grpc.ChainStreamInterceptor(p.restampAnys))
	}
	g := grpc.NewServer(opts...)
	// go-control-plane's streams end when this context does.
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, p.mux, nil))
	httpSrv := &http.Server{Handler: p.handler(), ReadHeaderTimeout: 10 * time.Second}

	parts.Go("registry", func() error { return p.reg.Run(ctx, p.pipe) })
	parts.Go("pipeline", func() error { return p.pipe.Run(ctx) })
	parts.Go("cache", func() error { return p.follow(ctx) })
	parts.Go("grpc", func() error {
		// Not before the first full set: an empty LinearCache would answer a sink's first
		// request with no resources, where galleon-file holds every answer back until the
		// registry was listed.
		select {
		case <-ctx.Done():
			grpcLis.Close()
			return nil
		case <-p.ready:
		}
		if err := g.Serve(grpcLis); !errors.Is(err, grpc.ErrServerStopped) {
			return err
		}
		return nil
	})
	parts.Go("http", func() error {
		if err := httpSrv.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})

	<-ctx.Done()
	// Config streams never end by themselves and the sinks are benchmark clients: no drain.
	g.Stop()
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	_ = httpSrv.Shutdown(shutdownCtx)
	return parts.Wait() // nil when every part stopped cleanly
}

// decoded is one served resource as the LinearCache holds it, with the snapshot version it was
// decoded from.
type decoded struct {
	version string
	msg     *mcp.Resource
}

// follow re-puts the full ServiceEntry collection into every cache on every new ready snapshot,
// until ctx is done.
func (p *Peer) follow(ctx context.Context) error {
	changed, unsubscribe := p.store.Subscribe()
	defer unsubscribe()
	var (
		prev    map[string]decoded
		lastSeq uint64
		put     bool
	)
	for {
		// The subscription coalesces: a slow re-put sees one signal and puts the newest.
		if snap := p.store.Current(); snap.Ready && (!put || snap.Seq != lastSeq) {
			next, err := p.reput(snap, prev)
			if err != nil {
				return err
			}
			prev, lastSeq, put = next, snap.Seq, true
			p.readyOnce.Do(func() { close(p.ready) })
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// reput puts every ServiceEntry of snap into every cache with SetResources. Each resource is
// Galleon's istio.mcp.v1alpha1.Resource decoded from its own bytes; go-control-plane marshals
// it again (deterministically, as Galleon did), and the body, an Any, keeps its bytes. Decoding
// is done once per resource version (prev), so that what the peer adds of its own per change is
// one decode and one map of the set: the rest is go-control-plane's.
func (p *Peer) reput(snap *snapshot.Snapshot, prev map[string]decoded) (map[string]decoded, error) {
	start := time.Now()
	coll := snap.Collection(snapshot.ServiceEntry)
	next := make(map[string]decoded, coll.Len())
	all := make(map[string]types.Resource, coll.Len())
	for _, r := range coll.Resources() {
		d, ok := prev[r.Name]
		if !ok || d.version != r.Version {
			m := &mcp.Resource{}
			if err := proto.Unmarshal(r.MCP(), m); err != nil {
				return nil, fmt.Errorf("decoding %s: %w", r.Name, err)
			}
			d = decoded{version: r.Version, msg: m}
		}
		next[r.Name] = d
		all[r.Name] = d.msg
	}
	for _, c := range p.caches {
		c.SetResources(all)
	}
	took := time.Since(start)
	p.reputs.Inc()
	p.reputSeconds.Observe(took.Seconds())
	p.resources.Set(float64(len(all)))
	if prev == nil {
		p.log.Info("ready: the full set is in the LinearCache", "resources", len(all), "seq", snap.Seq, "reput", took)
	} else {
		p.log.Debug("re-put the full set", "resources", len(all), "seq", snap.Seq, "took", took)
	}
	return next, nil
}

// restampAnys gives every resource of a SotW response for a served type the Any type URL
// Config.AnyTypeURL, in place. The response is this stream's own: go-control-plane's caches
// build a RawResponse per watch, and it marshals its resources into new Anys; only the byte
// slices inside them are shared, and they are not touched.
func (p *Peer) restampAnys(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, restampingStream{ServerStream: ss, p: p})
}

type restampingStream struct {
	grpc.ServerStream
	p *Peer
}

func (s restampingStream) SendMsg(m any) error {
	if resp, ok := m.(*discoveryv3.DiscoveryResponse); ok {
		if _, served := s.p.caches[resp.GetTypeUrl()]; served {
			for _, a := range resp.GetResources() {
				a.TypeUrl = s.p.cfg.AnyTypeURL
			}
		}
	}
	return s.ServerStream.SendMsg(m)
}

// otherTypes is the MuxCache key of every SotW type URL the peer does not serve.
const otherTypes = "(not served)"

// emptyCache answers a SotW stream's first request for a type with an empty set, once, and
// holds every later request of it (an ACK) open: the set never changes. It answers into out at
// once, as a LinearCache holding resources does.
type emptyCache struct{}

func (emptyCache) CreateWatch(req *cachev3.Request, _ cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	if req.GetVersionInfo() == "" {
		out <- emptySet(req)
	}
	return func() {}, nil
}

func (emptyCache) CreateDeltaWatch(req *cachev3.DeltaRequest, _ cachev3.Subscription, _ chan cachev3.DeltaResponse) (func(), error) {
	return nil, fmt.Errorf("type %s is not served", req.GetTypeUrl())
}

func (emptyCache) Fetch(_ context.Context, req *cachev3.Request) (cachev3.Response, error) {
	return emptySet(req), nil
}

// emptySet is the answer to req holding no resource, at version "empty".
func emptySet(req *cachev3.Request) *cachev3.PassthroughResponse {
	return &cachev3.PassthroughResponse{
		Request:           req,
		DiscoveryResponse: &discoveryv3.DiscoveryResponse{VersionInfo: "empty", TypeUrl: req.GetTypeUrl()},
	}
}

func (p *Peer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(p.metrics, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-p.ready:
			fmt.Fprintln(w, "ready")
		default:
			http.Error(w, "not ready: waiting for the first full listing of the registry", http.StatusServiceUnavailable)
		}
	})
	return mux
}
