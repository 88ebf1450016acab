package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
	"github.com/galleon-mesh/galleon/bench/internal/benchrun"
	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
)

const eurekaHelp = `galleon-bench eureka measures galleon-eureka's polling against a real Eureka API server
(PolarisMesh's polaris-server, adapters/eureka/eurekatest) and prints the results as markdown
table rows (| measure | value |), ready to paste into docs/benchmarks.md: bytes per delta poll
against a full one, a registry change -> every sink against the poll interval, the server's CPU
per poll while galleon-eureka polls deltas against while a plain full poller polls, and
galleon-eureka's memory.

  go run ./cmd/galleon-bench eureka                         2,000 applications x 10 instances, 1% churn per 5 s poll
  POLL=10s go run ./cmd/galleon-bench eureka                the same at the adapter's default interval
  go run ./cmd/galleon-bench eureka --apps 500 --polls 12 --changes 20

Settings (environment, or the flag of the same name in lower case; a flag wins):
  APPS      (--apps)           applications, default 2000
  INSTANCES (--instances)      instances per application, 1-250, default 10
  POLL      (--poll)           galleon-eureka's --eureka-poll-interval, the churn's period and the full
                               poller's interval, default 5s (whole seconds)
  CHURN     (--churn)          percent of the instances changed per POLL, default 1
  POLLS     (--polls)          polls in each CPU window, default 24
  SINKS     (--sinks)          sinks of the timed run, default 10
  CHANGES   (--changes)        timed changes, default 40
  PROTOCOL  (--protocol)       the timed run's sinks: delta or sotw, default delta
  LEASE     (--lease)          the instances' lease (galleon-load eureka-generate --lease-duration),
                               default 180s; they are renewed every 30 s whatever it is (below)
  SERVER_CPUS (--server-cpus)  CPUs polaris-server runs on alone (taskset -c form: 1, 0,2-3), the
                               rest of the run on the others; default: no pinning. On a 2-core
                               machine SERVER_CPUS=1 gives the server a core of its own
  GALLEON_ARGS                 extra flags for galleon-eureka

Steps (the figures mean something only on a quiet machine: the load average and how busy the
whole machine was are printed for each window):
  1. polaris-server 1.18.1 (eurekatest: the tool cache's build, its configuration) on free
     loopback ports in a temporary directory: caches rebuilt every second, delta window
     (deltaExpireInterval) 60 s;
  2. galleon-load eureka-generate registers APPS x INSTANCES (+ LOAD-TARGET; one instance of each
     application first, then the others) and keeps running: every instance renewed 2 s after its
     registration (Polaris marks an instance with no renewal on record unhealthy at its first
     check, within 30 s), then every 30 s; CHURN% of them registered again with a new metadata
     value per POLL, spread evenly (one MODIFIED entry of /apps/delta each); it reports every POLL;
  3. window B1, once the churn has filled a delta window: POLLS x POLL with no poller;
  4. galleon-eureka starts (--eureka-poll-interval POLL, --eureka-delta-window 60s, --log-level debug):
     start -> /readyz 200, its first full fetch;
  5. window A: POLLS polls of galleon-eureka, from its metrics (wire and decoded bytes, requests,
     fetch time) and /proc (its VmRSS and VmHWM);
  6. galleon-load run --eureka-url: CHANGES changes of LOAD-TARGET (one registration each) timed
     to every sink, each after a random pause of up to POLL so that changes fall at every point
     of the poll cycle, and to the server listing them (GET /apps/LOAD-TARGET every 50 ms);
  7. galleon-eureka stopped; window C, a full poller: GET /apps with Accept: application/json and
     Accept-Encoding: gzip every POLL, a new connection each; window B2, no poller again.
In every window: the server's, the generator's and galleon-eureka's utime+stime (/proc/<pid>/stat),
how busy the machine was (/proc/stat), the churn the generator made and how late its renewals
were. The server's CPU per poll is its CPU time over a window divided by the polls; "less the
no-poller rate" takes off what it spent at B1's and B2's rate over the same time: what the polls
themselves cost it.

Leases: Polaris marks an instance unhealthy 3 x TTL after the last renewal it processed, TTL
being min(durationInSecs/3, renewalIntervalInSecs) (a TTL over 60 s becomes 5 s), and its
standalone (bolt) store then reads every instance for each such change, which slows it further.
A lease of 180 s (TTL 60 s, the most Polaris takes) gives it the most slack against its own
stalls (on a 2-core machine, shared, its 1 s listing rebuild took up to 7 s while 20,000
instances registered); renewals still go every 30 s, as a Spring Cloud client's.

Everything started is stopped on exit, failure or Ctrl-C; the temporary directory is removed (its
logs are kept when something failed, and the failure line says where; not on Ctrl-C).

Needs: go, getconf; Linux (/proc); polaris-server is built into the tool cache from the Go module
proxy the first time (~2.5 min).
`

