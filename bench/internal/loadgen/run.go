package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/internal/loadtest"
	"github.com/galleon-mesh/galleon/internal/xdsclient"
)

// changer makes the run's changes to the target service of a registry:
// each moves one of its instances to a new address, so that it is one
// endpoint-only update of one ServiceEntry.
type changer interface {
	// Change makes change i (1, 2, ...) and returns when its write was sent
	// (the start of its latency) and the address the instance moved to.
	Change(ctx context.Context, i int) (sent time.Time, addr string, err error)
	Close()
}

// fileChanger rewrites filegen.TargetFile in a file registry.
type fileChanger struct {
	dir       string
	instances int
}

func (f fileChanger) Change(_ context.Context, i int) (time.Time, string, error) {
	t0 := time.Now()
	return t0, filegen.MoverAddr(i), filegen.WriteTarget(f.dir, f.instances, i)
}

func (fileChanger) Close() {}

// MCPCollection is the collection legacy MCP sinks of a run subscribe to
// (mcp.ServiceEntries).
const MCPCollection = "istio/networking/v1alpha3/serviceentries"

// zkRequestsMetric counts the requests the ZooKeeper adapter sends, by
// label set; a run sums them.
const zkRequestsMetric = "galleon_zookeeper_requests_total"

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
	// filegen.TargetFile in it. Instances is the target's size there.
	Dir       string
	Instances int
	// ZKServers, ZKLayout and ZKRoot are the ZooKeeper registry the source
	// serves (instead of Dir), written by ZKGenerate; the run moves one
	// instance of its target (TargetInterface or TargetService). ZKRoot
	// empty: the adapter's default for ZKLayout.
	ZKServers []string
	ZKLayout  string
	ZKRoot    string
	// Changes to make when Dir or ZKServers is set; neither: connect and
	// sync only.
	Changes int
	// Interval between changes; each change is also waited for.
	Interval time.Duration
	// MetricsURL is the source's /metrics, read for its resident memory
	// and, against ZooKeeper, its requests per change.
	MetricsURL string
	Timeout    time.Duration
	Progress   io.Writer
}

// Report is what a run measured.
type Report struct {
	Sinks, Changes int
	StuckSinks     int
	Protocol       string
	// Registry is what the changes were made in: "file", "zookeeper
	// dubbo" or "zookeeper curator"; empty when none were made.
	Registry string
	// InitialSync is from the first connection to every sink holding the
	// full state.
	InitialSync time.Duration
	// Latencies are per change, from the write (just before the target
	// file is rewritten, or the ZooKeeper transaction is sent) to the last
	// sink holding the new version, sorted.
	Latencies []time.Duration
	// Updates is how many responses the first sink received from the first
	// change until the run ended: Changes when each change was one update.
	Updates int
	// SyncBytes and ChangeBytes are what one sink received for the initial
	// state and for the last change.
	SyncBytes, ChangeBytes int
	// SourceRSS is the source's process_resident_memory_bytes after the
	// run; 0 when unknown.
	SourceRSS float64
	// ZKRequests is what the source asked ZooKeeper for over the changes;
	// nil unless changes were made in ZooKeeper with MetricsURL set.
	ZKRequests *RequestCount
}

// RequestCount is the growth of a source's request counter over a run's
// changes.
type RequestCount struct {
	// Reported is false when the source has no such counter.
	Reported bool
	Total    float64
	Changes  int
}

// PerChange is Total over Changes.
func (c *RequestCount) PerChange() float64 {
	if c.Changes == 0 {
		return 0
	}
	return c.Total / float64(c.Changes)
}

// Percentile returns the p-th percentile latency.
func (r *Report) Percentile(p int) time.Duration { return percentile(r.Latencies, p) }

