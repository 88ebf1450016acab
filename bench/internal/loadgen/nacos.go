package loadgen

// Nacos registries for load runs: NacosGenerate registers services through a Nacos server's
// gRPC API (Nacos 2.x, or a server with its API such as PolarisMesh's) and then churns them
// until stopped, and RunNacos makes a run's changes to the target service, one registration
// each, timing them to the sinks.
//
// The instances are registered as a Nacos 2 client registers them: ephemeral, over one gRPC
// connection that holds them (an InstanceRequest each, and one per change; nacostest/grpcwriter,
// over the adapter's own client), with no heartbeat; the server keeps them while the connection
// lives, so the generator runs for as long as the registry is needed, as a Eureka one does. Two other ways were tried
// on Polaris 1.18.1 and fail there: its HTTP API registers every instance ephemeral and
// heartbeat-checked with a 5 s TTL whatever the request says (apiserver/nacosserver/v1/discover/
// builder.go, BuildInstance; model/instance.go, ToSpecInstance), so without 100,000 heartbeats
// every 5 s the registry turns unhealthy within 30 s; and its gRPC PersistentInstanceRequest is
// routed to the ephemeral handler (v2/discover/server.go, initGRPCHandlers), which refuses it as
// "invalid request body type".

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest/grpcwriter"
	"github.com/galleon-mesh/galleon/internal/testing/polarisserver"
)

// NacosTargetService is the service a run changes in a Nacos registry.
const NacosTargetService = "load-target"

// Defaults of NacosGenerateConfig.
const (
	// DefaultNacosNamespace and DefaultNacosGroup are Nacos's own defaults.
	DefaultNacosNamespace = "public"
	DefaultNacosGroup     = "DEFAULT_GROUP"
	// DefaultNacosConcurrency is how many requests are in flight: registrations and churn
	// changes, one instance each. Polaris stores registrations in batches of up to 128 (after
	// 32 ms at most), each request waiting for its batch: 64 in flight fill half a batch.
	DefaultNacosConcurrency = 64
)

const (
	nacosPort = 8080
	// nacosChurnKey is the metadata key a churn change and a run's change set: the change's
	// number, or the run's token.
	nacosChurnKey = "churn"
	// nacosAttempts is how often a registration is tried before the generator gives up.
	nacosAttempts = 5
	// nacosCacheSettle is how long the service count must stay the same before waitServices
	// stops waiting for the services the server's cache missed (it is rebuilt every second).
	nacosCacheSettle = 5 * time.Second
	// nacosListWait bounds the wait for the server to list every registered instance.
	nacosListWait = 10 * time.Minute
	// nacosVisiblePoll is how often a run asks the server for the target while it waits for a
	// change to be listed.
	nacosVisiblePoll = 50 * time.Millisecond
	// maxNacosServices keeps generated addresses (filegen.InstanceAddr) distinct.
	maxNacosServices = 250*250 - 1
	// maxNacosChurn bounds the churn rate: one change a millisecond.
	maxNacosChurn = 1000
)

// Churn kinds (NacosGenerateConfig.ChurnKind).
const (
	// NacosChurnMetadata registers the instance again with a new value of its metadata key
	// "churn": a label change to the adapter.
	NacosChurnMetadata = "metadata"
	// NacosChurnWeight registers it again with a new weight (1 to 100, whole: Polaris keeps
	// weights as integers).
	NacosChurnWeight = "weight"
)

// nacosServiceName names generated service i.
func nacosServiceName(i int) string { return fmt.Sprintf("load-%05d", i) }

// nacosGenInstance is instance j of a generated service at ip, as a Spring Cloud Alibaba
// application registers it, with churn's changes applied: n (0: none) and the kind.
func nacosGenInstance(ip string, n int64, kind string) nacostest.Instance {
	in := nacostest.Instance{
		IP: ip, Port: nacosPort, Weight: 1, Healthy: true, Enabled: true, Cluster: nacostest.DefaultCluster,
		Metadata: map[string]string{"preserved.register.source": "SPRING_CLOUD", "version": "v1", "zone": "zone-a"},
	}
	switch {
	case n == 0:
	case kind == NacosChurnWeight:
		in.Weight = float64(n%100 + 1)
	default:
		in.Metadata[nacosChurnKey] = strconv.FormatInt(n, 10)
	}
	return in
}