// eurekaSettings are bench-eureka's settings, checked.
type eurekaSettings struct {
	registrySettings
	apps     int
	poll     time.Duration // whole seconds
	pollText string        // as given: "5s"
	churn    string        // a percentage
	polls    int
	protocol string
	lease    string
	// serverCPUs, when set, are polaris-server's own CPUs (SERVER_CPUS).
	serverCPUs []int
}

var (
	wholeSeconds = regexp.MustCompile(`^[1-9][0-9]*s$`)
	percentage   = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
)

func parseEureka(args []string) (eurekaSettings, error) {
	var s eurekaSettings
	var poll, churn, polls, protocol, lease, serverCPUs *string
	err := s.parse("eureka", eurekaHelp, args, sizeSetting{"APPS", "2000", "applications"}, "40", func(fs *flag.FlagSet) {
		poll = fs.String("poll", benchrun.Env("POLL", "5s"), "POLL: galleon-eureka's poll interval, the churn's period and the full poller's interval (whole seconds)")
		churn = fs.String("churn", benchrun.Env("CHURN", "1"), "CHURN: percent of the instances changed per POLL")
		polls = fs.String("polls", benchrun.Env("POLLS", "24"), "POLLS: polls in each CPU window")
		protocol = fs.String("protocol", benchrun.Env("PROTOCOL", "delta"), "PROTOCOL: the timed run's sinks, delta or sotw")
		lease = fs.String("lease", benchrun.Env("LEASE", "180s"), "LEASE: the instances' lease (whole seconds)")
		serverCPUs = fs.String("server-cpus", benchrun.Env("SERVER_CPUS", ""), "SERVER_CPUS: CPUs polaris-server runs on alone, the rest of the run on the others")
	})
	if err != nil {
		return s, err
	}
	s.apps = s.size
	if !wholeSeconds.MatchString(*poll) {
		return s, fmt.Errorf("POLL=%s: want whole seconds, e.g. 5s", *poll)
	}
	s.pollText = *poll
	secs, _ := strconv.Atoi(strings.TrimSuffix(*poll, "s"))
	s.poll = time.Duration(secs) * time.Second
	if !percentage.MatchString(*churn) {
		return s, fmt.Errorf("CHURN=%s: want a percentage, e.g. 1", *churn)
	}
	s.churn = *churn
	if s.polls, err = benchrun.Whole("POLLS", *polls); err != nil {
		return s, err
	}
	if err := benchrun.OneOf("PROTOCOL", *protocol, "delta", "sotw"); err != nil {
		return s, err
	}
	s.protocol = *protocol
	if !wholeSeconds.MatchString(*lease) {
		return s, fmt.Errorf("LEASE=%s: want whole seconds, e.g. 180s", *lease)
	}
	s.lease = *lease
	if s.serverCPUs, err = benchrun.ParseCPUs("SERVER_CPUS", *serverCPUs); err != nil {
		return s, err
	}
	return s, nil
}

func runEureka(ctx context.Context, args []string) error {
	s, err := parseEureka(args)
	return runRegistry(ctx, "bench-eureka", "galleon-eureka", s.galleonArgs, err, func(b *registryBench) registryRun {
		return &eurekaBench{eurekaSettings: s, registryBench: b, windows: map[string]*cpuWindow{}}
	})
}

// eurekaBench is one run of bench-eureka.
type eurekaBench struct {
	eurekaSettings
	*registryBench

	clkTck  int64
	server  *eurekatest.Server
	gen     *benchrun.Proc // galleon-load eureka-generate
	adapter *adapterProc   // galleon-eureka, nil once stopped
	windows map[string]*cpuWindow

	polarisVer string
	churnStart time.Time // when the generator had registered everything and began to churn
	full       fullFetch // galleon-eureka's first full fetch, per fetch
	deltas     deltaPolls
	timed      loadRun
	runChurn   genChurn // the churn during the timed changes
	chkRSS     int64    // galleon-eureka's memory after the timed changes, kB
	chkHWM     int64
	poller     pollerStats // window C
}

// stop stops what runs in the order the script did: the adapter, the generator, then Polaris,
// which takes 5-15 s.
func (e *eurekaBench) stop() {
	if e.adapter != nil {
		e.adapter.Stop()
	}
	e.gen.Stop()
	if e.server != nil {
		_ = e.server.Close()
	}
}

