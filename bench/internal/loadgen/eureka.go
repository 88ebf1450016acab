package loadgen

// Eureka registries for load runs: EurekaGenerate registers applications
// through a Eureka server's REST API (Netflix Eureka 1.x, or a server with
// its API such as PolarisMesh's) and then keeps them alive and churning
// until stopped, and RunEureka makes a run's changes to the target
// application, one registration each, timing them to the sinks.
//
// A Eureka registry is not written once like a ZooKeeper one: every
// instance must renew its lease (PUT /apps/{APP}/{ID}) or the server drops
// it (Eureka when its lease runs out, 90 s by default; Polaris three
// heartbeat TTLs after the last renewal it processed, also 90 s for that
// lease), so the generator runs for as long as the registry is needed.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
)

// TargetApp is the application a run changes in a Eureka registry; the
// adapter serves it as ServiceEntry load-target.
const TargetApp = "LOAD-TARGET"

// Defaults of EurekaGenerateConfig.
const (
	// DefaultEurekaConcurrency is how many requests the generator has in
	// flight, half of them at most registrations and churn. At 20,000
	// instances renewed every 30 s it must sustain about 670 renewals a
	// second; Polaris batches heartbeats (up to 32 a batch, or after
	// 32 ms), so each takes a few tens of milliseconds, and a registration
	// seconds when it is loaded.
	DefaultEurekaConcurrency = 128
	// DefaultRenewInterval is Eureka clients' own
	// (eureka.instance.lease-renewal-interval-in-seconds).
	DefaultRenewInterval = 30 * time.Second
	// DefaultChurnInterval is the Eureka adapter's default --eureka-poll-interval:
	// ChurnPercent is "per poll".
	DefaultChurnInterval = 10 * time.Second
	// DefaultLeaseDuration is Eureka clients' own
	// (eureka.instance.lease-expiration-duration-in-seconds).
	DefaultLeaseDuration = 90 * time.Second
)

const (
	eurekaAppPort = 8080
	// eurekaChurnKey is the metadata key a churned instance is registered
	// again with, its value the change's number.
	eurekaChurnKey = "churn"
	// eurekaRequestTimeout bounds one request of the generator or a run
	// (the adapter's default --eureka-timeout).
	eurekaRequestTimeout = 30 * time.Second
	// eurekaAttempts is how often a registration is tried before the
	// generator gives up: a loaded server stalls (Polaris, rebuilding its
	// listings every second on a busy machine, answered nothing for over
	// 15 s at times while 20,000 instances registered).
	eurekaAttempts = 5
	// eurekaListWait bounds the wait for the server to list every
	// registered instance. Polaris rebuilds its listing every second, but
	// under load its store commits a registration seconds after it stamps
	// it, and its cache, which reads what changed since 5 s before its last
	// read, then misses it until the instance is registered again (a 404 to
	// a renewal) or until it reloads everything (when, once a minute, it
	// counts fewer instances than its store).
	eurekaListWait = 5 * time.Minute
	// eurekaVisiblePoll is how often a run asks the server for the target
	// application while it waits for a change to be listed.
	eurekaVisiblePoll = 50 * time.Millisecond
	// maxEurekaApps keeps generated addresses (mapAddr) distinct.
	maxEurekaApps = 250*250 - 1
)

// eurekaApp names generated application i.
func eurekaApp(i int) string { return fmt.Sprintf("LOAD-%05d", i) }

// eurekaInstanceID is the instanceId of instance j of app.
func eurekaInstanceID(app string, j int) string { return strings.ToLower(app) + "-" + strconv.Itoa(j) }

// eurekaInstance is one registration: what an instance of a Spring Cloud
// Netflix application sends.
type eurekaInstance struct {
	app, id, ip string
	// churn, when not 0, is added to the metadata: the change's number.
	churn int64
	// lease is leaseInfo: durationInSecs, and renewalIntervalInSecs a third
	// of it (Eureka's defaults are 90 and 30). Polaris marks an instance
	// unhealthy 3 x TTL after its last renewal, TTL being
	// min(durationInSecs/3, renewalIntervalInSecs), and makes a TTL over
	// 60 s 5 s: its longest lease is 180 s.
	lease eurekaLease
}

// eurekaLease is an instance's leaseInfo, in seconds.
type eurekaLease struct {
	Renewal  int `json:"renewalIntervalInSecs"`
	Duration int `json:"durationInSecs"`
}

func leaseOf(d time.Duration) eurekaLease {
	secs := max(int(d/time.Second), 3)
	return eurekaLease{Renewal: secs / 3, Duration: secs}
}