// NacosGenerateConfig sizes a generated Nacos registry and its churn.
type NacosGenerateConfig struct {
	// Server is the server's HTTP address, host:port (what Nacos clients are given); GRPC its
	// gRPC address, default Server's port + 1000.
	Server, GRPC string
	// PolarisHTTP, if set, is a polaris-server's own HTTP API (host:port; its administrator's
	// token is the default of a new store): services the server lists without any instance
	// after their registrations are written again there (nacostest.Client.TouchServices), which
	// a registration cannot do. Polaris's cache can miss a service created under load
	// for good: 52 of 10,000 in one run.
	PolarisHTTP string
	// Namespace (ID) and Group the services are registered in; defaults "public" and
	// "DEFAULT_GROUP".
	Namespace, Group string
	// Services x Instances, plus NacosTargetService with Instances instances.
	Services, Instances int
	// Concurrency is how many requests are in flight: registrations and churn changes, one
	// instance each; default DefaultNacosConcurrency.
	Concurrency int
	// Churn is how many changes a second are made once everything is listed, each to one
	// instance of a generated service (never the target's), one registration each, in an
	// order that takes one instance of every service before a second of any; 0: none.
	// ChurnKind is what a change changes: NacosChurnMetadata (the default) or
	// NacosChurnWeight.
	Churn     float64
	ChurnKind string
	// Progress receives a line every 10% or second of the registration and one every
	// ReportInterval (default 10 s) after; nil: none.
	Progress       io.Writer
	ReportInterval time.Duration
	// Registered, when not nil, is called once every instance is registered and listed, as
	// the churn begins.
	Registered func(NacosGenerateStats)
}

// NacosGenerateStats is what NacosGenerate did.
type NacosGenerateStats struct {
	// Registered instances (generated and the target's, one request each), the time that
	// took, and when the server listed them all (from the start).
	Registered           int
	RegisterTook, Listed time.Duration
	// Retries are registrations tried again after a failure; Reregistered those made again
	// because the server did not list them (see nacosRelistAfter).
	Retries, Reregistered int64
	// Changes made by the churn, and those that failed.
	Changes, ChangeFailures int64
	// MaxBehind is how many changes the churn was behind its schedule at worst (every
	// request slot busy).
	MaxBehind int64
}

