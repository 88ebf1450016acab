package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/bench/internal/benchrun"
)

const peerHelp = `galleon-bench peer measures galleon-file against a peer in one run: galleon-peer
(bench/cmd/galleon-peer), which serves the same registry, converted by Galleon's own file adapter
and pipeline to the same resources, from go-control-plane v0.14.0's LinearCache (the full set
re-put with SetResources on every change) and its SotW and Delta ADS servers. The same
galleon-load sinks drive both, one server at a time, and one markdown table gives galleon-file's
figures, the peer's and their ratio, ready to paste into docs/benchmarks.md.

  go run ./cmd/galleon-bench peer                                  10,000 services x 10 instances, 10 sinks, 50 changes
  SERVICES=200 SINKS=2 CHANGES=5 go run ./cmd/galleon-bench peer   a smoke run

Settings (environment, or the flag of the same name in lower case; a flag wins):
  SERVICES   services of the generated file registry, default 10000
  INSTANCES  instances per service, default 10
  SINKS      sinks of each galleon-load run, default 10
  CHANGES    changes of each galleon-load run (one service's file replaced), default 50
  INTERVAL   pause after each change reached every sink, default 20ms
  PROTOCOLS  the sinks' protocols, in order, default "delta sotw"
  DEBOUNCE   the core's debounce flags, the same for both servers, default
             "--debounce-quiet 1ms --debounce-max 10ms" (issue 14's side-by-side run)
  PIN        auto (default): with taskset and 2 or more CPUs, each server runs on CPU 0 and
             galleon-load (the sinks) on CPU 1; 0: no pinning
  SERVER_ENV NAME=VALUE words added to the servers' environment only (not galleon-load's),
             e.g. SERVER_ENV=GOMEMLIMIT=140MiB; default none

For each protocol, then for galleon-file and the peer in turn: the registry is generated again
(so every run starts from the same files), the server starts on free loopback ports, is timed
to /readyz 200, galleon-load run measures it (its raw output is printed), the server's VmRSS
and VmHWM are read from /proc, and it is stopped. The sinks ask galleon-file for
networking.istio.io/v1/ServiceEntry and the peer for type.googleapis.com/istio.mcp.v1alpha1.Resource:
go-control-plane stamps the requested type URL on every resource it sends, and under that one
its resources are the same Any bytes as galleon-file's (galleon-peer's test checks it).
galleon-load checks the last change's result only for a */ServiceEntry type URL, so against the
peer it does not; the peer's test does.

Everything started is stopped on exit, failure or Ctrl-C; the temporary directory is removed
(its logs are kept when something failed, and the failure line says where; not on Ctrl-C).

Needs: go; Linux (/proc); taskset for pinning (optional).
`

const (
	mcpType = "type.googleapis.com/istio.mcp.v1alpha1.Resource"
	seType  = "networking.istio.io/v1/ServiceEntry"
)

// peerSettings are bench-peer's settings, checked.
type peerSettings struct {
	services, instances, sinks, changes int
	interval                            string
	protocols                           []string
	debounceText                        string
	debounce                            []string
	pin                                 string
	serverEnv                           []string
}

func parsePeer(args []string) (peerSettings, error) {
	fs := flag.NewFlagSet("peer", flag.ContinueOnError)
	services := benchrun.Setting(fs, "SERVICES", "10000", "services of the generated file registry")
	instances := benchrun.Setting(fs, "INSTANCES", "10", "instances per service, 1 to 250")
	sinks := benchrun.Setting(fs, "SINKS", "10", "sinks of each galleon-load run")
	changes := benchrun.Setting(fs, "CHANGES", "50", "changes of each galleon-load run")
	interval := benchrun.Setting(fs, "INTERVAL", "20ms", "pause after each change reached every sink")
	protocols := benchrun.Setting(fs, "PROTOCOLS", "delta sotw", "the sinks' protocols, in order")
	debounce := benchrun.Setting(fs, "DEBOUNCE", "--debounce-quiet 1ms --debounce-max 10ms", "the core's debounce flags, the same for both servers")
	pin := benchrun.Setting(fs, "PIN", "auto", "auto (servers on CPU 0, the sinks on CPU 1) or 0")
	serverEnv := benchrun.Setting(fs, "SERVER_ENV", "", "NAME=VALUE words for the servers' environment only")
	if err := parseFlags(fs, peerHelp, args, 0); err != nil {
		return peerSettings{}, err
	}
	s := peerSettings{interval: *interval, protocols: benchrun.Words(*protocols), debounceText: *debounce,
		debounce: benchrun.Words(*debounce), pin: *pin, serverEnv: benchrun.Words(*serverEnv)}
	if err := parseWholes(wholeSetting{"SERVICES", *services, &s.services}); err != nil {
		return s, err
	}
	var err error
	if s.instances, err = benchrun.Instances("INSTANCES", *instances); err != nil {
		return s, err
	}
	if err := parseWholes(wholeSetting{"SINKS", *sinks, &s.sinks}, wholeSetting{"CHANGES", *changes, &s.changes}); err != nil {
		return s, err
	}
	if err := checkProtocols(s.protocols); err != nil {
		return s, err
	}
	return s, benchrun.EnvWords("SERVER_ENV", s.serverEnv)
}

