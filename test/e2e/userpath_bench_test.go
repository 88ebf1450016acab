package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/internal/testing/procstat"
	"github.com/galleon-mesh/galleon/test/internal/proc"
	"github.com/galleon-mesh/galleon/test/istiod"
	"github.com/galleon-mesh/galleon/test/sidecar"
)

// The user's path: a registry change (a registry served by its adapter: userPathRegistry) ->
// istiod (real, default settings: no PILOT_DEBOUNCE tweaks) -> a sidecar connected to istiod.
// One change moves the first instance of the registry's target service to filegen.MoverAddr(v):
// an endpoint-only change, so istiod must take it as an EDS update, never a full push.

const (
	// userPathInstances is the instances per generated service, the target's included.
	userPathInstances = 10
	// userPathSettle is the pause before each change, so the previous change's pushes are over.
	userPathSettle = 200 * time.Millisecond
	// userPathPoll is how often istiod's pilot_inbound_updates{type="eds"} is read.
	userPathPoll = 5 * time.Millisecond
	// userPathIdle is how long the processes' idle CPU is measured before the loop.
	userPathIdle = 2 * time.Second
	// userPathScrapes is how many istiod /metrics scrapes measure what one scrape costs istiod.
	userPathScrapes = 20
	// userPathChangeTimeout bounds one change's trip to the sidecar.
	userPathChangeTimeout = time.Minute
)

// BenchmarkUserPath measures the user's path through each registry of GALLEON_USERPATH_REGISTRIES
// (default "file"; any of file, peer, zookeeper, consul, consul-watches, nacos and eureka: newUserPathRegistry), at each scale of
// GALLEON_USERPATH_SERVICES (default "1000,10000") and shard count of GALLEON_USERPATH_SHARDS
// (default "1"). The processes of one scale are set up here, once, and stopped before the next
// scale starts (they would take CPU from it); the child benchmark "R/services=S/shards=K" makes
// b.N changes. Choose with the variables: a -bench pattern that skips a child does not skip its
// set-up.
func BenchmarkUserPath(b *testing.B) {
	for _, name := range envWords(b, "GALLEON_USERPATH_REGISTRIES", "file") {
		if _, err := newUserPathRegistry(name); err != nil {
			b.Fatalf("GALLEON_USERPATH_REGISTRIES: %v", err)
		}
		for _, services := range envInts(b, "GALLEON_USERPATH_SERVICES", "1000,10000") {
			for _, shards := range envInts(b, "GALLEON_USERPATH_SHARDS", "1") {
				if name == "peer" && shards > 1 {
					b.Logf("peer: one source only, shards=%d left out", shards)
					continue
				}
				reg, _ := newUserPathRegistry(name)
				u := startUserPath(b, reg, services, shards)
				b.Run(fmt.Sprintf("%s/services=%d/shards=%d", name, services, shards), func(b *testing.B) {
					r := u.measure(b, b.N)
					if r.fullPushes != 0 {
						b.Errorf("%d endpoint-only changes caused %v full pushes in istiod, want 0", b.N, r.fullPushes)
					}
					r.report(b)
				})
				u.stop()
			}
		}
	}
}

