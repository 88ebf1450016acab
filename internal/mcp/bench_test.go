package mcp_test

// Benchmarks of the legacy MCP server at the scale Galleon is held to:
// 10,000 services x 10 instances, 10 connected sinks, over real gRPC on
// loopback; the same data set and harness as internal/xds's benchmarks
// (loadtest/benchtest). Results and how to read them: docs/benchmarks.md.

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"

	"github.com/galleon-mesh/galleon/internal/loadtest"
	"github.com/galleon-mesh/galleon/internal/loadtest/benchtest"
	"github.com/galleon-mesh/galleon/internal/mcp"
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

// BenchmarkInstanceChange measures one instance of one service changing,
// from the registry report to every sink holding the new version, for sinks
// asking for incremental updates and for full-state sinks.
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
			benchtest.InstanceChange(b, start(b), dialer(c.incremental), c.sinks, func(a loadtest.Arrival) error {
				if a.Incremental != c.incremental {
					return fmt.Errorf("incremental response %v, want %v", a.Incremental, c.incremental)
				}
				return nil
			})
		})
	}
}

// BenchmarkInitialSync measures 10 full-state sinks connecting at once to a
// source holding the full data set, until every one holds the full state.
func BenchmarkInitialSync(b *testing.B) {
	benchtest.InitialSync(b, start(b), dialer(false))
}
