package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TargetFile is the registry file the load run rewrites: one service whose
// first instance moves on every change, so each change is one
// endpoint-only update of one ServiceEntry.
const TargetFile = "zz-load-target.yaml"

// GenerateConfig sizes a generated file registry.
type GenerateConfig struct {
	Dir       string
	Services  int
	Instances int
	// PerFile is how many services each file holds; default 500.
	PerFile int
}

// Generate writes a file registry (see examples/file/README.md) of
// Services x Instances, plus the target service the run changes.
func Generate(cfg GenerateConfig) error {
	if cfg.Services < 1 || cfg.Instances < 1 {
		return fmt.Errorf("generate: --services and --instances must be at least 1")
	}
	if cfg.PerFile <= 0 {
		cfg.PerFile = 500
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	for first := 0; first < cfg.Services; first += cfg.PerFile {
		var b strings.Builder
		b.WriteString("services:\n")
		for i := first; i < min(first+cfg.PerFile, cfg.Services); i++ {
			writeService(&b, fmt.Sprintf("svc-%05d", i), i, cfg.Instances, 0)
		}
		name := filepath.Join(cfg.Dir, fmt.Sprintf("services-%05d.yaml", first/cfg.PerFile))
		if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return writeTarget(cfg.Dir, cfg.Instances, 0)
}

func writeService(b *strings.Builder, name string, i, instances, variant int) {
	fmt.Fprintf(b, "- name: %s\n  namespace: load\n  ports: [{number: 8080, protocol: HTTP}]\n  labels: {app: %s}\n  instances:\n", name, name)
	for j := range instances {
		addr := fmt.Sprintf("10.%d.%d.%d", i/250%250, i%250, j+1)
		if j == 0 && variant > 0 {
			addr = fmt.Sprintf("10.251.%d.%d", variant/250%250, variant%250)
		}
		fmt.Fprintf(b, "  - {id: %s-%d, address: %s, labels: {app: %s, version: v1}, locality: us-east1/us-east1-b}\n", name, j, addr, name)
	}
}

// writeTarget rewrites the target file atomically (temp file + rename), as
// a careful operator or a config-management tool would.
func writeTarget(dir string, instances, variant int) error {
	var b strings.Builder
	b.WriteString("services:\n")
	writeService(&b, "load-target", 250*250-1, instances, variant)
	tmp := filepath.Join(dir, "."+TargetFile+".tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, TargetFile))
}

// MCPCollection is the collection legacy MCP sinks of a run subscribe to
// (mcp.ServiceEntries).
const MCPCollection = "istio/networking/v1alpha3/serviceentries"

// RunConfig describes a load run against a running source.
type RunConfig struct {
	Addr  string
	Sinks int
	// StuckSinks are SotW sinks connected besides Sinks that subscribe and
	// then never read: what they cost the others is measured.
	StuckSinks int
	// Protocol is "sotw", "delta" (ADS, asking for TypeURL), "mcp" or
	// "mcp-incremental" (legacy MCP, asking for MCPCollection).
	Protocol string
	TypeURL  string
	// Dir is the file registry the source serves; the run rewrites
	// TargetFile in it. Empty: connect and sync only.
	Dir       string
	Instances int
	Changes   int
	// Interval between changes; each change is also waited for.
	Interval time.Duration
	// MetricsURL is the source's /metrics, read for its resident memory.
	MetricsURL string
	Timeout    time.Duration
	Progress   io.Writer
}

// Report is what a run measured.
type Report struct {
	Sinks, Changes int
	StuckSinks     int
	Protocol       string
	// InitialSync is from the first connection to every sink holding the
	// full state.
	InitialSync time.Duration
	// Latencies are per change, from the file rename to the last sink
	// holding the new version, sorted.
	Latencies []time.Duration
	// SyncBytes and ChangeBytes are what one sink received for the initial
	// state and for the last change.
	SyncBytes, ChangeBytes int
	// SourceRSS is the source's process_resident_memory_bytes after the
	// run; 0 when unknown.
	SourceRSS float64
}

// Percentile returns the p-th percentile latency.
func (r *Report) Percentile(p int) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := (len(r.Latencies)*p+99)/100 - 1
	return r.Latencies[max(i, 0)]
}

// String renders the report for people.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sinks=%d protocol=%s", r.Sinks, r.Protocol)
	if r.StuckSinks > 0 {
		fmt.Fprintf(&b, " (and %d stuck sinks that never read)", r.StuckSinks)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "initial sync of all sinks: %v (%d bytes per sink)\n", r.InitialSync.Round(time.Microsecond), r.SyncBytes)
	if len(r.Latencies) > 0 {
		fmt.Fprintf(&b, "registry change -> every sink (%d changes): p50 %v  p99 %v  max %v  (%d bytes per sink per change)\n",
			len(r.Latencies), r.Percentile(50).Round(time.Microsecond), r.Percentile(99).Round(time.Microsecond),
			r.Latencies[len(r.Latencies)-1].Round(time.Microsecond), r.ChangeBytes)
	}
	if r.SourceRSS > 0 {
		fmt.Fprintf(&b, "source resident memory: %.1f MiB\n", r.SourceRSS/(1<<20))
	}
	return b.String()
}

// Run connects the sinks, waits for the initial state, then makes the
// changes one by one and measures each.
func Run(ctx context.Context, cfg RunConfig) (*Report, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	dialSink := DialSotW
	switch cfg.Protocol {
	case "sotw":
	case "delta":
		dialSink = DialDelta
	case "mcp", "mcp-incremental":
		incremental := cfg.Protocol == "mcp-incremental"
		dialSink = func(ctx context.Context, addr, _ string) (*Sink, error) {
			return DialMCP(ctx, addr, MCPCollection, incremental)
		}
	default:
		return nil, fmt.Errorf("--protocol %q: want sotw, delta, mcp or mcp-incremental", cfg.Protocol)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rep := &Report{Sinks: cfg.Sinks, StuckSinks: cfg.StuckSinks, Protocol: cfg.Protocol}
	for range cfg.StuckSinks {
		c, err := DialStuck(ctx, cfg.Addr, cfg.TypeURL)
		if err != nil {
			return nil, err
		}
		defer c.Close()
	}
	start := time.Now()
	sinks := make([]*Sink, cfg.Sinks)
	for i := range sinks {
		s, err := dialSink(ctx, cfg.Addr, cfg.TypeURL)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		sinks[i] = s
	}
	// Synced: every sink has a response and all agree on the version.
	syncCtx, done := context.WithTimeout(ctx, cfg.Timeout)
	defer done()
	for {
		first, err := sinks[0].WaitChange(syncCtx, "")
		if err != nil {
			return nil, fmt.Errorf("initial sync: %w", err)
		}
		all := true
		for _, s := range sinks {
			a, err := s.Wait(syncCtx, first.Version)
			if err != nil {
				return nil, fmt.Errorf("initial sync: %w", err)
			}
			rep.SyncBytes = max(rep.SyncBytes, a.Bytes)
			rep.InitialSync = max(rep.InitialSync, a.At.Sub(start))
			all = all && sinks[0].Latest().Version == first.Version
		}
		if all {
			break
		}
	}
	fmt.Fprintf(cfg.Progress, "%d %s sinks synced in %v\n", cfg.Sinks, cfg.Protocol, rep.InitialSync.Round(time.Microsecond))

	for i := 1; i <= cfg.Changes && cfg.Dir != ""; i++ {
		old := sinks[0].Latest().Version
		t0 := time.Now()
		if err := writeTarget(cfg.Dir, cfg.Instances, i); err != nil {
			return nil, err
		}
		changeCtx, done := context.WithTimeout(ctx, cfg.Timeout)
		var last time.Time
		for _, s := range sinks {
			a, err := s.WaitChange(changeCtx, old)
			if err != nil {
				done()
				return nil, fmt.Errorf("change %d: %w", i, err)
			}
			if a.At.After(last) {
				last = a.At
			}
			rep.ChangeBytes = a.Bytes
		}
		done()
		rep.Latencies = append(rep.Latencies, last.Sub(t0))
		rep.Changes++
		if i%10 == 0 {
			fmt.Fprintf(cfg.Progress, "%d/%d changes\n", i, cfg.Changes)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(cfg.Interval):
		}
	}
	slices.Sort(rep.Latencies)
	if cfg.MetricsURL != "" {
		rss, err := scrapeGauge(ctx, cfg.MetricsURL, "process_resident_memory_bytes")
		if err != nil {
			return nil, fmt.Errorf("reading the source's memory: %w", err)
		}
		rep.SourceRSS = rss
	}
	return rep, nil
}

// scrapeGauge reads one unlabelled gauge from a Prometheus text endpoint.
func scrapeGauge(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no %s", url, name)
}
