package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/bench/internal/benchrun"
	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
)

const nacosHelp = `galleon-bench nacos measures galleon-nacos against a real Nacos API server (PolarisMesh's
polaris-server, adapters/nacos/nacostest) and prints the results as markdown table rows
(| measure | value |), ready to paste into docs/benchmarks.md: start -> ready, the requests it
took, pushes and requests per change under churn, a change -> every sink for Delta and SotW
against the server's own delay, resident and peak memory, beside what Higress McpBridge's Nacos
watcher would ask of the server for the same registry (computed from its code).

  go run ./cmd/galleon-bench nacos                                  10,000 services x 10 instances
  go run ./cmd/galleon-bench nacos --services 200 --changes 10      a smoke run

Settings (environment, or the flag of the same name in lower case; a flag wins):
  SERVICES  (--services)   services, default 10000
  INSTANCES (--instances)  instances per service, 1-250, default 10
  CHURN     (--churn)      changes a second the generator makes once everything is listed (one
                           instance's metadata each, every change a different service), default 10
  WINDOW    (--window)     the churn window measured for pushes and requests per change,
                           default 30s (Higress's relisting interval)
  SINKS     (--sinks)      sinks of each galleon-load run, default 10
  CHANGES   (--changes)    changes of each galleon-load run, default 50
  GALLEON_ARGS             extra flags for galleon-nacos, e.g. '--debounce-quiet 1ms'

Steps (the figures mean something only on a quiet machine: the load average is printed at the
start and the end):
  1. polaris-server 1.18.1 (nacostest: the tool cache's build, its configuration: caches
     refreshed every second) on free loopback ports in a temporary directory;
  2. galleon-load nacos-generate registers SERVICES x INSTANCES (+ load-target) over the gRPC
     API, one InstanceRequest each (64 in flight), ephemeral instances held by its connection
     (no heartbeats): every service's first instance, then, once Polaris lists the services,
     the others (a registration whose service Polaris's cache lacks reads every service record
     of its store); it waits until the HTTP API lists every instance (registering again what
     Polaris does not list after 15 s, and writing again, through Polaris's own API, a service
     listed without any), then makes CHURN changes a second;
  3. galleon-nacos starts (--nacos-servers, its defaults otherwise): start -> /readyz 200, the
     requests it made by then (galleon_nacos_requests_total), VmRSS and VmHWM;
  4. window W: WINDOW of churn with galleon-nacos running: its pushes (galleon_nacos_pushes_total)
     and requests per change the generator made; Higress's requests for the same registry and
     time, computed;
  5. galleon-load run --nacos-server, Delta then SotW: CHANGES changes of load-target (an
     instance of the run's own, one registration each) timed to every sink, each after a random
     pause of up to 1 s (Polaris's cache refresh), and to the server listing them;
  6. galleon-nacos's VmRSS and VmHWM at the end.
Everything started is stopped on exit, failure or Ctrl-C; the temporary directory is removed (its
logs are kept when something failed, and the failure line says where; not on Ctrl-C).

Needs: go; Linux (/proc); polaris-server is built into the tool cache from the Go module proxy
the first time (~2.5 min).
`

// Higress McpBridge's Nacos 2.x/3.x watcher, read in github.com/alibaba/higress
// registry/nacos/v2/watcher.go: Run calls fetchAllServices every NacosRefreshInterval
// (DefaultRefreshInterval 30 s, at least DefaultRefreshIntervalLimit 10 s), which asks every
// configured group for its service names, DefaultFetchPageSize (50) a page, until a page holds
// fewer than 50 (so N services cost floor(N/50)+1 pages), then subscribes to the services not
// yet watched. Its nacos-sdk-go v2.3.5 client leaves AsyncUpdateService off, so subscribed
// services are not queried again: the pushes carry the changes.
const (
	higressRefresh  = 30 * time.Second
	higressPageSize = 50
)

// higressRequests is what Higress's Nacos 2 watcher asks of the server per refresh for n
// services in one group: floor(n/50)+1 service-list pages.
func higressRequests(n int) int { return n/higressPageSize + 1 }

// nacosSettings are bench-nacos's settings, checked.
type nacosSettings struct {
	registrySettings
	services int
	churn    string // changes a second
	window   time.Duration
}

