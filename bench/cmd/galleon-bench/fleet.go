package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/bench/internal/benchrun"
)

const fleetHelp = `galleon-bench fleet measures what serving several registries from one galleon-fleet costs
against one galleon-file per registry: REGISTRIES file registries of SERVICES x INSTANCES each,
generated in namespaces of their own (no host in common), served

  (a) by one galleon-fleet whose registry list holds them all, and
  (b) by REGISTRIES galleon-file processes, started together,

one after the other. For each: start → ready (the exec to the "ready" log line; for (b) the last
of the processes), VmHWM at ready and VmRSS after SETTLE (for (b) summed), and the CPU one change
costs: CHANGES moves of one instance of registry 0's target service (an atomic file replace),
each waited for in /debug/status (polled every 5 ms, the same in both), the CPU of every process
over the changes less what the same processes spend in as long idle, per change; and the change →
served time (write to /debug/status's seq moving), p50 and max.

File registries isolate what the fleet itself adds (its intakes, the Merger, one serving
pipeline and one set of servers for all): each adapter's own cost is the same in both setups.

  go run ./cmd/galleon-bench fleet                     3 registries of 10,000 x 10
  REGISTRIES=2 SERVICES=1000 go run ./cmd/galleon-bench fleet

Settings (environment, or the flag of the same name in lower case; a flag wins):
  REGISTRIES  registries, default 3
  SERVICES    services of each registry, default 10000
  INSTANCES   instances per service, default 10
  CHANGES     changes measured, default 30
  GAP         pause after each change is served, default 200ms
  SETTLE      wait after ready before VmRSS and the idle CPU, default 5s

Needs: go; Linux (/proc).
`

type fleetSettings struct {
	registries, services, instances, changes int
	gap, settle                              time.Duration
}

func parseFleet(args []string) (fleetSettings, error) {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	registries := benchrun.Setting(fs, "REGISTRIES", "3", "registries")
	services := benchrun.Setting(fs, "SERVICES", "10000", "services of each registry")
	instances := benchrun.Setting(fs, "INSTANCES", "10", "instances per service, 1 to 250")
	changes := benchrun.Setting(fs, "CHANGES", "30", "changes measured")
	gap := benchrun.Setting(fs, "GAP", "200ms", "pause after each change is served")
	settle := benchrun.Setting(fs, "SETTLE", "5s", "wait after ready before VmRSS and the idle CPU")
	if err := parseFlags(fs, fleetHelp, args, 0); err != nil {
		return fleetSettings{}, err
	}
	var s fleetSettings
	if err := parseWholes(wholeSetting{"REGISTRIES", *registries, &s.registries}, wholeSetting{"SERVICES", *services, &s.services},
		wholeSetting{"CHANGES", *changes, &s.changes}); err != nil {
		return s, err
	}
	var err error
	if s.instances, err = benchrun.Instances("INSTANCES", *instances); err != nil {
		return s, err
	}
	for _, d := range []struct {
		name, value string
		to          *time.Duration
	}{{"GAP", *gap, &s.gap}, {"SETTLE", *settle, &s.settle}} {
		if *d.to, err = time.ParseDuration(d.value); err != nil || *d.to < 0 {
			return s, usageError{fmt.Sprintf("%s=%s: want a duration such as 200ms", d.name, d.value)}
		}
	}
	return s, nil
}

func runFleet(ctx context.Context, args []string) error {
	r := benchrun.New("bench-fleet", os.Stdout, os.Stderr)
	s, err := parseFleet(args)
	if err != nil {
		return settingsError(ctx, r, err)
	}
	return r.Finish(ctx, s.run(ctx, r))
}

// fleetResult is what one setup measured.
type fleetResult struct {
	readyMs      int64
	hwmKB, rssKB int64
	cpuMs        float64 // per change
	p50, max     time.Duration
}

