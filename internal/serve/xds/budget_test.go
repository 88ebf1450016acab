package xds

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/snapshot"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// startBudgeted serves routes with a budget of limits, as the daemon does
// (the budget's listener, its metrics on reg), and returns the address,
// the budget and the server.
func startBudgeted(t *testing.T, routes snapshot.Router, limits serve.BudgetLimits, reg prometheus.Registerer, opts Options) (string, *serve.Budget) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	budget := serve.NewBudget(limits, reg, nil, Protocols())
	g := grpc.NewServer(GRPCServerOptions()...)
	opts.Budget = budget
	NewServer(routes, opts).Register(g)
	go func() { _ = g.Serve(budget.Listener(lis)) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String(), budget
}

func dial(t *testing.T, addr string) discovery.AggregatedDiscoveryServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return discovery.NewAggregatedDiscoveryServiceClient(conn)
}

// recvStatus reads a stream until it ends and returns its status.
func (c *deltaClient) recvStatus() error {
	for {
		if _, err := c.stream.Recv(); err != nil {
			return err
		}
	}
}

func namesFrom(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/n%d", prefix, i)
	}
	return out
}

// Names are bounded across streams: what one stream may hold (200,000)
// no longer multiplies by the streams a client opens. A request over the
// total is refused as one over the per-stream bound is, and the refusal
// takes nothing from the streams that hold names.
func TestTotalNamesAreBoundedAcrossStreams(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	reg := prometheus.NewRegistry()
	limits := serve.DefaultBudgetLimits()
	limits.Names = 1000
	addr, budget := startBudgeted(t, snapshot.Everyone(store), limits, reg, Options{})
	client := dial(t, addr)

	first := openDelta(t, client)
	first.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: append(namesFrom("first", 599), "ns/a")})
	first.recvAck()

	second := openDelta(t, client)
	second.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: namesFrom("second", 401)})
	// (Refused after it is read: this send cannot meet a closed stream.)
	err := second.recvStatus()
	if grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-names 1000") || !strings.Contains(err.Error(), "wildcard") {
		t.Fatalf("601 + 401 names: got %v, want ResourceExhausted naming --max-names 1000 and the wildcard", err)
	}
	if got := labelValues(t, reg, "galleon_grpc_refusals_total", "limit")[serve.LimitNames]; got != 1 {
		t.Errorf("galleon_grpc_refusals_total{limit=names} = %v, want 1", got)
	}
	// The refused stream took nothing; the first one is served as before.
	if _, names, _, _ := budget.Held(); names != 600 {
		t.Errorf("the budget holds %d names after the refusal, want the first stream's 600", names)
	}
	put(t, store, true, "ns/a", "a2")
	if changed, _ := first.recvAck(); len(changed) != 1 || changed[0] != "ns/a=a2" {
		t.Fatalf("the first stream got %v after the refusal, want ns/a=a2", changed)
	}
	// Within what is left: served.
	third := openDelta(t, client)
	third.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: namesFrom("third", 400)})
	third.recvAck()
	eventually(t, "galleon_grpc_names_held 1000", func() bool {
		return labelValue(t, reg, "galleon_grpc_names_held") == 1000
	})
	// Unsubscribing gives names back, and so does the end of a stream.
	first.send(&discovery.DeltaDiscoveryRequest{ResourceNamesUnsubscribe: namesFrom("first", 300)})
	eventually(t, "300 names given back", func() bool { _, n, _, _ := budget.Held(); return n == 700 })
	if err := first.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := first.recvStatus(); !errors.Is(err, io.EOF) {
		t.Fatalf("the first stream, closed by the client, ended with %v", err)
	}
	eventually(t, "the first stream's names given back", func() bool { _, n, _, _ := budget.Held(); return n == 400 })
	fourth := openDelta(t, client)
	fourth.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: namesFrom("fourth", 600)})
	fourth.recvAck()
}

// The bytes of names are bounded too: a name may be 512 bytes.
func TestTotalNameBytesAreBounded(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	reg := prometheus.NewRegistry()
	limits := serve.DefaultBudgetLimits()
	limits.NameBytes = 100 * serve.MaxNameLen
	addr, budget := startBudgeted(t, snapshot.Everyone(store), limits, reg, Options{})
	client := dial(t, addr)
	long := func(prefix string, n int) []string {
		out := namesFrom(prefix, n)
		for i := range out {
			out[i] += strings.Repeat("x", serve.MaxNameLen-len(out[i]))
		}
		return out
	}
	held := openDelta(t, client)
	held.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: long("held", 60)})
	held.recvAck()
	// Resume versions count their names and versions.
	resume := map[string]string{}
	for _, name := range long("resume", 21) {
		resume[name] = strings.Repeat("v", serve.MaxNameLen)
	}
	over := openDelta(t, client)
	over.send(&discovery.DeltaDiscoveryRequest{InitialResourceVersions: resume})
	err := over.recvStatus()
	if grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-name-bytes") {
		t.Fatalf("60 + 2 x 21 long names: got %v, want ResourceExhausted naming --max-name-bytes", err)
	}
	if got := labelValues(t, reg, "galleon_grpc_refusals_total", "limit")[serve.LimitNameBytes]; got != 1 {
		t.Errorf("galleon_grpc_refusals_total{limit=name_bytes} = %v, want 1", got)
	}
	if _, _, bytes, _ := budget.Held(); bytes != 60*serve.MaxNameLen {
		t.Errorf("the budget holds %d bytes after the refusal, want the first stream's %d", bytes, 60*serve.MaxNameLen)
	}
}