func parseNacos(args []string) (nacosSettings, error) {
	var s nacosSettings
	var churn, window *string
	err := s.parse("nacos", nacosHelp, args, sizeSetting{"SERVICES", "10000", "services"}, "50", func(fs *flag.FlagSet) {
		churn = fs.String("churn", benchrun.Env("CHURN", "10"), "CHURN: changes a second the generator makes once everything is listed")
		window = fs.String("window", benchrun.Env("WINDOW", "30s"), "WINDOW: the churn window measured for pushes and requests per change (whole seconds)")
	})
	if err != nil {
		return s, err
	}
	s.services = s.size
	if !percentage.MatchString(*churn) {
		return s, fmt.Errorf("CHURN=%s: want changes a second, e.g. 10", *churn)
	}
	s.churn = *churn
	if !wholeSeconds.MatchString(*window) {
		return s, fmt.Errorf("WINDOW=%s: want whole seconds, e.g. 30s", *window)
	}
	secs, _ := strconv.Atoi(strings.TrimSuffix(*window, "s"))
	s.window = time.Duration(secs) * time.Second
	return s, nil
}

func runNacos(ctx context.Context, args []string) error {
	s, err := parseNacos(args)
	return runRegistry(ctx, "bench-nacos", "galleon-nacos", s.galleonArgs, err, func(b *registryBench) registryRun {
		return &nacosBench{nacosSettings: s, registryBench: b}
	})
}

// nacosBench is one run of bench-nacos.
type nacosBench struct {
	nacosSettings
	*registryBench

	server  *nacostest.Server
	gen     *benchrun.Proc // galleon-load nacos-generate
	adapter *adapterProc   // galleon-nacos
}

func (n *nacosBench) settings() (workName, what string) {
	return "bench-nacos", fmt.Sprintf("%d services x %d instances, churn %s changes a second, window %v, %d sinks, %d changes",
		n.services, n.instances, n.churn, n.window, n.sinks, n.changes)
}

func (n *nacosBench) steps() []func(context.Context) error {
	return []func(context.Context) error{n.startServer, n.generate, n.startAdapter, n.churnWindow, n.loadRuns, n.peakMemory}
}

func (n *nacosBench) result() (title, machine string) {
	return fmt.Sprintf("galleon-nacos, %d services x %d instances, %d sinks, %d changes", n.services, n.instances, n.sinks, n.changes),
		fmt.Sprintf("%d CPUs (nproc), %s, polaris-server %s (standalone, bolt store)", n.nproc, n.goVersion, nacostest.Version)
}

// stop stops the adapter, the generator (the server drops its instances), then Polaris.
func (n *nacosBench) stop() {
	if n.adapter != nil {
		n.adapter.Stop()
	}
	n.gen.Stop()
	if n.server != nil {
		_ = n.server.Close()
	}
}

