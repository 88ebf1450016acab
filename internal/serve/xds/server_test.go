package xds

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	mcp "istio.io/api/mcp/v1alpha1"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

const seV1 = "networking.istio.io/v1/ServiceEntry"

// startServer serves store on a loopback port and returns a client for it.
func startServer(t *testing.T, store *snapshot.Store) discovery.AggregatedDiscoveryServiceClient {
	t.Helper()
	return startServerWith(t, snapshot.Everyone(store), Options{})
}

func startServerWith(t *testing.T, routes snapshot.Router, opts Options) discovery.AggregatedDiscoveryServiceClient {
	t.Helper()
	return discovery.NewAggregatedDiscoveryServiceClient(startConn(t, routes, opts))
}

func put(t testing.TB, s *snapshot.Store, ready bool, kv ...string) {
	t.Helper()
	var changes []snapshot.Change
	for i := 0; i < len(kv); i += 2 {
		ch := snapshot.Change{Kind: snapshot.ServiceEntry, Name: kv[i]}
		if kv[i+1] != "" {
			ch.Object = &snapshot.Object{Kind: snapshot.ServiceEntry, Name: kv[i], Body: []byte(kv[i+1])}
		}
		changes = append(changes, ch)
	}
	if _, _, err := s.Apply(changes, ready); err != nil {
		t.Fatal(err)
	}
}

type sotwClient struct {
	t      *testing.T
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
}

func openSotW(t *testing.T, c discovery.AggregatedDiscoveryServiceClient) *sotwClient {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	st, err := c.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &sotwClient{t: t, stream: st}
}

func (c *sotwClient) send(typeURL, nonce, version string, nack bool) {
	c.t.Helper()
	req := &discovery.DiscoveryRequest{TypeUrl: typeURL, ResponseNonce: nonce, VersionInfo: version}
	if nack {
		req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: "rejected by test"}
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

func (c *sotwClient) recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	resp, err := c.stream.Recv()
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

func (c *sotwClient) ack(r *discovery.DiscoveryResponse) {
	c.send(r.TypeUrl, r.Nonce, r.VersionInfo, false)
}

// names unwraps every MCP resource of a response, checking the wrapping.
func names(t *testing.T, resources []*discovery.Resource, anys ...[]byte) []string {
	t.Helper()
	var out []string
	for _, a := range anys {
		var r mcp.Resource
		if err := proto.Unmarshal(a, &r); err != nil {
			t.Fatal(err)
		}
		if r.GetBody().GetTypeUrl() != snapshot.ServiceEntry.BodyTypeURL() {
			t.Fatalf("body type %q", r.GetBody().GetTypeUrl())
		}
		out = append(out, r.GetMetadata().GetName()+"="+string(r.GetBody().GetValue()))
	}
	for _, r := range resources {
		out = append(out, names(t, nil, r.Resource.Value)...)
	}
	sort.Strings(out)
	return out
}

func sotwNames(t *testing.T, r *discovery.DiscoveryResponse) []string {
	var raw [][]byte
	for _, a := range r.Resources {
		if a.TypeUrl != snapshot.MCPResourceTypeURL {
			t.Fatalf("resource type URL %q, want %q", a.TypeUrl, snapshot.MCPResourceTypeURL)
		}
		raw = append(raw, a.Value)
	}
	return names(t, nil, raw...)
}

func TestSotWWaitsForReadyButAnswersUnknownTypes(t *testing.T) {
	store := snapshot.NewStore()
	c := openSotW(t, startServer(t, store))
	// istiod's first requests carry a made-up nonce.
	c.send(seV1, "made-up-by-istiod", "", false)
	c.send("core/v1alpha1/MeshConfig", "made-up-by-istiod", "", false)
	r := c.recv()
	if r.TypeUrl != "core/v1alpha1/MeshConfig" || len(r.Resources) != 0 || r.Nonce == "" {
		t.Fatalf("first response %v, want an empty MeshConfig answer", r)
	}
	put(t, store, false, "ns/a", "a1") // not ready: held back
	put(t, store, true, "ns/b", "b1")  // ready
	r = c.recv()
	if r.TypeUrl != seV1 || !slices.Equal(sotwNames(t, r), []string{"ns/a=a1", "ns/b=b1"}) {
		t.Fatalf("got %s %v, want the full ready state", r.TypeUrl, sotwNames(t, r))
	}
	if r.VersionInfo != store.Current().Collection(snapshot.ServiceEntry).Version {
		t.Fatalf("version_info %q is not the collection version", r.VersionInfo)
	}
}

func TestSotWEveryAliasEchoesItsTypeURL(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	c := openSotW(t, startServer(t, store))
	for _, u := range TypeURLs(snapshot.ServiceEntry) {
		c.send(u, "", "", false)
		r := c.recv()
		if r.TypeUrl != u || !slices.Equal(sotwNames(t, r), []string{"ns/a=a1"}) {
			t.Fatalf("asked %s, got %s %v", u, r.TypeUrl, sotwNames(t, r))
		}
	}
}

func TestSotWOneOutstandingResponseAndLatestState(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	c := openSotW(t, startServer(t, store))
	c.send(seV1, "", "", false)
	first := c.recv()
	// Two changes while the first response is unacknowledged.
	put(t, store, true, "ns/a", "a2")
	put(t, store, true, "ns/a", "", "ns/b", "b1")
	c.send(seV1, "stale-nonce", "", false) // ignored
	c.ack(first)
	r := c.recv()
	if got := sotwNames(t, r); !slices.Equal(got, []string{"ns/b=b1"}) {
		t.Fatalf("after ACK got %v, want only the latest full state", got)
	}
	if r.Nonce == first.Nonce || r.VersionInfo == first.VersionInfo {
		t.Fatalf("second response reuses nonce %q or version %q", r.Nonce, r.VersionInfo)
	}
}

func TestSotWNackedVersionIsNotResent(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	c := openSotW(t, startServer(t, store))
	c.send(seV1, "", "", false)
	good := c.recv()
	c.ack(good)
	put(t, store, true, "ns/a", "bad")
	bad := c.recv()
	c.send(seV1, bad.Nonce, good.VersionInfo, true) // NACK
	put(t, store, true, "ns/z", "")                 // no-op: no new snapshot
	put(t, store, true, "ns/a", "fixed")
	r := c.recv()
	if got := sotwNames(t, r); !slices.Equal(got, []string{"ns/a=fixed"}) {
		t.Fatalf("after NACK got %v, want the next version, not the rejected one", got)
	}
}

func TestSotWResubscribeResends(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	c := openSotW(t, startServer(t, store))
	c.send(seV1, "", "", false)
	first := c.recv()
	c.ack(first)
	c.send(seV1, "", "", false) // ask again
	if again := c.recv(); again.VersionInfo != first.VersionInfo || len(again.Resources) != 1 {
		t.Fatalf("re-subscription answered with %v", again)
	}
}

func TestMalformedRequestClosesOnlyThatStream(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	client := startServer(t, store)
	good := openSotW(t, client)
	good.send(seV1, "", "", false)
	first := good.recv()
	good.ack(first)

	bad := openSotW(t, client)
	bad.send("", "", "", false)
	if _, err := bad.stream.Recv(); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty type URL: got %v, want InvalidArgument", err)
	}
	put(t, store, true, "ns/a", "a2")
	if got := sotwNames(t, good.recv()); !slices.Equal(got, []string{"ns/a=a2"}) {
		t.Fatalf("the healthy stream got %v", got)
	}
}

