package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/galleon-mesh/galleon/bench/internal/benchrun"
)

const startHelp = `galleon-bench start measures galleon-file's start on the load tool's registry: from its exec
to its "ready" log line (the registry's first full listing served; /readyz answers 200 from then
on), RUNS times, and its peak memory (VmHWM) at that point.

  go run ./cmd/galleon-bench start          10,000 services x 10 instances (21 files, 12 MB), 5 runs
  PIN=1 go run ./cmd/galleon-bench start    galleon-file on CPU 0 only, as galleon-bench peer runs it
  BASE=HEAD~1 go run ./cmd/galleon-bench start
                                            the same starts of the build of a git revision too,
                                            alternated with this tree's: this machine's speed drifts
                                            by up to 40% within an hour, so only starts made side by
                                            side compare

Settings (environment, or the flag of the same name in lower case; a flag wins):
  SERVICES   services of the generated registry, default 10000
  INSTANCES  instances per service, default 10
  RUNS       starts, default 5
  PIN        0 (default): both cores; 1: taskset -c 0
  BASE       a git revision to compare with (empty: none)

The time is the log line's own timestamp less the time of the exec, not a /readyz poll: a poll
loop on a 2-core machine slows what it measures. One markdown row per run, then the median.

Needs: go; Linux (/proc); taskset with PIN=1; git and tar with BASE.
`

type startSettings struct {
	services, instances, runs int
	pin                       bool
	base                      string
}

func parseStart(args []string) (startSettings, error) {
	fs := flag.NewFlagSet("start", flag.ContinueOnError)
	services := benchrun.Setting(fs, "SERVICES", "10000", "services of the generated registry")
	instances := benchrun.Setting(fs, "INSTANCES", "10", "instances per service, 1 to 250")
	runs := benchrun.Setting(fs, "RUNS", "5", "starts")
	pin := benchrun.Setting(fs, "PIN", "0", "0 (both cores) or 1 (taskset -c 0)")
	base := benchrun.Setting(fs, "BASE", "", "a git revision whose build's starts alternate with this tree's")
	if err := parseFlags(fs, startHelp, args, 0); err != nil {
		return startSettings{}, err
	}
	s := startSettings{base: *base, pin: *pin == "1"}
	if err := parseWholes(wholeSetting{"SERVICES", *services, &s.services}); err != nil {
		return s, err
	}
	var err error
	if s.instances, err = benchrun.Instances("INSTANCES", *instances); err != nil {
		return s, err
	}
	if err := parseWholes(wholeSetting{"RUNS", *runs, &s.runs}); err != nil {
		return s, err
	}
	return s, benchrun.OneOf("PIN", *pin, "0", "1")
}

func runStart(ctx context.Context, args []string) error {
	r := benchrun.New("bench-start", os.Stdout, os.Stderr)
	s, err := parseStart(args)
	if err != nil {
		return settingsError(ctx, r, err)
	}
	return r.Finish(ctx, s.run(ctx, r))
}

// readyLine is galleon-file's "ready" line in its JSON log; the match is its time.
var readyLine = regexp.MustCompile(`^\{"time":"([^"]*)".*"msg":"ready: `)

func (s startSettings) run(ctx context.Context, r *benchrun.Run) error {
	var pin []string
	if s.pin {
		if err := benchrun.NeedTools("taskset"); err != nil {
			return errors.New("PIN=1 needs taskset")
		}
		pin = []string{"taskset", "-c", "0"}
	}
	root, err := benchrun.RepoRoot(ctx)
	if err != nil {
		return err
	}
	if s.base != "" {
		if err := benchrun.NeedTools("git", "tar"); err != nil {
			return fmt.Errorf("BASE needs %w", err)
		}
		if _, err := benchrun.Revision(ctx, root, s.base); err != nil {
			return fmt.Errorf("BASE=%w", err)
		}
	}
	if err := benchrun.CheckProc(); err != nil {
		return err
	}
	if err := r.WorkDirs("bench-start"); err != nil {
		return err
	}
	regDir := filepath.Join(r.Dir, "registry")
	r.Bulky = []string{regDir, filepath.Join(r.Dir, "base-src")}
	if err := os.MkdirAll(regDir, 0o755); err != nil {
		return err
	}

	r.Step("build and generate")
	if err := r.BuildBinaries(ctx, root, []string{"./cmd/galleon-file"}, []string{"./cmd/galleon-load"}); err != nil {
		return err
	}
	builds := []string{"new"}
	if s.base != "" {
		builds = []string{"base", "new"}
		if err := s.buildBase(ctx, r, root); err != nil {
			return err
		}
	}
	genLog := filepath.Join(r.LogDir, "generate.log")
	if err := benchrun.RunTo(ctx, genLog, filepath.Join(r.BinDir, "galleon-load"), "generate", "--dir", regDir,
		"--services", strconv.Itoa(s.services), "--instances", strconv.Itoa(s.instances)); err != nil {
		return fmt.Errorf("galleon-load generate (see %s)", genLog)
	}
	said, _ := os.ReadFile(genLog)
	files, size := yamlFiles(regDir)
	r.Say("%s: %d files, %s", strings.TrimRight(string(said), "\n"), files, size)
	under := ""
	if s.pin {
		under = ", galleon-file under " + strings.Join(pin, " ")
	}
	r.Say("%s, %d CPUs, load average %s%s", benchrun.GoVersion(ctx), benchrun.NProc(), benchrun.LoadAvg(), under)

	r.Step("starts")
	if s.base != "" {
		r.Say("| run | base: start → ready | base: VmHWM | new: start → ready | new: VmHWM |")
		r.Say("|---|---|---|---|---|")
	} else {
		r.Say("| run | start → ready | VmHWM at ready |")
		r.Say("|---|---|---|")
	}
	times := map[string][]float64{}
	for run := 1; run <= s.runs; run++ {
		row := fmt.Sprintf("| %d |", run)
		for _, build := range builds {
			ms, hwm, err := startOnce(ctx, r, pin, build, run, regDir)
			if err != nil {
				return err
			}
			times[build] = append(times[build], float64(ms))
			row += fmt.Sprintf(" %d ms | %s |", ms, benchrun.MiB(hwm))
		}
		r.Say("%s", row)
	}
	for _, build := range builds {
		median := benchrun.AwkNumber(benchrun.Median(times[build]))
		if s.base != "" {
			r.Say("%s: median of %d: %s ms", build, s.runs, median)
		} else {
			r.Say("median of %d: %s ms", s.runs, median)
		}
	}
	return nil
}