// checkProtocols checks a PROTOCOLS setting: delta, sotw or both.
func checkProtocols(protos []string) error {
	if len(protos) == 0 {
		return errors.New("PROTOCOLS is empty: want delta, sotw or both")
	}
	for _, p := range protos {
		if p != "delta" && p != "sotw" {
			return fmt.Errorf("PROTOCOLS: %s: want delta or sotw", p)
		}
	}
	return nil
}

func runPeer(ctx context.Context, args []string) error {
	r := benchrun.New("bench-peer", os.Stdout, os.Stderr)
	s, err := parsePeer(args)
	if err != nil {
		return settingsError(ctx, r, err)
	}
	b := &peerBench{peerSettings: s, r: r, results: map[string]string{}}
	return r.Finish(ctx, b.run(ctx))
}

// peerBench is one run of bench-peer.
type peerBench struct {
	peerSettings
	r       *benchrun.Run
	pins    benchrun.Pinning
	regDir  string
	gcp     string
	results map[string]string // key: server,protocol,measure
}

func (b *peerBench) run(ctx context.Context) error {
	r := b.r
	if err := benchrun.CheckProc(); err != nil {
		return err
	}
	root, err := benchrun.RepoRoot(ctx)
	if err != nil {
		return err
	}
	start, loadStart := time.Now(), benchrun.LoadAvg()
	commit := benchrun.CommitOf(ctx, root)
	b.pins = benchrun.PinSides(b.pin)
	r.Say("%s: %d services x %d instances, %d sinks, %d changes (interval %s), protocols %s, both servers %s",
		r.Prog, b.services, b.instances, b.sinks, b.changes, b.interval, strings.Join(b.protocols, " "), b.debounceText)
	r.Say("commit %s, %d CPUs, load average %s, %s; %s", commit, b.pins.NProc, loadStart, benchrun.Stamp(), b.pins.Text)
	if err := r.WorkDirs("bench-peer"); err != nil {
		return err
	}
	b.regDir = filepath.Join(r.Dir, "registry")
	r.Bulky = []string{b.regDir}

	r.Step("build galleon-file, galleon-load and galleon-peer (bench/cmd/galleon-peer, go-control-plane v0.14.0)")
	t0 := time.Now()
	if err := r.BuildBinaries(ctx, root, []string{"./cmd/galleon-file"}, []string{"./cmd/galleon-load", "./cmd/galleon-peer"}); err != nil {
		return err
	}
	goVersion := benchrun.GoVersion(ctx)
	b.gcp = benchrun.GoModVersion(ctx, filepath.Join(root, "bench"), "github.com/envoyproxy/go-control-plane")
	r.Say("built in %s s with %s; go-control-plane %s", benchrun.Secs(t0, time.Now()), goVersion, b.gcp)

	for _, proto := range b.protocols {
		for _, name := range []string{"galleon-file", "peer"} {
			if err := b.measure(ctx, name, proto); err != nil {
				return err
			}
		}
	}

	loadEnd, wall := benchrun.LoadAvg(), benchrun.Secs(start, time.Now())
	fmt.Fprintf(r.Out, "\n== results: galleon-file and a go-control-plane %s peer, %d services x %d instances, %d sinks, %d changes\n\n",
		b.gcp, b.services, b.instances, b.sinks, b.changes)
	fmt.Fprintf(r.Out, "commit %s, %s, %d CPUs, %s; load average at start %s, at end %s; %s s\n\n",
		commit, goVersion, b.pins.NProc, benchrun.Stamp(), loadStart, loadEnd, wall)
	fmt.Fprint(r.Out, b.table())
	fmt.Fprintf(r.Out, "\nBoth servers: %s. galleon-file serves %s; the peer %s (go-control-plane stamps the\n", b.debounceText, seType, mcpType)
	fmt.Fprintf(r.Out, "requested type URL on each resource; under this one they are galleon-file's bytes). %s.\n", b.pins.Text)
	return nil
}

