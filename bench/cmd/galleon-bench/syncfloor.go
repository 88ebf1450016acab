package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/bench/internal/benchrun"
)

const syncFloorHelp = `galleon-bench sync-floor measures the initial sync of N sinks across processes beside its floor.
galleon-file serves the load tool's registry; galleon-load floor, a null source in a process of its
own, copies galleon-file's first SotW and Delta responses once and then answers every
subscription with those bytes and nothing else (no snapshot, no per-stream state, no ACK
tracking; the same gRPC server options). The same galleon-load sinks then sync from each in turn,
RUNS times per protocol, alternating. What the floor takes is the transport's and the sinks'
share of an initial sync; what galleon-file takes over it is its own.

  go run ./cmd/galleon-bench sync-floor         10,000 services x 10 instances, 10 sinks, 5 runs each

Settings (environment, or the flag of the same name in lower case; a flag wins):
  SERVICES   services of the generated registry, default 10000
  INSTANCES  instances per service, default 10
  SINKS      sinks of each sync, default 10
  RUNS       syncs per source and protocol, default 5
  PROTOCOLS  default "delta sotw"
  PIN        auto (default): with taskset and 2 or more CPUs, galleon-file and the floor run on
             CPU 0 and the sinks on CPU 1 (as galleon-bench peer); 0: no pinning

Needs: go; Linux; taskset for pinning (optional).
`

type syncFloorSettings struct {
	services, instances, sinks, runs int
	protocols                        []string
	pin                              string
}

func parseSyncFloor(args []string) (syncFloorSettings, error) {
	fs := flag.NewFlagSet("sync-floor", flag.ContinueOnError)
	services := benchrun.Setting(fs, "SERVICES", "10000", "services of the generated registry")
	instances := benchrun.Setting(fs, "INSTANCES", "10", "instances per service")
	sinks := benchrun.Setting(fs, "SINKS", "10", "sinks of each sync")
	runs := benchrun.Setting(fs, "RUNS", "5", "syncs per source and protocol")
	protocols := benchrun.Setting(fs, "PROTOCOLS", "delta sotw", "delta, sotw or both, in order")
	pin := benchrun.Setting(fs, "PIN", "auto", "auto (sources on CPU 0, the sinks on CPU 1) or 0")
	if err := parseFlags(fs, syncFloorHelp, args, 0); err != nil {
		return syncFloorSettings{}, err
	}
	s := syncFloorSettings{protocols: benchrun.Words(*protocols), pin: *pin}
	if err := parseWholes(wholeSetting{"SERVICES", *services, &s.services}, wholeSetting{"INSTANCES", *instances, &s.instances},
		wholeSetting{"SINKS", *sinks, &s.sinks}, wholeSetting{"RUNS", *runs, &s.runs}); err != nil {
		return s, err
	}
	for _, p := range s.protocols {
		if p != "delta" && p != "sotw" {
			return s, fmt.Errorf("PROTOCOLS: %s is not delta or sotw", p)
		}
	}
	return s, benchrun.OneOf("PIN", s.pin, "auto", "0")
}

func runSyncFloor(ctx context.Context, args []string) error {
	r := benchrun.New("bench-sync-floor", os.Stdout, os.Stderr)
	s, err := parseSyncFloor(args)
	if err != nil {
		return settingsError(ctx, r, err)
	}
	return r.Finish(ctx, s.run(ctx, r))
}

var (
	fileReady    = regexp.MustCompile(`"msg":"ready: `)
	floorServing = regexp.MustCompile(`^serving the floor`)
)