// TestUserPathHarness runs BenchmarkUserPath's set-up and measurement at 50 services, 3 changes:
// every change reaches istiod and the sidecar, the sidecar ends with the moved instance, and no
// change costs a full push: galleon-file with one source and with two shards, galleon-peer
// (go-control-plane) on galleon-file's registry, galleon-zookeeper (Dubbo 2 providers in a
// real ZooKeeper), galleon-consul (a real Consul agent), by default and with a watch per
// service, galleon-nacos and galleon-eureka (real Nacos and Eureka API servers).
func TestUserPathHarness(t *testing.T) {
	for _, c := range []struct {
		registry string
		shards   int
	}{{"file", 1}, {"file", 2}, {"peer", 1}, {"zookeeper", 1}, {"consul", 1}, {"consul-watches", 1}, {"nacos", 1}, {"eureka", 1}} {
		t.Run(fmt.Sprintf("%s/shards=%d", c.registry, c.shards), func(t *testing.T) {
			const changes = 3
			reg, err := newUserPathRegistry(c.registry)
			if err != nil {
				t.Fatal(err)
			}
			u := startUserPath(t, reg, 50, c.shards)
			defer u.stop()
			r := u.measure(t, changes)
			if len(r.istiod) != changes || len(r.sidecar) != changes {
				t.Errorf("changes seen: istiod %d, sidecar %d, want %d each", len(r.istiod), len(r.sidecar), changes)
			}
			moved := u.mover(u.variant)
			if !slices.Contains(r.lastEndpoints, moved) || len(r.lastEndpoints) != userPathInstances {
				t.Errorf("sidecar's last EDS of %s: %v, want %d endpoints with %s", u.reg.cluster(), r.lastEndpoints, userPathInstances, moved)
			}
			if previous := u.mover(u.variant - 1); slices.Contains(r.lastEndpoints, previous) {
				t.Errorf("sidecar's last EDS of %s still holds the previous place %s", u.reg.cluster(), previous)
			}
			if r.fullPushes != 0 {
				t.Errorf("%d endpoint-only changes caused %v full pushes, want 0", changes, r.fullPushes)
			}
			r.log(t)
		})
	}
}

// userPath is one scale's running path: the registry, its adapter, istiod and the sidecar's EDS
// stream, plus the idle CPU measured once they settled.
type userPath struct {
	reg      userPathRegistry
	g        *galleon
	ist      *istiod.Istiod
	eds      *sidecar.Watcher
	endWatch context.CancelFunc
	// variant is the target's last MoverAddr variant: each change writes the next, across the
	// benchmark's runs (b.N=1, then more), so every change really moves the instance.
	variant int
	// idle is the CPU the adapter and istiod use per second with nothing to do; scrape is what
	// one /metrics scrape costs istiod (the loop polls it every 5ms).
	idleGalleon, idleIstiod, scrape time.Duration
}

// startUserPath writes reg's registry of services x 10 instances plus the target, starts its
// adapter on it with 1 ms / 10 ms debounce windows (with shards > 1, serving shards shard
// listeners that istiod reads instead of --listen), istiod and the sidecar's EDS stream, waits
// for the initial state to reach the sidecar and istiod to settle, and measures idle CPU.
func startUserPath(tb testing.TB, reg userPathRegistry, services, shards int) *userPath {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	u := &userPath{reg: reg}
	start := time.Now()
	bin, args := reg.setUp(tb, ctx, services)
	args = append(args, "--debounce-quiet", "1ms", "--debounce-max", "10ms")
	var sources []string
	if shards > 1 {
		addrs, err := proc.FreeAddrs(shards)
		if err != nil {
			tb.Fatal(err)
		}
		args = append(args, "--shard-listen", strings.Join(addrs, ","))
		sources = addrs
	}
	u.g = startGalleon(tb, galleonBinary(tb, bin), args...)
	if sources == nil {
		sources = []string{u.g.Addr}
	}
	// istiod exits at start when a source does not answer: wait for every shard listener.
	for _, a := range sources {
		if err := u.g.WaitFor(ctx, func() (bool, error) { return proc.DialOK(a) == nil, nil }); err != nil {
			tb.Fatalf("shard listener %s: %v", a, err)
		}
	}
	u.ist = istiod.Start(tb, istiod.Options{ConfigSources: sources})
	if _, err := u.ist.WaitPushed(ctx, istiod.PushCounters{}); err != nil {
		tb.Fatalf("istiod's first push: %v", err)
	}
	var watchCtx context.Context
	watchCtx, u.endWatch = context.WithCancel(context.Background())
	tb.Cleanup(u.stop)
	var err error
	if u.eds, err = sidecar.Watch(watchCtx, u.ist.GRPCAddr, sidecarPod(), sidecar.TypeEndpoint, []string{reg.cluster()}); err != nil {
		tb.Fatal(err)
	}
	if _, _, err := u.waitSidecar(ctx, func(eps []string) bool { return len(eps) == userPathInstances }); err != nil {
		tb.Fatalf("sidecar's initial EDS of %s: %v", reg.cluster(), err)
	}
	if err := waitPushesQuiet(ctx, u.ist, time.Second); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%s, services=%d shards=%d: initial state in the sidecar, istiod quiet, %v after start", bin, services, shards, time.Since(start).Round(time.Millisecond))
	u.drain()
	u.measureIdle(tb, ctx)
	return u
}