type deltaClient struct {
	t      *testing.T
	stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
}

func openDelta(t *testing.T, c discovery.AggregatedDiscoveryServiceClient) *deltaClient {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	st, err := c.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &deltaClient{t: t, stream: st}
}

func (c *deltaClient) send(req *discovery.DeltaDiscoveryRequest) {
	c.t.Helper()
	if req.TypeUrl == "" {
		req.TypeUrl = seV1
	}
	if err := c.stream.Send(req); err != nil {
		c.t.Fatal(err)
	}
}

// recvAck receives one response, acknowledges it, and returns what it
// changed as sorted "name=body" and removed names.
func (c *deltaClient) recvAck() (changed, removed []string) {
	c.t.Helper()
	r, err := c.stream.Recv()
	if err != nil {
		c.t.Fatal(err)
	}
	for _, res := range r.Resources {
		var m mcp.Resource
		if err := proto.Unmarshal(res.Resource.Value, &m); err != nil {
			c.t.Fatal(err)
		}
		if m.GetMetadata().GetVersion() != res.Version || m.GetMetadata().GetName() != res.Name {
			c.t.Fatalf("resource %s version %s disagrees with its metadata %v", res.Name, res.Version, m.GetMetadata())
		}
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
	removed = append(removed, r.RemovedResources...)
	sort.Strings(removed)
	return names(c.t, r.Resources), removed
}

func TestDeltaSendsOnlyChanges(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1", "ns/b", "b1", "ns/c", "c1")
	c := openDelta(t, startServer(t, store))
	c.send(&discovery.DeltaDiscoveryRequest{})
	if changed, removed := c.recvAck(); len(changed) != 3 || len(removed) != 0 {
		t.Fatalf("initial: changed %v removed %v", changed, removed)
	}
	put(t, store, true, "ns/b", "b2", "ns/c", "")
	changed, removed := c.recvAck()
	if !slices.Equal(changed, []string{"ns/b=b2"}) || !slices.Equal(removed, []string{"ns/c"}) {
		t.Fatalf("after a change: changed %v removed %v", changed, removed)
	}
	// Several versions behind (no ACK yet), it still gets exactly the union.
	put(t, store, true, "ns/d", "d1")
	put(t, store, true, "ns/d", "d2", "ns/a", "")
	changed, removed = c.recvAck()
	if !(slices.Equal(changed, []string{"ns/d=d1"}) || slices.Equal(changed, []string{"ns/d=d2"})) {
		t.Fatalf("changed %v", changed)
	}
	if !slices.Equal(changed, []string{"ns/d=d2"}) {
		changed, removed = c.recvAck()
		if !slices.Equal(changed, []string{"ns/d=d2"}) || !slices.Equal(removed, []string{"ns/a"}) {
			t.Fatalf("catch-up: changed %v removed %v", changed, removed)
		}
	} else if !slices.Equal(removed, []string{"ns/a"}) {
		t.Fatalf("removed %v", removed)
	}
}

func TestDeltaResumeFromInitialVersions(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1", "ns/b", "b1")
	col := store.Current().Collection(snapshot.ServiceEntry)
	c := openDelta(t, startServer(t, store))
	c.send(&discovery.DeltaDiscoveryRequest{InitialResourceVersions: map[string]string{
		"ns/a":    col.Get("ns/a").Version, // current: not resent
		"ns/b":    "old",                   // stale: resent
		"ns/gone": "x",                     // no longer exists: removed
	}})
	changed, removed := c.recvAck()
	if !slices.Equal(changed, []string{"ns/b=b1"}) || !slices.Equal(removed, []string{"ns/gone"}) {
		t.Fatalf("resume: changed %v removed %v", changed, removed)
	}
}

func TestDeltaNamedSubscriptions(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1", "ns/b", "b1")
	c := openDelta(t, startServer(t, store))
	c.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"ns/a", "ns/nope"}})
	changed, removed := c.recvAck()
	if !slices.Equal(changed, []string{"ns/a=a1"}) || !slices.Equal(removed, []string{"ns/nope"}) {
		t.Fatalf("named: changed %v removed %v", changed, removed)
	}
	c.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"ns/b"}, ResourceNamesUnsubscribe: []string{"ns/a"}})
	if changed, _ = c.recvAck(); !slices.Equal(changed, []string{"ns/b=b1"}) {
		t.Fatalf("subscribing b: changed %v", changed)
	}
	put(t, store, true, "ns/a", "a2", "ns/b", "b2")
	if changed, _ = c.recvAck(); !slices.Equal(changed, []string{"ns/b=b2"}) {
		t.Fatalf("after unsubscribing a: changed %v", changed)
	}
}

