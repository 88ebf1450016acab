package main

// What the eureka and zookeeper commands share (once scripts/bench-eureka.sh and
// scripts/bench-zookeeper.sh, two near-copies): the run's header and results table, the builds,
// starting the adapter under test on free ports until /readyz answers, its galleon-load runs and
// the figures read from their output, and galleon-zookeeper's and galleon-eureka's slog lines.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/bench/internal/benchrun"
)

// registrySettings are the settings both registry benchmarks take, as flags defaulting to their
// environment variables (a flag wins); GALLEON_ARGS is read from the environment only. size is
// the registry's size: APPS or SERVICES.
type registrySettings struct {
	size, instances, sinks, changes int
	galleonArgs                     string
}

// sizeSetting is the setting of the registry's size: its environment variable, default and
// what it counts.
type sizeSetting struct{ env, def, usage string }

// parse declares the shared settings and, with more, the command's own on a flag set named
// name (CHANGES defaulting to changes), parses args (-h prints help) and checks the shared ones.
func (s *registrySettings) parse(name, help string, args []string, size sizeSetting, changes string, more func(fs *flag.FlagSet)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	sizeFlag := fs.String(strings.ToLower(size.env), benchrun.Env(size.env, size.def), size.env+": "+size.usage)
	instances := fs.String("instances", benchrun.Env("INSTANCES", "10"), "INSTANCES: instances per application or service, 1 to 250")
	sinks := fs.String("sinks", benchrun.Env("SINKS", "10"), "SINKS: sinks of each galleon-load run")
	changesFlag := fs.String("changes", benchrun.Env("CHANGES", changes), "CHANGES: changes of each galleon-load run")
	more(fs)
	if err := parseFlags(fs, help, args, 0); err != nil {
		return err
	}
	s.galleonArgs = os.Getenv("GALLEON_ARGS")
	var err error
	if s.size, err = benchrun.Whole(size.env, *sizeFlag); err != nil {
		return err
	}
	if s.instances, err = benchrun.Instances("INSTANCES", *instances); err != nil {
		return err
	}
	if s.sinks, err = benchrun.Whole("SINKS", *sinks); err != nil {
		return err
	}
	s.changes, err = benchrun.Whole("CHANGES", *changesFlag)
	return err
}

// registryRun is a registry benchmark's own part of a run.
type registryRun interface {
	// settings are the name of the run's work directory and its settings in a line.
	settings() (workName, what string)
	// steps measure, in order, once the binaries are built; a step adds its rows.
	steps() []func(context.Context) error
	// result is the results table's title and machine row.
	result() (title, machine string)
	// stop stops the registry server and what else the steps started, failed or not.
	stop()
}

// runRegistry runs a registry benchmark whose settings parsed with settingsErr: newRun makes its
// own part on the shared run; the report is printed before everything is stopped, so that the
// wall time does not count the stops.
func runRegistry(ctx context.Context, prog, adapter, galleonArgs string, settingsErr error, newRun func(*registryBench) registryRun) error {
	if settingsErr != nil {
		return settingsError(ctx, benchrun.New(prog, os.Stdout, os.Stderr), settingsErr)
	}
	b, err := newRegistryBench(prog, adapter, galleonArgs)
	if err != nil {
		return settingsError(ctx, benchrun.New(prog, os.Stdout, os.Stderr), err)
	}
	r := newRun(b)
	err = b.runSteps(ctx, r)
	r.stop()
	return b.Finish(ctx, err)
}

// runSteps builds the binaries, runs r's steps and prints the report.
func (b *registryBench) runSteps(ctx context.Context, r registryRun) error {
	workName, what := r.settings()
	if err := b.begin(ctx, workName, what); err != nil {
		return err
	}
	for _, step := range r.steps() {
		if err := step(ctx); err != nil {
			return err
		}
	}
	b.report(r.result())
	return nil
}

