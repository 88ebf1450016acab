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
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/xds"
)

// Dial connects one measuring sink to addr; it lives until ctx is done.
type Dial func(ctx context.Context, addr string) (*loadtest.Sink, error)

// Start serves the full data set (loadtest.BenchServices x
// loadtest.BenchInstances) with the server register installs, using the
// daemon's gRPC options (the pass-through codec), until b ends.
func Start(b *testing.B, register func(*grpc.Server, *snapshot.Store)) *loadtest.BenchEnv {
	b.Helper()
	env, err := loadtest.StartBenchEnv(xds.GRPCServerOptions(), register)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(env.Close)
	b.Logf("listing of %d services x %d instances converted and applied in %v",
		loadtest.BenchServices, loadtest.BenchInstances, env.Listed)
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
// per change and the process's RSS. check, if set, vets each op's arrival.
func InstanceChange(b *testing.B, env *loadtest.BenchEnv, dial Dial, n int, check func(loadtest.Arrival) error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sinks := connect(b, ctx, env.Addr, dial, n)
	waitAll(b, sinks, env.Store.Current().Collection(snapshot.ServiceEntry).Version)
	runtime.GC()
	var latencies []time.Duration
	var bytesPerSink int
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start, snap := env.Apply(loadtest.BenchService(i%loadtest.BenchServices, i+1))
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
}

// InitialSync measures loadtest.BenchSinks sinks connecting at once to the
// full data set, until every one holds the full state.
func InitialSync(b *testing.B, env *loadtest.BenchEnv, dial Dial) {
	version := env.Store.Current().Collection(snapshot.ServiceEntry).Version
	var bytes int
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		sinks := connect(b, ctx, env.Addr, dial, loadtest.BenchSinks)
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