func TestManyStreamsShareOneEncoding(t *testing.T) {
	store := snapshot.NewStore()
	var kv []string
	for i := range 50 {
		kv = append(kv, fmt.Sprintf("ns/s%02d", i), fmt.Sprint(i))
	}
	put(t, store, true, kv...)
	client := startServer(t, store)
	var versions []string
	for range 5 {
		c := openSotW(t, client)
		c.send(seV1, "", "", false)
		r := c.recv()
		if len(r.Resources) != 50 {
			t.Fatalf("got %d resources", len(r.Resources))
		}
		versions = append(versions, r.VersionInfo+"/"+r.Nonce)
	}
	col := store.Current().Collection(snapshot.ServiceEntry)
	a, b := sotwEncoded(col, seV1), sotwEncoded(col, seV1)
	if a != b {
		t.Fatal("the encoding of one version was built twice")
	}
	if len(slices.Compact(versions)) != 1 {
		t.Fatalf("streams saw different version/nonce: %v", versions)
	}
}

func TestTooManyTypesClosesTheStream(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	c := openSotW(t, startServer(t, store))
	for i := range maxTypesPerStream {
		c.send(fmt.Sprintf("example.com/v1/Kind%d", i), "", "", false)
		c.recv() // each unknown type gets its empty answer
	}
	c.send("example.com/v1/OneTooMany", "", "", false)
	if _, err := c.stream.Recv(); grpcstatus.Code(err) != codes.ResourceExhausted {
		t.Fatalf("type %d: got %v, want ResourceExhausted", maxTypesPerStream+1, err)
	}
}
