package conformance

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	mcp "istio.io/api/mcp/v1alpha1"
	istiomemory "istio.io/istio/pilot/pkg/config/memory"
	istiomodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pkg/adsc"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/collections"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/pkg/keepalive"

	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/internal/pipeline"
	"github.com/galleon-mesh/galleon/internal/serve/xds"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/test/internal/proc"
	"github.com/galleon-mesh/galleon/test/istiod"
)

// waitTimeout bounds every wait. Everything here is in-process and takes milliseconds; the
// reconnect test waits for adsc's backoff (0.5 s, x1.5, +-50%) and grpc's (1 s, x1.6).
const waitTimeout = 20 * time.Second

// eventually polls cond until it returns "" (satisfied) or waitTimeout passes; cond returns what
// is still wrong, which the failure message reports.
func eventually(t *testing.T, what string, cond func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	start := time.Now()
	last := "not checked yet"
	err := proc.WaitFor(ctx, func() (bool, error) {
		last = cond()
		return last == "", nil
	})
	if err != nil {
		t.Fatalf("%s: %v; still wrong: %s", what, err, last)
	}
	t.Logf("%s: after %v", what, time.Since(start).Round(time.Millisecond))
}

// ---------------------------------------------------------------------------------------------
// Galleon's side.

// galleonCore is Galleon's core wired as daemon wires it: a snapshot store, the pipeline
// that converts registry reports into it (the registry.Sink an adapter reports to), and the ADS
// server serving it on a gRPC server built with xds.GRPCServerOptions.
type galleonCore struct {
	t     *testing.T
	store *snapshot.Store
	pipe  *pipeline.Pipeline
	conv  convert.Options
	addr  string // host:port of the gRPC server (kept across restarts)
	grpc  *grpc.Server
}