// server is a started server under measure.
type server struct {
	proc      *benchrun.Proc
	xds, http string  // its addresses
	ready     float64 // seconds from its exec to /readyz 200
}

var (
	addrInUse = regexp.MustCompile(`address already in use`)
	// serverError is the line of a server's log that says why it exited.
	serverError = regexp.MustCompile(`(?i)level=ERROR|galleon-peer:`)
	loadError   = regexp.MustCompile(`^galleon-load:`)
)

// startServer generates the registry afresh, starts name on free ports (three tries when a port
// was taken meanwhile) and waits for /readyz 200.
func (b *peerBench) startServer(ctx context.Context, name, proto string) (server, error) {
	r := b.r
	genLog := filepath.Join(r.LogDir, "generate.log")
	if err := benchrun.RunTo(ctx, genLog, filepath.Join(r.BinDir, "galleon-load"), "generate", "--dir", b.regDir,
		"--services", strconv.Itoa(b.services), "--instances", strconv.Itoa(b.instances)); err != nil {
		return server{}, fmt.Errorf("galleon-load generate (see %s)", genLog)
	}
	log := filepath.Join(r.LogDir, name+"-"+proto+".log")
	for attempt := 1; ; attempt++ {
		xds, httpAddr := r.FreeAddr(), r.FreeAddr()
		args := append([]string{"--listen", xds, "--http", httpAddr}, b.debounce...)
		bin := filepath.Join(r.BinDir, "galleon-file")
		if name == "peer" {
			bin = filepath.Join(r.BinDir, "galleon-peer")
			args = append(args, "--dir", b.regDir, "--type", mcpType)
		} else {
			args = append(args, "--file-dir", b.regDir)
		}
		r.Say("%s%s %s", benchrun.Prefix(b.pins.Server), filepath.Base(bin), strings.Join(args, " "))
		p, err := r.Start(benchrun.Spec{Name: name, Log: log, Env: b.serverEnv, Pin: b.pins.Server, Path: bin, Args: args})
		if err != nil {
			return server{}, err
		}
		var readyAt time.Time
		err = benchrun.WaitFor(ctx, 600*time.Second, 50*time.Millisecond, name+" ready (/readyz 200)", func() (bool, error) {
			if benchrun.HTTPOK(ctx, "http://"+httpAddr+"/readyz", 2*time.Second) {
				readyAt = time.Now()
				return true, nil
			}
			return false, nil
		}, p)
		switch {
		case err == nil:
			s := server{proc: p, xds: xds, http: httpAddr, ready: readyAt.Sub(p.Started).Seconds()}
			r.Say("ready (/readyz 200) %.2f s after its start (pid %d, xDS %s, http %s)", s.ready, p.Pid(), xds, httpAddr)
			return s, nil
		case !errors.Is(err, benchrun.ErrExited):
			return server{}, err
		case attempt < 3 && p.LogLine(addrInUse) != "":
			continue
		}
		return server{}, fmt.Errorf("%s (pid %d) exited before it was ready: %s", name, p.Pid(), p.Why(serverError))
	}
}

// reputTotals is the peer's galleon_peer_reput_seconds sum and count, 0 and 0 when it has none.
func reputTotals(ctx context.Context, httpAddr string) (sum, n float64) {
	body, err := benchrun.HTTPGet(ctx, "http://"+httpAddr+"/metrics", 5*time.Second)
	if err != nil {
		return 0, 0
	}
	text := string(body)
	return benchrun.MetricSum(text, "galleon_peer_reput_seconds_sum", ""), benchrun.MetricSum(text, "galleon_peer_reput_seconds_count", "")
}