// String renders the report for people.
func (r *Report) String() string {
	var b strings.Builder
	r.writeHead(&b)
	if len(r.Latencies) > 0 {
		fmt.Fprintf(&b, "updates per sink: %d for %d changes\n", r.Updates, r.Changes)
	}
	if c := r.ZKRequests; c != nil {
		if c.Reported {
			fmt.Fprintf(&b, "zookeeper requests per change: %.1f (%.0f over %d changes)\n", c.PerChange(), c.Total, c.Changes)
		} else {
			fmt.Fprintf(&b, "zookeeper requests per change: n/a (the source does not report %s)\n", zkRequestsMetric)
		}
	}
	r.writeRSS(&b)
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
	dialSink, err := sinkDialer(cfg.Protocol)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rep := &Report{Sinks: cfg.Sinks, StuckSinks: cfg.StuckSinks, Protocol: cfg.Protocol}
	// The changer first: a registry without the target fails the run
	// before any sink connects.
	var ch changer
	switch {
	case cfg.Dir != "" && len(cfg.ZKServers) > 0:
		return nil, fmt.Errorf("--dir and --zk-servers both given: the source serves one registry, give the one it reads")
	case cfg.Dir != "":
		ch, rep.Registry = fileChanger{dir: cfg.Dir, instances: cfg.Instances}, "file"
	case len(cfg.ZKServers) > 0:
		zc, err := newZKChanger(ctx, cfg.ZKServers, cfg.ZKLayout, cfg.ZKRoot)
		if err != nil {
			return nil, err
		}
		ch, rep.Registry = zc, "zookeeper "+cfg.ZKLayout
	}
	if ch != nil {
		defer ch.Close()
	}
	for range cfg.StuckSinks {
		c, err := dialStuck(ctx, cfg.Addr, cfg.TypeURL)
		if err != nil {
			return nil, err
		}
		defer c.Close()
	}
	sinks, closeSinks, err := syncSinks(ctx, dialSink, cfg.Addr, cfg.TypeURL, cfg.Sinks, cfg.Timeout, rep)
	defer closeSinks()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Progress, "%d %s sinks synced in %v\n", cfg.Sinks, cfg.Protocol, rep.InitialSync.Round(time.Microsecond))

	if ch == nil || cfg.Changes <= 0 {
		return rep, scrapeRSS(ctx, cfg.MetricsURL, rep)
	}
	// The requests of the initial listing are not the changes': count
	// from here.
	zkBefore, zkReported := 0.0, false
	if len(cfg.ZKServers) > 0 && cfg.MetricsURL != "" {
		sums, err := scrapeSums(ctx, cfg.MetricsURL)
		if err != nil {
			return nil, fmt.Errorf("reading the source's metrics: %w", err)
		}
		zkBefore, zkReported = sums[zkRequestsMetric]
	}
	var addrs []string // where each change moved the instance to
	updates0 := sinks[0].Count()
	for i := 1; i <= cfg.Changes; i++ {
		old := sinks[0].Latest().Version
		t0, addr, err := ch.Change(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("change %d: %w", i, err)
		}
		addrs = append(addrs, addr)
		changeCtx, done := context.WithTimeout(ctx, cfg.Timeout)
		var last time.Time
		for _, s := range sinks {
			a, err := s.WaitChange(changeCtx, old)
			if err != nil {
				done()
				return nil, fmt.Errorf("change %d (instance moved to %s): %w", i, addr, err)
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
	if len(cfg.ZKServers) > 0 && cfg.MetricsURL != "" {
		sums, err := scrapeSums(ctx, cfg.MetricsURL)
		if err != nil {
			return nil, fmt.Errorf("reading the source's metrics: %w", err)
		}
		after, ok := sums[zkRequestsMetric]
		// A counter with no series yet is left out of the exposition: no
		// series before but some after means it started at 0.
		rep.ZKRequests = &RequestCount{Reported: ok, Changes: rep.Changes}
		if ok {
			if !zkReported {
				zkBefore = 0
			}
			rep.ZKRequests.Total = after - zkBefore
		}
	}
	if err := verifyTarget(ctx, cfg, addrs); err != nil {
		return nil, err
	}
	// After the check, which took a round trip: an update a change caused
	// late is counted too.
	rep.Updates = sinks[0].Count() - updates0
	return rep, scrapeRSS(ctx, cfg.MetricsURL, rep)
}

// dialStuck connects a SotW sink that subscribes to typeURL and then never
// reads nor acknowledges anything: a sink that hangs. Close it to let go.
func dialStuck(ctx context.Context, addr, typeURL string) (io.Closer, error) {
	conn, err := loadtest.Dial(addr)
	if err != nil {
		return nil, err
	}
	st, err := openADS(ctx, conn, false)
	if err == nil {
		err = st.SendMsg(&discovery.DiscoveryRequest{TypeUrl: typeURL})
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("stuck sink to %s: %w", addr, err)
	}
	return conn, nil
}

// verifyTarget checks, after the changes, that what the sinks were timed
// to receive is the state the changes made: each change is timed by the
// version moving on, which says that something changed, not what. A fresh
// SotW stream must serve the target with its instance at the last address
// (and no longer at the one before). Only ServiceEntry types are checked.
func verifyTarget(ctx context.Context, cfg RunConfig, addrs []string) error {
	if len(addrs) == 0 || !strings.HasSuffix(cfg.TypeURL, "/ServiceEntry") {
		return nil
	}
	entries, err := servedEntries(ctx, cfg)
	if err != nil {
		return err
	}
	last, prev := addrs[len(addrs)-1], ""
	if len(addrs) > 1 {
		prev = addrs[len(addrs)-2]
	}
	var at, atPrev []string
	for _, e := range entries {
		for _, ep := range e.se.GetEndpoints() {
			switch a := ep.GetAddress(); {
			case a == last:
				at = append(at, e.key)
			case a == prev && prev != "":
				atPrev = append(atPrev, e.key)
			}
		}
	}
	if len(at) != 1 {
		return fmt.Errorf("after the changes the source serves an endpoint at %s, where the last change moved the target's instance, in %d ServiceEntries %v, want 1: "+
			"the versions the sinks were timed on were not these changes; is something else changing the registry, or is the source serving another one?", last, len(at), at)
	}
	if len(atPrev) != 0 {
		return fmt.Errorf("after the changes the source still serves an endpoint at %s, where the change before the last moved the target's instance, in %v: "+
			"a change was served as an instance added, not moved", prev, atPrev)
	}
	return nil
}

// scrapeRSS sets rep.SourceRSS from url; nothing when url is empty.
func scrapeRSS(ctx context.Context, url string, rep *Report) error {
	if url == "" {
		return nil
	}
	sums, err := scrapeSums(ctx, url)
	if err != nil {
		return fmt.Errorf("reading the source's memory: %w", err)
	}
	rss, ok := sums["process_resident_memory_bytes"]
	if !ok {
		return fmt.Errorf("%s has no process_resident_memory_bytes: is it a Galleon source's /metrics?", url)
	}
	rep.SourceRSS = rss
	return nil
}

// scrapeSums reads a Prometheus text endpoint and returns, for every
// metric name, the sum of its samples over all label sets, but for the
// ZooKeeper adapter's liveness probes (op="probe"): they go out on a timer
// while the connection is idle, not for a change, so they are not among
// the requests a change costs.
func scrapeSums(ctx context.Context, url string) (map[string]float64, error) {
	sums := map[string]float64{}
	err := scrapeSamples(ctx, url, func(name string, v float64, line string) {
		if name == zkRequestsMetric && strings.Contains(line, `op="probe"`) {
			return
		}
		sums[name] += v
	})
	return sums, err
}

// scrapeSamples reads a Prometheus text endpoint (a source's --http
// /metrics) and calls each with every sample: its name, value and whole line.
func scrapeSamples(ctx context.Context, url string, each func(name string, v float64, line string)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s: give the source's --http address and /metrics", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if name, v, ok := parseSample(sc.Text()); ok {
			each(name, v, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	return nil
}

// parseSample parses one sample line of the Prometheus text format,
// `name{label="value",...} value [timestamp]`; comments and blank lines
// are not samples.
func parseSample(line string) (name string, v float64, ok bool) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", 0, false
	}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return "", 0, false
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		// Label values are quoted and may hold '}' and escaped quotes.
		end, quoted := -1, false
		for k := 1; k < len(rest) && end < 0; k++ {
			switch c := rest[k]; {
			case quoted && c == '\\':
				k++
			case c == '"':
				quoted = !quoted
			case !quoted && c == '}':
				end = k
			}
		}
		if end < 0 {
			return "", 0, false
		}
		rest = rest[end+1:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return name, v, err == nil
}

// dialFunc connects one sink of typeURL to addr.
type dialFunc func(ctx context.Context, addr, typeURL string) (*loadtest.Sink, error)

// sinkDialer is how a sink of protocol (--protocol) connects.
func sinkDialer(protocol string) (dialFunc, error) {
	switch protocol {
	case "sotw":
		return loadtest.DialSotW, nil
	case "delta":
		return loadtest.DialDelta, nil
	case "mcp", "mcp-incremental":
		incremental := protocol == "mcp-incremental"
		return func(ctx context.Context, addr, _ string) (*loadtest.Sink, error) {
			return loadtest.DialMCP(ctx, addr, MCPCollection, incremental)
		}, nil
	}
	return nil, fmt.Errorf("--protocol %q: want sotw, delta, mcp or mcp-incremental", protocol)
}

// syncSinks dials n sinks of typeURL at addr and waits until every one has a response and all
// agree on the version, recording the initial sync's time (from before the first dial) and its
// largest response in rep. closeSinks closes the sinks dialled, also after an error.
func syncSinks(ctx context.Context, dialSink dialFunc, addr, typeURL string, n int, timeout time.Duration, rep *Report) (sinks []*loadtest.Sink, closeSinks func(), err error) {
	start := time.Now()
	closeSinks = func() {
		for _, s := range sinks {
			s.Close()
		}
	}
	for range n {
		s, err := dialSink(ctx, addr, typeURL)
		if err != nil {
			return sinks, closeSinks, err
		}
		sinks = append(sinks, s)
	}
	syncCtx, done := context.WithTimeout(ctx, timeout)
	defer done()
	for {
		first, err := sinks[0].WaitChange(syncCtx, "")
		if err != nil {
			return sinks, closeSinks, fmt.Errorf("initial sync: %w", err)
		}
		all := true
		for _, s := range sinks {
			a, err := s.Wait(syncCtx, first.Version)
			if err != nil {
				return sinks, closeSinks, fmt.Errorf("initial sync: %w", err)
			}
			rep.SyncBytes = max(rep.SyncBytes, a.Bytes)
			rep.InitialSync = max(rep.InitialSync, a.At.Sub(start))
			all = all && sinks[0].Latest().Version == first.Version
		}
		if all {
			return sinks, closeSinks, nil
		}
	}
}

// percentile is the p-th percentile of sorted ds, 0 when there are none.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[max((len(ds)*p+99)/100-1, 0)]
}

// writeHead writes the report's first lines: the run, the initial sync and, when changes were
// made, their latency to every sink.
func (r *Report) writeHead(b *strings.Builder) {
	fmt.Fprintf(b, "sinks=%d protocol=%s", r.Sinks, r.Protocol)
	if r.Registry != "" {
		fmt.Fprintf(b, " registry=%s", r.Registry)
	}
	if r.StuckSinks > 0 {
		fmt.Fprintf(b, " (and %d stuck sinks that never read)", r.StuckSinks)
	}
	b.WriteString("\n")
	fmt.Fprintf(b, "initial sync of all sinks: %v (%d bytes per sink)\n", r.InitialSync.Round(time.Microsecond), r.SyncBytes)
	if len(r.Latencies) > 0 {
		fmt.Fprintf(b, "registry change -> every sink (%d changes): p50 %v  p99 %v  max %v  (%d bytes per sink per change)\n",
			len(r.Latencies), r.Percentile(50).Round(time.Microsecond), r.Percentile(99).Round(time.Microsecond),
			r.Latencies[len(r.Latencies)-1].Round(time.Microsecond), r.ChangeBytes)
	}
}

// writeRSS writes the source's memory, when known.
func (r *Report) writeRSS(b *strings.Builder) {
	if r.SourceRSS > 0 {
		fmt.Fprintf(b, "source resident memory: %.1f MiB\n", r.SourceRSS/(1<<20))
	}
}

// diffCounts is after - before, key by key.
func diffCounts(after, before map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(after))
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

// listedChanger makes the changes of a run in a registry that a generator keeps writing
// (Eureka, Nacos), where the version the sinks receive moves on with the churn as well: each
// change leaves a value in the served ServiceEntries (an endpoint's address, a label), its key,
// that a watcher looks for, and the server lists it where the changer can see it.
type listedChanger interface {
	changer
	// listed waits until the server lists change key, and returns when it saw it.
	listed(ctx context.Context, key string) (time.Time, error)
	// served returns the keys the ServiceEntry name (namespace/name) holds, of this run's
	// changes only: what the watcher keeps is bounded by them.
	served(name string, se *networkingv1alpha3.ServiceEntry) []string
	// unserved says what the watcher waited for in vain.
	unserved(key string) string
	// about names change key in errors.
	about(key string) string
}

// listedRun is what RunEureka and RunNacos differ in.
type listedRun struct {
	// flag is the registry's flag and name its name, for errors; typeHint says how to make
	// the source serve ServiceEntries ("" for nothing).
	flag, name, typeHint string
	// open makes the changer; it is called first, so that a registry without the target
	// fails the run before any sink connects.
	open func(ctx context.Context) (listedChanger, error)
	// before and after, when not nil, read the source's counters before the first change and
	// after the last.
	before, after func(ctx context.Context) error
	// verify checks, after the changes, that the source serves what the last change made
	// (keys are the changes', in order).
	verify func(ctx context.Context, cfg RunConfig, keys []string) error
}

// runListed is a run against a source serving a registry that a generator keeps writing: it
// connects the sinks, waits for the initial state, then makes cfg.Changes changes and measures
// each from the write to the last sink holding it. Which version holds the change is found by
// a Delta stream of its own that decodes the ServiceEntries (the sinks read headers only, and
// churn moves the version on as well); the sinks are then waited for that version. It also
// times each change to the server listing it: listed, and served (the latency less listed,
// change by change), both sorted. cfg is given its defaults.
func runListed(ctx context.Context, cfg *RunConfig, jitter time.Duration, rep *Report, r listedRun) (listed, served []time.Duration, err error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Dir != "" || len(cfg.ZKServers) > 0 {
		return nil, nil, fmt.Errorf("%s with --dir or --zk-servers: the source serves one registry, give the one it reads", r.flag)
	}
	if !strings.HasSuffix(cfg.TypeURL, "/ServiceEntry") {
		return nil, nil, fmt.Errorf("--type %q: a run against %s reads the target's ServiceEntry, give a ServiceEntry type URL%s", cfg.TypeURL, r.name, r.typeHint)
	}
	if cfg.Sinks < 1 {
		return nil, nil, fmt.Errorf("--sinks %d: want at least 1", cfg.Sinks)
	}
	dialSink, err := sinkDialer(cfg.Protocol)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	*rep = Report{Sinks: cfg.Sinks, Protocol: cfg.Protocol, Registry: strings.ToLower(r.name)}
	ch, err := r.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer ch.Close()
	w, stopWatch, err := watchValues(ctx, cfg.Addr, cfg.TypeURL, ch)
	if err != nil {
		return nil, nil, err
	}
	defer stopWatch()

	sinks, closeSinks, err := syncSinks(ctx, dialSink, cfg.Addr, cfg.TypeURL, cfg.Sinks, cfg.Timeout, rep)
	defer closeSinks()
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(cfg.Progress, "%d %s sinks synced in %v\n", cfg.Sinks, cfg.Protocol, rep.InitialSync.Round(time.Microsecond))
	if cfg.Changes <= 0 {
		return nil, nil, scrapeRSS(ctx, cfg.MetricsURL, rep)
	}
	if r.before != nil {
		if err := r.before(ctx); err != nil {
			return nil, nil, fmt.Errorf("reading the source's metrics: %w", err)
		}
	}
	var keys []string
	updates0 := sinks[0].Count()
	for i := 1; i <= cfg.Changes; i++ {
		t0, key, err := ch.Change(ctx, i)
		if err != nil {
			return nil, nil, fmt.Errorf("change %d: %w", i, err)
		}
		keys = append(keys, key)
		lat, l, size, err := changeLatency(ctx, cfg.Timeout, ch, w, sinks, t0, key)
		if err != nil {
			return nil, nil, fmt.Errorf("change %d (%s): %w", i, ch.about(key), err)
		}
		rep.Latencies = append(rep.Latencies, lat)
		listed = append(listed, l)
		served = append(served, lat-l)
		rep.ChangeBytes = size
		rep.Changes++
		if i%10 == 0 {
			fmt.Fprintf(cfg.Progress, "%d/%d changes\n", i, cfg.Changes)
		}
		pause := cfg.Interval
		if jitter > 0 {
			pause += rand.N(jitter)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(pause):
		}
	}
	slices.Sort(rep.Latencies)
	slices.Sort(listed)
	slices.Sort(served)
	if r.after != nil {
		if err := r.after(ctx); err != nil {
			return nil, nil, fmt.Errorf("reading the source's metrics: %w", err)
		}
	}
	if err := r.verify(ctx, *cfg, keys); err != nil {
		return nil, nil, err
	}
	// After the check, which took a round trip: an update a change caused late is counted too.
	rep.Updates = sinks[0].Count() - updates0
	return listed, served, scrapeRSS(ctx, cfg.MetricsURL, rep)
}

// changeLatency waits for one change: the server listing it, the watcher finding the version
// that holds it, and every sink holding that version. It returns write -> last sink, write ->
// listed, and the bytes of that version's response to the last sink.
func changeLatency(ctx context.Context, timeout time.Duration, ch listedChanger, w *valueWatcher, sinks []*loadtest.Sink, t0 time.Time, key string) (sink, listed time.Duration, size int, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type listedAt struct {
		at  time.Time
		err error
	}
	listedc := make(chan listedAt, 1)
	go func() {
		at, err := ch.listed(ctx, key)
		listedc <- listedAt{at, err}
	}()
	version, err := w.wait(ctx, key)
	if err != nil {
		cancel()
		<-listedc
		return 0, 0, 0, err
	}
	var last time.Time
	for k, s := range sinks {
		a, err := s.Wait(ctx, version)
		if err != nil {
			cancel()
			<-listedc
			return 0, 0, 0, fmt.Errorf("sink %d never received version %s, which holds the change (a version skipped, or the sink's stream failed): %w", k, version, err)
		}
		if a.At.After(last) {
			last, size = a.At, a.Bytes
		}
	}
	l := <-listedc
	if l.err != nil {
		return 0, 0, 0, l.err
	}
	return last.Sub(t0), l.at.Sub(t0), size, nil
}

// valueWatcher is a Delta stream that decodes what the sinks skip: it finds the version in
// which each of a changer's keys is first served.
type valueWatcher struct {
	ch listedChanger

	mu      sync.Mutex
	seen    map[string]string // key -> the version it first appeared in
	err     error
	changed chan struct{} // closed and replaced when a key appears or the stream fails
}

// watchValues opens the watcher's stream and reads it in a goroutine that ends when ctx is
// done or the stream fails; stop closes the connection and waits for it.
func watchValues(ctx context.Context, addr, typeURL string, ch listedChanger) (w *valueWatcher, stop func(), err error) {
	conn, err := loadtest.Dial(addr)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	st, err := xdsclient.OpenDelta(ctx, conn, xdsclient.NewNode("galleon-load-watch"), []string{typeURL})
	if err != nil {
		cancel()
		conn.Close()
		return nil, nil, fmt.Errorf("watching %s on %s: %w", typeURL, addr, err)
	}
	w = &valueWatcher{ch: ch, seen: map[string]string{}, changed: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.read(st)
	}()
	return w, func() { cancel(); conn.Close(); <-done }, nil
}

func (w *valueWatcher) read(st *xdsclient.DeltaStream) {
	for {
		resp, err := st.Recv()
		if err == nil {
			err = st.ACK(resp)
		}
		if err != nil {
			w.mu.Lock()
			w.err = err
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
			return
		}
		found := false
		for _, r := range resp.Resources {
			m, err := r.Spec()
			se, ok := m.(*networkingv1alpha3.ServiceEntry)
			if err != nil || !ok {
				continue
			}
			keys := w.ch.served(r.Key(), se)
			w.mu.Lock()
			for _, k := range keys {
				if _, ok := w.seen[k]; !ok {
					w.seen[k] = resp.SystemVersionInfo
					found = true
				}
			}
			w.mu.Unlock()
		}
		if found {
			w.mu.Lock()
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
		}
	}
}

// wait returns the version in which key first appeared.
func (w *valueWatcher) wait(ctx context.Context, key string) (string, error) {
	for {
		w.mu.Lock()
		v, ok := w.seen[key]
		err, ch := w.err, w.changed
		w.mu.Unlock()
		switch {
		case ok:
			return v, nil
		case err != nil:
			return "", fmt.Errorf("the watching stream failed: %w", err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s: %w", w.ch.unserved(key), ctx.Err())
		case <-ch:
		}
	}
}

// servedEntry is a ServiceEntry and its namespace/name.
type servedEntry struct {
	key string
	se  *networkingv1alpha3.ServiceEntry
}

// servedEntries reads, on a fresh SotW stream, the ServiceEntries the source serves now, for a
// check after the changes.
func servedEntries(ctx context.Context, cfg RunConfig) ([]servedEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	conn, err := loadtest.Dial(cfg.Addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	st, err := xdsclient.OpenSotW(ctx, conn, xdsclient.NewNode("galleon-load-verify"), []string{cfg.TypeURL})
	if err != nil {
		return nil, fmt.Errorf("verifying the last change: %w", err)
	}
	resp, err := st.Recv()
	if err != nil {
		return nil, fmt.Errorf("verifying the last change: %w", err)
	}
	out := make([]servedEntry, 0, len(resp.Resources))
	for _, r := range resp.Resources {
		m, err := r.Spec()
		if err != nil {
			return nil, fmt.Errorf("verifying the last change: %w", err)
		}
		se, ok := m.(*networkingv1alpha3.ServiceEntry)
		if !ok {
			return nil, fmt.Errorf("verifying the last change: %s holds %T, not ServiceEntries", cfg.TypeURL, m)
		}
		out = append(out, servedEntry{r.Key(), se})
	}
	return out, nil
}

// firstError keeps the first failure of a generator's concurrent requests.
type firstError struct {
	mu    sync.Mutex
	first error
}

func (f *firstError) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == nil {
		f.first = err
	}
}

func (f *firstError) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

// retried calls try up to attempts times, pausing attempt seconds after the attempt-th failure
// (and calling failed, when not nil), until it succeeds; it returns the last failure, or ctx's
// error when ctx ends first.
func retried(ctx context.Context, attempts int, try func() error, failed func()) error {
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		if err = try(); err == nil {
			return nil
		}
		if failed != nil {
			failed()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * time.Second):
		}
	}
	return err
}

// registerProgress prints how far a generator's registration got, every 10% or every second.
type registerProgress struct {
	w     io.Writer
	name  string // the generator's, which starts each line
	total int
	start time.Time

	mu   sync.Mutex
	done int
	last time.Time
}

func newRegisterProgress(w io.Writer, name string, total int) *registerProgress {
	now := time.Now()
	return &registerProgress{w: w, name: name, total: total, start: now, last: now}
}

func (p *registerProgress) add() {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := p.done * 10 / p.total
	p.done++
	now := time.Now()
	if p.done*10/p.total == before && now.Sub(p.last) < time.Second {
		return
	}
	p.last = now
	el := now.Sub(p.start)
	fmt.Fprintf(p.w, "%s: %d/%d instances registered (%d%%), %v, %.0f a second\n",
		p.name, p.done, p.total, p.done*100/p.total, el.Round(time.Millisecond), float64(p.done)/max(el.Seconds(), 1e-3))
}

// pooledHTTPClient is a registry client's HTTP client: up to conns connections kept, each
// request bounded by timeout.
func pooledHTTPClient(conns int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}