// 1. polaris-server.
func (n *nacosBench) startServer(ctx context.Context) error {
	n.Step("1. polaris-server")
	dir := filepath.Join(n.Dir, "polaris")
	n.Bulky = append(n.Bulky, filepath.Join(dir, "polaris.bolt"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	t0 := time.Now()
	srv, err := nacostest.StartServer(ctx, nacostest.Options{Dir: dir, Detach: serverproc.Detach{Session: true}})
	if err != nil {
		return fmt.Errorf("polaris-server's Nacos API did not answer: %w (see %s)", err, filepath.Join(dir, "log"))
	}
	n.server = srv
	n.Say("polaris-server %s (pid %d) serves the Nacos API at %s (gRPC %s), ready in %s s", nacostest.Version, srv.Pid(), srv.HTTPAddr, srv.GRPCAddr, benchrun.Secs(t0, time.Now()))
	return nil
}

// alive fails when a process the run started has exited.
func (n *nacosBench) alive() error {
	if !n.server.Running() {
		return fmt.Errorf("polaris-server exited (see %s)", n.server.OutPath)
	}
	if n.gen != nil && !n.gen.Alive() {
		return fmt.Errorf("galleon-load nacos-generate exited: %s", n.gen.Tail())
	}
	if n.adapter != nil && !n.adapter.Alive() {
		return fmt.Errorf("galleon-nacos exited: %s", n.adapter.Tail())
	}
	return nil
}

var (
	nacosGenRegistered = regexp.MustCompile(`^registered `)
	nacosGenTook       = regexp.MustCompile(` instances in ([^ ]*) \(`)
	nacosGenRetried    = regexp.MustCompile(` \(([0-9]*) retried, `)
	nacosGenAgain      = regexp.MustCompile(`, ([0-9]*) registered again\)`)
	nacosGenListed     = regexp.MustCompile(` all listed (\S*) after the start`)
	// nacosGenReport is one of nacos-generate's churn reports: "nacos-generate: 35s: N changes
	// (F failed, at most B behind schedule)".
	nacosGenReport = regexp.MustCompile(`^nacos-generate: (\S+): ([0-9]+) changes \(([0-9]+) failed, at most ([0-9]+) behind`)
)

// 2. galleon-load nacos-generate.
func (n *nacosBench) generate(ctx context.Context) error {
	n.Step("2. galleon-load nacos-generate")
	args := []string{"nacos-generate", "--nacos-server", n.server.HTTPAddr, "--nacos-grpc", n.server.GRPCAddr, "--polaris-http", n.server.PolarisHTTPAddr,
		"--services", strconv.Itoa(n.services), "--instances", strconv.Itoa(n.instances), "--churn", n.churn, "--report-interval", "5s"}
	n.Say("galleon-load %s", strings.Join(args, " "))
	var err error
	n.gen, err = n.Start(benchrun.Spec{Name: "galleon-load nacos-generate", Log: filepath.Join(n.LogDir, "nacos-generate.log"), Dir: n.Dir, Path: n.loadBin, Args: args})
	if err != nil {
		return err
	}
	line, err := n.gen.WaitLine(ctx, nacosGenRegistered, "nacos-generate registering every instance and the server listing them", 60*time.Minute, 200*time.Millisecond)
	if err != nil {
		return err
	}
	if err := n.alive(); err != nil {
		return err
	}
	n.Say("%s", line)
	took := submatch(nacosGenTook, line)
	total := (n.services + 1) * n.instances
	rate := "?"
	if d, err := benchrun.DurSeconds(took); err == nil && d > 0 {
		rate = fmt.Sprintf("%.0f", float64(total)/d)
	}
	n.row("registry", fmt.Sprintf("%d services x %d instances + load-target (%d instances) in namespace public, group DEFAULT_GROUP; ephemeral instances held by the generator's gRPC connection",
		n.services, n.instances, total))
	n.row("galleon-load nacos-generate: registered / all listed (GET /nacos/v1/ns/instance/list of every service)",
		fmt.Sprintf("%s / %s after the start (%s instances a second, one InstanceRequest each, 64 in flight; %s retried, %s registered again, not listed after 15 s)",
			or(took), or(submatch(nacosGenListed, line)), rate, or(submatch(nacosGenRetried, line)), or(submatch(nacosGenAgain, line))))
	return nil
}

// nacosCounts are galleon-nacos's counters read from /metrics: pushes by outcome, requests by
// kind (a failed one as "kind result").
type nacosCounts struct{ pushes, requests map[string]float64 }

var (
	labelOutcome = regexp.MustCompile(`outcome="([^"]*)"`)
	labelKind    = regexp.MustCompile(`kind="([^"]*)"`)
	labelResult  = regexp.MustCompile(`result="([^"]*)"`)
)

// readNacosCounts sums galleon_nacos_pushes_total by outcome and galleon_nacos_requests_total
// by kind.
func readNacosCounts(m string) nacosCounts {
	c := nacosCounts{pushes: map[string]float64{}, requests: map[string]float64{}}
	for _, l := range strings.Split(m, "\n") {
		name, rest, ok := strings.Cut(l, "{")
		if !ok {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		switch name {
		case "galleon_nacos_pushes_total":
			c.pushes[submatch(labelOutcome, l)] += v
		case "galleon_nacos_requests_total":
			k := submatch(labelKind, l)
			if r := submatch(labelResult, l); r != "ok" {
				k += " " + r
			}
			c.requests[k] += v
		}
	}
	return c
}

// minus is c - o, key by key.
func (c nacosCounts) minus(o nacosCounts) nacosCounts {
	d := nacosCounts{pushes: map[string]float64{}, requests: map[string]float64{}}
	for k, v := range c.pushes {
		d.pushes[k] = v - o.pushes[k]
	}
	for k, v := range c.requests {
		d.requests[k] = v - o.requests[k]
	}
	return d
}

// counts renders m as "k v, ..." in key order, "none" when empty.
func counts(m map[string]float64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %s", k, benchrun.Thousands(m[k])))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// 3. galleon-nacos: start -> /readyz 200, the requests that took, its memory.
func (n *nacosBench) startAdapter(ctx context.Context) error {
	n.Step("3. start galleon-nacos")
	a, err := n.registryBench.startAdapter(ctx, func(xds, http string) []string {
		return []string{"--nacos-servers", n.server.HTTPAddr, "--listen", xds, "--http", http}
	}, 10*time.Minute, 50*time.Millisecond, n.alive)
	if err != nil {
		return err
	}
	n.adapter = a
	m, err := a.metrics(ctx)
	if err != nil {
		return err
	}
	c := readNacosCounts(m)
	syncSecs := benchrun.MetricSum(m, "galleon_nacos_sync_duration_seconds_sum", "")
	rss, hwm, err := a.memory()
	if err != nil {
		return err
	}
	n.Say("ready: requests %s; sync %.2f s; VmRSS %s, VmHWM %s", counts(c.requests), syncSecs, benchrun.MiB(rss), benchrun.MiB(hwm))
	n.row("galleon-nacos start → /readyz 200", fmt.Sprintf("%s s (galleon_nacos_sync_duration_seconds: %.2f s from the connection's setup to every service listed and subscribed)", a.ready, syncSecs))
	n.row("requests to Nacos by then (galleon_nacos_requests_total)", counts(c.requests))
	n.row("resident memory once ready (VmRSS / VmHWM)", benchrun.MiB(rss)+" / "+benchrun.MiB(hwm))
	return nil
}

// genReportAt is one churn report of nacos-generate: when (seconds since the churn began) and
// the changes made by then.
type genReportAt struct{ secs, changes, failed float64 }

// genReports reads nacos-generate's churn reports from its log.
func genReports(log string) []genReportAt {
	var out []genReportAt
	_ = logLines(log, func(l string) bool {
		m := nacosGenReport.FindStringSubmatch(l)
		if m == nil {
			return true
		}
		t, err := benchrun.DurSeconds(m[1])
		if err != nil {
			return true
		}
		c, _ := strconv.ParseFloat(m[2], 64)
		f, _ := strconv.ParseFloat(m[3], 64)
		out = append(out, genReportAt{t, c, f})
		return true
	})
	return out
}

// 4. window W: pushes and requests per change under churn, and Higress's requests for the
// same registry and time.
func (n *nacosBench) churnWindow(ctx context.Context) error {
	n.Step(fmt.Sprintf("4. window W: %v of churn", n.window))
	if err := sleep(ctx, 6*time.Second); err != nil { // past a report of the generator's, and the start's pushes
		return err
	}
	m, err := n.adapter.metrics(ctx)
	if err != nil {
		return err
	}
	c0, g0 := readNacosCounts(m), genReports(n.gen.Log)
	l0 := benchrun.LoadAvg()
	if err := sleep(ctx, n.window); err != nil {
		return err
	}
	if err := n.alive(); err != nil {
		return err
	}
	if m, err = n.adapter.metrics(ctx); err != nil {
		return err
	}
	d := readNacosCounts(m).minus(c0)
	// The generator reports every 5 s: its changes between the last report before the window
	// and the last one in it, scaled to the window.
	if err := sleep(ctx, 5*time.Second); err != nil {
		return err
	}
	g1 := genReports(n.gen.Log)
	changes := math.NaN()
	if len(g0) > 0 && len(g1) > len(g0) {
		a, b := g0[len(g0)-1], g1[len(g1)-1]
		if b.secs > a.secs {
			changes = (b.changes - a.changes) / (b.secs - a.secs) * n.window.Seconds()
		}
	}
	applied := d.pushes["applied"]
	perChange := "?"
	if changes > 0 {
		perChange = fmt.Sprintf("%.2f", applied/changes)
	}
	n.Say("window W: %.0f changes made (from the generator's reports), pushes %s, requests %s; load %s -> %s", changes, counts(d.pushes), counts(d.requests), l0, benchrun.LoadAvg())
	n.row(fmt.Sprintf("window W (%v of churn at %s changes a second): pushes received, per change", n.window, n.churn),
		fmt.Sprintf("%s per change (%s; %.0f changes made)", perChange, counts(d.pushes), changes))
	n.row(fmt.Sprintf("window W: requests to Nacos (%v)", n.window), fmt.Sprintf("%s; none per change: a change arrives as a push", counts(d.requests)))
	hr := higressRequests(n.services + 1)
	n.row("peer: Higress McpBridge's Nacos 2 watcher (computed from its code, not measured)",
		fmt.Sprintf("floor(N/50)+1 service-list requests per group every 30 s, whatever changes: %d per 30 s at N = %d; changes by push, as here "+
			"(github.com/alibaba/higress registry/nacos/v2/watcher.go, watcher.Run and fetchAllServices; DefaultRefreshInterval 30 s, DefaultFetchPageSize 50)",
			hr, n.services+1))
	return nil
}

var (
	runServed   = regexp.MustCompile(`(?m)^listed by the server -> every sink.* p50 (\S*) .* p99 (\S*) .* max (\S*)$`)
	runPushes   = regexp.MustCompile(`(?m)^nacos pushes over the changes: (.*)$`)
	runRequests = regexp.MustCompile(`(?m)^nacos requests over the changes: (.*)$`)
)

// 5. galleon-load run, Delta then SotW.
func (n *nacosBench) loadRuns(ctx context.Context) error {
	for _, p := range []struct{ proto, label string }{{"delta", "Delta"}, {"sotw", "SotW"}} {
		n.Step("5. galleon-load run --nacos-server, " + p.label)
		out, err := n.galleonLoad(ctx, "run-"+p.proto+".out", "run", "--addr", n.adapter.xds, "--nacos-server", n.server.HTTPAddr, "--nacos-grpc", n.server.GRPCAddr,
			"--sinks", strconv.Itoa(n.sinks), "--protocol", p.proto, "--changes", strconv.Itoa(n.changes), "--interval", "1ms", "--interval-jitter", "1s",
			"--metrics", "http://"+n.adapter.http+"/metrics", "--timeout", "2m")
		if err != nil {
			return err
		}
		r, err := parseLoadRun(out)
		if err != nil {
			return fmt.Errorf("%w (%s)", err, p.label)
		}
		sync := ""
		if r.sync != "" {
			sync = fmt.Sprintf("%s (%s B per sink)", r.sync, r.syncBytes)
		}
		n.row(fmt.Sprintf("initial sync, %d %s sinks", n.sinks, p.label), or(sync))
		n.row(fmt.Sprintf("Nacos change → every %s sink (%d changes, churn %s a second)", p.label, n.changes, n.churn),
			fmt.Sprintf("p50 %s, p99 %s, max %s (%s B per sink per change)", r.p50, r.p99, or(r.max), or(r.bytes)))
		n.row(fmt.Sprintf("Nacos change → listed by polaris-server (GET /nacos/v1/ns/instance/list every 50 ms), %s run", p.label),
			fmt.Sprintf("p50 %s, p99 %s, max %s", or(r.listedP50), or(r.listedP99), or(r.listedMax)))
		served := "?"
		if m := runServed.FindStringSubmatch(out); m != nil {
			served = fmt.Sprintf("p50 %s, p99 %s, max %s", m[1], m[2], m[3])
		}
		n.row(fmt.Sprintf("listed by polaris-server → every %s sink, change by change (the push, galleon-nacos and the sinks; ±50 ms)", p.label), served)
		n.row(fmt.Sprintf("pushes and requests over the %s run's changes (churn included)", p.label),
			fmt.Sprintf("pushes: %s; requests: %s", or(submatch(runPushes, out)), or(submatch(runRequests, out))))
	}
	return nil
}

// 6. memory at the end.
func (n *nacosBench) peakMemory(context.Context) error {
	n.Step("6. memory")
	if err := n.alive(); err != nil {
		return err
	}
	rss, hwm, err := n.adapter.memory()
	if err != nil {
		return err
	}
	n.row(fmt.Sprintf("resident memory after both runs, %d sinks each (VmRSS / VmHWM: the peak)", n.sinks), benchrun.MiB(rss)+" / "+benchrun.MiB(hwm))
	if reps := genReports(n.gen.Log); len(reps) > 0 {
		last := reps[len(reps)-1]
		n.row("nacos-generate's churn at the end", fmt.Sprintf("%.0f changes in %.0f s, %.0f failed", last.changes, last.secs, last.failed))
	}
	if !n.gen.Alive() {
		return errors.New("galleon-load nacos-generate exited: " + n.gen.Tail())
	}
	return nil
}