func (e *eurekaBench) settings() (workName, what string) {
	return "bench-eureka", fmt.Sprintf("%d applications x %d instances, %s%% churn per %s poll, %d polls a window, %d %s sinks, %d changes, leases %s",
		e.apps, e.instances, e.churn, e.pollText, e.polls, e.sinks, e.protocol, e.changes, e.lease)
}

func (e *eurekaBench) steps() []func(context.Context) error {
	return []func(context.Context) error{e.clockTicks, e.startServer, e.generate, e.windowB1, e.startAdapter, e.windowA, e.timedChanges, e.windowsCB2, e.results}
}

func (e *eurekaBench) clockTicks(ctx context.Context) (err error) {
	e.clkTck, err = benchrun.ClockTicks(ctx)
	return err
}

// 1. polaris-server.
func (e *eurekaBench) startServer(ctx context.Context) error {
	e.Step("1. polaris-server")
	dir := filepath.Join(e.Dir, "polaris")
	e.Bulky = append(e.Bulky, filepath.Join(dir, "polaris.bolt"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	t0 := time.Now()
	srv, err := eurekatest.StartServer(ctx, eurekatest.Options{
		Dir: dir, DeltaExpireInterval: 60 * time.Second, Detach: serverproc.Detach{Session: true},
	})
	if err != nil {
		return fmt.Errorf("polaris-server did not answer GET /apps: %w (see %s and %s)", err, filepath.Join(dir, "polaris-server.out"), filepath.Join(dir, "log"))
	}
	e.server = srv
	if len(e.serverCPUs) > 0 {
		// The benchmark first, so that what it starts from now on (the generator, galleon-eureka,
		// the sinks) inherits the other CPUs; the server's threads, and those it starts, stay on its own.
		others, err := benchrun.OtherCPUs(e.serverCPUs)
		if err == nil {
			err = benchrun.Pin(os.Getpid(), others)
		}
		if err == nil {
			err = benchrun.Pin(srv.Pid(), e.serverCPUs)
		}
		if err != nil {
			return fmt.Errorf("SERVER_CPUS: %w", err)
		}
		e.Say("polaris-server pinned to CPUs %v, the rest of the run to %v", e.serverCPUs, others)
	}
	e.polarisVer = e.polarisVersion(ctx)
	e.Say("polaris-server %s (pid %d) serves the Eureka API at %s, ready in %s s", e.polarisVer, srv.Pid(), srv.BaseURL(), benchrun.Secs(t0, time.Now()))
	return nil
}

var polarisVersion = regexp.MustCompile(`v[0-9][0-9.]*`)

// polarisVersion is what `polaris-server version` says, "?" when it does not.
func (e *eurekaBench) polarisVersion(ctx context.Context) string {
	bin, err := eurekatest.BinaryPath()
	if err != nil {
		return "?"
	}
	out, _ := exec.CommandContext(ctx, bin, "version").Output()
	return or(polarisVersion.FindString(string(out)))
}

// alive fails when a process the run started has exited.
func (e *eurekaBench) alive() error {
	if !e.server.Running() {
		return fmt.Errorf("polaris-server exited (see %s)", e.server.OutPath)
	}
	if !e.gen.Alive() {
		return fmt.Errorf("galleon-load eureka-generate exited: %s", e.gen.Tail())
	}
	if e.adapter != nil && !e.adapter.Alive() {
		return fmt.Errorf("galleon-eureka exited: %s", e.adapter.Tail())
	}
	return nil
}

var (
	genRegistered   = regexp.MustCompile(`^registered `)
	genRegisterTook = regexp.MustCompile(` instances in ([^,]*), all listed `)
	genListed       = regexp.MustCompile(` all listed (\S*) after the start`)
	genListingBytes = regexp.MustCompile(`\(/apps ([0-9]*) bytes\)`)
	genPerPoll      = regexp.MustCompile(` churning ([0-9]*) instances every `)
)

// 2. galleon-load eureka-generate.
func (e *eurekaBench) generate(ctx context.Context) error {
	e.Step("2. galleon-load eureka-generate")
	args := []string{"eureka-generate", "--eureka-url", e.server.BaseURL(), "--apps", strconv.Itoa(e.apps), "--instances", strconv.Itoa(e.instances),
		"--churn-percent", e.churn, "--churn-interval", e.pollText, "--lease-duration", e.lease, "--report-interval", e.pollText}
	e.Say("galleon-load %s", strings.Join(args, " "))
	var err error
	e.gen, err = e.Start(benchrun.Spec{Name: "galleon-load eureka-generate", Log: filepath.Join(e.LogDir, "eureka-generate.log"), Dir: e.Dir, Path: e.loadBin, Args: args})
	if err != nil {
		return err
	}
	line, err := e.gen.WaitLine(ctx, genRegistered, "eureka-generate registering every instance and the server listing them", 30*time.Minute, 200*time.Millisecond)
	if err != nil {
		return err
	}
	if err := e.alive(); err != nil {
		return err
	}
	e.churnStart = time.Now()
	e.Say("%s", line)
	took, bytes := submatch(genRegisterTook, line), submatch(genListingBytes, line)
	total := (e.apps + 1) * e.instances
	listing := ""
	if n, err := strconv.ParseFloat(bytes, 64); err == nil {
		listing = benchrun.Thousands(n) + " bytes"
	}
	rate := "?"
	if d, err := benchrun.DurSeconds(took); err == nil && d > 0 {
		rate = fmt.Sprintf("%.0f", float64(total)/d)
	}
	e.row("registry", fmt.Sprintf("%d applications x %d instances + LOAD-TARGET (%d instances), leases %s, renewed every 30 s; /apps (JSON) %s", e.apps, e.instances, total, e.lease, listing))
	e.row("galleon-load eureka-generate: registered / all listed", fmt.Sprintf("%s / %s after the start (%s registrations a second, 64 in flight)", or(took), or(submatch(genListed, line)), rate))
	e.row("churn", fmt.Sprintf("%s instances per %s (%s%%), each registered again with a new metadata value: one MODIFIED entry of /apps/delta", or(submatch(genPerPoll, line)), e.pollText, e.churn))
	return nil
}

// 3. window B1, once the churn has run for a whole delta window (60 s): the delta is at its
// steady size then.
func (e *eurekaBench) windowB1(ctx context.Context) error {
	e.Step("3. window B1: no poller")
	if warm := math.Round(time.Until(e.churnStart.Add(65 * time.Second)).Seconds()); warm > 0 {
		e.Say("waiting %.0f s: the churn has to fill Polaris's 60 s delta window first", warm)
		if err := sleep(ctx, time.Duration(warm)*time.Second); err != nil {
			return err
		}
	}
	if err := e.alive(); err != nil {
		return err
	}
	return e.measure(ctx, "B1")
}

// cpuWindow is what one window measured: CPU seconds of the server, the generator and the
// adapter (0 when it does not run), how busy the machine was, and the churn the generator made.
type cpuWindow struct {
	secs, polaris, gen, adapter float64 // seconds, two decimals
	busy                        string  // percent
	load                        string  // "before -> after"
	churn                       genChurn
}

// measure measures window name for POLLS x POLL.
func (e *eurekaBench) measure(ctx context.Context, name string) error {
	d := time.Duration(e.polls) * e.poll
	e.Say("window %s: %.0f s", name, d.Seconds())
	mark := lineCount(e.gen.Log)
	var adapter *benchrun.Proc
	if e.adapter != nil {
		adapter = e.adapter.Proc
	}
	t0 := time.Now()
	p0, err := benchrun.CPUTicks(e.server.Pid())
	if err != nil {
		return err
	}
	g0, err := benchrun.CPUTicks(e.gen.Pid())
	if err != nil {
		return err
	}
	a0 := adapterTicks(adapter)
	m0, mt0, err := benchrun.MachineTicks()
	if err != nil {
		return err
	}
	l0 := benchrun.LoadAvg()
	if err := sleep(ctx, d); err != nil {
		return err
	}
	t1 := time.Now()
	p1, err := benchrun.CPUTicks(e.server.Pid())
	if err != nil {
		return fmt.Errorf("polaris-server exited during window %s", name)
	}
	g1, err := benchrun.CPUTicks(e.gen.Pid())
	if err != nil {
		return fmt.Errorf("eureka-generate exited during window %s", name)
	}
	a1 := adapterTicks(adapter)
	m1, mt1, err := benchrun.MachineTicks()
	if err != nil {
		return err
	}
	secs := func(a, b int64) float64 { return round2(float64(b-a) / float64(e.clkTck)) }
	w := &cpuWindow{
		secs: round2(t1.Sub(t0).Seconds()), polaris: secs(p0, p1), gen: secs(g0, g1), adapter: secs(a0, a1),
		busy:  fmt.Sprintf("%.0f", 100*float64(m1-m0)/float64(mt1-mt0)),
		load:  l0 + " -> " + benchrun.LoadAvg(),
		churn: genWindow(e.gen.Log, mark, e.poll),
	}
	e.windows[name] = w
	adapterCPU := ""
	if adapter != nil {
		adapterCPU = fmt.Sprintf(", galleon-eureka %.2f s", w.adapter)
	}
	e.Say("polaris-server %.2f s CPU, eureka-generate %.2f s%s in %.2f s; churn %s changes per %s (at most %s behind), renewals at worst %s s late; machine %s%% busy, load %s",
		w.polaris, w.gen, adapterCPU, w.secs, w.churn.perPoll, e.pollText, w.churn.behind, w.churn.late, w.busy, w.load)
	return nil
}

// adapterTicks is p's CPU time in clock ticks, 0 when p is nil or gone.
func adapterTicks(p *benchrun.Proc) int64 {
	if p == nil {
		return 0
	}
	t, _ := benchrun.CPUTicks(p.Pid())
	return t
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// genChurn is what eureka-generate's reports say of a stretch of time: changes per POLL, the
// most changes it was behind, how late its renewals were at worst (seconds); "?" each when it
// reported fewer than twice.
type genChurn struct{ perPoll, behind, late string }

// genReport is one of eureka-generate's reports: "eureka-generate: 1m5s: N renewals (...), C
// changes (F failed, at most B behind schedule); renewals at worst L late".
var (
	genReport  = regexp.MustCompile(`^eureka-generate: (\S+): .* renewals \(`)
	genChanges = regexp.MustCompile(`([0-9]+) changes \(`)
	genBehind  = regexp.MustCompile(`.*at most (\S*) behind`)
	genLate    = regexp.MustCompile(`.*at worst (\S*) late`)
)

// genWindow reads eureka-generate's reports after line `from` of its log.
func genWindow(log string, from int, poll time.Duration) genChurn {
	var n int
	var t0, t1, c0, c1, maxBehind, maxLate float64
	line := 0
	_ = logLines(log, func(l string) bool {
		line++
		m := genReport.FindStringSubmatch(l)
		if line <= from || m == nil {
			return true
		}
		t, err := benchrun.DurSeconds(m[1])
		if err != nil {
			t = -1
		}
		c, _ := strconv.ParseFloat(submatch(genChanges, l), 64)
		if n == 0 {
			t0, c0 = t, c
		}
		t1, c1 = t, c
		n++
		if b, _ := strconv.ParseFloat(submatch(genBehind, l), 64); b > maxBehind {
			maxBehind = b
		}
		if late, err := benchrun.DurSeconds(submatch(genLate, l)); err == nil && late > maxLate {
			maxLate = late
		}
		return true
	})
	if n < 2 || t1 <= t0 {
		return genChurn{"?", "?", "?"}
	}
	return genChurn{
		perPoll: fmt.Sprintf("%.0f", (c1-c0)/(t1-t0)*poll.Seconds()),
		behind:  fmt.Sprintf("%d", int64(maxBehind)),
		late:    fmt.Sprintf("%.2f", maxLate),
	}
}

// lineCount is the number of lines of the file at path (wc -l).
func lineCount(path string) int {
	n := 0
	_ = logLines(path, func(string) bool { n++; return true })
	return n
}

// fullFetch is galleon-eureka's full fetches as its metrics count them, per fetch.
type fullFetch struct{ wire, body, secs float64 }

// 4. galleon-eureka: start -> /readyz 200, its first full fetch.
func (e *eurekaBench) startAdapter(ctx context.Context) error {
	e.Step("4. start galleon-eureka")
	a, err := e.registryBench.startAdapter(ctx, func(xds, http string) []string {
		return []string{"--eureka-urls", e.server.BaseURL(), "--eureka-poll-interval", e.pollText, "--eureka-delta-window", "60s",
			"--listen", xds, "--http", http, "--log-level", "debug"}
	}, 5*time.Minute, 100*time.Millisecond, e.alive)
	if err != nil {
		return err
	}
	e.adapter = a
	m, err := a.metrics(ctx)
	if err != nil {
		return err
	}
	n := benchrun.MetricSum(m, "galleon_eureka_requests_total", `kind="full",result="ok"`)
	if n < 1 {
		return errors.New(`galleon-eureka is ready but counts no full fetch (galleon_eureka_requests_total{kind="full",result="ok"})`)
	}
	e.full = fullFetch{
		wire: math.Round(benchrun.MetricSum(m, "galleon_eureka_response_wire_bytes_total", `kind="full"`) / n),
		body: math.Round(benchrun.MetricSum(m, "galleon_eureka_response_bytes_total", `kind="full"`) / n),
		secs: benchrun.MetricSum(m, "galleon_eureka_fetch_duration_seconds_sum", `kind="full"`) / n,
	}
	e.Say("full fetch: %.0f bytes on the wire, %.0f decoded", e.full.wire, e.full.body)
	e.row("galleon-eureka start → /readyz 200 (one full fetch, mapped and served)", fmt.Sprintf("%s s (the full fetch: %.2f s to fetch and decode)", a.ready, e.full.secs))
	e.row("one full fetch (GET /apps), as galleon-eureka received it: wire / decoded", fmt.Sprintf("%s / %s bytes", benchrun.Thousands(e.full.wire), benchrun.Thousands(e.full.body)))
	return nil
}

// deltaCounters are galleon-eureka's counters window A is measured by.
type deltaCounters struct{ polls, wire, body, secs, fulls, requests, ok float64 }

func readDeltaCounters(m string) deltaCounters {
	return deltaCounters{
		polls:    benchrun.MetricSum(m, "galleon_eureka_requests_total", `kind="delta",result="ok"`),
		wire:     benchrun.MetricSum(m, "galleon_eureka_response_wire_bytes_total", `kind="delta"`),
		body:     benchrun.MetricSum(m, "galleon_eureka_response_bytes_total", `kind="delta"`),
		secs:     benchrun.MetricSum(m, "galleon_eureka_fetch_duration_seconds_sum", `kind="delta"`),
		fulls:    benchrun.MetricSum(m, "galleon_eureka_full_fetches_total", ""),
		requests: benchrun.MetricSum(m, "galleon_eureka_requests_total", `result="`),
		ok:       benchrun.MetricSum(m, "galleon_eureka_requests_total", `result="ok"`),
	}
}

// deltaPolls is what window A measured of galleon-eureka's delta polls.
type deltaPolls struct {
	polls, wire, body float64 // wire and body per poll, whole bytes
	ms                string  // fetch time per poll
	fulls, failed     float64
	rss, hwm          int64
	applied, mismatch int // log lines since the start
}

// 5. window A: galleon-eureka polls deltas.
func (e *eurekaBench) windowA(ctx context.Context) error {
	e.Step("5. window A: galleon-eureka polls deltas")
	if err := sleep(ctx, e.poll+2*time.Second); err != nil { // past its first delta
		return err
	}
	if err := e.alive(); err != nil {
		return err
	}
	m, err := e.adapter.metrics(ctx)
	if err != nil {
		return err
	}
	c0 := readDeltaCounters(m)
	if err := e.measure(ctx, "A"); err != nil {
		return err
	}
	if err := e.alive(); err != nil {
		return err
	}
	if m, err = e.adapter.metrics(ctx); err != nil {
		return err
	}
	c1 := readDeltaCounters(m)
	d := deltaPolls{polls: math.Round(c1.polls - c0.polls)}
	if d.polls <= 0 {
		return errors.New("galleon-eureka made no delta request in window A")
	}
	d.wire = math.Round((c1.wire - c0.wire) / d.polls)
	d.body = math.Round((c1.body - c0.body) / d.polls)
	d.ms = fmt.Sprintf("%.1f", 1000*(c1.secs-c0.secs)/d.polls)
	d.fulls = math.Round(c1.fulls - c0.fulls)
	d.failed = math.Round((c1.requests - c0.requests) - (c1.ok - c0.ok))
	if d.rss, d.hwm, err = e.adapter.memory(); err != nil {
		return err
	}
	e.Say("%.0f delta polls: %.0f bytes on the wire, %.0f decoded, %s ms each; %.0f full fetches, %.0f failed requests; galleon-eureka VmRSS %s, VmHWM %s",
		d.polls, d.wire, d.body, d.ms, d.fulls, d.failed, benchrun.MiB(d.rss), benchrun.MiB(d.hwm))
	d.applied = countLines(e.adapter.Log, `msg="applied a delta"`)
	d.mismatch = countLines(e.adapter.Log, "apps__hashcode differs")
	e.deltas = d
	return nil
}

// 6. galleon-load run --eureka-url: CHANGES changes timed to every sink.
func (e *eurekaBench) timedChanges(ctx context.Context) error {
	e.Step(fmt.Sprintf("6. galleon-load run --eureka-url: %d changes", e.changes))
	mark := lineCount(e.gen.Log)
	out, err := e.galleonLoad(ctx, "run.out", "run", "--addr", e.adapter.xds, "--eureka-url", e.server.BaseURL(), "--sinks", strconv.Itoa(e.sinks),
		"--protocol", e.protocol, "--changes", strconv.Itoa(e.changes), "--interval", "1ms", "--interval-jitter", e.pollText,
		"--metrics", "http://"+e.adapter.http+"/metrics", "--timeout", "2m")
	if err != nil {
		return err
	}
	e.runChurn = genWindow(e.gen.Log, mark, e.poll)
	if e.timed, err = parseLoadRun(out); err != nil {
		return err
	}
	e.chkRSS, e.chkHWM, err = e.adapter.memory()
	return err
}

// pollerStats is what the full poller did: its GETs, their bytes and time.
type pollerStats struct {
	polls, failed int
	bytes, ms     float64 // per poll, rounded
	encoding      string  // the first answer's Content-Encoding
}

// 7. galleon-eureka stopped; window C, a full poller; window B2, no poller.
func (e *eurekaBench) windowsCB2(ctx context.Context) error {
	e.Step(fmt.Sprintf("7. window C: a full poller (GET /apps every %s)", e.pollText))
	e.adapter.Stop()
	e.adapter = nil
	if err := e.alive(); err != nil {
		return err
	}
	url := e.server.BaseURL() + "/apps"
	first, err := getFull(ctx, fullClient(), url)
	if err != nil {
		return fmt.Errorf("GET %s failed: %w", url, err)
	}
	log := filepath.Join(e.LogDir, "full-poller.log")
	stopPoller, err := startFullPoller(ctx, url, e.poll, log)
	if err != nil {
		return err
	}
	err = e.measure(ctx, "C")
	stopPoller()
	if err != nil {
		return err
	}
	if err := e.alive(); err != nil {
		return err
	}
	if e.poller, err = readPollerLog(log); err != nil {
		return err
	}
	e.poller.encoding = first.encoding
	if e.poller.encoding == "" {
		e.poller.encoding = "none"
	}
	e.Say("%d full polls (%d failed): %.0f bytes each (Content-Encoding: %s), %.0f ms each", e.poller.polls, e.poller.failed, e.poller.bytes, e.poller.encoding, e.poller.ms)

	e.Step("7. window B2: no poller")
	if err := e.measure(ctx, "B2"); err != nil {
		return err
	}
	return e.alive()
}

// fullGet is one GET /apps as a plain Eureka client makes it, gzip accepted and not decoded.
type fullGet struct {
	bytes    int64 // the body as it came over the wire
	secs     float64
	encoding string
}

// fullClient makes a new connection for each GET (curl in the script did) and leaves gzip
// bodies as they came.
func fullClient() *http.Client {
	return &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true},
	}
}

func getFull(ctx context.Context, client *http.Client, url string) (fullGet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fullGet{}, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Accept-Encoding", "gzip")
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return fullGet{}, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return fullGet{}, err
	}
	return fullGet{bytes: n, secs: time.Since(t0).Seconds(), encoding: resp.Header.Get("Content-Encoding")}, nil
}

