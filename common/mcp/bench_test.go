package mcp_test

// Benchmarks of the legacy MCP server at the scale Galleon is held to:
// 10,000 services x 10 instances, 10 connected sinks, over real gRPC on
// loopback; the same data set and harness as common/xds's benchmarks
// (loadtest). Results and how to read them: docs/benchmarks.md.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/galleon-mesh/galleon/common/loadtest"
	"github.com/galleon-mesh/galleon/common/mcp"
	"github.com/galleon-mesh/galleon/common/snapshot"
	"github.com/galleon-mesh/galleon/common/xds"
)

// newBenchEnv starts the full data set served by the legacy MCP server,
// with the daemon's gRPC options (the pass-through codec).
func newBenchEnv(b *testing.B) *loadtest.BenchEnv {
	b.Helper()
	env, err := loadtest.StartBenchEnv(xds.GRPCServerOptions(), func(g *grpc.Server, store *snapshot.Store) {
		mcp.NewServer(store, mcp.Options{}).Register(g)
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(env.Close)
	b.Logf("listing of %d services x %d instances converted and applied in %v",
		loadtest.BenchServices, loadtest.BenchInstances, env.Listed)
	return env
}

func connectSinks(b *testing.B, ctx context.Context, addr string, incremental bool, n int) []*loadtest.Sink {
	b.Helper()
	sinks := make([]*loadtest.Sink, n)
	for i := range sinks {
		var err error
		sinks[i], err = loadtest.DialMCP(ctx, addr, mcp.ServiceEntries, incremental)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sinks[i].Close() })
	}
	return sinks
}

// waitAll returns when every sink holds version: the last arrival and the
// last sink's arrival.
func waitAll(b *testing.B, sinks []*loadtest.Sink, version string) (time.Time, loadtest.Arrival) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last, a, err := loadtest.WaitAll(ctx, sinks, version)
	if err != nil {
		b.Fatal(err)
	}
	return last, a
}

// BenchmarkInstanceChange measures one instance of one service changing,
// from the registry report to every sink holding the new version, for
// sinks asking for incremental updates and for full-state sinks. One op is
// one change; p50/p99 are over the ops of the run.
func BenchmarkInstanceChange(b *testing.B) {
	for _, c := range []struct {
		incremental bool
		sinks       int
	}{{true, loadtest.BenchSinks}, {false, loadtest.BenchSinks}, {true, 1}, {false, 1}} {
		mode := "full"
		if c.incremental {
			mode = "incremental"
		}
		b.Run(fmt.Sprintf("%s-%dsinks", mode, c.sinks), func(b *testing.B) {
			env := newBenchEnv(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sinks := connectSinks(b, ctx, env.Addr, c.incremental, c.sinks)
			waitAll(b, sinks, env.Store.Current().Collection(snapshot.ServiceEntry).Version)
			runtime.GC()
			var latencies []time.Duration
			var bytesPerSink int
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				start, snap := env.Apply(loadtest.BenchService(i%loadtest.BenchServices, i+1))
				if d := snap.Collection(snapshot.ServiceEntry).LastDiff(); len(d.EndpointOnly) != 1 {
					b.Fatalf("op %d: diff %+v, want one endpoint-only update", i, d)
				}
				last, a := waitAll(b, sinks, snap.Collection(snapshot.ServiceEntry).Version)
				if a.Incremental != c.incremental {
					b.Fatalf("op %d: incremental response %v, want %v", i, a.Incremental, c.incremental)
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
		})
	}
}

// BenchmarkInitialSync measures 10 full-state sinks connecting at once to a
// source holding the full data set, until every one holds the full state.
func BenchmarkInitialSync(b *testing.B) {
	env := newBenchEnv(b)
	version := env.Store.Current().Collection(snapshot.ServiceEntry).Version
	var bytes int
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		sinks := connectSinks(b, ctx, env.Addr, false, loadtest.BenchSinks)
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