// buildBase builds galleon-file of revision BASE into BinDir/base.
func (s startSettings) buildBase(ctx context.Context, r *benchrun.Run, root string) error {
	src := filepath.Join(r.Dir, "base-src")
	if err := benchrun.GitArchive(ctx, root, s.base, src); err != nil {
		return fmt.Errorf("git archive %s: %w", s.base, err)
	}
	log := filepath.Join(r.LogDir, "build.log")
	if err := benchrun.GoBuild(ctx, src, log, filepath.Join(r.BinDir, "base")+"/", "./cmd/galleon-file"); err != nil {
		return fmt.Errorf("go build ./cmd/galleon-file of %s (see %s)", s.base, log)
	}
	short, err := benchrun.Revision(ctx, root, s.base)
	if err != nil {
		return err
	}
	r.Say("base: %s (%s); new: this tree", short, s.base)
	return nil
}

// startOnce starts one build of galleon-file, waits for its ready line and returns the time from
// the exec to that line's timestamp, in whole ms, and its VmHWM then (kB).
func startOnce(ctx context.Context, r *benchrun.Run, pin []string, build string, run int, regDir string) (ms, hwm int64, err error) {
	bin := filepath.Join(r.BinDir, "galleon-file")
	// --dir is --file-dir's name before issue 28: the one a base build of any age knows.
	dirFlag := "--file-dir"
	if build == "base" {
		bin, dirFlag = filepath.Join(r.BinDir, "base", "galleon-file"), "--dir"
	}
	log := filepath.Join(r.LogDir, fmt.Sprintf("galleon-file-%s-%d.log", build, run))
	p, err := r.Start(benchrun.Spec{Name: "galleon-file (" + build + ")", Log: log, Pin: pin, Path: bin,
		Args: []string{dirFlag, regDir, "--listen", r.FreeAddr(), "--http", r.FreeAddr(), "--log-format", "json"}})
	if err != nil {
		return 0, 0, err
	}
	defer p.Stop()
	line, err := p.WaitLine(ctx, readyLine, "its ready line", 120*time.Second, 100*time.Millisecond)
	switch {
	case errors.Is(err, benchrun.ErrExited):
		return 0, 0, fmt.Errorf("galleon-file (%s) exited before it was ready: %s", build, p.Tail())
	case err != nil && ctx.Err() != nil:
		return 0, 0, err
	case err != nil:
		return 0, 0, fmt.Errorf("galleon-file (%s) not ready within 120 s (see %s)", build, log)
	}
	if hwm, err = benchrun.ProcKB(p.Pid(), "VmHWM"); err != nil {
		return 0, 0, fmt.Errorf("cannot read VmHWM of pid %d: %w", p.Pid(), err)
	}
	p.Stop()
	stamp := readyLine.FindStringSubmatch(line)[1]
	ready, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return 0, 0, fmt.Errorf("galleon-file (%s): the ready line's time %q: %w", build, stamp, err)
	}
	return int64(ready.Sub(p.Started).Seconds()*1000 + 0.5), hwm, nil
}

// yamlFiles counts the *.yaml files under dir and says how much disk they take, as du -sh does
// (K, M, G; one decimal below 10, rounded up).
func yamlFiles(dir string) (int, string) {
	var files int
	var bytes int64
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".yaml") {
			files++
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				bytes += st.Blocks * 512
			}
		}
		return nil
	})
	return files, duSize(bytes)
}

// duSize is a size as du -h prints it: 0, 816K, 2.4M, 12M.
func duSize(b int64) string {
	if b == 0 {
		return "0"
	}
	v, unit := float64(b), ""
	for _, u := range []string{"K", "M", "G", "T"} {
		if v <= 1023 && unit != "" {
			break
		}
		v, unit = v/1024, u
	}
	if v < 10 {
		return strconv.FormatFloat(ceilTo(v, 10), 'f', 1, 64) + unit
	}
	return strconv.FormatFloat(ceilTo(v, 1), 'f', 0, 64) + unit
}

// ceilTo rounds v up to a multiple of 1/per.
func ceilTo(v, per float64) float64 {
	n := v * per
	if n != float64(int64(n)) {
		n = float64(int64(n) + 1)
	}
	return n / per
}
