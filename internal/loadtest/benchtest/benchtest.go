// Package benchtest is the benchmark harness shared by the servers'
// benchmarks: the full data set served by one server, the instance-change
// and initial-sync loops, and their metrics. Only _test files import it, so
// the testing package stays out of the binaries that use loadtest.
package benchtest

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/galleon-mesh/galleon/internal/loadtest"
	"github.com/galleon-mesh/galleon/internal/serve/xds"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// Dial connects one measuring sink to addr; it lives until ctx is done.
type Dial func(ctx context.Context, addr string) (*loadtest.Sink, error)

// Scale returns the benchmark scale (loadtest.BenchScaleFromEnv: 10,000
// services and 10 sinks unless GALLEON_BENCH_SERVICES or GALLEON_BENCH_SINKS
// say otherwise), failing b with what to set when either is wrong.
func Scale(b *testing.B) loadtest.BenchScale {
	b.Helper()
	scale, err := loadtest.BenchScaleFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	return scale
}

// SinkCounts returns the numbers of sinks the instance-change benchmarks
// run with: Scale's, then 1 (what a single sink costs) unless that is the
// same.
func SinkCounts(b *testing.B) []int {
	b.Helper()
	if n := Scale(b).Sinks; n != 1 {
		return []int{n, 1}
	}
	return []int{1}
}

// Start serves the full data set (Scale's services x
// loadtest.BenchInstances) with the server register installs, using the
// daemon's gRPC options (the pass-through codec), until b ends.
func Start(b *testing.B, register func(*grpc.Server, *snapshot.Store)) *loadtest.BenchEnv {
	b.Helper()
	env, err := loadtest.StartBenchEnv(Scale(b).Services, xds.GRPCServerOptions(), register)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(env.Close)
	b.Logf("listing of %d services x %d instances converted and applied in %v",
		env.Services, loadtest.BenchInstances, env.Listed)
	return env
}

func connect(b *testing.B, ctx context.Context, addr string, dial Dial, n int) []*loadtest.Sink {
	b.Helper()
	sinks := make([]*loadtest.Sink, n)
	for i := range sinks {
		s, err := dial(ctx, addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		sinks[i] = s
	}
	return sinks
}

func waitAll(b *testing.B, sinks []*loadtest.Sink, version string) (time.Time, loadtest.Arrival) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last, a, err := loadtest.WaitAll(ctx, sinks, version)
	if err != nil {
		b.Fatalf("waiting for version %s: %v", version, err)
	}
	return last, a
}

// InstanceChange measures one instance of one service changing, from the
// registry report to every one of n sinks holding the new version. One op is
// one change; it reports p50/p99 over the ops, the bytes one sink received
// per change, the process's RSS and, for n > 1, the memory one more synced
// sink holds (live-B/extra-sink, see connectMeasured). check, if set, vets
// each op's arrival.
func InstanceChange(b *testing.B, env *loadtest.BenchEnv, dial Dial, n int, check func(loadtest.Arrival) error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sinks, perSink := connectMeasured(b, ctx, env, dial, n)
	var latencies []time.Duration
	var bytesPerSink int
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start, snap := env.Apply(loadtest.BenchService(i%env.Services, i+1))
		col := snap.Collection(snapshot.ServiceEntry)
		if d := col.LastDiff(); len(d.EndpointOnly) != 1 {
			b.Fatalf("op %d: diff %+v, want one endpoint-only update", i, d)
		}
		last, a := waitAll(b, sinks, col.Version)
		if check != nil {
			if err := check(a); err != nil {
				b.Fatalf("op %d: %v", i, err)
			}
		}
		bytesPerSink = a.Bytes
		latencies = append(latencies, last.Sub(start))
	}
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(ms(loadtest.Percentile(latencies, 50)), "p50-ms")
	b.ReportMetric(ms(loadtest.Percentile(latencies, 99)), "p99-ms")
	b.ReportMetric(float64(bytesPerSink), "bytes/sink")
	b.ReportMetric(loadtest.RSSMB(), "rss-MB")
	if n > 1 {
		b.ReportMetric(float64(perSink), "live-B/extra-sink")
	}
}

// connectMeasured connects n sinks to env and waits until each holds the
// full state. With n > 1 it also returns what each sink after the first
// added to the live memory (heap and goroutine stacks, see liveBytes):
// the first sink is connected and synced alone, so that what every sink
// shares and the first one brings into being (the full state encoded for
// its protocol) is not counted as a sink's. The figure covers both ends of
// each stream, the source's and the sink's gRPC client, which run in this
// process.
func connectMeasured(b *testing.B, ctx context.Context, env *loadtest.BenchEnv, dial Dial, n int) (sinks []*loadtest.Sink, perSink int64) {
	b.Helper()
	version := env.Store.Current().Collection(snapshot.ServiceEntry).Version
	sinks = connect(b, ctx, env.Addr, dial, 1)
	waitAll(b, sinks, version)
	shared := liveBytes()
	if n == 1 {
		return sinks, 0
	}
	sinks = append(sinks, connect(b, ctx, env.Addr, dial, n-1)...)
	waitAll(b, sinks, version)
	return sinks, (liveBytes() - shared) / int64(n-1)
}

// liveBytes returns the heap and goroutine stacks in use after two
// collections: the first only moves sync.Pool contents (gRPC's buffer
// pools among them) to the pools' victim caches, the second frees them, so
// what remains is what the process holds rather than what it keeps in
// reserve.
func liveBytes() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}

// InitialSync measures Scale's sinks connecting at once to the full data
// set, until every one holds the full state.
func InitialSync(b *testing.B, env *loadtest.BenchEnv, dial Dial) {
	version := env.Store.Current().Collection(snapshot.ServiceEntry).Version
	n := Scale(b).Sinks
	var bytes int
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		sinks := connect(b, ctx, env.Addr, dial, n)
		_, a := waitAll(b, sinks, version)
		bytes = a.Bytes
		cancel()
		for _, s := range sinks {
			_ = s.Close()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(bytes), "bytes/sink")
	b.ReportMetric(loadtest.RSSMB(), "rss-MB")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