// registration is the instance as Spring Cloud Netflix's client registers it
// (the URLs, lease and metadata make an instance as long as a real one in
// listings).
func (in eurekaInstance) registration() eurekatest.Instance {
	meta := map[string]string{"management.port": "8081", "zone": "zone-a", "version": "v1"}
	if in.churn != 0 {
		meta[eurekaChurnKey] = strconv.FormatInt(in.churn, 10)
	}
	vip := strings.ToLower(in.app)
	return eurekatest.Instance{
		App: in.app, ID: in.id, HostName: in.ip, IPAddr: in.ip,
		VIPAddress: vip, SecureVIPAddress: vip,
		Port: eurekaAppPort, SecurePort: 443, SecurePortOff: true,
		Metadata:      meta,
		LeaseDuration: time.Duration(in.lease.Duration) * time.Second, RenewalInterval: time.Duration(in.lease.Renewal) * time.Second,
		Extra: map[string]any{
			"overriddenStatus":              "UNKNOWN",
			"countryId":                     1,
			"homePageUrl":                   "http://" + net.JoinHostPort(in.ip, strconv.Itoa(eurekaAppPort)) + "/",
			"statusPageUrl":                 "http://" + net.JoinHostPort(in.ip, "8081") + "/actuator/info",
			"healthCheckUrl":                "http://" + net.JoinHostPort(in.ip, "8081") + "/actuator/health",
			"isCoordinatingDiscoveryServer": "false",
		},
	}
}

// newEurekaClient checks base and returns a client of the Eureka server
// there keeping up to conns connections.
func newEurekaClient(base string, conns int) (*eurekatest.Client, error) {
	if base == "" {
		return nil, errors.New("--eureka-url is empty: give the Eureka server's base URL, e.g. http://127.0.0.1:8761/eureka")
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		return nil, fmt.Errorf("--eureka-url %q: want the server's base URL, http(s)://host:port/eureka (what clients call its serviceUrl)", base)
	}
	return eurekatest.NewClient(base, pooledHTTPClient(conns, eurekaRequestTimeout)), nil
}

// eurekaHashcode finds apps__hashcode in the head of a JSON listing.
var eurekaHashcode = regexp.MustCompile(`"apps__hashcode"\s*:\s*"([A-Z_0-9]*)"`)

// eurekaCount reads GET /apps in JSON and returns how many instances the server
// counts in its apps__hashcode (STATUS_COUNT_..., every status), which it
// writes before the applications: the listing itself (27 MB at 20,000
// instances from Polaris) is counted, not decoded. It also returns the
// listing's size.
func eurekaCount(ctx context.Context, c *eurekatest.Client) (n, size int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+"/apps", nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("eureka GET %s/apps: %w", c.Base, err)
	}
	defer resp.Body.Close()
	head := make([]byte, 4<<10)
	k, err := io.ReadFull(resp.Body, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, 0, fmt.Errorf("eureka GET %s/apps: %w", c.Base, err)
	}
	head = head[:k]
	if resp.StatusCode != http.StatusOK {
		return 0, 0, &eurekatest.StatusError{Method: http.MethodGet, Path: "/apps", Status: resp.StatusCode, Body: string(head)}
	}
	rest, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("eureka GET %s/apps: %w", c.Base, err)
	}
	m := eurekaHashcode.FindSubmatch(head)
	if m == nil {
		return 0, 0, fmt.Errorf("eureka GET %s/apps: no apps__hashcode at the head of the listing (%.200q): is it a Eureka server's JSON?", c.Base, head)
	}
	parts := strings.Split(strings.TrimSuffix(string(m[1]), "_"), "_")
	// STATUS_COUNT pairs; OUT_OF_SERVICE holds underscores itself: the
	// counts are the parts that are numbers.
	for _, p := range parts {
		if v, err := strconv.Atoi(p); err == nil {
			n += v
		}
	}
	return n, k + int(rest), nil
}

// EurekaGenerateConfig sizes a generated Eureka registry and its churn.
type EurekaGenerateConfig struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:8761/eureka.
	URL string
	// Apps x Instances, plus TargetApp with Instances instances.
	Apps, Instances int
	// Concurrency is how many requests are in flight; default
	// DefaultEurekaConcurrency.
	Concurrency int
	// RenewInterval is how long after its registration, then after each
	// renewal, an instance is renewed; default DefaultRenewInterval, at most
	// two thirds of LeaseDuration.
	RenewInterval time.Duration
	// LeaseDuration is the lease the instances declare (leaseInfo
	// durationInSecs; renewalIntervalInSecs is a third of it); default
	// DefaultLeaseDuration. A longer one lets a server that falls behind
	// with its renewals keep the instances. On Polaris, at most 180 s: it
	// marks an instance unhealthy 3 x min(duration/3, renewal interval)
	// after the last renewal it processed, but makes that TTL 5 s when it
	// is over 60 s.
	LeaseDuration time.Duration
	// ChurnPercent of the generated instances (not the target's) are
	// changed every ChurnInterval (default DefaultChurnInterval), spread
	// evenly over it; 0: none. A change registers the instance again with a
	// new value of its metadata key "churn".
	ChurnPercent  float64
	ChurnInterval time.Duration
	// Progress receives a line every 10% or second of the registration and
	// one every ReportInterval (default RenewInterval) after; nil: none.
	Progress       io.Writer
	ReportInterval time.Duration
	// Registered, when not nil, is called once every instance is registered
	// and listed, as the churn begins.
	Registered func(EurekaGenerateStats)
}