// Streams are bounded in total and per client, SotW and Delta together;
// a refused stream is told which limit and flag, and the others are
// served on.
func TestStreamsAreBounded(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	reg := prometheus.NewRegistry()

	t.Run("in total", func(t *testing.T) {
		limits := serve.DefaultBudgetLimits()
		limits.Streams = 3
		addr, _ := startBudgeted(t, snapshot.Everyone(store), limits, prometheus.NewRegistry(), Options{})
		client := dial(t, addr)
		sotw := openSotW(t, client)
		sotw.send(seV1, "", "", false)
		r := sotw.recv()
		sotw.send(seV1, r.Nonce, r.VersionInfo, false)
		var deltas []*deltaClient
		for range 2 {
			d := openDelta(t, client)
			d.send(&discovery.DeltaDiscoveryRequest{})
			d.recvAck()
			deltas = append(deltas, d)
		}
		refused := openDelta(t, client)
		// The server may have refused the stream before this is sent.
		_ = refused.stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: seV1})
		err := refused.recvStatus()
		if grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams 3") {
			t.Fatalf("a 4th stream: got %v, want ResourceExhausted naming --max-streams 3", err)
		}
		// The three are served on.
		put(t, store, true, "ns/a", "a2")
		if r := sotw.recv(); len(r.Resources) != 1 {
			t.Fatalf("SotW stream after the refusal: %d resources", len(r.Resources))
		}
		for _, d := range deltas {
			if changed, _ := d.recvAck(); len(changed) != 1 {
				t.Fatalf("Delta stream after the refusal: %v", changed)
			}
		}
		// One ends: a new one is let in.
		_ = deltas[0].stream.CloseSend()
		_ = deltas[0].recvStatus()
		eventually(t, "a new stream admitted", func() bool {
			d := openDelta(t, client)
			d.send(&discovery.DeltaDiscoveryRequest{})
			_, err := d.stream.Recv()
			return err == nil
		})
	})
	t.Run("per client", func(t *testing.T) {
		limits := serve.DefaultBudgetLimits()
		limits.StreamsPerClient = 2
		addr, budget := startBudgeted(t, snapshot.Everyone(store), limits, reg, Options{})
		client := dial(t, addr)
		for range 2 {
			d := openDelta(t, client)
			d.send(&discovery.DeltaDiscoveryRequest{})
			d.recvAck()
		}
		refused := openSotW(t, client)
		_ = refused.stream.Send(&discovery.DiscoveryRequest{TypeUrl: seV1})
		_, err := refused.stream.Recv()
		if grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams-per-client 2") ||
			!strings.Contains(err.Error(), "ip:127.0.0.1") {
			t.Fatalf("a 3rd stream of 127.0.0.1: got %v, want ResourceExhausted naming the client and --max-streams-per-client 2", err)
		}
		if streams, _, _, _ := budget.Held(); streams != 2 {
			t.Errorf("the budget holds %d streams, want 2", streams)
		}
		if got := labelValues(t, reg, "galleon_grpc_refusals_total", "limit")[serve.LimitStreamsPerClient]; got != 1 {
			t.Errorf("galleon_grpc_refusals_total{limit=streams_per_client} = %v, want 1", got)
		}
		if got := labelValues(t, reg, "galleon_grpc_streams", "protocol"); got[protocolDelta] != 2 || got[protocolSotW] != 0 {
			t.Errorf("galleon_grpc_streams = %v, want delta 2, sotw 0", got)
		}
	})
}

// labelValue returns the value of an unlabelled metric.
func labelValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return value(mf.GetMetric()[0])
		}
	}
	return -1
}