// stop ends the sidecar's stream and stops istiod, the adapter and the registry's server
// (idempotent).
func (u *userPath) stop() {
	if u.endWatch != nil {
		u.endWatch()
	}
	if u.ist != nil {
		u.ist.Stop()
	}
	if u.g != nil {
		u.g.Stop()
	}
	u.reg.close()
}

// measureIdle measures the CPU both processes use doing nothing, and what an istiod /metrics
// scrape costs, so the loop's CPU can be reduced to what the changes cost.
func (u *userPath) measureIdle(tb testing.TB, ctx context.Context) {
	tb.Helper()
	c0 := u.cpu(tb)
	start := time.Now()
	time.Sleep(userPathIdle)
	c1, elapsed := u.cpu(tb), time.Since(start)
	u.idleGalleon = perSecond(c1.galleon-c0.galleon, elapsed)
	u.idleIstiod = perSecond(c1.istiod-c0.istiod, elapsed)

	start = time.Now()
	for range userPathScrapes {
		if _, err := u.ist.InboundUpdates(ctx, "eds"); err != nil {
			tb.Fatal(err)
		}
	}
	c2, elapsed := u.cpu(tb), time.Since(start)
	u.scrape = max(0, (c2.istiod-c1.istiod-idleFor(u.idleIstiod, elapsed))/userPathScrapes)
	tb.Logf("idle CPU per second: adapter %v, istiod %v; one istiod /metrics scrape: %v", u.idleGalleon, u.idleIstiod, u.scrape)
}

// userPathResult is what one measured loop saw.
type userPathResult struct {
	changes int
	// istiod and sidecar are each change's time from the registry write to istiod's EDS update
	// (seen by polling, so up to userPathPoll plus a scrape late) and to the sidecar's EDS
	// response holding the moved instance.
	istiod, sidecar []time.Duration
	// istiodCPU and galleonCPU are the CPU per change, idle (and istiod's polled scrapes) taken
	// off.
	istiodCPU, galleonCPU time.Duration
	scrapes               int
	sentBytes             float64 // galleon_xds_response_bytes_total per change
	sidecarBytes          float64 // EDS bytes the sidecar received per change
	fullPushes            float64
	lastEndpoints         []string // the sidecar's last EDS of the target
}

