package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/loadtest"
)

// TestHundredSinksAtOnce connects 100 SotW sinks at the same moment to galleon-file serving
// 10,000 services x 10 instances, as after an istiod fleet restart or a network partition
// healing: every sink must hold the full state. How long that takes and the adapter's memory
// afterwards are logged (docs/reliability.md); the bound asserted is loose, since figures are
// measured, not asserted.
func TestHundredSinksAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 10,000 services and 100 sinks")
	}
	bin := galleonBinary(t, "galleon-file")
	dir := t.TempDir()
	if err := loadtest.Generate(loadtest.GenerateConfig{Dir: dir, Services: 10_000, Instances: 10, PerFile: 500}); err != nil {
		t.Fatal(err)
	}
	g := startGalleon(t, bin, "--file-dir", dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := loadtest.Run(ctx, loadtest.RunConfig{
		Addr: g.Addr, Sinks: 100, Protocol: "sotw", TypeURL: seTypeURL,
		MetricsURL: "http://" + g.HTTPAddr + "/metrics", Timeout: 2 * time.Minute,
	})
	if err != nil {
		t.Fatalf("100 sinks at once: %v", err)
	}
	t.Logf("100 SotW sinks connected at once to 10,000 x 10: all held the full state (%d bytes each) after %v; galleon-file RSS %.0f MiB",
		rep.SyncBytes, rep.InitialSync.Round(time.Millisecond), rep.SourceRSS/(1<<20))
	if rep.SyncBytes < 5<<20 {
		t.Errorf("a sink received %d bytes: not the full state of 10,000 services", rep.SyncBytes)
	}
	if rep.InitialSync > time.Minute {
		t.Errorf("100 sinks took %v to hold the full state", rep.InitialSync)
	}
}
