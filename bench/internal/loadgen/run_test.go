package loadgen_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/bench/internal/loadgen"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/testing/daemontest"
	"github.com/galleon-mesh/galleon/registry"
)

// startGalleonFile runs the daemon galleon-file runs, in process, on a
// generated registry in dir; it returns the gRPC and HTTP addresses.
func startGalleonFile(t *testing.T, dir string) (listen, httpAddr string) {
	t.Helper()
	if err := filegen.Generate(filegen.GenerateConfig{Dir: dir, Services: 40, Instances: 3, PerFile: 15}); err != nil {
		t.Fatal(err)
	}
	return daemontest.Start(t, "galleon-file", "file", func(env daemon.Env) (registry.Registry, error) {
		return file.New(file.Config{Dir: dir, Logger: env.Logger})
	}, 10*time.Second)
}

// TestRunAgainstGalleonFile drives the load tool against a real file
// source (the daemon galleon-file runs) on loopback.
func TestRunAgainstGalleonFile(t *testing.T) {
	dir := t.TempDir()
	listen, httpAddr := startGalleonFile(t, dir)
	for _, protocol := range []string{"sotw", "delta", "mcp", "mcp-incremental"} {
		stuck := 0
		if protocol == "sotw" {
			stuck = 2 // they hang; the others must still get every change
		}
		var rep *loadgen.Report
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; {
			rep, err = loadgen.Run(context.Background(), loadgen.RunConfig{
				Addr: listen, Sinks: 3, StuckSinks: stuck, Protocol: protocol, TypeURL: "networking.istio.io/v1/ServiceEntry",
				Dir: dir, Instances: 3, Changes: 4, Interval: time.Millisecond,
				MetricsURL: "http://" + httpAddr + "/metrics", Timeout: 10 * time.Second,
			})
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond) // the daemon is still starting
		}
		if err != nil {
			t.Fatalf("%s: %v", protocol, err)
		}
		if rep.Changes != 4 || len(rep.Latencies) != 4 || rep.SyncBytes == 0 || rep.ChangeBytes == 0 || rep.SourceRSS == 0 || rep.StuckSinks != stuck {
			t.Fatalf("%s report incomplete: %+v", protocol, rep)
		}
		if (protocol == "delta" || protocol == "mcp-incremental") && rep.ChangeBytes >= rep.SyncBytes/10 {
			t.Fatalf("%s change sent %d bytes against %d for the full state: not incremental", protocol, rep.ChangeBytes, rep.SyncBytes)
		}
		if (protocol == "sotw" || protocol == "mcp") && rep.ChangeBytes < rep.SyncBytes/2 {
			t.Fatalf("%s change sent %d bytes, full state is %d: must be the full state", protocol, rep.ChangeBytes, rep.SyncBytes)
		}
		t.Logf("%s: %s", protocol, rep)
	}
}

// TestAttackEndsOnTheSourcesBounds runs the attacker against galleon-file
// until it has made each of its three attacks twice: the type-URL flood and
// the Delta name flood must be ended by the source with ResourceExhausted,
// and the NACK flood (bounded in log lines, not cut off) by the attacker.
func TestAttackEndsOnTheSourcesBounds(t *testing.T) {
	listen, _ := startGalleonFile(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stats loadgen.AttackStats
	done := make(chan error, 1)
	go func() { done <- loadgen.Attack(ctx, listen, "networking.istio.io/v1/ServiceEntry", &stats) }()
	deadline := time.Now().Add(time.Minute)
	for stats.Streams.Load() < 6 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := stats.String()
	t.Log(got)
	if stats.Streams.Load() < 6 {
		t.Fatalf("the attacker made %s in a minute, want 6", got)
	}
	ended := stats.Ended()
	if ended["ResourceExhausted"] < 4 || ended["by the attacker"] < 2 || len(ended) != 2 {
		t.Fatalf("attacking streams ended %v, want only ResourceExhausted (at least 4) and by the attacker (at least 2)", ended)
	}
}

// TestFloorServesTheSourcesBytes copies galleon-file's first responses with CopyFloor and
// syncs sinks from the floor: each gets the source's version, in as many bytes as from the
// source itself.
func TestFloorServesTheSourcesBytes(t *testing.T) {
	dir := t.TempDir()
	listen, _ := startGalleonFile(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var floor *loadgen.Floor
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if floor, err = loadgen.CopyFloor(ctx, listen, "networking.istio.io/v1/ServiceEntry"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the daemon is still starting
	}
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- floor.Serve(ctx, l) }()
	sotwSize, deltaSize := floor.Sizes()
	for _, tc := range []struct {
		protocol string
		size     int
	}{{"sotw", sotwSize}, {"delta", deltaSize}} {
		fromSource, err := loadgen.Run(ctx, loadgen.RunConfig{Addr: listen, Sinks: 2, Protocol: tc.protocol, TypeURL: "networking.istio.io/v1/ServiceEntry", Timeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("%s from the source: %v", tc.protocol, err)
		}
		fromFloor, err := loadgen.Run(ctx, loadgen.RunConfig{Addr: l.Addr().String(), Sinks: 3, Protocol: tc.protocol, TypeURL: "networking.istio.io/v1/ServiceEntry", Timeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("%s from the floor: %v", tc.protocol, err)
		}
		if fromFloor.SyncBytes != fromSource.SyncBytes || fromFloor.SyncBytes != tc.size {
			t.Errorf("%s: the floor synced %d bytes a sink, the source %d, the copy is %d", tc.protocol, fromFloor.SyncBytes, fromSource.SyncBytes, tc.size)
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
