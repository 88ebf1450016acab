package xds_test

// Benchmarks of the core at the scale Galleon is held to: 10,000 services x
// 10 instances, 10 connected sinks, over real gRPC on loopback
// (GALLEON_BENCH_SERVICES and GALLEON_BENCH_SINKS change the scale:
// `galleon-bench scale`, bench/). The data set and harness are shared with
// internal/serve/mcp's benchmarks (loadtest/benchtest). Results and how to read
// them: docs/benchmarks.md.

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"

	"github.com/galleon-mesh/galleon/internal/loadtest"
	"github.com/galleon-mesh/galleon/internal/loadtest/benchtest"
	"github.com/galleon-mesh/galleon/internal/serve/xds"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

const benchType = "networking.istio.io/v1/ServiceEntry"

func start(b *testing.B) *loadtest.BenchEnv {
	return benchtest.Start(b, func(g *grpc.Server, store *snapshot.Store) {
		xds.NewServer(snapshot.Everyone(store), xds.Options{}).Register(g)
	})
}

func dialSotW(ctx context.Context, addr string) (*loadtest.Sink, error) {
	return loadtest.DialSotW(ctx, addr, benchType)
}

func dialDelta(ctx context.Context, addr string) (*loadtest.Sink, error) {
	return loadtest.DialDelta(ctx, addr, benchType)
}

// startFloor serves the same data set from benchtest's null source: the
// SotW floor, what moving the full state to the sinks costs by itself.
func startFloor(b *testing.B) *loadtest.BenchEnv { return benchtest.StartFloorSotW(b, benchType) }

// BenchmarkInstanceChange measures one instance of one service changing,
// from the registry report to every sink holding the new version, with
// benchtest.SinkCounts sinks (10 and 1 by default). Each sotw-floor variant
// runs the sotw one's loop against the null source, so
// -bench 'InstanceChange/sotw' prints the two side by side.
func BenchmarkInstanceChange(b *testing.B) {
	for _, sinks := range benchtest.SinkCounts(b) {
		for _, c := range []struct {
			protocol string
			start    func(*testing.B) *loadtest.BenchEnv
			dial     benchtest.Dial
		}{
			{"sotw", start, dialSotW}, {"sotw-floor", startFloor, dialSotW}, {"delta", start, dialDelta},
		} {
			b.Run(fmt.Sprintf("%s-%dsinks", c.protocol, sinks), func(b *testing.B) {
				benchtest.InstanceChange(b, c.start(b), c.dial, sinks, nil)
			})
		}
	}
}

// BenchmarkInitialSync measures 10 SotW sinks (GALLEON_BENCH_SINKS) connecting
// at once to a source holding the full data set, until every one holds the
// full state.
func BenchmarkInitialSync(b *testing.B) {
	benchtest.InitialSync(b, start(b), dialSotW)
}