// measure is one server's run under one protocol.
func (b *peerBench) measure(ctx context.Context, name, proto string) error {
	r := b.r
	typ := seType
	if name == "peer" {
		typ = mcpType
	}
	r.Step(name + ", " + proto)
	srv, err := b.startServer(ctx, name, proto)
	if err != nil {
		return err
	}
	p, httpAddr := srv.proc, srv.http
	set := func(measure, v string) { b.results[name+","+proto+","+measure] = v }
	set("ready", fmt.Sprintf("%.2f", srv.ready))
	rss, err := benchrun.ProcKB(p.Pid(), "VmRSS")
	if err != nil {
		return err
	}
	set("rss_ready", strconv.FormatInt(rss, 10))
	var reputSum0, reputN0 float64
	if name == "peer" {
		reputSum0, reputN0 = reputTotals(ctx, httpAddr)
	}
	args := []string{"--addr", srv.xds, "--dir", b.regDir, "--instances", strconv.Itoa(b.instances), "--type", typ,
		"--sinks", strconv.Itoa(b.sinks), "--protocol", proto, "--changes", strconv.Itoa(b.changes),
		"--interval", b.interval, "--metrics", "http://" + httpAddr + "/metrics"}
	r.Say("%sgalleon-load run %s", benchrun.Prefix(b.pins.Load), strings.Join(args, " "))
	outFile := filepath.Join(r.LogDir, "run-"+name+"-"+proto+".out")
	argv := append(append(append([]string{}, b.pins.Load...), filepath.Join(r.BinDir, "galleon-load"), "run"), args...)
	if err := benchrun.RunTo(ctx, outFile, argv...); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("galleon-load run against %s (%s): %s", name, proto, benchrun.FirstOrLast(outFile, loadError))
	}
	raw, err := os.ReadFile(outFile)
	if err != nil {
		return err
	}
	out := string(raw)
	fmt.Fprint(r.Out, indent(out, "    "))
	hwm, err := benchrun.ProcKB(p.Pid(), "VmHWM")
	if err != nil {
		return err
	}
	set("hwm", strconv.FormatInt(hwm, 10))
	run, err := parseRunOutput(out)
	if err != nil {
		return fmt.Errorf("galleon-load run (%s, %s) %w", name, proto, err)
	}
	for k, v := range run {
		set(k, v)
	}
	if name == "peer" {
		// The peer's own figure: its full re-puts (SetResources on the LinearCache) during the
		// run, mean; the first listing's, before the run, is left out.
		sum, n := reputTotals(ctx, httpAddr)
		if n > reputN0 {
			set("reput", fmt.Sprintf("%.2f ms (%d re-puts)", (sum-reputSum0)/(n-reputN0)*1000, int(n-reputN0)))
		}
	}
	p.Stop()
	return nil
}

var (
	syncLine    = regexp.MustCompile(`(?m)^initial sync of all sinks: (\S+) .*$`)
	syncBytes   = regexp.MustCompile(`\((\d+) bytes per sink\)$`)
	changeLine  = regexp.MustCompile(`(?m)^registry change -> every sink.*$`)
	p50Re       = regexp.MustCompile(`.* p50 ([^ ]*) `)
	p99Re       = regexp.MustCompile(`.* p99 ([^ ]*) `)
	maxRe       = regexp.MustCompile(`.* max ([^ ]*) `)
	changeBytes = regexp.MustCompile(`\((\d+) bytes per sink per change\)$`)
	updatesRe   = regexp.MustCompile(`(?m)^updates per sink: (\d+) for `)
	rssMetricRe = regexp.MustCompile(`(?m)^source resident memory: ([0-9.]+) MiB$`)
)