// measure makes n changes, one at a time, each after userPathSettle, and measures them. A change
// that does not reach istiod and the sidecar within userPathChangeTimeout fails tb. With a
// *testing.B, only the changes' trips are timed.
func (u *userPath) measure(tb testing.TB, n int) userPathResult {
	tb.Helper()
	b, _ := tb.(*testing.B)
	if b != nil {
		b.StopTimer()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n)*(userPathChangeTimeout+userPathSettle))
	defer cancel()
	r := userPathResult{changes: n}
	pushes0, err := u.ist.PushCounters(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	sent0 := u.galleonSentBytes(tb, ctx)
	u.drain()
	cpu0, start := u.cpu(tb), time.Now()
	for range n {
		time.Sleep(userPathSettle)
		eds0, err := u.ist.InboundUpdates(ctx, "eds")
		if err != nil {
			tb.Fatal(err)
		}
		r.scrapes++
		u.variant++
		mover := u.mover(u.variant)
		if b != nil {
			b.StartTimer()
		}
		t0 := time.Now()
		if err := u.reg.move(ctx, u.variant); err != nil {
			tb.Fatal(err)
		}
		tIstiod, scrapes, err := waitEDSUpdate(ctx, u.ist, eds0)
		r.scrapes += scrapes
		if err != nil {
			tb.Fatalf("change %d (%s): istiod: %v", u.variant, mover, err)
		}
		seen, bytes, err := u.waitSidecar(ctx, func(eps []string) bool { return slices.Contains(eps, mover) })
		if b != nil {
			b.StopTimer()
		}
		r.sidecarBytes += float64(bytes)
		if err != nil {
			tb.Fatalf("change %d (%s): sidecar: %v", u.variant, mover, err)
		}
		r.istiod = append(r.istiod, tIstiod.Sub(t0))
		r.sidecar = append(r.sidecar, seen.resp.Received.Sub(t0))
		r.lastEndpoints = seen.eps
	}
	time.Sleep(userPathSettle) // what the last change still costs
	cpu1, elapsed := u.cpu(tb), time.Since(start)
	r.sidecarBytes += float64(u.drain())
	sent1 := u.galleonSentBytes(tb, ctx)
	pushes1, err := u.ist.PushCounters(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	r.istiodCPU = (cpu1.istiod - cpu0.istiod - idleFor(u.idleIstiod, elapsed) - time.Duration(r.scrapes)*u.scrape) / time.Duration(n)
	r.galleonCPU = (cpu1.galleon - cpu0.galleon - idleFor(u.idleGalleon, elapsed)) / time.Duration(n)
	r.sentBytes = (sent1 - sent0) / float64(n)
	r.sidecarBytes /= float64(n)
	r.fullPushes = pushes1.FullPushes - pushes0.FullPushes
	return r
}

// sidecarEDS is an EDS response of the sidecar's stream and the target's endpoints in it.
type sidecarEDS struct {
	resp sidecar.Response
	eps  []string
}

// waitSidecar reads the sidecar's EDS responses until one holds target endpoints ok accepts, and
// returns it with the bytes of every response read (that one included).
func (u *userPath) waitSidecar(ctx context.Context, ok func(eps []string) bool) (sidecarEDS, int, error) {
	bytes := 0
	for {
		select {
		case r, open := <-u.eds.Responses:
			if !open {
				return sidecarEDS{}, bytes, fmt.Errorf("EDS stream ended: %w", u.eds.Err())
			}
			bytes += r.Size
			if eps, found := r.Endpoints(u.reg.cluster()); found && ok(eps) {
				return sidecarEDS{resp: r, eps: eps}, bytes, nil
			}
		case <-ctx.Done():
			return sidecarEDS{}, bytes, ctx.Err()
		}
	}
}

// drain reads the responses already delivered on the sidecar's stream and returns their bytes.
func (u *userPath) drain() int {
	bytes := 0
	for {
		select {
		case r, open := <-u.eds.Responses:
			if !open {
				return bytes
			}
			bytes += r.Size
		default:
			return bytes
		}
	}
}

// waitEDSUpdate polls istiod's pilot_inbound_updates{type="eds"} every userPathPoll until it
// exceeds before, and returns when the scrape that saw it returned and how many scrapes it took.
func waitEDSUpdate(ctx context.Context, ist *istiod.Istiod, before float64) (time.Time, int, error) {
	for scrapes := 1; ; scrapes++ {
		v, err := ist.InboundUpdates(ctx, "eds")
		if err != nil {
			return time.Time{}, scrapes, err
		}
		if v > before {
			return time.Now(), scrapes, nil
		}
		select {
		case <-time.After(userPathPoll):
		case <-ctx.Done():
			return time.Time{}, scrapes, fmt.Errorf("pilot_inbound_updates{type=\"eds\"} stayed %v: %w", before, ctx.Err())
		}
	}
}

// waitPushesQuiet waits until istiod's push counters stay the same for quiet: its initial
// pushes are over.
func waitPushesQuiet(ctx context.Context, ist *istiod.Istiod, quiet time.Duration) error {
	last, err := ist.PushCounters(ctx)
	for err == nil {
		select {
		case <-time.After(quiet):
		case <-ctx.Done():
			return fmt.Errorf("istiod kept pushing: %w", ctx.Err())
		}
		var now istiod.PushCounters
		if now, err = ist.PushCounters(ctx); err == nil && now == last {
			return nil
		}
		last = now
	}
	return err
}

// galleonSentBytes is the adapter's galleon_xds_response_bytes_total, summed over its labels (0
// before the first response).
func (u *userPath) galleonSentBytes(tb testing.TB, ctx context.Context) float64 {
	tb.Helper()
	fams, _, err := scrapeMetrics(ctx, u.g)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := istiod.MetricValue(fams, "galleon_xds_response_bytes_total", nil)
	if err != nil && !errors.Is(err, istiod.ErrMetricNotFound) {
		tb.Fatal(err)
	}
	return v
}

// cpuTimes are the CPU times (user + system) the adapter and istiod have used.
type cpuTimes struct{ galleon, istiod time.Duration }

func (u *userPath) cpu(tb testing.TB) cpuTimes {
	tb.Helper()
	g, err := processCPU(u.g.Pid())
	if err != nil {
		tb.Fatal(err)
	}
	i, err := processCPU(u.ist.Pid())
	if err != nil {
		tb.Fatal(err)
	}
	return cpuTimes{galleon: g, istiod: i}
}

// processCPU is the user + system CPU time of process pid and all its threads.
func processCPU(pid int) (time.Duration, error) {
	st, err := procstat.Read(pid)
	return st.CPU(), err
}

// perSecond is the CPU per second of wall time d over elapsed.
func perSecond(d, elapsed time.Duration) time.Duration {
	return time.Duration(float64(d) / elapsed.Seconds())
}

// idleFor is the CPU a process using rate per second uses in elapsed.
func idleFor(rate, elapsed time.Duration) time.Duration {
	return time.Duration(float64(rate) * elapsed.Seconds())
}

// report gives the benchmark its metrics.
func (r userPathResult) report(b *testing.B) {
	b.ReportMetric(ms(percentile(r.istiod, 50)), "istiod-p50-ms")
	b.ReportMetric(ms(slices.Max(r.istiod)), "istiod-max-ms")
	b.ReportMetric(ms(percentile(r.sidecar, 50)), "sidecar-p50-ms")
	b.ReportMetric(ms(slices.Max(r.sidecar)), "sidecar-max-ms")
	b.ReportMetric(ms(r.istiodCPU), "istiod-cpu-ms/change")
	b.ReportMetric(ms(r.galleonCPU), "galleon-cpu-ms/change")
	b.ReportMetric(r.sentBytes, "sent-bytes/change")
	b.ReportMetric(r.fullPushes, "full-pushes")
	r.log(b)
}

// log writes what report does not: every change's times, the sidecar's bytes and the scrapes.
func (r userPathResult) log(tb testing.TB) {
	tb.Helper()
	tb.Logf("%d changes: istiod %v, sidecar %v; CPU per change istiod %v (%d scrapes taken off), adapter %v; galleon sent %.0f B/change, sidecar received %.0f B/change; full pushes %v",
		r.changes, r.istiod, r.sidecar, r.istiodCPU, r.scrapes, r.galleonCPU, r.sentBytes, r.sidecarBytes, r.fullPushes)
}

// percentile is the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	i := (len(s)*p + 99) / 100
	return s[max(i, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// mover is the sidecar's endpoint of the target's moving instance in variant v.
func (u *userPath) mover(v int) string {
	return net.JoinHostPort(filegen.MoverAddr(v), strconv.Itoa(u.reg.port()))
}

// envWords reads a comma-separated list of names from the environment variable name, or def
// when it is unset.
func envWords(tb testing.TB, name, def string) []string {
	tb.Helper()
	s := cmp.Or(os.Getenv(name), def)
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			tb.Fatalf("%s=%q: want names separated by commas", name, s)
		}
		out = append(out, f)
	}
	return out
}

// envInts reads a comma-separated list of positive integers from the environment variable name,
// or def when it is unset.
func envInts(tb testing.TB, name, def string) []int {
	tb.Helper()
	s := os.Getenv(name)
	if s == "" {
		s = def
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			tb.Fatalf("%s=%q: want positive integers separated by commas", name, s)
		}
		out = append(out, n)
	}
	return out
}