func startCore(t *testing.T, mode convert.Mode) *galleonCore {
	t.Helper()
	c := &galleonCore{t: t, store: snapshot.NewStore(), conv: convert.Options{Mode: mode, Registry: registryName}}
	// Short debounce: the tests wait for results, they do not time the pipeline.
	c.pipe = pipeline.New(c.store, pipeline.Config{Registry: registryName, Convert: c.conv, Quiet: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.pipe.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	c.serve("127.0.0.1:0")
	t.Cleanup(c.stopServing)
	return c
}

// serve starts a new gRPC server with a new xds.Server over the core's store on addr (which,
// right after stopServing, may need a moment to be free again).
func (c *galleonCore) serve(addr string) {
	c.t.Helper()
	var lis net.Listener
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := proc.WaitFor(ctx, func() (bool, error) {
		var err error
		lis, err = net.Listen("tcp", addr)
		return err == nil, err
	}); err != nil {
		c.t.Fatalf("listening on %s: %v", addr, err)
	}
	g := grpc.NewServer(xds.GRPCServerOptions()...)
	xds.NewServer(snapshot.Everyone(c.store), xds.Options{}).Register(g)
	go func() { _ = g.Serve(lis) }()
	c.grpc, c.addr = g, lis.Addr().String()
}

// stopServing stops the gRPC server at once, closing every stream and connection.
func (c *galleonCore) stopServing() {
	if c.grpc != nil {
		c.grpc.Stop()
		c.grpc = nil
	}
}

// served returns the resource the core currently serves under kind and "namespace/name".
func (c *galleonCore) served(kind snapshot.Kind, name string) *snapshot.Resource {
	return c.store.Current().Collection(kind).Get(name)
}

// waitApplied waits until the pipeline has applied a flush with Seq > after, and returns the
// new Seq.
func (c *galleonCore) waitApplied(after uint64) uint64 {
	c.t.Helper()
	var seq uint64
	eventually(c.t, "pipeline flush applied", func() string {
		seq = c.store.Current().Seq
		if seq <= after {
			return fmt.Sprintf("snapshot seq %d", seq)
		}
		return ""
	})
	return seq
}

// wantResource is what istiod's store must hold for one converted resource.
type wantResource struct {
	gvk         config.GroupVersionKind
	kind        snapshot.Kind
	namespace   string
	name        string
	spec        proto.Message
	labels      map[string]string
	annotations map[string]string
}

func (w wantResource) fullName() string { return w.namespace + "/" + w.name }

// want converts services the way the pipeline does and returns what istiod must hold, keyed
// "Kind/namespace/name".
func (c *galleonCore) want(services ...model.Service) map[string]wantResource {
	c.t.Helper()
	out := map[string]wantResource{}
	for _, svc := range services {
		resources, err := convert.Convert(svc, c.conv)
		if err != nil {
			c.t.Fatalf("test fixture %s does not convert: %v", svc.Key(), err)
		}
		for _, r := range resources {
			w := wantResource{namespace: r.Namespace, name: r.Name, spec: r.Spec, labels: r.Labels, annotations: r.Annotations}
			switch r.Kind {
			case convert.KindServiceEntry:
				w.gvk, w.kind = gvk.ServiceEntry, snapshot.ServiceEntry
			case convert.KindWorkloadEntry:
				w.gvk, w.kind = gvk.WorkloadEntry, snapshot.WorkloadEntry
			default:
				c.t.Fatalf("unexpected resource kind %v", r.Kind)
			}
			out[w.gvk.Kind+"/"+w.fullName()] = w
		}
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// istiod's side.

// The istiod settings that shape its config-source client, at their defaults
// (pilot/pkg/bootstrap/options.go: POD_NAMESPACE, POD_NAME, REVISION).
const (
	podNamespace = "istio-system"
	podName      = ""
	revision     = ""
)

// istiodSink is istiod's client for one `xds://` config source, built exactly as
// pilot/pkg/bootstrap/configcontroller.go (Istio 1.29.2, initConfigSources, case XDS) builds it:
// adsc.New with adsc.ConfigInitialRequests(), the node metadata and dial options istiod uses, a
// memory.Make(collections.Pilot) store (which validates like istiod) behind a memory.Controller
// whose HasSynced is adsc's. The controller runs, like istiod's, and its events (what istiod's
// ServiceEntry controller reacts to) are recorded; adsc's XDSUpdates channel, which istiod leaves
// unread, is drained to record every response.
type istiodSink struct {
	t          *testing.T
	adsc       *adsc.ADSC
	store      *istiomemory.Controller
	events     *eventLog
	responses  *responseLog
	initialReq []string // type URLs of the initial requests, in order
}

func connectIstiod(t *testing.T, addr string) *istiodSink {
	t.Helper()
	xdsMCP, err := adsc.New(addr, &adsc.ADSConfig{
		InitialDiscoveryRequests: adsc.ConfigInitialRequests(),
		Config: adsc.Config{
			Namespace: podNamespace,
			Workload:  podName,
			Revision:  revision,
			Meta: istiomodel.NodeMetadata{
				Generator:     "api",
				IstioRevision: revision,
			}.ToStruct(),
			GrpcOpts: []grpc.DialOption{
				keepalive.DefaultOption().ConvertToClientOption(),
				// getTransportCredentials without tlsSettings.
				grpc.WithTransportCredentials(insecure.NewCredentials()),
			},
		},
	})
	if err != nil {
		t.Fatalf("adsc.New(%s): %v", addr, err)
	}
	store := istiomemory.Make(collections.Pilot)
	controller := istiomemory.NewController(store)
	controller.RegisterHasSyncedHandler(xdsMCP.HasSynced)
	xdsMCP.Store = controller

	s := &istiodSink{t: t, adsc: xdsMCP, store: controller, events: &eventLog{}, responses: &responseLog{}}
	for _, r := range adsc.ConfigInitialRequests() {
		s.initialReq = append(s.initialReq, r.TypeUrl)
	}
	for _, k := range []config.GroupVersionKind{gvk.ServiceEntry, gvk.WorkloadEntry} {
		controller.RegisterEventHandler(k, s.events.record)
	}
	stop := make(chan struct{})
	drained := make(chan struct{})
	go controller.Run(stop)
	go func() {
		defer close(drained)
		s.responses.drain(xdsMCP.XDSUpdates, stop)
	}()
	if err := xdsMCP.Run(); err != nil {
		// istiod exits here ("MCP: failed running ...").
		t.Fatalf("adsc Run against %s: %v", addr, err)
	}
	t.Cleanup(func() {
		xdsMCP.Close()
		close(stop)
		<-drained
	})
	return s
}

// waitSynced waits until adsc reports HasSynced, what istiod waits for before it serves.
func (s *istiodSink) waitSynced() {
	s.t.Helper()
	eventually(s.t, "adsc HasSynced", func() string {
		if !s.adsc.HasSynced() {
			return "HasSynced false; types answered so far: " + strings.Join(s.responses.types(), ", ")
		}
		return ""
	})
}

// waitAllAnswered waits until a response to every initial request (MeshConfig included) has
// been recorded.
func (s *istiodSink) waitAllAnswered() {
	s.t.Helper()
	eventually(s.t, "a response for every initial request", func() string {
		types := s.responses.types()
		var missing []string
		for _, typ := range s.initialReq {
			if !slices.Contains(types, typ) {
				missing = append(missing, typ)
			}
		}
		if len(missing) > 0 {
			return "no response for " + strings.Join(missing, ", ")
		}
		return ""
	})
}

// get returns the config istiod's store holds under kind and "namespace/name", or nil.
func (s *istiodSink) get(k config.GroupVersionKind, fullName string) *config.Config {
	ns, name, _ := strings.Cut(fullName, "/")
	return s.store.Get(k, name, ns)
}

// diff compares istiod's store with want (every ServiceEntry and WorkloadEntry, nothing more)
// and with what core serves (resourceVersion = the MCP version, creationTimestamp = the
// create_time); it returns "" when they agree, otherwise what differs.
func (s *istiodSink) diff(core *galleonCore, want map[string]wantResource) string {
	var problems []string
	held := map[string]config.Config{}
	for _, k := range []config.GroupVersionKind{gvk.ServiceEntry, gvk.WorkloadEntry} {
		for _, c := range s.store.List(k, "") {
			held[k.Kind+"/"+c.Namespace+"/"+c.Name] = c
		}
	}
	for _, key := range sortedKeys(want) {
		w := want[key]
		got, ok := held[key]
		if !ok {
			problems = append(problems, key+" missing")
			continue
		}
		if got.GroupVersionKind != w.gvk {
			problems = append(problems, fmt.Sprintf("%s: stored as %v, want %v", key, got.GroupVersionKind, w.gvk))
		}
		spec, ok := got.Spec.(proto.Message)
		if !ok || !proto.Equal(spec, w.spec) {
			problems = append(problems, fmt.Sprintf("%s: spec %v, want %v", key, got.Spec, w.spec))
		}
		if !maps.Equal(got.Labels, w.labels) {
			problems = append(problems, fmt.Sprintf("%s: labels %v, want %v", key, got.Labels, w.labels))
		}
		if !maps.Equal(got.Annotations, w.annotations) {
			problems = append(problems, fmt.Sprintf("%s: annotations %v, want %v", key, got.Annotations, w.annotations))
		}
		r := core.served(w.kind, w.fullName())
		switch {
		case r == nil:
			problems = append(problems, key+": not in Galleon's snapshot")
		case got.ResourceVersion != r.Version:
			problems = append(problems, fmt.Sprintf("%s: resourceVersion %q, Galleon serves version %q", key, got.ResourceVersion, r.Version))
		case !got.CreationTimestamp.Equal(r.CreateTime):
			problems = append(problems, fmt.Sprintf("%s: creationTimestamp %v, Galleon's create_time %v", key, got.CreationTimestamp, r.CreateTime))
		}
	}
	for _, key := range sortedKeys(held) {
		if _, ok := want[key]; !ok {
			problems = append(problems, key+" held but not expected")
		}
	}
	return strings.Join(problems, "; ")
}

// waitHolds waits until istiod's store holds exactly want (see diff).
func (s *istiodSink) waitHolds(what string, core *galleonCore, want map[string]wantResource) {
	s.t.Helper()
	eventually(s.t, what, func() string { return s.diff(core, want) })
}

func sortedKeys[V any](m map[string]V) []string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	return keys
}

// storeEvent is one event of istiod's config store for a ServiceEntry or WorkloadEntry.
type storeEvent struct {
	event     istiomodel.Event
	key       string // "Kind/namespace/name"
	oldCreate time.Time
	newCreate time.Time
}

func (e storeEvent) String() string { return e.event.String() + " " + e.key }

type eventLog struct {
	mu     sync.Mutex
	events []storeEvent
}

func (l *eventLog) record(old, cur config.Config, ev istiomodel.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, storeEvent{
		event:     ev,
		key:       cur.GroupVersionKind.Kind + "/" + cur.Namespace + "/" + cur.Name,
		oldCreate: old.CreationTimestamp,
		newCreate: cur.CreationTimestamp,
	})
}

// since returns the events after the first n.
func (l *eventLog) since(n int) []storeEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events[min(n, len(l.events)):])
}