// registryBench is one run of a registry benchmark: a real registry server, the adapter that
// reads it (galleon-eureka, galleon-zookeeper) and galleon-load measuring what its sinks get.
type registryBench struct {
	*benchrun.Run
	adapter   string   // the adapter's command: "galleon-eureka"
	extraArgs []string // GALLEON_ARGS: more flags for the adapter

	started   time.Time
	loadStart string
	commit    string
	goVersion string
	nproc     int
	rows      benchrun.Rows

	adapterBin, loadBin string
}

// newRegistryBench checks what every registry benchmark needs and returns its run, before
// anything is started.
func newRegistryBench(prog, adapter, galleonArgs string) (*registryBench, error) {
	if err := benchrun.CheckProc(); err != nil {
		return nil, err
	}
	if err := benchrun.NeedTools("go"); err != nil {
		return nil, err
	}
	return &registryBench{
		Run:       benchrun.New(prog, os.Stdout, os.Stderr),
		adapter:   adapter,
		extraArgs: benchrun.Words(galleonArgs),
		started:   time.Now(),
		loadStart: benchrun.LoadAvg(),
		nproc:     benchrun.NProc(),
	}, nil
}

// begin prints the run's settings (what) and machine, makes its work directory and builds the
// adapter and galleon-load into it.
func (b *registryBench) begin(ctx context.Context, workName, what string) error {
	repo, err := benchrun.RepoRoot(ctx)
	if err != nil {
		return err
	}
	b.commit = benchrun.CommitOf(ctx, repo)
	if len(b.extraArgs) > 0 {
		what += ", " + b.adapter + " " + strings.Join(b.extraArgs, " ")
	}
	b.Say("%s: %s", b.Prog, what)
	b.Say("commit %s, %d CPUs, load average %s, %s", b.commit, b.nproc, b.loadStart, benchrun.Stamp())
	if err := b.WorkDirs(workName); err != nil {
		return err
	}
	b.Step("build " + b.adapter + " and galleon-load")
	t0 := time.Now()
	log := filepath.Join(b.LogDir, "build.log")
	if err := benchrun.GoBuild(ctx, repo, log, b.BinDir+"/", "./cmd/"+b.adapter); err != nil {
		return err
	}
	if err := benchrun.GoBuild(ctx, filepath.Join(repo, "bench"), log, b.BinDir+"/", "./cmd/galleon-load"); err != nil {
		return err
	}
	b.adapterBin = filepath.Join(b.BinDir, b.adapter)
	b.loadBin = filepath.Join(b.BinDir, "galleon-load")
	b.goVersion = benchrun.GoVersion(ctx)
	b.Say("built in %s s with %s", benchrun.Secs(t0, time.Now()), b.goVersion)
	return nil
}

// row adds a result row.
func (b *registryBench) row(measure, value string) { b.rows.Add(measure, value) }

// report prints the results: the title, the commit and machine rows, the run's rows and the
// load average and wall time at the end.
func (b *registryBench) report(title, machine string) {
	if len(b.extraArgs) > 0 {
		machine += ", " + b.adapter + " " + strings.Join(b.extraArgs, " ")
	}
	b.Say("\n== results: %s\n", title)
	b.Say("| measure | value |\n|---|---|")
	b.Say("%s", benchrun.Row("commit", b.commit))
	b.Say("%s", benchrun.Row("machine", machine))
	b.Say("%s", benchrun.Row("load average (1, 5, 15 min) at start", b.loadStart))
	for _, r := range b.rows {
		b.Say("%s", r)
	}
	b.Say("%s", benchrun.Row("load average (1, 5, 15 min) at end (the 1-min figure counts this run's own processes)", benchrun.LoadAvg()))
	b.Say("%s", benchrun.Row("wall time of this script", benchrun.Secs(b.started, time.Now())+" s"))
}

// adapterProc is the running adapter under test.
type adapterProc struct {
	*benchrun.Proc
	xds, http string // its gRPC and HTTP addresses
	ready     string // start → /readyz 200, seconds
}

