package xds_test

// Benchmarks of the core at the scale Galleon is held to: 10,000 services x
// 10 instances, 10 connected sinks, over real gRPC on loopback. The data set
// and environment are shared with common/mcp's benchmarks (loadtest). Results
// and how to read them: docs/benchmarks.md.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/galleon-mesh/galleon/common/loadtest"
	"github.com/galleon-mesh/galleon/common/snapshot"
	"github.com/galleon-mesh/galleon/common/xds"
)

const benchType = "networking.istio.io/v1/ServiceEntry"

// newBenchEnv starts the full data set served by the ADS server.
func newBenchEnv(b *testing.B) *loadtest.BenchEnv {
	b.Helper()
	env, err := loadtest.StartBenchEnv(xds.GRPCServerOptions(), func(g *grpc.Server, store *snapshot.Store) {
		xds.NewServer(store, xds.Options{}).Register(g)
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(env.Close)
	b.Logf("listing of %d services x %d instances converted and applied in %v",
		loadtest.BenchServices, loadtest.BenchInstances, env.Listed)
	return env
}

func connectSinks(b *testing.B, ctx context.Context, addr, protocol string, n int) []*loadtest.Sink {
	b.Helper()
	sinks := make([]*loadtest.Sink, n)
	for i := range sinks {
		var err error
		if protocol == "sotw" {
			sinks[i], err = loadtest.DialSotW(ctx, addr, benchType)
		} else {
			sinks[i], err = loadtest.DialDelta(ctx, addr, benchType)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sinks[i].Close() })
	}
	return sinks
}

// waitAll returns when every sink holds version: the last arrival and the
// bytes the last sink received.
func waitAll(b *testing.B, sinks []*loadtest.Sink, version string) (time.Time, int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last, a, err := loadtest.WaitAll(ctx, sinks, version)
	if err != nil {
		b.Fatal(err)
	}
	return last, a.Bytes
}

// BenchmarkInstanceChange measures one instance of one service changing,
// from the registry report to every sink holding the new version. One op is
// one change; p50/p99 are over the ops of the run.
func BenchmarkInstanceChange(b *testing.B) {
	for _, c := range []struct {
		protocol string
		sinks    int
	}{{"sotw", loadtest.BenchSinks}, {"delta", loadtest.BenchSinks}, {"sotw", 1}, {"delta", 1}} {
		protocol := c.protocol
		b.Run(fmt.Sprintf("%s-%dsinks", protocol, c.sinks), func(b *testing.B) {
			env := newBenchEnv(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sinks := connectSinks(b, ctx, env.Addr, protocol, c.sinks)
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
				version := snap.Collection(snapshot.ServiceEntry).Version
				last, n := waitAll(b, sinks, version)
				bytesPerSink = n
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

// BenchmarkInitialSync measures 10 sinks connecting at once to a source
// holding the full data set, until every one holds the full state.
func BenchmarkInitialSync(b *testing.B) {
	env := newBenchEnv(b)
	version := env.Store.Current().Collection(snapshot.ServiceEntry).Version
	var bytes int
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		sinks := connectSinks(b, ctx, env.Addr, "sotw", loadtest.BenchSinks)
		_, bytes = waitAll(b, sinks, version)
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
