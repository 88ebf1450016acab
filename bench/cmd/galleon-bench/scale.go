package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/bench/internal/benchrun"
)

const scaleHelp = `galleon-bench scale draws the scale curve of docs/benchmarks.md: the core's
BenchmarkInstanceChange (internal/serve/xds, Delta and SotW) at 1,000, 10,000 and 50,000 services
x 10 instances, each with 10 and 100 sinks. Prints a markdown table to stdout, keeps the results
as a TSV, and draws docs/benchmarks-scale.png from that TSV with bench/cmd/plot.

  go run ./cmd/galleon-bench scale [OUT_DIR]        about 3.5 minutes on 2 cores (measured 2026-11-23)
  SERVICES=1000 SINKS=10 OPS=5 PNG=/tmp/smoke.png go run ./cmd/galleon-bench scale /tmp/smoke

Settings (environment, or the flag of the same name in lower case; a flag wins):
  OUT_DIR (argument)  where scale.tsv, each run's raw output and the built binaries go; default a
                      new temporary directory, kept (its path is printed)
  SERVICES            services to run at, default "1000 10000 50000" (1 to 62750)
  SINKS               sink counts to run with, default "10 100"
  OPS                 ops (changes) of every run, default per run (below)
  PNG                 the plot to write, default docs/benchmarks-scale.png

Each run is one process of the benchmark binary: GALLEON_BENCH_SERVICES and GALLEON_BENCH_SINKS
set, -test.bench 'InstanceChange/<delta|sotw>-<sinks>sinks$', -test.benchtime <ops>x; the same as
  GALLEON_BENCH_SERVICES=50000 GALLEON_BENCH_SINKS=100 \
      go test -run XXX -bench 'InstanceChange/delta-100sinks$' -benchtime 1000x ./internal/serve/xds/
Ops per run: Delta 1000 (a change is ~1 KB per sink); SotW as many as move about 30 GB in all,
from 5 to 300, since every change sends the full state (~0.95 KB per service) to every sink:
300 at 1,000 services and at 10,000 x 10, 30 at 10,000 x 100, 60 at 50,000 x 10 and only 6 at
50,000 x 100 (4.7 GB per change), whose p99 is then simply the slowest of 6. Go runs each
benchmark once with one op before the counted run, so every run sets up its data set and sinks
twice.

Needs: go; Linux (/proc, for the RSS and the load average).
`

// scaleTSVHeader is scale.tsv's first line; bench/cmd/plot reads the columns by these names.
const scaleTSVHeader = "protocol\tsinks\tservices\tops\tp50_ms\tp99_ms\tbytes_per_sink\tbytes_per_op\tallocs_per_op\trss_mib\tlive_bytes_per_extra_sink\tseconds\n"

type scaleSettings struct {
	services, sinks []int
	ops             int // 0: per run
	png, outDir     string
}

func parseScale(args []string, root string) (scaleSettings, error) {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	services := benchrun.Setting(fs, "SERVICES", "1000 10000 50000", "services to run at")
	sinks := benchrun.Setting(fs, "SINKS", "10 100", "sink counts to run with")
	ops := benchrun.Setting(fs, "OPS", "", "ops (changes) of every run; empty: per run")
	png := benchrun.Setting(fs, "PNG", filepath.Join(root, "docs", "benchmarks-scale.png"), "the plot to write")
	if err := parseFlags(fs, scaleHelp, args, 1); err != nil {
		return scaleSettings{}, err
	}
	s := scaleSettings{png: *png, outDir: fs.Arg(0)}
	words := append(append(benchrun.Words(*services), benchrun.Words(*sinks)...), benchrun.Words(*ops)...)
	for _, w := range words {
		if _, err := benchrun.Whole("", w); err != nil {
			return s, fmt.Errorf("SERVICES, SINKS and OPS take whole numbers of at least 1, got '%s'", w)
		}
	}
	for _, w := range benchrun.Words(*services) {
		n, _ := strconv.Atoi(w)
		s.services = append(s.services, n)
	}
	for _, w := range benchrun.Words(*sinks) {
		n, _ := strconv.Atoi(w)
		s.sinks = append(s.sinks, n)
	}
	if *ops != "" {
		s.ops, _ = strconv.Atoi(strings.TrimSpace(*ops))
	}
	return s, nil
}

func runScale(ctx context.Context, args []string) error {
	// Progress goes to stderr, the results to stdout: the table is what a run is for.
	r := benchrun.New("bench-scale", os.Stderr, os.Stderr)
	root, err := benchrun.RepoRoot(ctx)
	if err != nil {
		return r.Finish(ctx, err)
	}
	s, err := parseScale(args, root)
	if err != nil {
		return settingsError(ctx, r, err)
	}
	return r.Finish(ctx, s.run(ctx, r, root))
}