// EurekaGenerateStats is what EurekaGenerate did.
type EurekaGenerateStats struct {
	// Registered instances (generated and the target's), the time that
	// took, and when the server listed them all (from the start).
	Registered           int
	RegisterTook, Listed time.Duration
	// ListingBytes is the size of the server's /apps (JSON, uncompressed)
	// once they were listed.
	ListingBytes int
	// Renewals made, those that failed, those the server answered 404
	// (Reregistered: the instance was registered again; NotYetListed: a
	// first renewal, 2 s after the registration, before the server listed
	// the instance), and churn changes.
	Renewals, RenewFailures, Reregistered, NotYetListed int64
	Changes, ChangeFailures                             int64
	// ChurnPerInterval is how many changes each ChurnInterval holds.
	ChurnPerInterval int
	// MaxBehind is how late a renewal was handed to a worker at worst
	// (every worker busy), up to the last report: each is due RenewInterval
	// after the instance's registration or last renewal ended.
	MaxBehind time.Duration
}

func (c *EurekaGenerateConfig) check() error {
	if c.Apps < 1 || c.Apps > maxEurekaApps || c.Instances < 1 || c.Instances > maxInstances {
		return fmt.Errorf("--apps must be 1 to %d and --instances 1 to %d", maxEurekaApps, maxInstances)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultEurekaConcurrency
	}
	if c.Concurrency < 1 || c.Concurrency > 1024 {
		return fmt.Errorf("--concurrency %d: want 1 to 1024 requests in flight", c.Concurrency)
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = DefaultRenewInterval
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.LeaseDuration < 3*time.Second || c.LeaseDuration > time.Hour {
		return fmt.Errorf("--lease-duration %v: want 3s to 1h (Eureka's default: 90s)", c.LeaseDuration)
	}
	if c.RenewInterval < 100*time.Millisecond || c.RenewInterval > c.LeaseDuration*2/3 {
		return fmt.Errorf("--renew-interval %v: want 100ms to two thirds of --lease-duration (%v), so that a lease survives a missed renewal", c.RenewInterval, c.LeaseDuration)
	}
	if c.ChurnInterval == 0 {
		c.ChurnInterval = DefaultChurnInterval
	}
	if c.ChurnPercent < 0 || c.ChurnPercent > 100 || math.IsNaN(c.ChurnPercent) || c.ChurnInterval < 100*time.Millisecond {
		return fmt.Errorf("--churn-percent %v per --churn-interval %v: want 0 to 100 percent per 100ms or more", c.ChurnPercent, c.ChurnInterval)
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = c.RenewInterval
	}
	if c.ReportInterval < 100*time.Millisecond {
		return fmt.Errorf("--report-interval %v: want 100ms or more", c.ReportInterval)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// eurekaGenerator is one EurekaGenerate. Its requests run on a pool of
// cfg.Concurrency workers: the renewals before anything else (each
// instance renewed firstRenewal after its registration, then RenewInterval
// after its last renewal, as a Eureka client's heartbeat timer does:
// registering 20,000 instances can take longer than a lease), then the
// registrations (at most half the workers) and the churn. A renewal must
// not wait behind a slow registration: an instance that misses its
// renewals is marked unhealthy, and on Polaris's standalone store each such
// change reads every instance, which slows the server further.
type eurekaGenerator struct {
	cfg   EurekaGenerateConfig
	c     *eurekatest.Client
	total int // instances: Apps x Instances, then the target's
	churn int // changes per ChurnInterval
	// renewals go to urgent, the rest to jobs; both are closed at the end.
	urgent, jobs chan func(context.Context)
	// writes holds a token for each registration or churn change in
	// flight: they may take half the workers, the rest are the renewals'.
	// A registration takes seconds when Polaris is loaded; were they
	// allowed every worker, renewals would wait (by over a minute, seen).
	writes chan struct{}

	renewals, renewFailures, reregistered, notYet atomic.Int64
	changes, changeFailures                       atomic.Int64
	// lastOK is when a request last succeeded (UnixNano).
	lastOK atomic.Int64

	firstError

	mu sync.Mutex
	// queues are the renewals to make: [firstQ] the first of each instance,
	// firstRenewal after its registration, [laterQ] the others,
	// RenewInterval after the one before. Each is in the order its
	// renewals fall due (one delay each, queued as requests end); head is
	// the next.
	queues [2]renewalQueue
}

const (
	firstQ = iota
	laterQ
)

// firstRenewal is how long after its registration an instance is renewed
// the first time. A Netflix client waits its renewal interval (30 s), but
// Polaris checks a new instance within its maxCheckInterval (30 s) of
// registering and marks it unhealthy if it has no renewal on record yet
// (each such change reads every instance in its standalone store); a
// renewal it receives before its caches hold the instance still counts.
const firstRenewal = 2 * time.Second

type renewalQueue struct {
	due  []renewal
	head int
}

type renewal struct {
	k     int // instance, as instance() numbers them
	at    time.Time
	first bool // the first after its registration
}

// instance is the registration of instance k (0 to total-1) as generated:
// the target's instances come last.
func (g *eurekaGenerator) instance(k int) eurekaInstance {
	gen := g.cfg.Apps * g.cfg.Instances
	if k >= gen {
		j := k - gen
		return eurekaInstance{app: TargetApp, id: eurekaInstanceID(TargetApp, j), ip: targetAddr(j), lease: leaseOf(g.cfg.LeaseDuration)}
	}
	i, j := k/g.cfg.Instances, k%g.cfg.Instances
	app := eurekaApp(i)
	return eurekaInstance{app: app, id: eurekaInstanceID(app, j), ip: filegen.InstanceAddr(i, j), lease: leaseOf(g.cfg.LeaseDuration)}
}

// churned is change n (1, 2, ...): instance n-1 of the generated ones in an
// order that takes one instance of every application before a second of
// any, so that the changes of one interval are spread over as many
// applications as there are changes (the costliest case for the adapter
// and the sinks: each change is a different ServiceEntry).
func (g *eurekaGenerator) churned(n int64) eurekaInstance {
	c := int((n - 1) % int64(g.cfg.Apps*g.cfg.Instances))
	i, j := c%g.cfg.Apps, c/g.cfg.Apps
	app := eurekaApp(i)
	return eurekaInstance{app: app, id: eurekaInstanceID(app, j), ip: filegen.InstanceAddr(i, j), churn: n, lease: leaseOf(g.cfg.LeaseDuration)}
}

// renewLater queues the renewal of instance k: its first (after its
// registration) or a later one.
func (g *eurekaGenerator) renewLater(k int, first bool) {
	q, d := &g.queues[laterQ], g.cfg.RenewInterval
	if first {
		q, d = &g.queues[firstQ], min(firstRenewal, g.cfg.RenewInterval)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if q.head > 1024 && q.head > len(q.due)/2 {
		q.due = q.due[:copy(q.due, q.due[q.head:])]
		q.head = 0
	}
	q.due = append(q.due, renewal{k, time.Now().Add(d), first})
}

// nextDue takes the next renewal due at now, if any.
func (g *eurekaGenerator) nextDue(now time.Time) (renewal, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.queues {
		q := &g.queues[i]
		if q.head < len(q.due) && !q.due[q.head].at.After(now) {
			q.head++
			return q.due[q.head-1], true
		}
	}
	return renewal{}, false
}

// EurekaGenerate registers cfg.Apps applications of cfg.Instances
// instances each, plus TargetApp, through the REST API of the Eureka server
// at cfg.URL, cfg.Concurrency requests in flight. Application i is
// LOAD-<i, 5 digits>; its instance j has the id load-<i>-<j> and the
// address 10.<i/250>.<i%250>.<j+1>, port 8080, as in the other generators;
// registering again over a previous run replaces its instances. Each
// instance is renewed 2 s after its registration (see firstRenewal), then
// every cfg.RenewInterval. Once the server lists them all it calls
// cfg.Registered and starts the churn: cfg.ChurnPercent of the instances
// every cfg.ChurnInterval. It goes on until ctx is done, its normal end: it
// returns nil then, with what it did. It fails when a registration fails
// five times, or when no request succeeds for a whole LeaseDuration (the
// server is gone: the instances expire).
func EurekaGenerate(ctx context.Context, cfg EurekaGenerateConfig) (EurekaGenerateStats, error) {
	var stats EurekaGenerateStats
	if err := cfg.check(); err != nil {
		return stats, fmt.Errorf("eureka-generate: %w", err)
	}
	c, err := newEurekaClient(cfg.URL, cfg.Concurrency)
	if err != nil {
		return stats, fmt.Errorf("eureka-generate: %w", err)
	}
	defer c.Close()
	g := &eurekaGenerator{cfg: cfg, c: c, total: (cfg.Apps + 1) * cfg.Instances,
		urgent: make(chan func(context.Context)), jobs: make(chan func(context.Context)),
		writes: make(chan struct{}, max(1, cfg.Concurrency/2))}
	g.churn = int(math.Round(float64(cfg.Apps*cfg.Instances) * cfg.ChurnPercent / 100))
	if cfg.ChurnPercent > 0 {
		g.churn = max(g.churn, 1)
	}
	stats.ChurnPerInterval = g.churn
	g.lastOK.Store(time.Now().UnixNano())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The workers, and the scheduler of renewals and churn: both stop when
	// ctx is done, the scheduler first (it sends to the workers).
	workers := make(chan struct{})
	go func() {
		defer close(workers)
		g.work(ctx)
	}()
	churnStart := make(chan time.Time, 1)
	type result struct {
		behind time.Duration
		err    error
	}
	maintained := make(chan result, 1)
	go func() {
		behind, err := g.maintain(ctx, churnStart)
		if err != nil {
			cancel()
		}
		maintained <- result{behind, err}
	}()
	finish := func(err error) (EurekaGenerateStats, error) {
		cancel()
		res := <-maintained
		close(g.urgent)
		close(g.jobs)
		<-workers
		stats.MaxBehind = res.behind
		g.stats(&stats)
		if res.err != nil {
			err = res.err // why ctx was cancelled, if it was for that
		}
		if err != nil {
			return stats, fmt.Errorf("eureka-generate: %w", err)
		}
		return stats, nil
	}

	start := time.Now()
	if err := g.registerAll(ctx); err != nil {
		return finish(err)
	}
	stats.Registered, stats.RegisterTook = g.total, time.Since(start)
	fmt.Fprintf(cfg.Progress, "eureka-generate: registered %d instances in %v; waiting for the server to list them\n",
		g.total, stats.RegisterTook.Round(time.Millisecond))
	listed, size, err := g.waitListed(ctx, g.total)
	if err != nil {
		return finish(err)
	}
	stats.Listed, stats.ListingBytes = listed.Sub(start), size
	fmt.Fprintf(cfg.Progress, "eureka-generate: the server lists all %d instances %v after the first registration (/apps: %d bytes); renewing every %v, churning %d instances every %v\n",
		g.total, stats.Listed.Round(time.Millisecond), size, cfg.RenewInterval, g.churn, cfg.ChurnInterval)
	churnStart <- time.Now()
	if cfg.Registered != nil {
		g.stats(&stats)
		cfg.Registered(stats)
	}
	<-ctx.Done()
	return finish(nil)
}

func (g *eurekaGenerator) stats(s *EurekaGenerateStats) {
	s.Renewals, s.RenewFailures, s.Reregistered, s.NotYetListed = g.renewals.Load(), g.renewFailures.Load(), g.reregistered.Load(), g.notYet.Load()
	s.Changes, s.ChangeFailures = g.changes.Load(), g.changeFailures.Load()
}

// work runs the jobs on cfg.Concurrency workers, those of g.urgent first,
// until both channels are closed. Every job handed over runs: once ctx is
// done, the jobs left return at once (their requests fail).
func (g *eurekaGenerator) work(ctx context.Context) {
	var wg sync.WaitGroup
	for range g.cfg.Concurrency {
		wg.Go(func() {
			urgent, jobs := g.urgent, g.jobs
			for urgent != nil || jobs != nil {
				var job func(context.Context)
				ok := false
				select {
				case job, ok = <-urgent:
					if !ok {
						urgent = nil
						continue
					}
				default:
					select {
					case job, ok = <-urgent:
						if !ok {
							urgent = nil
							continue
						}
					case job, ok = <-jobs:
						if !ok {
							jobs = nil
							continue
						}
					}
				}
				job(ctx)
			}
		})
	}
	wg.Wait()
}

// send hands job to a worker through ch; false when ctx is done first.
func (g *eurekaGenerator) send(ctx context.Context, ch chan<- func(context.Context), job func(context.Context)) bool {
	select {
	case ch <- job:
		return true
	case <-ctx.Done():
		return false
	}
}

// registerAll registers every instance in two rounds: first one instance
// of every application (the target's first), which makes the server create
// the applications, until the server counts them all; then the others.
// Polaris, loaded, stores a new application seconds after it stamps it,
// and its cache then misses it for good (its count-and-reload fallback does
// not bring it back): the whole application is never listed. Early on,
// with few instances, it keeps up.
func (g *eurekaGenerator) registerAll(ctx context.Context) error {
	prog := newRegisterProgress(g.cfg.Progress, "eureka-generate", g.total)
	gen := g.cfg.Apps * g.cfg.Instances
	first := []int{gen}
	var rest []int
	for j := 1; j < g.cfg.Instances; j++ {
		rest = append(rest, gen+j)
	}
	for k := range gen {
		if k%g.cfg.Instances == 0 {
			first = append(first, k)
		} else {
			rest = append(rest, k)
		}
	}
	if err := g.register(ctx, first, prog); err != nil {
		return err
	}
	at, _, err := g.waitListed(ctx, len(first))
	if err != nil {
		return fmt.Errorf("after the first instance of each application: %w", err)
	}
	fmt.Fprintf(g.cfg.Progress, "eureka-generate: the server counts the first instance of all %d applications %v after the start; registering the other %d instances\n",
		len(first), at.Sub(prog.start).Round(time.Millisecond), len(rest))
	return g.register(ctx, rest, prog)
}

// register registers the instances keys, and returns once all have been,
// or once one failed.
func (g *eurekaGenerator) register(ctx context.Context, keys []int, prog *registerProgress) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, k := range keys {
		select {
		case g.writes <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		in := g.instance(k)
		wg.Add(1)
		// The job runs with this ctx, which a failure cancels, not the
		// worker's.
		job := func(context.Context) {
			defer wg.Done()
			defer func() { <-g.writes }()
			if err := g.registerRetrying(ctx, in); err != nil {
				if ctx.Err() == nil {
					g.fail(err)
				}
				cancel()
				return
			}
			g.renewLater(k, true)
			prog.add()
		}
		if !g.send(ctx, g.jobs, job) {
			wg.Done()
			break
		}
	}
	wg.Wait() // every job handed over runs, and returns at once once ctx is done
	if err := g.err(); err != nil {
		return err
	}
	return ctx.Err()
}

// registerRetrying registers in, trying again after a failure.
func (g *eurekaGenerator) registerRetrying(ctx context.Context, in eurekaInstance) error {
	err := retried(ctx, eurekaAttempts, func() error { return g.c.Register(ctx, in.registration()) }, nil)
	if err == nil {
		g.lastOK.Store(time.Now().UnixNano())
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("registering %s/%s failed %d times, the last: %w", in.app, in.id, eurekaAttempts, err)
}

// waitListed polls /apps until the server counts want instances; it
// returns when that was and the listing's size.
func (g *eurekaGenerator) waitListed(ctx context.Context, want int) (time.Time, int, error) {
	wctx, cancel := context.WithTimeout(ctx, eurekaListWait)
	defer cancel()
	last, lastErr := -1, error(nil)
	for {
		n, size, err := eurekaCount(wctx, g.c)
		now := time.Now()
		if err == nil && n >= want {
			return now, size, nil
		}
		if err == nil {
			last = n
		} else {
			lastErr = err
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return now, 0, ctx.Err()
			}
			why := ""
			if lastErr != nil {
				why = fmt.Sprintf(" (the last attempt: %v)", lastErr)
			}
			return now, 0, fmt.Errorf("%v after the registrations the server counts %d instances in its apps__hashcode, not the %d registered%s: is it dropping registrations, or failing renewals?", eurekaListWait, last, want, why)
		case <-time.After(2 * time.Second):
		}
	}
}

// maintain hands the renewals to the workers as they fall due and, from
// the time churnStart sends, the churn, spread evenly over each
// ChurnInterval; until ctx is done (it returns nil then) or until it gives
// up, with the reason. A change waits for a write slot (see writes) and a
// free worker without holding the renewals up: changes that cannot be
// made when due are made later, and counted behind schedule meanwhile. It
// returns too how late a renewal was handed over at worst.
func (g *eurekaGenerator) maintain(ctx context.Context, churnStart <-chan time.Time) (maxBehind time.Duration, err error) {
	tick := time.NewTicker(min(100*time.Millisecond, g.cfg.RenewInterval/10))
	defer tick.Stop()
	var churnFrom time.Time
	var churned int64 // changes handed over
	start := time.Now()
	nextReport := start.Add(g.cfg.ReportInterval)
	var late time.Duration // since the last report
	var behind int64       // changes behind schedule, at worst since the last report
	for {
		select {
		case <-ctx.Done():
			return max(maxBehind, late), nil
		case churnFrom = <-churnStart:
			continue
		case <-tick.C:
		}
		now := time.Now()
		for {
			r, ok := g.nextDue(now)
			if !ok {
				break
			}
			late = max(late, time.Since(r.at))
			in := g.instance(r.k)
			if !g.send(ctx, g.urgent, func(ctx context.Context) { g.renew(ctx, r, in) }) {
				return max(maxBehind, late), nil
			}
		}
		if g.churn > 0 && !churnFrom.IsZero() {
			due := int64(float64(now.Sub(churnFrom)) / float64(g.cfg.ChurnInterval) * float64(g.churn))
		churn:
			for ; churned < due; churned++ {
				select {
				case g.writes <- struct{}{}:
				default:
					break churn
				}
				in := g.churned(churned + 1)
				select {
				case g.jobs <- func(ctx context.Context) { defer func() { <-g.writes }(); g.change(ctx, in) }:
				default:
					<-g.writes
					break churn
				}
			}
			behind = max(behind, due-churned)
		}
		if silent := time.Since(time.Unix(0, g.lastOK.Load())); silent > g.cfg.LeaseDuration {
			return max(maxBehind, late), fmt.Errorf("no request to %s succeeded for %v, a whole lease (the instances are expiring): is the server up? (%d renewals failed)",
				g.c.Base, silent.Round(time.Second), g.renewFailures.Load())
		}
		if !now.Before(nextReport) {
			nextReport = nextReport.Add(g.cfg.ReportInterval)
			fmt.Fprintf(g.cfg.Progress, "eureka-generate: %v: %d renewals (%d failed, %d re-registered after a 404, %d first ones before the server listed the instance), %d changes (%d failed, at most %d behind schedule); renewals at worst %v late\n",
				now.Sub(start).Round(time.Second), g.renewals.Load(), g.renewFailures.Load(), g.reregistered.Load(), g.notYet.Load(),
				g.changes.Load(), g.changeFailures.Load(), behind, late.Round(time.Millisecond))
			maxBehind = max(maxBehind, late)
			late, behind = 0, 0
		}
	}
}

// renew makes renewal r of in; a 404 (Eureka no longer knows it)
// registers it again, as Netflix's client does, unless it answers the first
// renewal: that one comes 2 s after the registration, when the server may
// not list the instance yet (Polaris answers 404 then, and still counts the
// renewal). Its next renewal is queued either way.
func (g *eurekaGenerator) renew(ctx context.Context, r renewal, in eurekaInstance) {
	found, err := g.c.Renew(ctx, in.app, in.id)
	if err == nil && !found && r.first {
		g.notYet.Add(1)
	} else if err == nil && !found {
		g.reregistered.Add(1)
		if in.app == TargetApp {
			// A run moves the target's instances: registering the generated
			// address again would undo its last change.
			err = fmt.Errorf("the server answered 404 to a renewal of %s/%s", in.app, in.id)
		} else {
			err = g.c.Register(ctx, in.registration())
		}
	}
	if ctx.Err() != nil {
		return
	}
	g.renewLater(r.k, false)
	g.renewals.Add(1)
	if err != nil {
		g.renewFailures.Add(1)
		return
	}
	g.lastOK.Store(time.Now().UnixNano())
}

// change makes one churn change: in registered again with its new churn
// number in its metadata.
func (g *eurekaGenerator) change(ctx context.Context, in eurekaInstance) {
	err := g.c.Register(ctx, in.registration())
	if ctx.Err() != nil {
		return
	}
	g.changes.Add(1)
	if err != nil {
		g.changeFailures.Add(1)
		return
	}
	g.lastOK.Store(time.Now().UnixNano())
}

// eurekaChanger moves the first instance (by id) of TargetApp, one
// registration per change.
type eurekaChanger struct {
	c   *eurekatest.Client
	app string
	id  string
	// key is the namespace/name of the target's ServiceEntry (namespace "default" unless
	// the run says otherwise).
	key string
	v0  int // the variant the mover had when the run began (0: not moved)
	// lease is the mover's, as listed: a change keeps it.
	lease eurekaLease
}

// newEurekaChanger finds the target's instance to move: one a previous
// run moved (its address is a mover address), else the first by id.
func newEurekaChanger(ctx context.Context, base string) (*eurekaChanger, error) {
	c, err := newEurekaClient(base, 4)
	if err != nil {
		return nil, err
	}
	app, err := c.App(ctx, TargetApp)
	if err == nil && (app == nil || len(app.Instance) == 0) {
		err = fmt.Errorf("the server at %s lists no application %s: register it with galleon-load eureka-generate --eureka-url %s (and keep that running: it renews the instances)", base, TargetApp, base)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	ins := slices.Clone(app.Instance)
	slices.SortFunc(ins, func(a, b eurekatest.InstanceInfo) int { return strings.Compare(a.InstanceID, b.InstanceID) })
	mover := ins[0]
	for _, in := range ins {
		if v := moverVariant(in.IPAddr); v > 0 {
			mover = in
			break
		}
	}
	ch := &eurekaChanger{c: c, app: TargetApp, id: mover.InstanceID, key: "default/" + serviceNameOf(TargetApp),
		v0: moverVariant(mover.IPAddr), lease: leaseOf(DefaultLeaseDuration)}
	if d := mover.LeaseDuration(); d > 0 {
		ch.lease = leaseOf(d)
	}
	return ch, nil
}

// Change registers the mover again at a new address: to Eureka, one
// instance of the target changed (one MODIFIED entry in /apps/delta).
func (ch *eurekaChanger) Change(ctx context.Context, i int) (time.Time, string, error) {
	addr := filegen.MoverAddr((ch.v0+i-1)%moverVariants + 1)
	t0 := time.Now()
	if err := ch.c.Register(ctx, eurekaInstance{app: ch.app, id: ch.id, ip: addr, lease: ch.lease}.registration()); err != nil {
		return t0, "", fmt.Errorf("moving instance %s of %s to %s: %w", ch.id, ch.app, addr, err)
	}
	return t0, addr, nil
}

func (ch *eurekaChanger) Close() { ch.c.Close() }

// served returns the target's endpoint addresses.
func (ch *eurekaChanger) served(name string, se *networkingv1alpha3.ServiceEntry) []string {
	if name != ch.key {
		return nil
	}
	var out []string
	for _, ep := range se.GetEndpoints() {
		out = append(out, ep.GetAddress())
	}
	return out
}

func (ch *eurekaChanger) unserved(addr string) string {
	return fmt.Sprintf("%s was never served with an endpoint at %s", ch.key, addr)
}

func (ch *eurekaChanger) about(addr string) string {
	return fmt.Sprintf("instance %s of %s moved to %s", ch.id, ch.app, addr)
}

// listed waits until the server lists the mover at addr in GET
// /apps/{TargetApp}, asking every eurekaVisiblePoll, and returns when it
// saw it.
func (ch *eurekaChanger) listed(ctx context.Context, addr string) (time.Time, error) {
	for {
		app, err := ch.c.App(ctx, ch.app)
		now := time.Now()
		if err == nil && app != nil {
			for _, in := range app.Instance {
				if in.InstanceID == ch.id && in.IPAddr == addr {
					return now, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return now, fmt.Errorf("the server never listed %s/%s at %s: %w", ch.app, ch.id, addr, err)
		case <-time.After(eurekaVisiblePoll):
		}
	}
}

// EurekaRunConfig is a run whose changes are made in a Eureka registry
// written by EurekaGenerate (whose generator keeps running: it renews the
// instances, and may churn others).
type EurekaRunConfig struct {
	// RunConfig's Addr, Sinks, Protocol, TypeURL (a ServiceEntry type),
	// Changes, Interval, MetricsURL, Timeout and Progress apply; Dir,
	// Instances and the ZooKeeper fields do not.
	RunConfig
	// URL is the Eureka server's base URL, one of the source's
	// --eureka-urls.
	URL string
	// Namespace is the source's --namespace; default "default".
	Namespace string
	// IntervalJitter adds a random pause of up to this much after each
	// change, so that changes fall at every point of the source's poll
	// cycle: give the source's --eureka-poll-interval. A fixed pause after each
	// change reached the sinks would make every change the same time after
	// a poll.
	IntervalJitter time.Duration
}

// EurekaReport is what a run against a Eureka registry measured.
type EurekaReport struct {
	Report
	// Listed is, per change (sorted), from the write to the server listing
	// the new address in GET /apps/{TargetApp} (polled every 50 ms): the
	// server's own delay, before any client can see the change.
	Listed []time.Duration
	// Polls are the source's requests to Eureka over the changes, by kind
	// (galleon_eureka_requests_total); nil without MetricsURL.
	Polls map[string]float64
}

// ListedPercentile is the p-th percentile of Listed.
func (r *EurekaReport) ListedPercentile(p int) time.Duration { return percentile(r.Listed, p) }

// String renders the report for people.
func (r *EurekaReport) String() string {
	var b strings.Builder
	r.writeHead(&b)
	if len(r.Latencies) > 0 {
		fmt.Fprintf(&b, "registry change -> listed by the server (GET /apps/%s every %v): p50 %v  p99 %v  max %v\n",
			TargetApp, eurekaVisiblePoll, r.ListedPercentile(50).Round(time.Millisecond), r.ListedPercentile(99).Round(time.Millisecond),
			r.Listed[len(r.Listed)-1].Round(time.Millisecond))
		fmt.Fprintf(&b, "updates per sink: %d while %d changes were made (other changes in the registry, churn, are served too)\n", r.Updates, r.Changes)
	}
	if r.Polls != nil {
		fmt.Fprintf(&b, "eureka requests over the changes: %.0f delta, %.0f full\n", r.Polls["delta"], r.Polls["full"])
	}
	r.writeRSS(&b)
	return b.String()
}

// eurekaRequestsMetric counts the Eureka adapter's requests by server,
// kind (full, delta) and result.
const eurekaRequestsMetric = "galleon_eureka_requests_total"

// scrapeEurekaPolls returns galleon_eureka_requests_total summed by its
// kind label (full, delta).
func scrapeEurekaPolls(ctx context.Context, url string) (map[string]float64, error) {
	out := map[string]float64{}
	err := scrapeSamples(ctx, url, func(name string, v float64, line string) {
		if name != eurekaRequestsMetric {
			return
		}
		for _, kind := range []string{"full", "delta"} {
			if strings.Contains(line, `kind="`+kind+`"`) {
				out[kind] += v
			}
		}
	})
	return out, err
}

// RunEureka is Run against a source serving a Eureka registry written by EurekaGenerate (see
// runListed): it moves one instance of TargetApp to a new address cfg.Changes times, one
// registration each, and times each to the last sink holding it and to the server listing it.
func RunEureka(ctx context.Context, cfg EurekaRunConfig) (*EurekaReport, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	rep := &EurekaReport{}
	var polls0 map[string]float64
	run := listedRun{
		flag: "--eureka-url", name: "Eureka", typeHint: " (the source's --output serviceentry)",
		open: func(ctx context.Context) (listedChanger, error) {
			ch, err := newEurekaChanger(ctx, cfg.URL)
			if err != nil {
				return nil, err
			}
			ch.key = cfg.Namespace + "/" + serviceNameOf(TargetApp)
			return ch, nil
		},
		verify: func(ctx context.Context, rc RunConfig, addrs []string) error { return verifyTarget(ctx, rc, addrs) },
	}
	if cfg.MetricsURL != "" {
		run.before = func(ctx context.Context) (err error) {
			polls0, err = scrapeEurekaPolls(ctx, cfg.MetricsURL)
			return err
		}
		run.after = func(ctx context.Context) error {
			polls, err := scrapeEurekaPolls(ctx, cfg.MetricsURL)
			rep.Polls = diffCounts(polls, polls0)
			return err
		}
	}
	listed, _, err := runListed(ctx, &cfg.RunConfig, cfg.IntervalJitter, &rep.Report, run)
	if err != nil {
		return nil, err
	}
	rep.Listed = listed
	return rep, nil
}

// serviceNameOf is the Eureka adapter's ServiceEntry name of an application
// made of letters, digits and '-': its name in lower case.
func serviceNameOf(app string) string { return strings.ToLower(app) }