// startFullPoller GETs url every interval, started on the interval (a slow answer does not
// shift the next one), writing "BYTES SECONDS" or "failed" a line to log, until the returned
// stop is called; stop waits for the poller to end.
func startFullPoller(ctx context.Context, url string, interval time.Duration, log string) (stop func(), err error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	client := fullClient()
	var wg sync.WaitGroup
	wg.Go(func() {
		defer f.Close()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			g, err := getFull(ctx, client, url)
			if ctx.Err() != nil {
				return // a GET cut short by the stop is not one
			}
			if err != nil {
				fmt.Fprintln(f, "failed")
			} else {
				fmt.Fprintf(f, "%d %.6f\n", g.bytes, g.secs)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return func() { cancel(); wg.Wait() }, nil
}

func readPollerLog(log string) (pollerStats, error) {
	var s pollerStats
	var bytes, secs float64
	_ = logLines(log, func(l string) bool {
		var b, t float64
		if _, err := fmt.Sscanf(l, "%f %f", &b, &t); err != nil {
			s.failed++
			return true
		}
		s.polls++
		bytes += b
		secs += t
		return true
	})
	if s.polls == 0 {
		return s, fmt.Errorf("the full poller completed no GET /apps (see %s)", log)
	}
	s.bytes = math.Round(bytes / float64(s.polls))
	s.ms = math.Round(1000 * secs / float64(s.polls))
	return s, nil
}

// results adds the rows of windows A, C, B1 and B2 and of the timed changes.
func (e *eurekaBench) results(context.Context) error {
	d, w, p := e.deltas, e.windows, e.poller
	e.row(fmt.Sprintf("bytes per delta poll (window A, %.0f polls; wire / decoded)", d.polls),
		fmt.Sprintf("%s / %s bytes: %.3f of a full fetch's wire bytes (target ≤ 0.1)", benchrun.Thousands(d.wire), benchrun.Thousands(d.body), d.wire/e.full.wire))
	e.row("bytes per full poll (plain GET, window C)", fmt.Sprintf("%s bytes (Content-Encoding: %s)", benchrun.Thousands(p.bytes), p.encoding))
	e.row("fetch time per poll: delta (galleon-eureka, decoded) / full (plain GET, not decoded)", fmt.Sprintf("%s ms / %.0f ms", d.ms, p.ms))
	e.row("full fetches and failed requests during window A",
		fmt.Sprintf("%.0f full (%d hashcode mismatches logged since the start), %.0f failed; %d \"applied a delta\" lines since the start", d.fulls, d.mismatch, d.failed, d.applied))
	t := e.timed
	e.row(fmt.Sprintf("change → every %s sink (%d sinks, %d changes, poll %s; target ≤ %s + 50 ms)", e.protocol, e.sinks, e.changes, e.pollText, e.pollText),
		fmt.Sprintf("p50 %s, p99 %s, max %s (%s B per sink per change)", t.p50, t.p99, or(t.max), or(t.bytes)))
	e.row("change → listed by polaris-server (GET /apps/LOAD-TARGET every 50 ms)", fmt.Sprintf("p50 %s, p99 %s, max %s", or(t.listedP50), or(t.listedP99), or(t.listedMax)))
	e.row("during the changes: churn, renewals", fmt.Sprintf("%s changes per %s (at most %s behind), renewals at worst %s s late", e.runChurn.perPoll, e.pollText, e.runChurn.behind, e.runChurn.late))
	for _, x := range []struct{ name, what string }{{"B1", "no poller"}, {"A", "galleon-eureka polling deltas"}, {"C", "full poller, plain GET"}, {"B2", "no poller"}} {
		c := w[x.name]
		e.row(fmt.Sprintf("window %s (%s): polaris-server / eureka-generate CPU", x.name, x.what),
			fmt.Sprintf("%.0f%% / %.0f%% of a CPU over %.2f s; churn made %s changes per %s (at most %s behind), renewals at worst %s s late; machine %s%% busy, load %s",
				100*c.polaris/c.secs, 100*c.gen/c.secs, c.secs, c.churn.perPoll, e.pollText, c.churn.behind, c.churn.late, c.busy, c.load))
	}
	// The no-poller rate: B1 and B2 together; "less" it is what the polls themselves cost.
	idle := round4((w["B1"].polaris + w["B2"].polaris) / (w["B1"].secs + w["B2"].secs))
	perPoll := func(cpu, polls float64) float64 { return 1000 * cpu / polls }
	marginal := func(c *cpuWindow, polls float64) float64 { return 1000 * (c.polaris - idle*c.secs) / polls }
	e.row("polaris-server CPU per poll: delta (window A) / full (window C)",
		fmt.Sprintf("%.0f / %.0f ms; less the no-poller rate (B1 and B2, %.0f%% of a CPU): %.0f / %.0f ms",
			perPoll(w["A"].polaris, d.polls), perPoll(w["C"].polaris, float64(p.polls)), 100*idle, marginal(w["A"], d.polls), marginal(w["C"], float64(p.polls))))
	e.row("galleon-eureka CPU per delta poll (window A)", fmt.Sprintf("%.0f ms (%.2f s over %.2f s)", perPoll(w["A"].adapter, d.polls), w["A"].adapter, w["A"].secs))
	e.row("galleon-eureka memory after window A (VmRSS / VmHWM)", benchrun.MiB(d.rss)+" / "+benchrun.MiB(d.hwm))
	e.row(fmt.Sprintf("galleon-eureka memory after the timed changes, %d sinks connected (VmRSS / VmHWM)", e.sinks), benchrun.MiB(e.chkRSS)+" / "+benchrun.MiB(e.chkHWM))
	last := ""
	_ = logLines(e.gen.Log, func(l string) bool {
		if strings.Contains(l, "renewals (") {
			last = l
		}
		return true
	})
	if last != "" {
		e.row("eureka-generate's last report", strings.TrimPrefix(last, "eureka-generate: "))
	}
	return nil
}

func (e *eurekaBench) result() (title, machine string) {
	return fmt.Sprintf("galleon-eureka, %d applications x %d instances, %s%% churn per %s poll", e.apps, e.instances, e.churn, e.pollText),
		fmt.Sprintf("%d CPUs (nproc), %s, polaris-server %s (standalone, bolt store)", e.nproc, e.goVersion, e.polarisVer)
}

func round4(v float64) float64 { return math.Round(v*10000) / 10000 }