func (s fleetSettings) run(ctx context.Context, r *benchrun.Run) error {
	root, err := benchrun.RepoRoot(ctx)
	if err != nil {
		return err
	}
	if err := benchrun.CheckProc(); err != nil {
		return err
	}
	if err := r.WorkDirs("bench-fleet"); err != nil {
		return err
	}
	r.Step("build and generate")
	if err := r.BuildBinaries(ctx, root, []string{"./cmd/galleon-fleet", "./cmd/galleon-file"}, []string{"./cmd/galleon-load"}); err != nil {
		return err
	}
	dirs := make([]string, s.registries)
	for i := range dirs {
		dirs[i] = filepath.Join(r.Dir, fmt.Sprintf("registry-%d", i))
		r.Bulky = append(r.Bulky, dirs[i])
		log := filepath.Join(r.LogDir, fmt.Sprintf("generate-%d.log", i))
		if err := benchrun.RunTo(ctx, log, filepath.Join(r.BinDir, "galleon-load"), "generate", "--dir", dirs[i],
			"--services", strconv.Itoa(s.services), "--instances", strconv.Itoa(s.instances), "--namespace", fleetNamespace(i)); err != nil {
			return fmt.Errorf("galleon-load generate (see %s)", log)
		}
	}
	r.Say("%d registries of %d services x %d instances; %s, %d CPUs, load average %s", s.registries, s.services, s.instances,
		benchrun.GoVersion(ctx), benchrun.NProc(), benchrun.LoadAvg())

	r.Step("one galleon-fleet")
	fleet, err := s.measure(ctx, r, dirs, true)
	if err != nil {
		return err
	}
	r.Step(fmt.Sprintf("%d galleon-file", s.registries))
	separate, err := s.measure(ctx, r, dirs, false)
	if err != nil {
		return err
	}
	r.Step("results")
	r.Say("%s", benchrun.Row("measure", "one galleon-fleet", fmt.Sprintf("%d galleon-file", s.registries), "fleet / separate"))
	r.Say("|---|---|---|---|")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	for _, row := range [][4]string{
		{"start → ready", fmt.Sprintf("%d ms", fleet.readyMs), fmt.Sprintf("%d ms", separate.readyMs), benchrun.Ratio(float64(separate.readyMs), float64(fleet.readyMs))},
		{"VmHWM at ready", benchrun.MiB(fleet.hwmKB), benchrun.MiB(separate.hwmKB), benchrun.Ratio(float64(separate.hwmKB), float64(fleet.hwmKB))},
		{"VmRSS after " + s.settle.String(), benchrun.MiB(fleet.rssKB), benchrun.MiB(separate.rssKB), benchrun.Ratio(float64(separate.rssKB), float64(fleet.rssKB))},
		{"CPU per change", fmt.Sprintf("%.1f ms", fleet.cpuMs), fmt.Sprintf("%.1f ms", separate.cpuMs), benchrun.Ratio(separate.cpuMs, fleet.cpuMs)},
		{"change → served p50", ms(fleet.p50), ms(separate.p50), benchrun.Ratio(float64(separate.p50), float64(fleet.p50))},
		{"change → served max", ms(fleet.max), ms(separate.max), benchrun.Ratio(float64(separate.max), float64(fleet.max))},
	} {
		r.Say("%s", benchrun.Row(row[:]...))
	}
	r.Say("measured %s", benchrun.Stamp())
	return nil
}

func fleetNamespace(i int) string { return fmt.Sprintf("load-%d", i) }

// fleetServer is one process of a setup and the /debug/status its changes are watched in.
type fleetServer struct {
	proc *benchrun.Proc
	http string
}

// measure starts one setup (a fleet, or one galleon-file per registry), measures it and stops it.
func (s fleetSettings) measure(ctx context.Context, r *benchrun.Run, dirs []string, asFleet bool) (fleetResult, error) {
	var res fleetResult
	servers, err := s.start(r, dirs, asFleet)
	if err != nil {
		return res, err
	}
	defer func() {
		for _, sv := range servers {
			sv.proc.Stop()
		}
	}()
	for _, sv := range servers {
		line, err := sv.proc.WaitLine(ctx, readyLine, "its ready line", 300*time.Second, 100*time.Millisecond)
		if err != nil {
			return res, fmt.Errorf("%s not ready: %v (see %s)", sv.proc.Name, err, sv.proc.Log)
		}
		hwm, err := benchrun.ProcKB(sv.proc.Pid(), "VmHWM")
		if err != nil {
			return res, err
		}
		res.hwmKB += hwm
		ready, err := time.Parse(time.RFC3339Nano, readyLine.FindStringSubmatch(line)[1])
		if err != nil {
			return res, fmt.Errorf("%s: the ready line's time: %w", sv.proc.Name, err)
		}
		res.readyMs = max(res.readyMs, ready.Sub(sv.proc.Started).Milliseconds())
	}
	if err := sleep(ctx, s.settle); err != nil {
		return res, err
	}
	for _, sv := range servers {
		rss, err := benchrun.ProcKB(sv.proc.Pid(), "VmRSS")
		if err != nil {
			return res, err
		}
		res.rssKB += rss
	}
	return res, s.changesCost(ctx, servers, dirs[0], &res)
}