func (c *NacosGenerateConfig) check() error {
	if c.Services < 1 || c.Services > maxNacosServices || c.Instances < 1 || c.Instances > maxInstances {
		return fmt.Errorf("--services must be 1 to %d and --instances 1 to %d", maxNacosServices, maxInstances)
	}
	if c.GRPC == "" {
		addr, err := grpcAddrOf(c.Server)
		if err != nil {
			return err
		}
		c.GRPC = addr
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNacosNamespace
	}
	if c.Group == "" {
		c.Group = DefaultNacosGroup
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultNacosConcurrency
	}
	if c.Concurrency < 1 || c.Concurrency > 1024 {
		return fmt.Errorf("--concurrency %d: want 1 to 1024 requests in flight", c.Concurrency)
	}
	if c.Churn < 0 || c.Churn > maxNacosChurn || math.IsNaN(c.Churn) {
		return fmt.Errorf("--churn %v: want 0 to %d changes a second", c.Churn, maxNacosChurn)
	}
	if c.ChurnKind == "" {
		c.ChurnKind = NacosChurnMetadata
	}
	if c.ChurnKind != NacosChurnMetadata && c.ChurnKind != NacosChurnWeight {
		return fmt.Errorf("--churn-kind %q: want %s or %s", c.ChurnKind, NacosChurnMetadata, NacosChurnWeight)
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = 10 * time.Second
	}
	if c.ReportInterval < 100*time.Millisecond {
		return fmt.Errorf("--report-interval %v: want 100ms or more", c.ReportInterval)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// nacosGenerator is one NacosGenerate.
type nacosGenerator struct {
	cfg   NacosGenerateConfig
	g     *grpcwriter.Writer
	h     *nacosHTTP
	total int // instances: Services x Instances, then the target's
	// slots holds a token for each request in flight.
	slots chan struct{}

	retries, reregistered, changes, changeFailures atomic.Int64

	firstError
}

// ref is the reference of service i, -1 the target.
func (g *nacosGenerator) ref(i int) nacostest.Ref {
	name := NacosTargetService
	if i >= 0 {
		name = nacosServiceName(i)
	}
	return nacostest.Ref{Namespace: g.cfg.Namespace, Group: g.cfg.Group, Service: name}
}

// instance is instance j of service i (-1: the target) as generated.
func (g *nacosGenerator) instance(i, j int) nacostest.Instance {
	if i < 0 {
		return nacosGenInstance(targetAddr(j), 0, "")
	}
	return nacosGenInstance(filegen.InstanceAddr(i, j), 0, "")
}

// churned is change n (1, 2, ...): instance n-1 of the generated ones in an order that takes
// one instance of every service before a second of any, so that the changes of a second are
// spread over as many services as there are changes (each a different ServiceEntry).
func (g *nacosGenerator) churned(n int64) (int, nacostest.Instance) {
	c := int((n - 1) % int64(g.cfg.Services*g.cfg.Instances))
	i, j := c%g.cfg.Services, c/g.cfg.Services
	return i, nacosGenInstance(filegen.InstanceAddr(i, j), n, g.cfg.ChurnKind)
}

// NacosGenerate registers cfg.Services services of cfg.Instances instances each, plus
// NacosTargetService, through the gRPC API of the Nacos server at cfg.Server (its port + 1000,
// or cfg.GRPC), one request per instance, cfg.Concurrency in flight, over one connection that
// holds them. Service i is load-<i, 5 digits>; its instance j has the address
// 10.<i/250>.<i%250>.<j+1>, port 8080, as in the other generators. Once the server lists them
// all (its HTTP API) it calls cfg.Registered and starts the churn: cfg.Churn changes a second. It
// goes on until ctx is done, its normal end: it returns nil then, with what it did, and the
// server drops the instances with the connection. It fails when a registration fails five
// times, or when the connection is lost (the server dropped the instances).
func NacosGenerate(ctx context.Context, cfg NacosGenerateConfig) (stats NacosGenerateStats, err error) {
	if err := cfg.check(); err != nil {
		return stats, fmt.Errorf("nacos-generate: %w", err)
	}
	h, err := newNacosHTTP(cfg.Server, 16)
	if err != nil {
		return stats, fmt.Errorf("nacos-generate: %w", err)
	}
	if cfg.PolarisHTTP != "" {
		h.Client = nacostest.NewClient("http://"+cfg.Server, "http://"+cfg.PolarisHTTP, h.hc)
		h.PolarisToken = polarisserver.AdminToken
	}
	defer h.Close()
	gc, err := dialNacos(ctx, cfg.GRPC)
	if err != nil {
		return stats, fmt.Errorf("nacos-generate: %w", err)
	}
	defer gc.Close()
	g := &nacosGenerator{cfg: cfg, g: gc, h: h, total: (cfg.Services + 1) * cfg.Instances, slots: make(chan struct{}, cfg.Concurrency)}

	start := time.Now()
	if err := g.registerAll(ctx); err != nil {
		return g.stats(stats), fmt.Errorf("nacos-generate: %w", err)
	}
	stats.Registered, stats.RegisterTook = g.total, time.Since(start)
	fmt.Fprintf(cfg.Progress, "nacos-generate: registered %d instances in %v; waiting for the server to list them\n", g.total, stats.RegisterTook.Round(time.Millisecond))
	listed, err := g.waitListed(ctx)
	if err != nil {
		return g.stats(stats), fmt.Errorf("nacos-generate: %w", err)
	}
	stats.Listed = listed.Sub(start)
	fmt.Fprintf(cfg.Progress, "nacos-generate: the server lists all %d instances %v after the first registration; churning %g changes a second (%s)\n",
		g.total, stats.Listed.Round(time.Millisecond), cfg.Churn, cfg.ChurnKind)
	if cfg.Registered != nil {
		cfg.Registered(g.stats(stats))
	}
	behind, err := g.churn(ctx)
	stats = g.stats(stats)
	stats.MaxBehind = behind
	if err != nil {
		return stats, fmt.Errorf("nacos-generate: %w", err)
	}
	return stats, nil
}

func (g *nacosGenerator) stats(s NacosGenerateStats) NacosGenerateStats {
	s.Retries, s.Reregistered, s.Changes, s.ChangeFailures = g.retries.Load(), g.reregistered.Load(), g.changes.Load(), g.changeFailures.Load()
	return s
}

// registerAll registers every instance, the target's first, one request each, cfg.Concurrency
// in flight; it returns once all have been, or once one failed (after the ones in flight end).
// One request per instance, not a BatchInstanceRequest per service: Polaris answers a batch
// before it stores it (apiserver/nacosserver/v2/discover/instance.go,
// handleBatchInstanceRequest, with ContextOpenAsyncRegis) and drops what waited in its queue for
// over 30 s (service/batch/instance.go, registerHandler: taskLife), silently: at 1,000 x 10 it
// listed 882 services short. A single InstanceRequest waits for the store.
//
// Two rounds: every service's first instance, then, once the server's service cache holds every
// service, the others. Polaris looks a registration's service up in that cache (rebuilt every
// second) and, on a miss, in its bolt store by reading every service record
// (service/instance.go loadService, store/boltdb/service.go getServiceByNameAndNsCommon): one
// round in service order sent nine of every ten registrations to that scan, and the rate fell
// from 390 to 170 a second at 28,000 instances of 10,000 x 10. In the second round none misses.
func (g *nacosGenerator) registerAll(ctx context.Context) error {
	prog := newRegisterProgress(g.cfg.Progress, "nacos-generate", g.total)
	var first, rest []nacosKey
	for i := -1; i < g.cfg.Services; i++ {
		first = append(first, nacosKey{i, 0})
		for j := 1; j < g.cfg.Instances; j++ {
			rest = append(rest, nacosKey{i, j})
		}
	}
	if err := g.register(ctx, first, prog); err != nil {
		return err
	}
	if len(rest) == 0 {
		return nil
	}
	if err := g.waitServices(ctx); err != nil {
		return err
	}
	return g.register(ctx, rest, prog)
}

// waitServices waits until the server's service listing counts every service the generator
// registers (the count comes from the cache a registration looks its service up in), or until
// the count has not grown for nacosCacheSettle: under load Polaris's cache can miss a service
// written while it was being rebuilt (see nacosRelistAfter) until it is written again, and the
// few registrations of those that go to the store cost little; waitListed registers again what
// is still not listed.
func (g *nacosGenerator) waitServices(ctx context.Context) error {
	want, count, since := g.cfg.Services+1, -1, time.Now()
	for {
		n, _, err := g.h.Services(ctx, g.cfg.Namespace, g.cfg.Group, 1, 1)
		switch {
		case err == nil && n >= want:
			return nil
		case err == nil && n != count:
			count, since = n, time.Now()
		case time.Since(since) >= nacosCacheSettle && count >= 0:
			fmt.Fprintf(g.cfg.Progress, "nacos-generate: the server lists %d of the %d services (no more for %v); registering the other instances\n", count, want, nacosCacheSettle)
			return nil
		case time.Since(since) >= nacosListWait:
			return fmt.Errorf("%v after registering every service's first instance the server's service listing did not answer: %w", nacosListWait, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// nacosKey is instance j of service i (-1: the target).
type nacosKey struct{ i, j int }

// register registers the instances keys, cfg.Concurrency in flight, and returns once all have
// been, or once one failed (after the ones in flight end).
func (g *nacosGenerator) register(ctx context.Context, keys []nacosKey, prog *registerProgress) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, k := range keys {
		taken := false
		select {
		case g.slots <- struct{}{}:
			taken = true
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			if taken {
				<-g.slots // taken as ctx ended: give it back
			}
			break
		}
		wg.Go(func() {
			defer func() { <-g.slots }()
			if err := g.registerRetrying(ctx, g.ref(k.i), g.instance(k.i, k.j)); err != nil {
				if ctx.Err() == nil {
					g.fail(err)
				}
				cancel()
				return
			}
			if prog != nil {
				prog.add()
			}
		})
	}
	wg.Wait()
	if err := g.err(); err != nil {
		return err
	}
	return ctx.Err()
}

// registerRetrying registers in as an instance of ref, trying again after a failure.
func (g *nacosGenerator) registerRetrying(ctx context.Context, ref nacostest.Ref, in nacostest.Instance) error {
	err := retried(ctx, nacosAttempts, func() error { return g.g.Register(ctx, ref, in) }, func() { g.retries.Add(1) })
	if err == nil || ctx.Err() != nil {
		return err
	}
	return fmt.Errorf("registering %s/%s/%s %s failed %d times, the last: %w", ref.Namespace, ref.Group, ref.Service, in.IP, nacosAttempts, err)
}

// nacosRelistAfter is how long the generator waits for the server to list a registered
// instance before it registers it again. Polaris's cache reads what its store changed since
// a little before its last read; under load a write committed later than that is missed until
// the instance is written again (the Eureka generator meets the same).
const nacosRelistAfter = 15 * time.Second

// waitListed waits until the server lists every service with all its instances (cfg.Concurrency
// reads in flight, every service not yet complete read again every 2 s), registering again
// every nacosRelistAfter the instances it does not list.
func (g *nacosGenerator) waitListed(ctx context.Context) (time.Time, error) {
	wctx, cancel := context.WithTimeout(ctx, nacosListWait)
	defer cancel()
	pending := make([]int, 0, g.cfg.Services+1)
	for i := -1; i < g.cfg.Services; i++ {
		pending = append(pending, i)
	}
	start := time.Now()
	lastWrite := start
	var lastErr error
	for {
		missing, err := g.unlisted(wctx, pending)
		now := time.Now()
		if err == nil && len(missing) == 0 {
			return now, nil
		}
		if err != nil {
			lastErr = err
		}
		pending = pending[:0]
		var again []nacosKey
		for i, js := range missing {
			pending = append(pending, i)
			for _, j := range js {
				again = append(again, nacosKey{i, j})
			}
		}
		slices.Sort(pending)
		fmt.Fprintf(g.cfg.Progress, "nacos-generate: %v after the registrations the server does not list %d instances of %d services yet\n",
			now.Sub(start).Round(time.Second), len(again), len(pending))
		if now.Sub(lastWrite) >= nacosRelistAfter && len(again) > 0 {
			slices.SortFunc(again, func(a, b nacosKey) int { return cmp.Or(cmp.Compare(a.i, b.i), cmp.Compare(a.j, b.j)) })
			fmt.Fprintf(g.cfg.Progress, "nacos-generate: registering those %d instances again\n", len(again))
			if err := g.register(wctx, again, nil); err != nil {
				return now, err
			}
			if err := g.touchEmpty(wctx, missing); err != nil {
				return now, err
			}
			g.reregistered.Add(int64(len(again)))
			lastWrite = time.Now()
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return now, ctx.Err()
			}
			why := ""
			if lastErr != nil {
				why = fmt.Sprintf(" (the last failure: %v)", lastErr)
			}
			return now, fmt.Errorf("%v after the registrations the server does not list %d services with all their %d instances%s", nacosListWait, len(pending), g.cfg.Instances, why)
		case <-time.After(2 * time.Second):
		}
	}
}

// touchEmpty writes again, through Polaris's own API (cfg.PolarisHTTP; nothing without it), the
// services of missing listed without any of their instances.
func (g *nacosGenerator) touchEmpty(ctx context.Context, missing map[int][]int) error {
	if g.cfg.PolarisHTTP == "" {
		return nil
	}
	var refs []nacostest.Ref
	for _, i := range slices.Sorted(maps.Keys(missing)) {
		if len(missing[i]) == g.cfg.Instances {
			refs = append(refs, g.ref(i))
		}
	}
	if len(refs) == 0 {
		return nil
	}
	fmt.Fprintf(g.cfg.Progress, "nacos-generate: writing again the %d services listed without any instance (Polaris's own API)\n", len(refs))
	return g.h.TouchServices(ctx, refs, "galleon-load nacos-generate "+time.Now().UTC().Format(time.RFC3339Nano))
}

// unlisted returns, for each service of pending whose instance list does not hold all its
// instances healthy and enabled, the instances (j) it lacks; a service whose list could not be
// read is returned with none.
func (g *nacosGenerator) unlisted(ctx context.Context, pending []int) (map[int][]int, error) {
	var (
		mu      sync.Mutex
		out     = map[int][]int{}
		lastErr error
		wg      sync.WaitGroup
	)
	sem := make(chan struct{}, min(g.cfg.Concurrency, 16))
	for _, i := range pending {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			hosts, err := g.h.instances(ctx, g.ref(i))
			listed := map[string]bool{}
			for _, h := range hosts {
				if h.Healthy && h.Enabled {
					listed[h.IP] = true
				}
			}
			var lacks []int
			for j := range g.cfg.Instances {
				if !listed[g.instance(i, j).IP] {
					lacks = append(lacks, j)
				}
			}
			if err == nil && len(lacks) == 0 {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				lastErr, lacks = err, nil
			}
			out[i] = lacks
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		for _, i := range pending {
			if _, ok := out[i]; !ok {
				out[i] = nil
			}
		}
		return out, err
	}
	return out, lastErr
}

// churn makes cfg.Churn changes a second, each on a request slot, until ctx is done (it
// returns nil then) or the connection is lost; a change that finds every slot busy is made
// later, counted behind schedule meanwhile. It returns how far behind it was at worst.
func (g *nacosGenerator) churn(ctx context.Context) (maxBehind int64, err error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	nextReport := start.Add(g.cfg.ReportInterval)
	var made, behind int64
	for {
		select {
		case <-ctx.Done():
			return max(maxBehind, behind), nil
		case <-g.g.Done():
			return max(maxBehind, behind), fmt.Errorf("the connection to %s was lost, and the server dropped its instances with it: %v", g.cfg.GRPC, g.g.Err())
		case <-tick.C:
		}
		now := time.Now()
		if g.cfg.Churn > 0 {
			due := int64(now.Sub(start).Seconds() * g.cfg.Churn)
		changes:
			for ; made < due; made++ {
				select {
				case g.slots <- struct{}{}:
				default:
					break changes
				}
				i, in := g.churned(made + 1)
				ref := g.ref(i)
				wg.Go(func() {
					defer func() { <-g.slots }()
					err := g.g.Register(ctx, ref, in)
					if ctx.Err() != nil {
						return
					}
					g.changes.Add(1)
					if err != nil {
						g.changeFailures.Add(1)
					}
				})
			}
			behind = max(behind, due-made)
		}
		if !now.Before(nextReport) {
			nextReport = nextReport.Add(g.cfg.ReportInterval)
			fmt.Fprintf(g.cfg.Progress, "nacos-generate: %v: %d changes (%d failed, at most %d behind schedule)\n",
				now.Sub(start).Round(time.Second), g.changes.Load(), g.changeFailures.Load(), behind)
			maxBehind, behind = max(maxBehind, behind), 0
		}
	}
}

// nacosChanger registers an instance of its own in the target service, the mover, and changes
// it, one registration per change: a new value of its metadata key "churn", a token unique to
// the run and the change. The mover is the changer's: a Nacos 2 server keeps an instance while
// the connection that registered it lives, so the generator's instances cannot be changed from
// another process without being bound to it (and dropped when it ends); the mover is dropped
// when the run ends, leaving the registry as generated.
type nacosChanger struct {
	g   *grpcwriter.Writer
	h   *nacosHTTP
	ref nacostest.Ref
	in  nacostest.Instance // the mover as first registered
	// run prefixes every token of this run; tokens matches them.
	run    string
	tokens *regexp.Regexp
}

// newNacosChanger checks that the target is registered, registers the mover (at a mover
// address of its own, port 8080, with token 0) and waits until the server lists it.
func newNacosChanger(ctx context.Context, server, grpcAddr, namespace, group string, timeout time.Duration) (*nacosChanger, error) {
	h, err := newNacosHTTP(server, 4)
	if err != nil {
		return nil, err
	}
	ref := nacostest.Ref{Namespace: namespace, Group: group, Service: NacosTargetService}
	hosts, err := h.instances(ctx, ref)
	if err == nil && len(hosts) == 0 {
		err = fmt.Errorf("the server at %s lists no instance of %s in namespace %s, group %s: register it with galleon-load nacos-generate --nacos-server %s (and keep that running: the server keeps the instances while it does)",
			server, NacosTargetService, namespace, group, server)
	}
	if err == nil && grpcAddr == "" {
		grpcAddr, err = grpcAddrOf(server)
	}
	if err != nil {
		h.Close()
		return nil, err
	}
	g, err := dialNacos(ctx, grpcAddr)
	if err != nil {
		h.Close()
		return nil, err
	}
	// The mover's address is one no generated instance has, and another for every run: the
	// server drops the last run's mover when that run's connection ends, and does so a few
	// milliseconds late (Polaris: after a next run registered the same instance, seen).
	run := strconv.FormatInt(time.Now().UnixNano()/1e6, 36)
	ch := &nacosChanger{g: g, h: h, ref: ref, in: nacosGenInstance(filegen.MoverAddr(1+rand.N(moverVariants)), 0, ""),
		run: run, tokens: regexp.MustCompile(`^r` + run + `-[0-9]+$`)}
	if _, tok, err := ch.Change(ctx, 0); err == nil {
		lctx, cancel := context.WithTimeout(ctx, timeout)
		_, err = ch.listed(lctx, tok)
		cancel()
		if err != nil {
			ch.Close()
			return nil, fmt.Errorf("registering the run's own instance of %s: %w", NacosTargetService, err)
		}
	} else {
		ch.Close()
		return nil, err
	}
	return ch, nil
}

// token is change i's value of the metadata key "churn": a label value (letters, digits, '-').
func (ch *nacosChanger) token(i int) string { return "r" + ch.run + "-" + strconv.Itoa(i) }

// Change registers the mover again with change i's token: to Nacos, one instance of one
// service changed.
func (ch *nacosChanger) Change(ctx context.Context, i int) (time.Time, string, error) {
	in := ch.in
	in.Metadata = make(map[string]string, len(ch.in.Metadata)+1)
	for k, v := range ch.in.Metadata {
		in.Metadata[k] = v
	}
	tok := ch.token(i)
	in.Metadata[nacosChurnKey] = tok
	t0 := time.Now()
	if err := ch.g.Register(ctx, ch.ref, in); err != nil {
		return t0, "", fmt.Errorf("changing %s %s:%d to %s=%s: %w", NacosTargetService, in.IP, in.Port, nacosChurnKey, tok, err)
	}
	return t0, tok, nil
}

// Close ends the changer's connection: the server drops the mover.
func (ch *nacosChanger) Close() { _ = ch.g.Close(); ch.h.Close() }

// served returns the run's tokens among the endpoints' labels, whichever ServiceEntry holds
// them: the run needs no knowledge of how the adapter names the target.
func (ch *nacosChanger) served(_ string, se *networkingv1alpha3.ServiceEntry) []string {
	var out []string
	for _, ep := range se.GetEndpoints() {
		for _, v := range ep.GetLabels() {
			if ch.tokens.MatchString(v) {
				out = append(out, v)
			}
		}
	}
	return out
}

func (ch *nacosChanger) unserved(token string) string {
	return fmt.Sprintf("no ServiceEntry was served with an endpoint labelled %s (is instance metadata mapped to endpoint labels?)", token)
}

func (ch *nacosChanger) about(token string) string {
	return fmt.Sprintf("%s %s:%d given %s=%s", NacosTargetService, ch.in.IP, ch.in.Port, nacosChurnKey, token)
}

// listed waits until the server lists the mover with token in its metadata, asking every
// nacosVisiblePoll, and returns when it saw it.
func (ch *nacosChanger) listed(ctx context.Context, token string) (time.Time, error) {
	for {
		hosts, err := ch.h.instances(ctx, ch.ref)
		now := time.Now()
		if err == nil {
			for _, in := range hosts {
				if in.IP == ch.in.IP && in.Port == ch.in.Port && in.Metadata[nacosChurnKey] == token {
					return now, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return now, fmt.Errorf("the server never listed %s %s:%d with %s=%s: %w", NacosTargetService, ch.in.IP, ch.in.Port, nacosChurnKey, token, err)
		case <-ch.g.Done():
			return now, fmt.Errorf("the connection that registered %s %s:%d was lost: %v", NacosTargetService, ch.in.IP, ch.in.Port, ch.g.Err())
		case <-time.After(nacosVisiblePoll):
		}
	}
}

// NacosRunConfig is a run whose changes are made in a Nacos registry written by NacosGenerate.
type NacosRunConfig struct {
	// RunConfig's Addr, Sinks, Protocol, TypeURL (a ServiceEntry type), Changes, Interval,
	// MetricsURL, Timeout and Progress apply; Dir, Instances and the ZooKeeper fields do not.
	RunConfig
	// Server is the Nacos server's HTTP address, host:port, one of the source's
	// --nacos-servers; GRPC its gRPC address (default: its port + 1000).
	Server, GRPC string
	// Namespace and Group the target is registered in (NacosGenerate's).
	Namespace, Group string
	// IntervalJitter adds a random pause of up to this much after each change, so that
	// changes fall at every point of the server's cache refresh (Polaris: every second).
	IntervalJitter time.Duration
}

// NacosReport is what a run against a Nacos registry measured.
type NacosReport struct {
	Report
	// Listed is, per change (sorted), from the write to the server listing it in GET
	// /v1/ns/instance/list (polled every 50 ms): the server's own delay.
	Listed []time.Duration
	// Served is, per change (sorted), from the server listing it to the last sink holding it
	// (Latencies less Listed, change by change): the push, the adapter and the sinks, within
	// the 50 ms of the listing's polls (it may be below 0: a push can beat the poll).
	Served []time.Duration
	// Pushes are the source's pushes received over the changes, by outcome
	// (galleon_nacos_pushes_total), and Requests its requests, by kind
	// (galleon_nacos_requests_total); nil without MetricsURL.
	Pushes, Requests map[string]float64
}

// ListedPercentile is the p-th percentile of Listed.
func (r *NacosReport) ListedPercentile(p int) time.Duration { return percentile(r.Listed, p) }

// ServedPercentile is the p-th percentile of Served.
func (r *NacosReport) ServedPercentile(p int) time.Duration { return percentile(r.Served, p) }

// String renders the report for people.
func (r *NacosReport) String() string {
	var b strings.Builder
	r.writeHead(&b)
	if len(r.Latencies) > 0 {
		fmt.Fprintf(&b, "registry change -> listed by the server (GET /nacos/v1/ns/instance/list every %v): p50 %v  p99 %v  max %v\n",
			nacosVisiblePoll, r.ListedPercentile(50).Round(time.Millisecond), r.ListedPercentile(99).Round(time.Millisecond),
			r.Listed[len(r.Listed)-1].Round(time.Millisecond))
		fmt.Fprintf(&b, "listed by the server -> every sink (per change, within the %v of the polls): p50 %v  p99 %v  max %v\n",
			nacosVisiblePoll, r.ServedPercentile(50).Round(time.Millisecond), r.ServedPercentile(99).Round(time.Millisecond),
			r.Served[len(r.Served)-1].Round(time.Millisecond))
		fmt.Fprintf(&b, "updates per sink: %d while %d changes were made (other changes in the registry, churn, are served too)\n", r.Updates, r.Changes)
	}
	if r.Pushes != nil {
		fmt.Fprintf(&b, "nacos pushes over the changes: %s\n", formatCounts(r.Pushes))
		fmt.Fprintf(&b, "nacos requests over the changes: %s\n", formatCounts(r.Requests))
	}
	r.writeRSS(&b)
	return b.String()
}

// formatCounts renders counts by label value, "a 1, b 2" in the labels' order, "none" when
// there are none.
func formatCounts(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "none"
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.0f", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Metrics of the Nacos adapter a run reads (adapters/nacos/metrics.go).
const (
	nacosPushesMetric   = "galleon_nacos_pushes_total"   // by outcome
	nacosRequestsMetric = "galleon_nacos_requests_total" // by server, kind and result
)

// labelValue is the value of label name in a sample line, "" when it has none.
func labelValue(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 || (i > 0 && line[i-1] != '{' && line[i-1] != ',') {
		return ""
	}
	v := line[i+len(name)+2:]
	if j := strings.IndexByte(v, '"'); j >= 0 {
		return v[:j]
	}
	return ""
}

// scrapeNacosCounts returns galleon_nacos_pushes_total summed by outcome and
// galleon_nacos_requests_total summed by kind (each result counted; failed ones under
// "<kind> <result>").
func scrapeNacosCounts(ctx context.Context, url string) (pushes, requests map[string]float64, err error) {
	pushes, requests = map[string]float64{}, map[string]float64{}
	err = scrapeSamples(ctx, url, func(name string, v float64, line string) {
		switch name {
		case nacosPushesMetric:
			pushes[labelValue(line, "outcome")] += v
		case nacosRequestsMetric:
			k := labelValue(line, "kind")
			if r := labelValue(line, "result"); r != "ok" && r != "" {
				k += " " + r
			}
			requests[k] += v
		}
	})
	return pushes, requests, err
}

// RunNacos is Run against a source serving a Nacos registry written by NacosGenerate (see
// runListed): it changes the run's own instance of the target cfg.Changes times (a new
// metadata value, one registration each) and times each to the last sink holding it and to
// the server listing it. The watcher looks for the change's token among the endpoints'
// labels.
func RunNacos(ctx context.Context, cfg NacosRunConfig) (*NacosReport, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNacosNamespace
	}
	if cfg.Group == "" {
		cfg.Group = DefaultNacosGroup
	}
	rep := &NacosReport{}
	var pushes0, requests0 map[string]float64
	run := listedRun{
		flag: "--nacos-server", name: "Nacos",
		open: func(ctx context.Context) (listedChanger, error) {
			return newNacosChanger(ctx, cfg.Server, cfg.GRPC, cfg.Namespace, cfg.Group, cfg.Timeout)
		},
		verify: verifyLabel,
	}
	if cfg.MetricsURL != "" {
		run.before = func(ctx context.Context) (err error) {
			pushes0, requests0, err = scrapeNacosCounts(ctx, cfg.MetricsURL)
			return err
		}
		run.after = func(ctx context.Context) error {
			pushes, requests, err := scrapeNacosCounts(ctx, cfg.MetricsURL)
			rep.Pushes, rep.Requests = diffCounts(pushes, pushes0), diffCounts(requests, requests0)
			return err
		}
	}
	var err error
	rep.Listed, rep.Served, err = runListed(ctx, &cfg.RunConfig, cfg.IntervalJitter, &rep.Report, run)
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// verifyLabel checks, after the changes, that what the sinks were timed to receive is the
// state the changes made: a fresh SotW stream must serve exactly one endpoint labelled with the
// last change's token, and none with the one before.
func verifyLabel(ctx context.Context, cfg RunConfig, tokens []string) error {
	if len(tokens) == 0 {
		return nil
	}
	entries, err := servedEntries(ctx, cfg)
	if err != nil {
		return err
	}
	last, prev := tokens[len(tokens)-1], ""
	if len(tokens) > 1 {
		prev = tokens[len(tokens)-2]
	}
	var at, atPrev []string
	for _, e := range entries {
		for _, ep := range e.se.GetEndpoints() {
			for _, v := range ep.GetLabels() {
				switch {
				case v == last:
					at = append(at, e.key+" "+ep.GetAddress())
				case v == prev && prev != "":
					atPrev = append(atPrev, e.key+" "+ep.GetAddress())
				}
			}
		}
	}
	if len(at) != 1 {
		return fmt.Errorf("after the changes the source serves %d endpoints labelled %s, the last change's token, %v, want 1: "+
			"the versions the sinks were timed on were not these changes; is something else changing the registry?", len(at), last, at)
	}
	if len(atPrev) != 0 {
		return fmt.Errorf("after the changes the source still serves endpoints labelled %s, the change before the last's token: %v", prev, atPrev)
	}
	return nil
}
