package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
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
	if err := filegen.Generate(filegen.GenerateConfig{Dir: dir, Services: 10_000, Instances: 10, PerFile: 500}); err != nil {
		t.Fatal(err)
	}
	g := startGalleon(t, bin, "--file-dir", dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	took, syncBytes, err := syncSinksAtOnce(ctx, g.Addr, seTypeURL, 100)
	if err != nil {
		t.Fatalf("100 sinks at once: %v", err)
	}
	fams, _, err := scrapeMetrics(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	rss, ok := metricSum(fams, "process_resident_memory_bytes", nil)
	if !ok {
		t.Fatal("galleon-file's /metrics has no process_resident_memory_bytes")
	}
	t.Logf("100 SotW sinks connected at once to 10,000 x 10: all held the full state (%d bytes each) after %v; galleon-file RSS %.0f MiB",
		syncBytes, took.Round(time.Millisecond), rss/(1<<20))
	if syncBytes < 5<<20 {
		t.Errorf("a sink received %d bytes: not the full state of 10,000 services", syncBytes)
	}
	if took > time.Minute {
		t.Errorf("100 sinks took %v to hold the full state", took)
	}
}

// syncSinksAtOnce dials n SotW sinks of typeURL to addr, none waiting for another, and returns
// when every one holds the version the first one received: the time from the first dial to the
// last sink's arrival, and the largest response a sink took. The source's registry must not
// change meanwhile.
func syncSinksAtOnce(ctx context.Context, addr, typeURL string, n int) (took time.Duration, syncBytes int, err error) {
	start := time.Now()
	var sinks []*loadtest.Sink
	defer func() {
		for _, s := range sinks {
			s.Close()
		}
	}()
	for range n {
		s, err := loadtest.DialSotW(ctx, addr, typeURL)
		if err != nil {
			return 0, 0, err
		}
		sinks = append(sinks, s)
	}
	first, err := sinks[0].WaitChange(ctx, "")
	if err != nil {
		return 0, 0, fmt.Errorf("the first sink's initial state: %w", err)
	}
	for i, s := range sinks {
		a, err := s.Wait(ctx, first.Version)
		if err != nil {
			return 0, 0, fmt.Errorf("sink %d waiting for version %s, which the first sink holds: %w", i, first.Version, err)
		}
		took, syncBytes = max(took, a.At.Sub(start)), max(syncBytes, a.Bytes)
	}
	return took, syncBytes, nil
}