// start runs the setup's processes.
func (s fleetSettings) start(r *benchrun.Run, dirs []string, asFleet bool) ([]fleetServer, error) {
	common := []string{"--log-format", "json", "--removal-hold", "0"}
	if asFleet {
		var list strings.Builder
		list.WriteString("registries:\n")
		for i, d := range dirs {
			fmt.Fprintf(&list, "- {name: reg-%d, kind: file, settings: {file-dir: %q}}\n", i, d)
		}
		path := filepath.Join(r.Dir, "registries.yaml")
		if err := os.WriteFile(path, []byte(list.String()), 0o644); err != nil {
			return nil, err
		}
		http := r.FreeAddr()
		p, err := r.Start(benchrun.Spec{Name: "galleon-fleet", Log: filepath.Join(r.LogDir, "galleon-fleet.log"), Path: filepath.Join(r.BinDir, "galleon-fleet"),
			Args: append([]string{"--registries", path, "--listen", r.FreeAddr(), "--http", http}, common...)})
		if err != nil {
			return nil, err
		}
		return []fleetServer{{p, http}}, nil
	}
	var out []fleetServer
	for i, d := range dirs {
		http := r.FreeAddr()
		p, err := r.Start(benchrun.Spec{Name: fmt.Sprintf("galleon-file %d", i), Log: filepath.Join(r.LogDir, fmt.Sprintf("galleon-file-%d.log", i)),
			Path: filepath.Join(r.BinDir, "galleon-file"), Args: append([]string{"--file-dir", d, "--listen", r.FreeAddr(), "--http", http}, common...)})
		if err != nil {
			return nil, err
		}
		out = append(out, fleetServer{p, http})
	}
	return out, nil
}

// changesCost makes the changes in registry 0 (served by servers[0]) and records their CPU and
// latency.
func (s fleetSettings) changesCost(ctx context.Context, servers []fleetServer, dir string, res *fleetResult) error {
	ticks := func() (int64, error) {
		var sum int64
		for _, sv := range servers {
			t, err := benchrun.CPUTicks(sv.proc.Pid())
			if err != nil {
				return 0, err
			}
			sum += t
		}
		return sum, nil
	}
	hz, err := benchrun.ClockTicks(ctx)
	if err != nil {
		return err
	}
	idleFrom, err := ticks()
	if err != nil {
		return err
	}
	idleStart := time.Now()
	if err := sleep(ctx, s.settle); err != nil {
		return err
	}
	idleTo, err := ticks()
	if err != nil {
		return err
	}
	idlePerSec := float64(idleTo-idleFrom) / time.Since(idleStart).Seconds()

	status := "http://" + servers[0].http + "/debug/status"
	var took []float64
	start := time.Now()
	from, err := ticks()
	if err != nil {
		return err
	}
	for v := 1; v <= s.changes; v++ {
		seq, err := statusSeq(ctx, status)
		if err != nil {
			return err
		}
		wrote := time.Now()
		if err := filegen.WriteTargetIn(dir, fleetNamespace(0), s.instances, v); err != nil {
			return err
		}
		err = benchrun.WaitFor(ctx, 30*time.Second, 5*time.Millisecond, "the change served", func() (bool, error) {
			now, err := statusSeq(ctx, status)
			return now > seq, err
		}, servers[0].proc)
		if err != nil {
			return err
		}
		took = append(took, float64(time.Since(wrote)))
		if err := sleep(ctx, s.gap); err != nil {
			return err
		}
	}
	to, err := ticks()
	if err != nil {
		return err
	}
	busy := float64(to-from) - idlePerSec*time.Since(start).Seconds()
	res.cpuMs = max(0, busy) * 1000 / float64(hz) / float64(s.changes)
	res.p50 = time.Duration(benchrun.Median(took))
	for _, t := range took {
		res.max = max(res.max, time.Duration(t))
	}
	return nil
}

// statusSeq is the snapshot sequence /debug/status reports.
func statusSeq(ctx context.Context, url string) (uint64, error) {
	body, err := benchrun.HTTPGet(ctx, url, 5*time.Second)
	if err != nil {
		return 0, err
	}
	var st struct {
		Seq uint64 `json:"seq"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return 0, fmt.Errorf("%s: %w", url, err)
	}
	return st.Seq, nil
}