// opsFor is the changes to measure in one run (see the help).
func (s scaleSettings) opsFor(proto string, services, sinks int) int {
	switch {
	case s.ops != 0:
		return s.ops
	case proto == "delta":
		return 1000
	}
	return min(max(int(30e9/(float64(services)*float64(sinks)*1000)), 5), 300)
}

func (s scaleSettings) run(ctx context.Context, r *benchrun.Run, root string) error {
	out := s.outDir
	if out == "" {
		d, err := os.MkdirTemp("", "galleon-bench-scale.")
		if err != nil {
			return fmt.Errorf("cannot make a temporary directory: %w", err)
		}
		out = d
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("cannot make OUT_DIR %s: %w", out, err)
	}
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	// The directory is kept, the failure line points at it.
	r.LogDir = out
	tsv := filepath.Join(out, "scale.tsv")

	r.Step("Building the benchmark binary (internal/serve/xds) and the plotting tool")
	buildLog := filepath.Join(out, "build.log")
	if err := benchrun.GoTestBinary(ctx, root, buildLog, filepath.Join(out, "xds.test"), "./internal/serve/xds/"); err != nil {
		return fmt.Errorf("go test -c ./internal/serve/xds/ (see %s)", buildLog)
	}
	if err := benchrun.GoBuild(ctx, filepath.Join(root, "bench"), buildLog, filepath.Join(out, "plot"), "./cmd/plot"); err != nil {
		return fmt.Errorf("building bench/cmd/plot (see %s)", buildLog)
	}

	started, loadBefore, t0 := benchrun.Stamp(), benchrun.LoadAvg(), time.Now()
	rows := scaleTSVHeader
	if err := os.WriteFile(tsv, []byte(rows), 0o644); err != nil {
		return err
	}
	for _, services := range s.services {
		for _, sinks := range s.sinks {
			for _, proto := range []string{"delta", "sotw"} {
				row, err := s.one(ctx, r, root, out, proto, services, sinks)
				if err != nil {
					return err
				}
				rows += row
				if err := os.WriteFile(tsv, []byte(rows), 0o644); err != nil {
					return err
				}
			}
		}
	}
	total := benchrun.Secs(t0, time.Now())

	r.Step("Plotting " + s.png)
	plot := exec.CommandContext(ctx, filepath.Join(out, "plot"), "-in", tsv, "-out", s.png,
		"-title", "One instance change until every sink holds it ("+started+")")
	plot.Stdout, plot.Stderr = os.Stderr, os.Stderr
	if err := plot.Run(); err != nil {
		return fmt.Errorf("plotting %s", s.png)
	}

	fmt.Printf("Measured %s, load average %s before and %s after, %s s in all; %d CPUs, %s.\n",
		started, loadBefore, benchrun.LoadAvg(), total, benchrun.NProc(), benchrun.GoVersion(ctx))
	fmt.Printf("Ops per run: Delta as listed, SotW fewer where each change moves more (its p99 over few ops is the slowest op).\n\n")
	fmt.Print(scaleTable(rows))
	fmt.Printf("\nTSV and raw output: %s; plot: %s\n", out, s.png)
	return nil
}

// one runs the benchmark once and returns its TSV row.
func (s scaleSettings) one(ctx context.Context, r *benchrun.Run, root, out, proto string, services, sinks int) (string, error) {
	n := s.opsFor(proto, services, sinks)
	raw := filepath.Join(out, fmt.Sprintf("%s-%d-%d.txt", proto, services, sinks))
	what := fmt.Sprintf("%d services x %d sinks, %s", services, sinks, proto)
	r.Step(fmt.Sprintf("%s, %d ops (load %s)", what, n, benchrun.LoadAvg()))
	f, err := os.Create(raw)
	if err != nil {
		return "", err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, filepath.Join(out, "xds.test"), "-test.run", "XXX",
		"-test.bench", fmt.Sprintf("InstanceChange/%s-%dsinks$", proto, sinks), "-test.benchtime", fmt.Sprintf("%dx", n), "-test.timeout", "20m")
	cmd.Dir = filepath.Join(root, "internal", "serve", "xds")
	cmd.Env = append(os.Environ(), fmt.Sprintf("GALLEON_BENCH_SERVICES=%d", services), fmt.Sprintf("GALLEON_BENCH_SINKS=%d", sinks))
	cmd.Stdout, cmd.Stderr = f, f
	t := time.Now()
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("%s: the benchmark failed (see %s)", what, raw)
	}
	secs := benchrun.Secs(t, time.Now())
	text, err := os.ReadFile(raw)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(l, "Benchmark") {
			fmt.Fprintln(os.Stderr, l)
		}
	}
	row := tsvRow(string(text), proto, services, sinks, secs)
	if row == "" {
		return "", fmt.Errorf("%s: no result line in %s", what, raw)
	}
	return row, nil
}