// errorLine is the line of an adapter's log that says why it exited.
var errorLine = regexp.MustCompile(`level=ERROR`)

// startAdapter starts the adapter with args(xds, http) plus GALLEON_ARGS on free ports (three
// tries when a port was taken meanwhile) and waits up to timeout, checking every `every`, for
// its /readyz to answer 200. alive says whether the registry server still runs.
func (b *registryBench) startAdapter(ctx context.Context, args func(xds, http string) []string, timeout, every time.Duration, alive func() error) (*adapterProc, error) {
	log := filepath.Join(b.LogDir, b.adapter+".log")
	for attempt := 1; ; attempt++ {
		a := &adapterProc{xds: b.FreeAddr(), http: b.FreeAddr()}
		argv := append(args(a.xds, a.http), b.extraArgs...)
		b.Say("%s %s", b.adapter, strings.Join(argv, " "))
		p, err := b.Start(benchrun.Spec{Name: b.adapter, Log: log, Path: b.adapterBin, Args: argv})
		if err != nil {
			return nil, err
		}
		a.Proc = p
		what := b.adapter + " ready (/readyz 200)"
		err = benchrun.WaitFor(ctx, timeout, every, what, func() (bool, error) {
			return benchrun.HTTPOK(ctx, "http://"+a.http+"/readyz", 2*time.Second), alive()
		}, p)
		if err == nil {
			a.ready = benchrun.Secs(p.Started, time.Now())
			if err := a.checkComm(); err != nil {
				return nil, err
			}
			b.Say("ready (/readyz 200) %s s after its start (pid %d, xDS %s, http %s)", a.ready, p.Pid(), a.xds, a.http)
			return a, nil
		}
		if !errors.Is(err, benchrun.ErrExited) {
			return nil, err
		}
		if attempt == 3 || !fileHas(log, "address already in use") {
			return nil, fmt.Errorf("%s (pid %d) exited before it was ready: %s", b.adapter, p.Pid(), p.Why(errorLine))
		}
	}
}

// checkComm makes sure the pid whose /proc files are read is the adapter's.
func (a *adapterProc) checkComm() error {
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", a.Pid()))
	name := strings.TrimSpace(string(comm))
	if want := a.Name[:min(len(a.Name), 15)]; !strings.HasPrefix(name, want) {
		return fmt.Errorf("pid %d is not %s (/proc/%d/comm: %s)", a.Pid(), a.Name, a.Pid(), name)
	}
	return nil
}

// memory is the adapter's VmRSS and VmHWM in kB.
func (a *adapterProc) memory() (rss, hwm int64, err error) {
	if rss, err = benchrun.ProcKB(a.Pid(), "VmRSS"); err != nil {
		return 0, 0, err
	}
	hwm, err = benchrun.ProcKB(a.Pid(), "VmHWM")
	return rss, hwm, err
}

// metrics is the adapter's /metrics text.
func (a *adapterProc) metrics(ctx context.Context) (string, error) {
	body, err := benchrun.HTTPGet(ctx, "http://"+a.http+"/metrics", 10*time.Second)
	if err != nil {
		return "", fmt.Errorf("%s's /metrics does not answer: %w", a.Name, err)
	}
	return string(body), nil
}

// loadFailure is galleon-load's own line saying why it failed.
var loadFailure = regexp.MustCompile(`(?m)^galleon-load:.*$`)

// galleonLoad runs galleon-load with args, its output in LogDir/logName, printed indented once
// it is done; it returns the output.
func (b *registryBench) galleonLoad(ctx context.Context, logName string, args ...string) (string, error) {
	b.Say("galleon-load %s", strings.Join(args, " "))
	log := filepath.Join(b.LogDir, logName)
	out, err := exec.CommandContext(ctx, b.loadBin, args...).CombinedOutput()
	if werr := os.WriteFile(log, out, 0o644); werr != nil {
		return "", werr
	}
	text := string(out)
	if err != nil {
		why := loadFailure.FindString(text)
		if why == "" {
			why = lastLine(text)
		}
		return "", fmt.Errorf("galleon-load %s: %s", args[0], why)
	}
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		b.Say("    %s", l)
	}
	return text, nil
}