// The "Done when": 100 streams of maximal garbage names against a
// real server stay under a stated memory bound. A client in a process of
// its own (this test binary, TestGarbageNamesClient) opens 100 Delta
// streams, as many as one client may, and on each sends requests of 7,500
// made-up names of the longest allowed length (512 bytes: 3.9 MB a request,
// under gRPC's 4 MiB message limit) without reading what the server
// answers, until the server refuses the stream. Unbounded in total, that is
// 100 x 200,000 x 512 B = 10 GB of names. This process, the server with
// the default limits, samples its heap all along.
//
// Figures (2 cores, loaded): see the test log ("peak heap") and the bound
// below.
func TestGarbageNamesStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("sends about 400 MB over loopback")
	}
	toolcache.RequireFullTier(t, "sends about 400 MB over loopback")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	reg := prometheus.NewRegistry()
	limits := serve.DefaultBudgetLimits()
	addr, budget := startBudgeted(t, snapshot.Everyone(store), limits, reg, Options{SendTimeout: 10 * time.Second})

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak, peakNames, peakBytes = base, 0, int64(0)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			_, n, b, _ := budget.Held()
			peakNames, peakBytes = max(peakNames, n), max(peakBytes, b)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestGarbageNamesClient$", "-test.v")
	cmd.Env = append(os.Environ(), "GALLEON_GARBAGE_ADDR="+addr)
	out, err := cmd.CombinedOutput()
	close(stop)
	<-sampled
	if err != nil {
		t.Fatalf("the garbage client failed: %v\n%s", err, out)
	}
	var summary string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "GARBAGE ") {
			summary = sc.Text()
		}
	}
	if summary == "" {
		t.Fatalf("the garbage client said nothing:\n%s", out)
	}
	if !strings.Contains(summary, "refused=") || strings.Contains(summary, "refused=0 ") {
		t.Errorf("no garbage stream was refused: %s", summary)
	}
	eventually(t, "every stream's names given back", func() bool {
		streams, n, b, _ := budget.Held()
		return streams == 0 && n == 0 && b == 0
	})
	const mib = 1 << 20
	t.Logf("%s; peak heap %d MiB over a base of %d MiB (+%d MiB); peak names held %d of %d bytes (limits %d, %d)",
		summary, peak/mib, base/mib, (peak-base)/mib, peakNames, peakBytes, limits.Names, limits.NameBytes)
	if peakBytes > limits.NameBytes || peakNames > limits.Names {
		t.Errorf("the budget held %d names of %d bytes, over its limits", peakNames, peakBytes)
	}
	// The bound: what streams hold is at most --max-name-bytes (64 MiB)
	// of names, in the subscription maps; what dominates is transient:
	// each of the 100 streams may have one request of up to gRPC's 4 MiB
	// message limit received and decoded (about 8 MiB) at once, and the
	// heap counts refused requests until the collector runs (GOGC=100
	// lets it double). Measured 760-950 MiB on 2 loaded cores; without
	// the total budget the names alone would reach 10 GB.
	const bound = 1536 * mib
	if peak-base > bound {
		t.Errorf("peak heap grew by %d MiB, over the bound of %d MiB", (peak-base)/mib, bound/mib)
	}
}

// TestGarbageNamesClient is the hostile client of TestGarbageNamesStayBounded,
// run in a process of its own; without GALLEON_GARBAGE_ADDR it does nothing.
func TestGarbageNamesClient(t *testing.T) {
	addr := os.Getenv("GALLEON_GARBAGE_ADDR")
	if addr == "" {
		t.Skip("the client of TestGarbageNamesStayBounded")
	}
	const (
		streams    = 100
		conns      = 4
		perRequest = 7_500
		requests   = serve.MaxNamesPerStream/perRequest + 1 // one over the per-stream bound
	)
	clients := make([]discovery.AggregatedDiscoveryServiceClient, conns)
	for i := range clients {
		clients[i] = dial(t, addr)
	}
	var mu sync.Mutex
	codesSeen := map[codes.Code]int{}
	sent := 0
	var wg sync.WaitGroup
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A stream that ends while a response to it is unread can
			// never tell the client so; the client gives up on it.
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			stream, err := clients[s%conns].DeltaAggregatedResources(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			n := 0
			for r := range requests {
				names := make([]string, perRequest)
				for i := range names {
					name := fmt.Sprintf("garbage/%d/%d/%d/", s, r, i)
					names[i] = name + strings.Repeat("g", serve.MaxNameLen-len(name))
				}
				if stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: seV1, ResourceNamesSubscribe: names}) != nil {
					break // the server ended the stream
				}
				n++
			}
			for {
				if _, err = stream.Recv(); err != nil {
					break
				}
			}
			mu.Lock()
			codesSeen[grpcstatus.Code(err)]++
			sent += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	fmt.Printf("GARBAGE streams=%d refused=%d requests_sent=%d codes=%v\n", streams, codesSeen[codes.ResourceExhausted], sent, codesSeen)
}
