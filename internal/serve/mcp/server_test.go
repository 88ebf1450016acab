package mcp

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/serve/xds"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	mcpv1alpha1 "github.com/galleon-mesh/galleon/proto/mcp/v1alpha1"
)

const meshConfig = "istio/mesh/v1alpha1/MeshConfig"

// startServer serves store on a loopback port with the daemon's gRPC
// options and returns the server and a client for it.
func startServer(t *testing.T, routes snapshot.Router, opts Options) (*Server, mcpv1alpha1.ResourceSourceClient) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(xds.GRPCServerOptions()...)
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	s := NewServer(routes, opts)
	s.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return s, mcpv1alpha1.NewResourceSourceClient(conn)
}

func apply(t testing.TB, s *snapshot.Store, kind snapshot.Kind, ready bool, kv ...string) {
	t.Helper()
	var changes []snapshot.Change
	for i := 0; i < len(kv); i += 2 {
		ch := snapshot.Change{Kind: kind, Name: kv[i]}
		if kv[i+1] != "" {
			ch.Object = &snapshot.Object{Kind: kind, Name: kv[i], Body: []byte(kv[i+1])}
		}
		changes = append(changes, ch)
	}
	if _, _, err := s.Apply(changes, ready); err != nil {
		t.Fatal(err)
	}
}

// put changes ServiceEntries: name, body pairs; an empty body deletes.
func put(t testing.TB, s *snapshot.Store, ready bool, kv ...string) {
	t.Helper()
	apply(t, s, snapshot.ServiceEntry, ready, kv...)
}

type recvResult struct {
	r   *mcpv1alpha1.Resources
	err error
}

// sink is a test sink: a receiving goroutine feeds got, so a test can
// also check that nothing arrives.
type sink struct {
	t           *testing.T
	id          string
	annotations map[string]string // sent in every request's SinkNode
	stream      sinkStream
	cancel      context.CancelFunc
	got         chan recvResult
}

// sinkStream is the sink's end of a stream, whichever side dialed: a
// ResourceSource client stream or a ResourceSink server stream (callout).
type sinkStream interface {
	Send(*mcpv1alpha1.RequestResources) error
	Recv() (*mcpv1alpha1.Resources, error)
}