// loadRun is what `galleon-load run` printed: durations as it wrote them, "" when it did not.
type loadRun struct {
	sync, syncBytes      string // initial sync of all sinks, its bytes per sink
	p50, p99, max, bytes string // registry change -> every sink
	listedP50, listedP99 string // registry change -> listed by the server (Eureka)
	listedMax            string
	updates, zkRequests  string // updates per sink; zookeeper requests per change
}

var (
	runSync      = regexp.MustCompile(`(?m)^initial sync of all sinks: (\S+) \(([0-9]+) bytes per sink\)$`)
	runEvery     = regexp.MustCompile(`(?m)^registry change -> every sink.* p50 (\S*) .* p99 (\S*) .* max (\S*) .*$`)
	runBytes     = regexp.MustCompile(`(?m)^registry change -> every sink.*\(([0-9]+) bytes per sink per change\)$`)
	runListed    = regexp.MustCompile(`(?m)^registry change -> listed by the server.* p50 (\S*) .* p99 (\S*) .* max (\S*)$`)
	runUpdates   = regexp.MustCompile(`(?m)^updates per sink: (.*)$`)
	runZKRequest = regexp.MustCompile(`(?m)^zookeeper requests per change: (.*)$`)
)

// parseLoadRun reads galleon-load run's output; it fails without the change -> every sink line.
func parseLoadRun(out string) (loadRun, error) {
	var r loadRun
	if m := runSync.FindStringSubmatch(out); m != nil {
		r.sync, r.syncBytes = m[1], m[2]
	}
	m := runEvery.FindStringSubmatch(out)
	if m == nil || m[1] == "" || m[2] == "" {
		return r, errors.New(`galleon-load run printed no "registry change -> every sink ... p50 ... p99" line`)
	}
	r.p50, r.p99, r.max = m[1], m[2], m[3]
	r.bytes = submatch(runBytes, out)
	if m := runListed.FindStringSubmatch(out); m != nil {
		r.listedP50, r.listedP99, r.listedMax = m[1], m[2], m[3]
	}
	r.updates = submatch(runUpdates, out)
	r.zkRequests = submatch(runZKRequest, out)
	return r, nil
}

// or is v, or "?" when it is empty (the scripts' ${v:-?}).
func or(v string) string {
	if v == "" {
		return "?"
	}
	return v
}

// durSecs is a Go duration in seconds with three decimals (bench-lib.sh's dur_s), "?" when it is
// not one.
func durSecs(d string) string {
	s, err := benchrun.DurSeconds(d)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.3f", s)
}

// logField is the value of key=value in an slog text line (the last " key=" in it), "" when
// there is none.
func logField(line, key string) string {
	i := strings.LastIndex(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// logTime is an slog text line's time=.
func logTime(line string) (time.Time, error) {
	ts, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, errors.New("no time= at the start")
	}
	ts, _, _ = strings.Cut(ts, " ")
	return time.Parse(time.RFC3339Nano, ts)
}

// logLines calls each with every line of the file at path, stopping when it returns false.
func logLines(path string, each func(line string) bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if !each(sc.Text()) {
			break
		}
	}
	return sc.Err()
}

// countLines is how many lines of the file at path contain s.
func countLines(path, s string) int {
	n := 0
	_ = logLines(path, func(l string) bool {
		if strings.Contains(l, s) {
			n++
		}
		return true
	})
	return n
}

func fileHas(path, s string) bool { return countLines(path, s) > 0 }

func submatch(re *regexp.Regexp, s string) string {
	if m := re.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// sleep waits d, or until ctx is cancelled.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