// parseRunOutput reads galleon-load run's report: the initial sync (ms and bytes per sink), the
// change -> every sink percentiles (ms), bytes per sink per change, updates per sink and the
// source's resident memory (MiB). A figure the report lacks is left out; the two lines every
// report has are errors when missing ("printed no ... line").
func parseRunOutput(out string) (map[string]string, error) {
	res := map[string]string{}
	line := syncLine.FindStringSubmatch(out)
	if line == nil {
		return nil, errors.New("printed no initial sync line")
	}
	var err error
	if res["sync"], err = benchrun.Ms(line[1]); err != nil {
		return nil, fmt.Errorf("initial sync: %w", err)
	}
	if m := syncBytes.FindStringSubmatch(line[0]); m != nil {
		res["sync_bytes"] = m[1]
	}
	cl := changeLine.FindString(out)
	if cl == "" {
		return nil, errors.New(`printed no "registry change -> every sink" line`)
	}
	for k, re := range map[string]*regexp.Regexp{"p50": p50Re, "p99": p99Re, "max": maxRe} {
		if m := re.FindStringSubmatch(cl); m != nil {
			if res[k], err = benchrun.Ms(m[1]); err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	if m := changeBytes.FindStringSubmatch(cl); m != nil {
		res["change_bytes"] = m[1]
	}
	if m := updatesRe.FindStringSubmatch(out); m != nil {
		res["updates"] = m[1]
	}
	if m := rssMetricRe.FindStringSubmatch(out); m != nil {
		res["rss_metric"] = m[1]
	}
	return res, nil
}

// table is the results' markdown table.
func (b *peerBench) table() string {
	var t strings.Builder
	fmt.Fprintf(&t, "| measure | galleon-file | peer: go-control-plane %s LinearCache | peer / galleon-file |\n|---|---|---|---|\n", b.gcp)
	const perMiB = 1.0 / 1024 // kB to MiB
	for _, p := range b.protocols {
		label := map[string]string{"delta": "Delta", "sotw": "SotW"}[p]
		row := func(what, measure, unit string, scale float64) {
			a, c := b.results["galleon-file,"+p+","+measure], b.results["peer,"+p+","+measure]
			t.WriteString(compareRow(label+": "+what, a, c, unit, scale) + "\n")
		}
		row("start → /readyz 200", "ready", "s", 1)
		row(fmt.Sprintf("initial sync, %d sinks", b.sinks), "sync", "ms", 1)
		row("initial sync, bytes per sink", "sync_bytes", "B", 1)
		row(fmt.Sprintf("file saved → every sink, p50 (%d changes)", b.changes), "p50", "ms", 1)
		row("file saved → every sink, p99", "p99", "ms", 1)
		row("file saved → every sink, max", "max", "ms", 1)
		row("bytes per sink per change", "change_bytes", "B", 1)
		row("updates per sink", "updates", "", 1)
		row("resident memory once ready (VmRSS)", "rss_ready", "MiB", perMiB)
		row("resident memory after the run (process_resident_memory_bytes)", "rss_metric", "MiB", 1)
		row("peak resident memory (VmHWM after the run)", "hwm", "MiB", perMiB)
		reput := b.results["peer,"+p+",reput"]
		if reput == "" {
			reput = "?"
		}
		fmt.Fprintf(&t, "| %s: the peer's full re-put per change (SetResources), mean | | %s | |\n", label, reput)
	}
	return t.String()
}

// compareRow is a row of both servers' figures a and b (strings as measured; "" unknown) in unit,
// scaled by scale (kB to MiB: 1/1024, then one decimal), and their ratio b / a.
func compareRow(label, a, b, unit string, scale float64) string {
	if scale != 1 {
		a, b = scaled(a, scale), scaled(b, scale)
	}
	return benchrun.Row(label, cell(a, unit), cell(b, unit), ratio(a, b))
}

func scaled(v string, scale float64) string {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return v
	}
	return fmt.Sprintf("%.1f", f*scale)
}

// cell is "VALUE UNIT", "?" when the value is unknown.
func cell(v, unit string) string {
	switch {
	case v == "":
		return "?"
	case unit == "":
		return v
	}
	return v + " " + unit
}

// ratio is b / a with two decimals; "?" when either is unknown or a is 0.
func ratio(a, b string) string {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	if err1 != nil || err2 != nil {
		return "?"
	}
	return benchrun.Ratio(x, y)
}

// indent prefixes every line of text with pre.
func indent(text, pre string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(text, "\n") {
		if l != "" {
			b.WriteString(pre + l)
		}
	}
	if !strings.HasSuffix(text, "\n") && text != "" {
		b.WriteString("\n")
	}
	return b.String()
}
