package mcp_test

// Benchmarks of the legacy MCP server at the scale Galleon is held to:
// 10,000 services x 10 instances, 10 connected sinks, over real gRPC on
// loopback (GALLEON_BENCH_SERVICES and GALLEON_BENCH_SINKS change the
// scale); the same data set and harness as internal/serve/xds's benchmarks
// (loadtest/benchtest). Results and how to read them: docs/benchmarks.md.

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"

	"github.com/galleon-mesh/galleon/internal/loadtest"
	"github.com/galleon-mesh/galleon/internal/loadtest/benchtest"
	"github.com/galleon-mesh/galleon/internal/serve/mcp"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

func start(b *testing.B) *loadtest.BenchEnv {
	return benchtest.Start(b, func(g *grpc.Server, store *snapshot.Store) {
		mcp.NewServer(snapshot.Everyone(store), mcp.Options{}).Register(g)
	})
}

func dialer(incremental bool) benchtest.Dial {
	return func(ctx context.Context, addr string) (*loadtest.Sink, error) {
		return loadtest.DialMCP(ctx, addr, mcp.ServiceEntries, incremental)
	}
}

// startFloor serves the same data set from benchtest's null source: the
// full-state floor, what moving the full state to the sinks costs by itself.
func startFloor(b *testing.B) *loadtest.BenchEnv {
	return benchtest.StartFloorMCP(b, mcp.ServiceEntries)
}

// BenchmarkInstanceChange measures one instance of one service changing,
// from the registry report to every sink holding the new version, for sinks
// asking for incremental updates and for full-state sinks, with
// benchtest.SinkCounts sinks (10 and 1 by default). Each full-floor variant
// runs the full one's loop against the null source, so
// -bench 'InstanceChange/full' prints the two side by side.
func BenchmarkInstanceChange(b *testing.B) {
	for _, sinks := range benchtest.SinkCounts(b) {
		for _, c := range []struct{ incremental, floor bool }{{true, false}, {false, false}, {false, true}} {
			mode, startEnv := "full", start
			if c.incremental {
				mode = "incremental"
			}
			if c.floor {
				mode, startEnv = "full-floor", startFloor
			}
			b.Run(fmt.Sprintf("%s-%dsinks", mode, sinks), func(b *testing.B) {
				benchtest.InstanceChange(b, startEnv(b), dialer(c.incremental), sinks, func(a loadtest.Arrival) error {
					if a.Incremental != c.incremental {
						return fmt.Errorf("incremental response %v, want %v", a.Incremental, c.incremental)
					}
					return nil
				})
			})
		}
	}
}

// BenchmarkInitialSync measures 10 full-state sinks (GALLEON_BENCH_SINKS)
// connecting at once to a source holding the full data set, until every one
// holds the full state.
func BenchmarkInitialSync(b *testing.B) {
	benchtest.InitialSync(b, start(b), dialer(false))
}