func (s syncFloorSettings) run(ctx context.Context, r *benchrun.Run) error {
	root, err := benchrun.RepoRoot(ctx)
	if err != nil {
		return err
	}
	pins := benchrun.PinSides(s.pin) // galleon-file and the floor are the servers
	commit := benchrun.CommitOf(ctx, root)
	if err := r.WorkDirs("bench-sync-floor"); err != nil {
		return err
	}
	regDir := filepath.Join(r.Dir, "registry")
	r.Bulky = []string{regDir}

	r.Step("build and generate")
	if err := r.BuildBinaries(ctx, root, []string{"./cmd/galleon-file"}, []string{"./cmd/galleon-load"}); err != nil {
		return err
	}
	load := filepath.Join(r.BinDir, "galleon-load")
	genLog := filepath.Join(r.LogDir, "generate.log")
	if err := benchrun.RunTo(ctx, genLog, load, "generate", "--dir", regDir,
		"--services", strconv.Itoa(s.services), "--instances", strconv.Itoa(s.instances)); err != nil {
		return fmt.Errorf("galleon-load generate (see %s)", genLog)
	}
	r.Say("%s: %d services x %d instances, %d sinks, %d syncs per source and protocol", r.Prog, s.services, s.instances, s.sinks, s.runs)
	r.Say("commit %s, %s, %d CPUs, load average %s, %s; %s", commit, benchrun.GoVersion(ctx), pins.NProc, benchrun.LoadAvg(), benchrun.Stamp(), pins.Text)

	r.Step("start galleon-file and the floor")
	fileXDS := r.FreeAddr()
	file, err := r.Start(benchrun.Spec{Name: "galleon-file", Log: filepath.Join(r.LogDir, "galleon-file.log"), Pin: pins.Server,
		Path: filepath.Join(r.BinDir, "galleon-file"),
		Args: []string{"--file-dir", regDir, "--listen", fileXDS, "--http", r.FreeAddr(), "--log-format", "json"}})
	if err != nil {
		return err
	}
	if err := waitLine(ctx, file, fileReady, `"msg":"ready: `); err != nil {
		return err
	}
	floorXDS := r.FreeAddr()
	floor, err := r.Start(benchrun.Spec{Name: "galleon-load floor", Log: filepath.Join(r.LogDir, "floor.log"), Pin: pins.Server,
		Path: load, Args: []string{"floor", "--from", fileXDS, "--listen", floorXDS}})
	if err != nil {
		return err
	}
	if err := waitLine(ctx, floor, floorServing, "^serving the floor"); err != nil {
		return err
	}
	said, _ := os.ReadFile(floor.Log)
	r.Say("galleon-file on %s; %s", fileXDS, strings.TrimRight(string(said), "\n"))

	r.Step("syncs")
	var rows []string
	for _, proto := range s.protocols {
		var fileMs, floorMs []float64
		for run := 1; run <= s.runs; run++ {
			f, err := s.syncMs(ctx, r, pins.Load, load, fileXDS, proto, fmt.Sprintf("file-%d", run))
			if err != nil {
				return err
			}
			g, err := s.syncMs(ctx, r, pins.Load, load, floorXDS, proto, fmt.Sprintf("floor-%d", run))
			if err != nil {
				return err
			}
			fileMs, floorMs = append(fileMs, f), append(floorMs, g)
			r.Say("%s run %d: galleon-file %.2f ms, floor %.2f ms", proto, run, f, g)
		}
		rows = append(rows, benchrun.Row(fmt.Sprintf("%s: initial sync, %d sinks, median of %d (range)", proto, s.sinks, s.runs),
			rangeStats(fileMs), rangeStats(floorMs), fmt.Sprintf("%.2f", benchrun.Median(fileMs)/benchrun.Median(floorMs))))
	}

	r.Step("results")
	r.Say("| measure | galleon-file | floor (null source, own process) | galleon-file / floor |")
	r.Say("|---|---|---|---|")
	for _, row := range rows {
		r.Say("%s", row)
	}
	return nil
}

// waitLine waits up to 120 s for a line of p's log matching re (pattern, as the messages say it).
func waitLine(ctx context.Context, p *benchrun.Proc, re *regexp.Regexp, pattern string) error {
	_, err := p.WaitLine(ctx, re, pattern, 120*time.Second, 100*time.Millisecond)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, benchrun.ErrExited):
		return fmt.Errorf("%s exited: %s", p.Name, p.Tail())
	case ctx.Err() != nil:
		return err
	}
	return fmt.Errorf("%s: no %q within 120 s (see %s)", p.Name, pattern, p.Log)
}

// syncMs is one initial sync of SINKS sinks from addr, in ms (two decimals, as measured).
func (s syncFloorSettings) syncMs(ctx context.Context, r *benchrun.Run, pin []string, load, addr, proto, name string) (float64, error) {
	out := filepath.Join(r.LogDir, "run-"+proto+"-"+name+".log")
	argv := append(append([]string{}, pin...), load, "run", "--addr", addr, "--sinks", strconv.Itoa(s.sinks), "--protocol", proto)
	if err := benchrun.RunTo(ctx, out, argv...); err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("galleon-load run --addr %s --protocol %s: %s", addr, proto, benchrun.FirstOrLast(out, nil))
	}
	m := benchrun.FirstMatch(out, syncLine)
	if m == "" {
		return 0, fmt.Errorf("no initial sync in %s", out)
	}
	ms, err := benchrun.Ms(syncLine.FindStringSubmatch(m)[1])
	if err != nil {
		return 0, fmt.Errorf("%s: %w", out, err)
	}
	return strconv.ParseFloat(ms, 64)
}

// rangeStats is "median ms (min-max)" with one decimal.
func rangeStats(vs []float64) string {
	return fmt.Sprintf("%.1f ms (%.1f-%.1f)", benchrun.Median(vs), slices.Min(vs), slices.Max(vs))
}