func (l *eventLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// summary is the events as "add Kind/ns/name" strings.
func summary(events []storeEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.String()
	}
	return out
}

// response is one DiscoveryResponse adsc received.
type response struct {
	typeURL string
	version string
	nonce   string
	names   []string // metadata.name of each MCP resource, in order
}

type responseLog struct {
	mu        sync.Mutex
	responses []response
}

func (l *responseLog) drain(ch <-chan *discovery.DiscoveryResponse, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case msg := <-ch:
			if msg == nil {
				continue
			}
			r := response{typeURL: msg.TypeUrl, version: msg.VersionInfo, nonce: msg.Nonce}
			for _, a := range msg.Resources {
				var res mcp.Resource
				if err := a.UnmarshalTo(&res); err != nil {
					r.names = append(r.names, "<not an mcp.Resource: "+a.TypeUrl+">")
					continue
				}
				r.names = append(r.names, res.GetMetadata().GetName())
			}
			l.mu.Lock()
			l.responses = append(l.responses, r)
			l.mu.Unlock()
		}
	}
}

// all returns every response so far.
func (l *responseLog) all() []response {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.responses)
}

// types returns the type URLs answered so far, sorted.
func (l *responseLog) types() []string {
	seen := map[string]bool{}
	for _, r := range l.all() {
		seen[r.typeURL] = true
	}
	return sortedKeys(seen)
}

// counts returns the number of responses per type URL.
func (l *responseLog) counts() map[string]int {
	out := map[string]int{}
	for _, r := range l.all() {
		out[r.typeURL]++
	}
	return out
}

// of returns the responses of one type URL.
func (l *responseLog) of(typeURL string) []response {
	var out []response
	for _, r := range l.all() {
		if r.typeURL == typeURL {
			out = append(out, r)
		}
	}
	return out
}

// forCompiledRelease runs fn as a sub-test named after the Istio release whose pkg/adsc is compiled
// into this binary ("adsc-1.29.2"), so a failure names the release. One test module compiles one
// release; another release's client needs its own module (docs/istiod-releases.md).
func forCompiledRelease(t *testing.T, fn func(t *testing.T)) {
	t.Run("adsc-"+istiod.CompiledRelease(), fn)
}
