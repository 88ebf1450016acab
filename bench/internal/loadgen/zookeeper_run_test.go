package loadgen_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/zookeeper"
	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/bench/internal/loadgen"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/testing/daemontest"
	"github.com/galleon-mesh/galleon/registry"
)

// startGalleonZookeeper runs the daemon galleon-zookeeper runs, in process,
// on the registry in ZooKeeper at zkAddr; it returns the gRPC and HTTP
// addresses.
func startGalleonZookeeper(t *testing.T, zkAddr, layout string) (listen, httpAddr string) {
	t.Helper()
	return daemontest.Start(t, "galleon-zookeeper", "zookeeper", func(env daemon.Env) (registry.Registry, error) {
		return zookeeper.New(zookeeper.Config{Servers: []string{zkAddr}, Layout: layout, Logger: env.Logger})
	}, 20*time.Second)
}

// TestRunAgainstGalleonZookeeper drives the load tool against a real
// ZooKeeper source (the daemon galleon-zookeeper runs, on a real ZooKeeper)
// in each layout: every change is one update that reaches the sinks, and
// the last one is what the source serves.
func TestRunAgainstGalleonZookeeper(t *testing.T) {
	srv := zktest.Start(t, zktest.Options{})
	for _, layout := range []string{loadgen.ZKLayoutDubbo, loadgen.ZKLayoutCurator} {
		t.Run(layout, func(t *testing.T) {
			if _, err := loadgen.ZKGenerate(context.Background(), loadgen.ZKGenerateConfig{
				Servers: []string{srv.Addr()}, Layout: layout, Services: 40, Instances: 3,
			}); err != nil {
				t.Fatal(err)
			}
			listen, httpAddr := startGalleonZookeeper(t, srv.Addr(), layout)
			for _, protocol := range []string{"sotw", "delta"} {
				rep, err := loadgen.Run(context.Background(), loadgen.RunConfig{
					Addr: listen, Sinks: 3, Protocol: protocol, TypeURL: "networking.istio.io/v1/ServiceEntry",
					ZKServers: []string{srv.Addr()}, ZKLayout: layout, Changes: 4, Interval: time.Millisecond,
					MetricsURL: "http://" + httpAddr + "/metrics", Timeout: 20 * time.Second,
				})
				if err != nil {
					t.Fatalf("%s: %v", protocol, err)
				}
				if rep.Changes != 4 || len(rep.Latencies) != 4 || rep.ChangeBytes == 0 || rep.SourceRSS == 0 ||
					rep.Registry != "zookeeper "+layout || rep.ZKRequests == nil || rep.ZKRequests.Changes != 4 {
					t.Fatalf("%s report incomplete: %+v", protocol, rep)
				}
				if rep.Updates != rep.Changes {
					t.Fatalf("%s: %d updates for %d changes, want one each", protocol, rep.Updates, rep.Changes)
				}
				if protocol == "delta" && rep.ChangeBytes >= rep.SyncBytes/10 {
					t.Fatalf("delta change sent %d bytes against %d for the full state: not one endpoint-only update", rep.ChangeBytes, rep.SyncBytes)
				}
				if c := rep.ZKRequests; c.Reported && c.Total <= 0 {
					t.Fatalf("the source reports %v ZooKeeper requests for 4 changes", c.Total)
				}
				out := rep.String()
				if !strings.Contains(out, "zookeeper requests per change: ") {
					t.Fatalf("the report says nothing of ZooKeeper requests:\n%s", out)
				}
				t.Logf("%s %s: %s", layout, protocol, out)
			}
		})
	}
}