// tsvRow is the TSV row (or rows) of the benchmark's result line in out, "" when there is none.
func tsvRow(out, proto string, services, sinks int, secs string) string {
	name := regexp.MustCompile(fmt.Sprintf(`^BenchmarkInstanceChange/%s-%dsinks(-[0-9]+)?$`, regexp.QuoteMeta(proto), sinks))
	label := map[string]string{"delta": "Delta"}[proto]
	if label == "" {
		label = "SotW"
	}
	var rows strings.Builder
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !name.MatchString(f[0]) {
			continue
		}
		m := map[string]string{}
		for i := 2; i+1 < len(f); i += 2 {
			m[f[i+1]] = f[i]
		}
		live, ok := m["live-B/extra-sink"]
		if !ok {
			live = "-"
		}
		fmt.Fprintf(&rows, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", label, sinks, services, f[1],
			m["p50-ms"], m["p99-ms"], m["bytes/sink"], m["B/op"], m["allocs/op"], m["rss-MB"], live, secs)
	}
	return rows.String()
}

// num is a TSV field as awk reads it: its leading number, 0 when there is none.
func num(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return v
}

// group is n truncated to a whole number, with commas between thousands (awk's %d, then commas).
func group(n float64) string { return benchrun.Thousands(float64(int64(n))) }

// size is a byte count: "812 B", "12.3 KB", "1.25 MB".
func size(b float64) string {
	switch {
	case b < 1e4:
		return group(b) + " B"
	case b < 1e6:
		return fmt.Sprintf("%.1f KB", b/1e3)
	}
	return fmt.Sprintf("%.2f MB", b/1e6)
}

// kb is a byte count in KB, "-" for none.
func kb(b string) string {
	if b == "-" {
		return "-"
	}
	return fmt.Sprintf("%.0f KB", num(b)/1e3)
}

// scaleTable is the markdown table of scale.tsv's text, then for each sink count the Delta
// growth from the fewest services to the most, against the target of issue 14 (<= 2x), and the
// memory per extra sink.
func scaleTable(tsv string) string {
	type span struct {
		lo, hi                 float64 // services
		lo50, lo99, hi50, hi99 float64
		mem                    []string
	}
	var b strings.Builder
	b.WriteString("| services | sinks | protocol | ops | p50 ms | p99 ms | bytes per sink per change | allocated per change | allocs per change | RSS MiB | live memory per extra sink |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	var keys []string
	spans := map[string]*span{}
	for i, line := range strings.Split(strings.TrimRight(tsv, "\n"), "\n") {
		f := strings.Split(line, "\t")
		if i == 0 || len(f) < 12 {
			continue
		}
		services, p50, p99 := num(f[2]), num(f[4]), num(f[5])
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.2f | %.2f | %s | %s | %s | %.0f | %s |\n", group(services), f[1], f[0], f[3],
			p50, p99, size(num(f[6])), size(num(f[7])), group(num(f[8])), num(f[9]), kb(f[10]))
		key := f[0] + ", " + f[1] + " sinks"
		sp, ok := spans[key]
		if !ok {
			sp = &span{lo: services, hi: services, lo50: p50, hi50: p50, lo99: p99, hi99: p99}
			spans[key] = sp
			keys = append(keys, key)
		}
		if services < sp.lo {
			sp.lo, sp.lo50, sp.lo99 = services, p50, p99
		}
		if services > sp.hi {
			sp.hi, sp.hi50, sp.hi99 = services, p50, p99
		}
		sp.mem = append(sp.mem, group(services)+" services "+kb(f[10]))
	}
	b.WriteString("\n")
	for _, key := range keys {
		sp := spans[key]
		if !strings.HasPrefix(key, "Delta") || sp.hi == sp.lo {
			continue
		}
		r50, r99 := sp.hi50/sp.lo50, sp.hi99/sp.lo99
		verdict := "missed"
		switch {
		case r50 <= 2 && r99 <= 2:
			verdict = "met"
		case r50 <= 2:
			verdict = "met at p50, missed at p99"
		}
		fmt.Fprintf(&b, "%s, %s -> %s services: p50 x%.2f, p99 x%.2f; target <= 2x %s\n", key, group(sp.lo), group(sp.hi), r50, r99, verdict)
	}
	for _, key := range keys {
		fmt.Fprintf(&b, "Live memory per extra sink, %s: %s\n", key, strings.Join(spans[key].mem, ", "))
	}
	return b.String()
}