func openSink(t *testing.T, c mcpv1alpha1.ResourceSourceClient, id string) *sink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := c.EstablishResourceStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{t: t, id: id, stream: st, cancel: cancel, got: make(chan recvResult, 16)}
	go func() {
		for {
			r, err := st.Recv()
			s.got <- recvResult{r, err}
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (s *sink) send(req *mcpv1alpha1.RequestResources) {
	s.t.Helper()
	req.SinkNode = &mcpv1alpha1.SinkNode{Id: s.id, Annotations: s.annotations}
	if err := s.stream.Send(req); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sink) subscribe(collection string, incremental bool) {
	s.t.Helper()
	s.send(&mcpv1alpha1.RequestResources{Collection: collection, Incremental: incremental})
}

func (s *sink) ack(r *mcpv1alpha1.Resources, incremental bool) {
	s.t.Helper()
	s.send(&mcpv1alpha1.RequestResources{Collection: r.Collection, ResponseNonce: r.Nonce, Incremental: incremental})
}

func (s *sink) nack(r *mcpv1alpha1.Resources, incremental bool) {
	s.t.Helper()
	s.send(&mcpv1alpha1.RequestResources{Collection: r.Collection, ResponseNonce: r.Nonce, Incremental: incremental,
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "rejected by test"}})
}

func (s *sink) recv() *mcpv1alpha1.Resources {
	s.t.Helper()
	select {
	case res := <-s.got:
		if res.err != nil {
			s.t.Fatal(res.err)
		}
		return res.r
	case <-time.After(10 * time.Second):
		s.t.Fatal("no response")
		return nil
	}
}

func (s *sink) recvErr() error {
	s.t.Helper()
	select {
	case res := <-s.got:
		return res.err
	case <-time.After(10 * time.Second):
		s.t.Fatal("stream not closed")
		return nil
	}
}

// nothing checks that no response arrives for a while.
func (s *sink) nothing() {
	s.t.Helper()
	select {
	case res := <-s.got:
		s.t.Fatalf("unexpected response %v (error %v)", res.r, res.err)
	case <-time.After(300 * time.Millisecond):
	}
}

// names returns name=body of every resource, checking the wrapping.
func names(t *testing.T, r *mcpv1alpha1.Resources) []string {
	t.Helper()
	out := []string{}
	for _, res := range r.Resources {
		if !strings.HasPrefix(res.GetBody().GetTypeUrl(), "type.googleapis.com/istio.networking.v1alpha3.") {
			t.Fatalf("body type %q", res.GetBody().GetTypeUrl())
		}
		out = append(out, res.GetMetadata().GetName()+"="+string(res.GetBody().GetValue()))
	}
	return out
}

func versions(r *mcpv1alpha1.Resources) map[string]string {
	out := map[string]string{}
	for _, res := range r.Resources {
		out[res.GetMetadata().GetName()] = res.GetMetadata().GetVersion()
	}
	return out
}

func seVersion(store *snapshot.Store) string {
	return store.Current().Collection(snapshot.ServiceEntry).Version
}

func TestWaitsForReadyButAnswersUnknownCollections(t *testing.T) {
	store := snapshot.NewStore()
	_, client := startServer(t, snapshot.Everyone(store), Options{})
	s := openSink(t, client, "sink-1")
	s.subscribe(ServiceEntries, false)
	s.subscribe(meshConfig, false)
	r := s.recv()
	if r.Collection != meshConfig || len(r.Resources) != 0 || r.Incremental || r.Nonce == "" {
		t.Fatalf("first response %v, want an empty full-state MeshConfig answer", r)
	}
	s.nothing()
	put(t, store, false, "ns/a", "a1") // not ready: held back
	s.nothing()
	put(t, store, true, "ns/b", "b1") // ready
	r = s.recv()
	if r.Collection != ServiceEntries || r.Incremental || !slices.Equal(names(t, r), []string{"ns/a=a1", "ns/b=b1"}) {
		t.Fatalf("got %s incremental=%v %v, want the full ready state", r.Collection, r.Incremental, names(t, r))
	}
	if r.SystemVersionInfo != seVersion(store) {
		t.Fatalf("system_version_info %q is not the collection version", r.SystemVersionInfo)
	}
}

func TestWorkloadEntriesCollection(t *testing.T) {
	store := snapshot.NewStore()
	apply(t, store, snapshot.WorkloadEntry, true, "ns/w1", "10.0.0.1")
	_, client := startServer(t, snapshot.Everyone(store), Options{})
	s := openSink(t, client, "sink-1")
	s.subscribe(WorkloadEntries, false)
	r := s.recv()
	if r.Collection != WorkloadEntries || !slices.Equal(names(t, r), []string{"ns/w1=10.0.0.1"}) {
		t.Fatalf("got %s %v", r.Collection, names(t, r))
	}
	if got := r.Resources[0].GetBody().GetTypeUrl(); got != snapshot.WorkloadEntry.BodyTypeURL() {
		t.Fatalf("body type %q", got)
	}
}

func TestNonIncrementalSinkGetsFullStateEveryTime(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1", "ns/b", "b1")
	_, client := startServer(t, snapshot.Everyone(store), Options{})
	s := openSink(t, client, "sink-1")
	s.subscribe(ServiceEntries, false)
	first := s.recv()
	s.ack(first, false)
	s.nothing()                     // nothing changed: nothing sent
	put(t, store, true, "ns/z", "") // no-op: no new snapshot
	s.nothing()
	put(t, store, true, "ns/a", "a2", "ns/b", "", "ns/c", "c1")
	r := s.recv()
	if r.Incremental || !slices.Equal(names(t, r), []string{"ns/a=a2", "ns/c=c1"}) || len(r.RemovedResources) != 0 {
		t.Fatalf("got incremental=%v %v removed %v, want the full state", r.Incremental, names(t, r), r.RemovedResources)
	}
	if r.Nonce == first.Nonce || r.SystemVersionInfo == first.SystemVersionInfo {
		t.Fatalf("second response reuses nonce %q or version %q", r.Nonce, r.SystemVersionInfo)
	}
}

func TestOneOutstandingResponseAndStaleNonce(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	srv, client := startServer(t, snapshot.Everyone(store), Options{})
	s := openSink(t, client, "sink-1")
	s.subscribe(ServiceEntries, false)
	first := s.recv()
	// Two changes while the first response is unacknowledged.
	put(t, store, true, "ns/a", "a2")
	put(t, store, true, "ns/a", "", "ns/b", "b1")
	s.nothing()
	s.send(&mcpv1alpha1.RequestResources{Collection: ServiceEntries, ResponseNonce: "stale-nonce"})
	s.nothing() // a stale nonce acknowledges nothing
	if n := counter(t, srv.metrics.badRequests.WithLabelValues("stale_nonce")); n != 1 {
		t.Fatalf("stale_nonce counted %v times", n)
	}
	s.ack(first, false)
	r := s.recv()
	if got := names(t, r); !slices.Equal(got, []string{"ns/b=b1"}) {
		t.Fatalf("after ACK got %v, want only the latest full state", got)
	}
	// An ACK of the older response now is stale too.
	s.ack(first, false)
	put(t, store, true, "ns/c", "c1")
	s.nothing()
	if n := counter(t, srv.metrics.badRequests.WithLabelValues("stale_nonce")); n != 2 {
		t.Fatalf("stale_nonce counted %v times", n)
	}
}

func TestNackedStateIsNotResent(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	var logs syncbuf.Buffer
	srv, client := startServer(t, snapshot.Everyone(store), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s := openSink(t, client, "sink-7")
	s.subscribe(ServiceEntries, false)
	s.ack(s.recv(), false)
	put(t, store, true, "ns/a", "bad")
	bad := s.recv()
	s.nack(bad, false)
	s.nothing()                     // the rejected state is not sent again
	put(t, store, true, "ns/z", "") // no-op: no new snapshot
	s.nothing()
	put(t, store, true, "ns/a", "fixed")
	r := s.recv()
	if got := names(t, r); !slices.Equal(got, []string{"ns/a=fixed"}) {
		t.Fatalf("after NACK got %v, want the next version, not the rejected one", got)
	}
	if n := counter(t, srv.metrics.acks.WithLabelValues(ServiceEntries, "nack")); n != 1 {
		t.Fatalf("nack counted %v times", n)
	}
	if l := logs.String(); !strings.Contains(l, "sink=sink-7") || !strings.Contains(l, "rejected by test") {
		t.Fatalf("NACK log lacks sink id or message: %s", l)
	}
}

func TestIncrementalSinkGetsOnlyChanges(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1", "ns/b", "b1", "ns/c", "c1")
	_, client := startServer(t, snapshot.Everyone(store), Options{})
	s := openSink(t, client, "sink-1")
	s.subscribe(ServiceEntries, true)
	first := s.recv()
	if first.Incremental || len(first.Resources) != 3 {
		t.Fatalf("first response incremental=%v with %d resources, want the full state", first.Incremental, len(first.Resources))
	}
	s.ack(first, true)
	put(t, store, true, "ns/a", "a2", "ns/b", "", "ns/d", "d1")
	r := s.recv()
	if !r.Incremental || !slices.Equal(names(t, r), []string{"ns/a=a2", "ns/d=d1"}) || !slices.Equal(r.RemovedResources, []string{"ns/b"}) {
		t.Fatalf("got incremental=%v %v removed %v", r.Incremental, names(t, r), r.RemovedResources)
	}
	if r.SystemVersionInfo != seVersion(store) {
		t.Fatalf("system_version_info %q is not the collection version", r.SystemVersionInfo)
	}
	s.ack(r, true)
	put(t, store, true, "ns/c", "c2")
	r = s.recv()
	if !r.Incremental || !slices.Equal(names(t, r), []string{"ns/c=c2"}) || len(r.RemovedResources) != 0 {
		t.Fatalf("got incremental=%v %v removed %v", r.Incremental, names(t, r), r.RemovedResources)
	}
	// More changes than the collection remembers while unacknowledged:
	// the comparison falls back to every resource, still sending only x.
	for i := range 300 {
		put(t, store, true, "ns/x", fmt.Sprint(i))
	}
	s.ack(r, true)
	r = s.recv()
	if !r.Incremental || !slices.Equal(names(t, r), []string{"ns/x=299"}) || len(r.RemovedResources) != 0 {
		t.Fatalf("after a long gap got incremental=%v %v removed %v", r.Incremental, names(t, r), r.RemovedResources)
	}
}

func TestIncrementalNackThenFullState(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1", "ns/b", "b1")
	_, client := startServer(t, snapshot.Everyone(store), Options{})
	s := openSink(t, client, "sink-1")
	s.subscribe(ServiceEntries, true)
	s.ack(s.recv(), true)
	put(t, store, true, "ns/a", "bad")
	bad := s.recv()
	s.nack(bad, true)
	s.nothing()
	put(t, store, true, "ns/b", "b2")
	// What the sink holds after rejecting is not known: the newer state
	// goes out in full, then increments resume.
	r := s.recv()
	if r.Incremental || !slices.Equal(names(t, r), []string{"ns/a=bad", "ns/b=b2"}) {
		t.Fatalf("after NACK got incremental=%v %v, want the newer full state", r.Incremental, names(t, r))
	}
	s.ack(r, true)
	put(t, store, true, "ns/a", "a3")
	if r = s.recv(); !r.Incremental || !slices.Equal(names(t, r), []string{"ns/a=a3"}) {
		t.Fatalf("got incremental=%v %v", r.Incremental, names(t, r))
	}
}

func TestResumeWithInitialResourceVersions(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1", "ns/b", "b1", "ns/c", "c1")
	_, client := startServer(t, snapshot.Everyone(store), Options{})
	s := openSink(t, client, "sink-1")
	s.subscribe(ServiceEntries, true)
	held := versions(s.recv())
	s.cancel() // the sink goes away

	put(t, store, true, "ns/b", "b2", "ns/c", "", "ns/d", "d1")
	s = openSink(t, client, "sink-1")
	s.send(&mcpv1alpha1.RequestResources{Collection: ServiceEntries, Incremental: true, InitialResourceVersions: held})
	r := s.recv()
	if !r.Incremental || !slices.Equal(names(t, r), []string{"ns/b=b2", "ns/d=d1"}) || !slices.Equal(r.RemovedResources, []string{"ns/c"}) {
		t.Fatalf("resume got incremental=%v %v removed %v, want only what the sink lacks", r.Incremental, names(t, r), r.RemovedResources)
	}
	s.ack(r, true)
	put(t, store, true, "ns/a", "a2")
	if r = s.recv(); !r.Incremental || !slices.Equal(names(t, r), []string{"ns/a=a2"}) {
		t.Fatalf("got incremental=%v %v", r.Incremental, names(t, r))
	}

	// A sink that holds everything gets an empty increment: an answer.
	up := openSink(t, client, "sink-2")
	current := map[string]string{}
	for _, res := range store.Current().Collection(snapshot.ServiceEntry).Resources() {
		current[res.Name] = res.Version
	}
	up.send(&mcpv1alpha1.RequestResources{Collection: ServiceEntries, Incremental: true, InitialResourceVersions: current})
	if r := up.recv(); !r.Incremental || len(r.Resources)+len(r.RemovedResources) != 0 || r.SystemVersionInfo != seVersion(store) {
		t.Fatalf("up-to-date resume got incremental=%v %v removed %v", r.Incremental, names(t, r), r.RemovedResources)
	}

	// Without incremental=true the initial versions are ignored.
	full := openSink(t, client, "sink-3")
	full.send(&mcpv1alpha1.RequestResources{Collection: ServiceEntries, InitialResourceVersions: map[string]string{"ns/a": "x"}})
	if r := full.recv(); r.Incremental || len(r.Resources) != 3 {
		t.Fatalf("non-incremental resume got incremental=%v %v", r.Incremental, names(t, r))
	}
}

func TestStreamsShareFullStateEncoding(t *testing.T) {
	store := snapshot.NewStore()
	var kv []string
	for i := range 50 {
		kv = append(kv, fmt.Sprintf("ns/s%02d", i), fmt.Sprint(i))
	}
	put(t, store, true, kv...)
	_, client := startServer(t, snapshot.Everyone(store), Options{})
	var wire [][]byte
	for i := range 2 {
		s := openSink(t, client, fmt.Sprint("sink-", i))
		s.subscribe(ServiceEntries, i == 1) // full first response either way
		r := s.recv()
		if len(r.Resources) != 50 {
			t.Fatalf("got %d resources", len(r.Resources))
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		wire = append(wire, b)
	}
	if !bytes.Equal(wire[0], wire[1]) {
		t.Fatal("two streams received different full-state messages")
	}
	col := store.Current().Collection(snapshot.ServiceEntry)
	if a, b := fullEncoded(col, ServiceEntries), fullEncoded(col, ServiceEntries); a != b {
		t.Fatal("the encoding of one version was built twice")
	}
	// The hand-made encoding is what proto.Marshal makes of the message.
	var m mcpv1alpha1.Resources
	var raw []byte
	for _, buf := range fullEncoded(col, ServiceEntries).Buffers {
		raw = append(raw, buf.ReadOnlyData()...)
	}
	if err := proto.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if len(raw) != fullEncoded(col, ServiceEntries).Size || m.Nonce != nonceOf(col.Seq) || m.Collection != ServiceEntries {
		t.Fatalf("encoding: %d bytes (size %d), nonce %q, collection %q", len(raw), fullEncoded(col, ServiceEntries).Size, m.Nonce, m.Collection)
	}
}

func TestOversizeResponsesCounted(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", strings.Repeat("x", 100))
	var logs syncbuf.Buffer
	srv, client := startServer(t, snapshot.Everyone(store), Options{MaxResponseBytes: 64,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for i := range 2 {
		s := openSink(t, client, fmt.Sprint("sink-", i))
		s.subscribe(ServiceEntries, false)
		if r := s.recv(); len(r.Resources) != 1 {
			t.Fatalf("oversize response not sent: %v", r)
		}
	}
	if n := counter(t, srv.metrics.oversize.WithLabelValues(ServiceEntries)); n != 2 {
		t.Fatalf("oversize counted %v times, want 2", n)
	}
	if n := strings.Count(logs.String(), "exceeds"); n != 1 {
		t.Fatalf("oversize logged %d times, want once per collection version:\n%s", n, logs.String())
	}

	// Under the default limit nothing is counted.
	srv2, client2 := startServer(t, snapshot.Everyone(store), Options{})
	s := openSink(t, client2, "sink-x")
	s.subscribe(ServiceEntries, false)
	s.recv()
	if n := counter(t, srv2.metrics.oversize.WithLabelValues(ServiceEntries)); n != 0 {
		t.Fatalf("oversize counted %v times under the default limit", n)
	}
}

func TestMalformedCollectionClosesTheStream(t *testing.T) {
	store := snapshot.NewStore()
	_, client := startServer(t, snapshot.Everyone(store), Options{})
	s := openSink(t, client, "sink-1")
	s.subscribe("", false)
	if err := s.recvErr(); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
	// Other streams are unaffected.
	ok := openSink(t, client, "sink-2")
	ok.subscribe(meshConfig, false)
	ok.recv()
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A sink chooses how often it NACKs and what the NACK says: neither may
// cost more than a bounded amount of log.
func TestNackLogIsCutAndBounded(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "v0")
	var logs syncbuf.Buffer
	srv, client := startServer(t, snapshot.Everyone(store), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s := openSink(t, client, strings.Repeat("s", 10_000))
	s.subscribe(ServiceEntries, false)
	const nacks = 12
	huge := strings.Repeat("x", 100_000)
	for i := range nacks {
		r := s.recv()
		s.send(&mcpv1alpha1.RequestResources{Collection: ServiceEntries, ResponseNonce: r.Nonce,
			ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: huge}})
		put(t, store, true, "ns/a", fmt.Sprintf("v%d", i+1))
	}
	s.recv()
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "mcp response rejected") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 5 {
		t.Errorf("%d NACKs logged %d lines, want the stream's burst of 5", nacks, len(lines))
	}
	for _, l := range lines {
		if len(l) > serve.MaxLoggedText+1024 {
			t.Errorf("a NACK line is %d bytes: the sink's text is not cut", len(l))
		}
	}
	if n := counter(t, srv.metrics.logSuppressed); n != nacks-5 {
		t.Errorf("suppressed lines counted %v, want %d", n, nacks-5)
	}
}

func TestResumeVersionsAreBounded(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	_, client := startServer(t, snapshot.Everyone(store), Options{})
	long := openSink(t, client, "sink-long")
	long.send(&mcpv1alpha1.RequestResources{Collection: ServiceEntries, Incremental: true,
		InitialResourceVersions: map[string]string{strings.Repeat("n", serve.MaxNameLen+1): "v"}})
	if err := long.recvErr(); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Fatalf("a name over the limit: got %v, want InvalidArgument", err)
	}
	many := openSink(t, client, "sink-many")
	versions := make(map[string]string, serve.MaxNamesPerStream/2+1)
	for i := range serve.MaxNamesPerStream/2 + 1 {
		versions[fmt.Sprintf("ns/n%d", i)] = "v"
	}
	many.send(&mcpv1alpha1.RequestResources{Collection: ServiceEntries, Incremental: true, InitialResourceVersions: versions})
	many.recv()
	many.send(&mcpv1alpha1.RequestResources{Collection: WorkloadEntries, Incremental: true, InitialResourceVersions: versions})
	if err := many.recvErr(); grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("resume versions over the stream's bound: got %v, want ResourceExhausted", err)
	}
}
