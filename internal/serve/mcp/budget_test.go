package mcp

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/serve/xds"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	mcpv1alpha1 "github.com/galleon-mesh/galleon/proto/mcp/v1alpha1"
)

// The xDS and legacy MCP servers of a process share one budget, as the
// daemon wires them: names an xDS stream holds leave that much less for
// MCP resume versions, and streams count together.
func TestBudgetIsSharedWithXDS(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	limits := serve.DefaultBudgetLimits()
	limits.Names, limits.Streams = 100, 3
	budget := serve.NewBudget(limits, prometheus.NewRegistry(), nil, append(xds.Protocols(), Protocol))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(xds.GRPCServerOptions()...)
	xds.NewServer(snapshot.Everyone(store), xds.Options{Budget: budget}).Register(g)
	NewServer(snapshot.Everyone(store), Options{Budget: budget, Registerer: prometheus.NewRegistry()}).Register(g)
	go func() { _ = g.Serve(budget.Listener(lis)) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	delta, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 60)
	for i := range names {
		names[i] = fmt.Sprintf("ns/x%d", i)
	}
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: "networking.istio.io/v1/ServiceEntry", ResourceNamesSubscribe: names}); err != nil {
		t.Fatal(err)
	}
	if _, err := delta.Recv(); err != nil {
		t.Fatal(err)
	}

	client := mcpv1alpha1.NewResourceSourceClient(conn)
	versions := map[string]string{}
	for i := range 41 {
		versions[fmt.Sprintf("ns/r%d", i)] = "v"
	}
	over := openSink(t, client, "sink-over")
	over.send(&mcpv1alpha1.RequestResources{Collection: ServiceEntries, Incremental: true, InitialResourceVersions: versions})
	if err := over.recvErr(); grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-names 100") {
		t.Fatalf("60 xDS names + 41 MCP resume versions: got %v, want ResourceExhausted naming --max-names 100", err)
	}
	delete(versions, "ns/r0")
	within := openSink(t, client, "sink-within")
	within.send(&mcpv1alpha1.RequestResources{Collection: ServiceEntries, Incremental: true, InitialResourceVersions: versions})
	within.recv()
	// Streams: the Delta one, this sink, one more; the 4th is refused.
	third := openSink(t, client, "sink-third")
	third.send(&mcpv1alpha1.RequestResources{Collection: ServiceEntries})
	third.recv()
	fourth := openSink(t, client, "sink-fourth")
	// The server may have refused the stream before this is sent.
	_ = fourth.stream.Send(&mcpv1alpha1.RequestResources{Collection: ServiceEntries})
	if err := fourth.recvErr(); grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams 3") {
		t.Fatalf("a 4th stream, xDS and MCP together: got %v, want ResourceExhausted naming --max-streams 3", err)
	}
	if streams, held, _, _ := budget.Held(); streams != 3 || held != 100 {
		t.Fatalf("the budget holds %d streams and %d names, want 3 and 100", streams, held)
	}
}
