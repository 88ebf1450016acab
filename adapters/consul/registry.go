// Package consul is a Galleon adapter for HashiCorp Consul: it watches the
// catalog of one or more datacenters through a Consul agent and reports
// every service as a model.Service (see docs/adapters/consul.md for the
// mapping and the flags).
//
// # Watching
//
// One long-poll per service would hit the agent's limit of 200 HTTP
// connections per client at 200 services. Instead, per datacenter, three
// blocking queries are change signals:
//
//   - /v1/catalog/services (names and tags) says which services appeared,
//     disappeared or changed tags;
//   - /v1/health/state/critical and /v1/health/state/warning list the
//     failing checks, from Consul's status index (about a millisecond at
//     50,000 checks): a check that enters or leaves either set is a health
//     flip (or a failing check created or deleted), and names its service,
//     or for a node check every service on the node. Their responses are
//     as small as the sets of failing checks, not the 16 MiB of all 50,000
//     checks at 10,000 services x 5 instances. They start from a listing of
//     every check, read once per (re)start.
//
// Only the services a signal names are fetched, with
// /v1/health/service/<name> (every instance, healthy or not), at most
// Config.FetchConcurrency at a time over all datacenters.
//
// A catalog change that changes no name or tag is attributed through the
// checks: an agent writes a service together with its checks, so a checked
// instance registered or deregistered, or retagged, wrote a check in the
// same raft index. Passing checks are in neither signal, so the adapter
// reads the checks table's index (a non-blocking /v1/health/state/critical:
// every state shares it) and, if a check was written at or after the
// catalog change's index, every check once, diffed against the last full
// listing: the checks created or rewritten at that index, or deleted when
// the table's index is that one, name the service. When no check was written there (a port,
// meta, address or weight edit of an instance whose checks did not change;
// a check-less instance), or nothing attributes the change, a sweep finds
// it: every service is probed for its X-Consul-Index with a filter that
// matches no instance (an empty body), and only those whose index moved
// are fetched. Such sweeps run at most once per Config.SweepInterval, and
// every Config.Resync in any case, because node changes (a node's address)
// move no signal at all.
//
// The blocking index follows Consul's rules: an index that goes backwards
// (a restored snapshot, a wiped data directory) resynchronises the
// datacenter from index 0 and reports a Replace; an index of 0 is clamped
// to 1 so that the next query blocks. Failed requests are retried with
// jittered exponential backoff (Config.RetryMin to RetryMax).
//
// # Outages
//
// A failed request reports Unreachable(err) once; nothing is removed while
// it lasts, and before the first complete listing nothing is reported at
// all. When every request to the datacenter succeeds again, the
// datacenter is listed again from scratch, the result is reported with
// Replace, and Unreachable(nil) follows.
package consul

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/galleon-mesh/galleon/common/model"
	"github.com/galleon-mesh/galleon/common/registry"
)

const (
	// pollGap is the least time between two blocking queries of one
	// signal after a change, as Consul's documentation recommends: a
	// burst of check updates costs a few listings, not one per update.
	pollGap = 200 * time.Millisecond
)

// Registry is a registry.Registry that watches Consul. It holds only
// configuration and metrics: each Run keeps its own state and its own HTTP
// connections, so a Registry may be Run again after a previous Run
// returned.
type Registry struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	mapper *mapper
}

var _ registry.Registry = (*Registry)(nil)

// New checks cfg (see Config.Validate) and returns a Registry for it. Its
// metrics are registered with cfg.Registerer here, once.
func New(cfg Config) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("consul registry: %w", err)
	}
	cfg = cfg.withDefaults()
	mp, err := newMapper(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul registry: --host-template: %w", err)
	}
	if _, err := apiConfig(cfg); err != nil {
		return nil, fmt.Errorf("consul registry: %w", err)
	}
	return &Registry{cfg: cfg, log: cfg.Logger, m: newMetrics(cfg.Registerer), mapper: mp}, nil
}

// Run watches Consul and reports to sink until ctx is cancelled, then
// returns ctx.Err(), after every goroutine it started has stopped.
func (r *Registry) Run(ctx context.Context, sink registry.Sink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := newClient(r.cfg, r.m)
	if err != nil {
		return fmt.Errorf("consul registry: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watch{
		cfg: r.cfg, log: r.log, m: r.m, mapper: r.mapper, sink: sink, c: c, ctx: ctx,
		events:   make(chan event, 16),
		work:     make(chan job),
		idle:     r.cfg.FetchConcurrency,
		dcs:      map[string]*dcWatch{},
		pending:  map[jobKey]bool{},
		inflight: map[jobKey]bool{},
		again:    map[jobKey]bool{},
		byKey:    map[model.ServiceKey]map[partRef]bool{},
		reported: map[model.ServiceKey]model.Service{},
		dirty:    map[model.ServiceKey]bool{},
		collided: map[partRef]bool{},
	}
	defer func() {
		cancel()
		w.wg.Wait()
		// After every request has returned: close the keep-alive
		// connections so that their goroutines end with Run.
		c.close()
	}()
	w.loop()
	return ctx.Err()
}

// event is what the goroutines of a Run send to its loop.
type event struct {
	kind     eventKind
	dc       string
	gen      int
	index    uint64
	reset    bool
	err      error
	names    map[string][]string // catalogEvent
	filtered bool                // catalogEvent: ACLs hid some of it
	checks   api.HealthChecks    // checksEvent, explainEvent
	status   string              // checksEvent: the state listed (api.HealthAny: every check)
	full     bool                // explainEvent: every check (else the table's index)
	name     string              // fetchEvent
	probe    bool                // fetchEvent
	final    bool                // fetchEvent: the job is over (else a failed attempt)
	entries  []*api.ServiceEntry // fetchEvent
	list     []string            // dcsEvent
}

type eventKind int

const (
	catalogEvent eventKind = iota
	checksEvent
	fetchEvent
	dcsEvent
	explainEvent // a full checks listing, read to attribute catalog changes
)

// job is one per-service request: a fetch, or a probe of its index.
type job struct {
	key   jobKey
	probe bool
	gen   int
	ctx   context.Context // the datacenter's: a resync cancels it
}

type jobKey struct{ dc, name string }

// partRef names one datacenter's part of a service.
type partRef struct{ dc, name string }

// dcWatch is the state of one datacenter.
type dcWatch struct {
	name   string // "" is the agent's own datacenter
	gen    int    // bumped by every resync; older results are ignored
	ctx    context.Context
	cancel context.CancelFunc

	catalogSeen  bool
	catalogIndex uint64
	names        map[string][]string // service name -> tags, as last listed
	checksSeen   bool
	checks       map[string]checkInfo            // node/checkID -> check: the last full listing, kept current by the signals
	unhealthy    map[string]map[string]checkInfo // state -> node/checkID -> check: the failing checks, as last signalled
	explaining   bool                            // an attribution (the checks index, maybe every check) is in flight
	explainAgain bool                            // and another is wanted after it
	svcs         map[string]*dcService
	awaiting     map[string]bool // fetches the current listing waits for
	listed       bool

	warnedFiltered bool

	failing map[string]error // by source: catalog, checks, fetch
	outage  bool             // a signal failed: list again once it is back

	unexplained map[uint64]bool // catalog indexes not attributed yet
	lastSweep   time.Time
	sweepDue    bool // a sweep waits for SweepInterval to pass
}

// statusLeft marks a held check that left a failing set: passing now, or
// deleted.
const statusLeft = "(left)"

type checkInfo struct {
	service, node, status string
	createIndex, modify   uint64
}

// dcService is what one datacenter holds of one service.
type dcService struct {
	index   uint64 // X-Consul-Index of the last fetch
	part    *part  // nil: nothing to serve
	nodes   []string
	rejects map[string]string // record -> reason, as reported
}

// watch is the state of one Run. Everything but the channels, ctx and wg
// is owned by the loop goroutine.
type watch struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	mapper *mapper
	sink   registry.Sink
	c      *client
	ctx    context.Context
	wg     sync.WaitGroup

	events chan event
	work   chan job
	idle   int // workers waiting for a job

	allDCs bool
	dcsSet bool // the datacenters are known
	dcs    map[string]*dcWatch

	queue    []jobKey
	pending  map[jobKey]bool // queued; value: a full fetch (else a probe)
	inflight map[jobKey]bool
	again    map[jobKey]bool // requested while in flight; value: full

	byKey    map[model.ServiceKey]map[partRef]bool
	reported map[model.ServiceKey]model.Service
	dirty    map[model.ServiceKey]bool
	collided map[partRef]bool

	synced         bool
	replacePending bool
	unreachable    bool

	sweepTimer *time.Timer
}

func (w *watch) loop() {
	for range w.cfg.FetchConcurrency {
		w.goFunc(w.worker)
	}
	switch {
	case len(w.cfg.Datacenters) == 1 && w.cfg.Datacenters[0] == AllDatacenters:
		w.allDCs = true
		w.goFunc(w.followDatacenters)
	case len(w.cfg.Datacenters) == 0:
		w.dcsSet = true
		w.addDC("", "start")
	default:
		w.dcsSet = true
		for _, dc := range w.cfg.Datacenters {
			w.addDC(dc, "start")
		}
	}
	w.sweepTimer = time.NewTimer(time.Hour)
	w.sweepTimer.Stop()
	defer w.sweepTimer.Stop()
	resync := time.NewTicker(w.cfg.Resync)
	defer resync.Stop()

	for {
		var work chan job
		var next job
		if len(w.queue) > 0 && w.idle > 0 {
			k := w.queue[0]
			d := w.dcs[k.dc]
			next = job{key: k, probe: !w.pending[k], gen: d.gen, ctx: d.ctx}
			work = w.work
		}
		select {
		case <-w.ctx.Done():
			return
		case work <- next:
			w.queue = w.queue[1:]
			delete(w.pending, next.key)
			w.inflight[next.key] = true
			w.idle--
		case ev := <-w.events:
			w.handle(ev)
		case <-w.sweepTimer.C:
			for _, d := range w.dcs {
				if d.sweepDue {
					d.sweepDue = false
					w.sweep(d, "unattributed")
				}
			}
		case <-resync.C:
			for _, d := range w.dcs {
				if d.listed {
					w.startSweep(d, "periodic")
				}
			}
		}
		w.flush()
	}
}

// goFunc runs f in a goroutine Run waits for.
func (w *watch) goFunc(f func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f()
	}()
}

// send hands an event to the loop unless the Run is over.
func (w *watch) send(ev event) bool {
	select {
	case w.events <- ev:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// ---------------------------------------------------------------------------
// Goroutines: signals, fetch workers, datacenter list.

// pollChecks lists every check of one datacenter generation (the baseline
// the failing-check signals are diffed against and catalog changes
// attributed with), then runs the critical and warning signals from that
// listing's index until its context ends.
func (w *watch) pollChecks(ctx context.Context, dc string, gen int) {
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	for {
		checks, idx, err := w.c.checks(ctx, dc, 0, api.HealthAny)
		if ctx.Err() != nil {
			return
		}
		if !w.send(event{kind: checksEvent, dc: dc, gen: gen, status: api.HealthAny, checks: checks, index: idx, err: err}) {
			return
		}
		if err == nil {
			// An index of 0 would make every query return at once.
			index := max(idx, 1)
			w.goFunc(func() { w.poll(ctx, dc, gen, checksEvent, api.HealthWarning, index) })
			w.poll(ctx, dc, gen, checksEvent, api.HealthCritical, index)
			return
		}
		if !sleep(ctx, bo.next()) {
			return
		}
	}
}

// poll runs one blocking-query signal of one datacenter generation until
// its context ends: the catalog, or the checks in one state from index.
func (w *watch) poll(ctx context.Context, dc string, gen int, kind eventKind, state string, index uint64) {
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	signal := "catalog"
	if kind == checksEvent {
		signal = state
	}
	for {
		ev := event{kind: kind, dc: dc, gen: gen, status: state}
		var idx uint64
		var err error
		if kind == catalogEvent {
			ev.names, idx, ev.filtered, err = w.c.services(ctx, dc, index)
		} else {
			ev.checks, idx, err = w.c.checks(ctx, dc, index, state)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			ev.err = err
			if !w.send(ev) || !sleep(ctx, bo.next()) {
				return
			}
			continue
		}
		bo.reset()
		outcome := "changed"
		switch {
		case idx < index:
			// Consul's rule: an index going backwards means the state
			// was reset (snapshot restore, wiped data): start over.
			outcome = "reset"
			ev.reset = true
		case idx == index:
			outcome = "unchanged"
		}
		w.m.wakeups.WithLabelValues(signal, outcome).Inc()
		w.log.Debug("consul signal", "datacenter", dcLabel(dc), "signal", signal, "outcome", outcome, "index", idx, "previous", index)
		ev.index = idx
		if !w.send(ev) {
			return
		}
		if ev.reset {
			<-ctx.Done() // the loop resynchronises with a new generation
			return
		}
		// An index of 0 would make every query return at once.
		index = max(idx, 1)
		if outcome == "changed" && !sleep(ctx, pollGap) {
			return
		}
	}
}

// worker runs per-service jobs, retrying each until it succeeds or its
// datacenter's context ends.
func (w *watch) worker() {
	for {
		var j job
		select {
		case j = <-w.work:
		case <-w.ctx.Done():
			return
		}
		bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
		for {
			kind := "fetch"
			if j.probe {
				kind = "probe"
			}
			w.m.refetched.WithLabelValues(kind).Inc()
			entries, idx, err := w.c.service(j.ctx, j.key.dc, j.key.name, j.probe)
			ev := event{kind: fetchEvent, dc: j.key.dc, gen: j.gen, name: j.key.name, probe: j.probe,
				index: idx, entries: entries, err: err, final: true}
			if err != nil && j.ctx.Err() == nil {
				ev.final = false
				if !w.send(ev) || !sleep(j.ctx, bo.next()) {
					if w.ctx.Err() != nil {
						return
					}
					// The datacenter is being listed again: give the
					// job back.
					w.send(event{kind: fetchEvent, dc: j.key.dc, gen: j.gen, name: j.key.name, probe: j.probe, final: true, err: j.ctx.Err()})
					break
				}
				continue
			}
			if !w.send(ev) {
				return
			}
			break
		}
	}
}

// listChecks reads, once (non-blocking), every check of a datacenter with
// full, else only the checks table's index (with the critical checks,
// which Consul lists from an index), retrying until it succeeds or the
// datacenter's context ends.
func (w *watch) listChecks(ctx context.Context, dc string, gen int, full bool) {
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	state := api.HealthCritical
	if full {
		state = api.HealthAny
	}
	for {
		checks, idx, err := w.c.checks(ctx, dc, 0, state)
		if ctx.Err() != nil {
			return
		}
		ev := event{kind: explainEvent, dc: dc, gen: gen, full: full, checks: checks, index: idx, err: err, final: err == nil}
		if !w.send(ev) || (err != nil && !sleep(ctx, bo.next())) {
			return
		}
		if err == nil {
			return
		}
	}
}

// followDatacenters lists the datacenters now and every DatacenterRefresh.
func (w *watch) followDatacenters() {
	bo := newBackoff(w.cfg.RetryMin, w.cfg.RetryMax)
	for {
		list, err := w.c.datacenters(w.ctx)
		if w.ctx.Err() != nil {
			return
		}
		if !w.send(event{kind: dcsEvent, list: list, err: err}) {
			return
		}
		wait := w.cfg.DatacenterRefresh
		if err != nil {
			wait = bo.next()
		} else {
			bo.reset()
		}
		if !sleep(w.ctx, wait) {
			return
		}
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// backoff is jittered exponential backoff ("full jitter" over the upper
// half, so that a retry never comes sooner than half the step).
type backoff struct {
	min, max, step time.Duration
}

func newBackoff(lo, hi time.Duration) *backoff { return &backoff{min: lo, max: hi, step: lo} }

func (b *backoff) next() time.Duration {
	d := b.step/2 + rand.N(b.step/2+1)
	b.step = min(b.step*2, b.max)
	return d
}

func (b *backoff) reset() { b.step = b.min }

// ---------------------------------------------------------------------------
// The loop's handlers.

func (w *watch) handle(ev event) {
	if ev.kind == dcsEvent {
		w.handleDatacenters(ev)
		return
	}
	if ev.kind == fetchEvent && ev.final {
		k := jobKey{ev.dc, ev.name}
		delete(w.inflight, k)
		w.idle++
		if full, ok := w.again[k]; ok {
			delete(w.again, k)
			if d := w.dcs[k.dc]; d != nil {
				w.enqueue(d, k.name, full)
			}
		}
	}
	d := w.dcs[ev.dc]
	if d == nil || d.gen != ev.gen {
		return // a datacenter dropped or listed again since
	}
	if ev.err != nil {
		if errors.Is(ev.err, context.Canceled) {
			return
		}
		src := "fetch"
		switch ev.kind {
		case catalogEvent:
			src = "catalog"
		case checksEvent:
			src = "checks/" + ev.status
		}
		w.failed(d, src, ev.err)
		return
	}
	switch ev.kind {
	case catalogEvent:
		w.ok(d, "catalog")
		if ev.filtered && !d.warnedFiltered {
			// Consul answers a token that may not read a service by
			// leaving it out, not with an error: say so once, since
			// those services are not served.
			d.warnedFiltered = true
			w.log.Warn("the ACL token cannot read every service of the catalog: those it cannot read are not served (grant service:read and node:read)",
				"datacenter", dcLabel(d.name))
		}
		w.handleCatalog(d, ev)
	case checksEvent:
		w.ok(d, "checks/"+ev.status)
		w.handleChecks(d, ev)
	case explainEvent:
		w.ok(d, "fetch")
		w.handleExplain(d, ev)
	case fetchEvent:
		w.ok(d, "fetch")
		w.handleFetch(d, ev)
	}
}

// failed records a failed request. The first failure while reachable is
// reported; nothing is removed.
func (w *watch) failed(d *dcWatch, src string, err error) {
	w.m.contact(d.name, false)
	d.failing[src] = err
	if src != "fetch" {
		d.outage = true
	}
	w.log.Debug("consul request failed", "datacenter", dcLabel(d.name), "source", src, "error", err)
	if !w.unreachable {
		w.unreachable = true
		w.sink.Unreachable(err)
	}
}

// ok records a successful request. Once every request to a datacenter
// whose signals failed succeeds again, it is listed again from scratch.
func (w *watch) ok(d *dcWatch, src string) {
	w.m.contact(d.name, true)
	if _, was := d.failing[src]; !was {
		return
	}
	delete(d.failing, src)
	if len(d.failing) == 0 && d.outage {
		w.resync(d, "outage")
	}
}

func (w *watch) handleDatacenters(ev event) {
	if ev.err != nil {
		w.m.contact("", false)
		if !w.unreachable {
			w.unreachable = true
			w.sink.Unreachable(ev.err)
		}
		return
	}
	w.dcsSet = true
	want := map[string]bool{}
	for _, dc := range ev.list {
		want[dc] = true
		if w.dcs[dc] == nil {
			reason := "datacenter_added"
			if !w.synced {
				reason = "start"
			}
			w.addDC(dc, reason)
		}
	}
	for name, d := range w.dcs {
		if !want[name] {
			w.dropDC(d)
		}
	}
}

func (w *watch) addDC(name, reason string) {
	d := &dcWatch{name: name, svcs: map[string]*dcService{}, failing: map[string]error{}}
	w.dcs[name] = d
	w.resync(d, reason)
}

// dropDC forgets a datacenter that is no longer listed.
func (w *watch) dropDC(d *dcWatch) {
	d.cancel()
	for name := range d.svcs {
		w.setPart(d, name, nil)
	}
	w.dropQueued(d.name)
	delete(w.dcs, d.name)
}

// resync lists the datacenter again from index 0: new signals, every
// service fetched again, then a Replace.
func (w *watch) resync(d *dcWatch, reason string) {
	if d.cancel != nil {
		d.cancel()
	}
	w.m.resyncs.WithLabelValues(reason).Inc()
	d.gen++
	d.ctx, d.cancel = context.WithCancel(w.ctx)
	d.catalogSeen, d.checksSeen, d.listed = false, false, false
	d.catalogIndex = 0
	d.unexplained = map[uint64]bool{}
	d.explaining, d.explainAgain = false, false
	d.awaiting = map[string]bool{}
	clear(d.failing)
	d.outage = false
	for _, s := range d.svcs {
		s.index = 0 // indexes of the old state mean nothing now
	}
	w.dropQueued(d.name)
	w.replacePending = true
	ctx, gen, name := d.ctx, d.gen, d.name
	w.goFunc(func() { w.poll(ctx, name, gen, catalogEvent, "", 0) })
	w.goFunc(func() { w.pollChecks(ctx, name, gen) })
}

func (w *watch) dropQueued(dc string) {
	q := w.queue[:0]
	for _, k := range w.queue {
		if k.dc == dc {
			delete(w.pending, k)
			continue
		}
		q = append(q, k)
	}
	w.queue = q
}

// enqueue asks for a fetch (full) or a probe of one service.
func (w *watch) enqueue(d *dcWatch, name string, full bool) {
	k := jobKey{d.name, name}
	if w.inflight[k] {
		w.again[k] = w.again[k] || full
		return
	}
	if was, ok := w.pending[k]; ok {
		w.pending[k] = was || full
		return
	}
	w.pending[k] = full
	w.queue = append(w.queue, k)
}

func (w *watch) handleCatalog(d *dcWatch, ev event) {
	if ev.reset {
		w.resync(d, "index_reset")
		return
	}
	if !d.catalogSeen {
		d.catalogSeen, d.catalogIndex, d.names = true, ev.index, ev.names
		for name := range d.svcs {
			if _, ok := ev.names[name]; !ok {
				w.setPart(d, name, nil)
				delete(d.svcs, name)
			}
		}
		for name := range ev.names {
			d.awaiting[name] = true
			w.enqueue(d, name, true)
		}
		w.checkListed(d)
		return
	}
	// The listing is diffed even when the index did not move: a server
	// whose state was wiped can come back with an index equal to the one
	// held, and its listing is still the truth.
	moved := ev.index != d.catalogIndex
	changed := false
	for name, tags := range ev.names {
		old, ok := d.names[name]
		if !ok || !sameTags(old, tags) {
			changed = true
			w.enqueue(d, name, true)
		}
	}
	for name := range d.names {
		if _, ok := ev.names[name]; !ok {
			changed = true
			w.setPart(d, name, nil)
			delete(d.svcs, name)
		}
	}
	d.names, d.catalogIndex = ev.names, ev.index
	if moved && !changed && !w.attribute(d, ev.index) {
		d.unexplained[ev.index] = true
		if d.checksSeen {
			// A passing check (in neither signal) may have been
			// written or deleted at this index.
			w.explain(d)
		}
	}
}

// explain reads the checks table's index, then if needed every check, to
// attribute the unexplained catalog indexes (see handleExplain).
func (w *watch) explain(d *dcWatch) {
	if d.explaining {
		d.explainAgain = true
		return
	}
	d.explaining = true
	ctx, gen, name := d.ctx, d.gen, d.name
	w.goFunc(func() { w.listChecks(ctx, name, gen, false) })
}

// attribute fetches the services whose checks, as known, were created or
// written in the raft transaction at index (an agent syncs a service
// together with its checks, and a catalog registration carries them in the
// same write), and reports whether there were any.
func (w *watch) attribute(d *dcWatch, index uint64) bool {
	if !d.checksSeen {
		return false
	}
	found := false
	nodes := map[string]bool{}
	for _, c := range d.checks {
		if c.createIndex != index && c.modify != index {
			continue
		}
		found = true
		if c.service == "" {
			nodes[c.node] = true
		} else if _, ok := d.names[c.service]; ok {
			w.enqueue(d, c.service, true)
		}
	}
	w.fetchOnNodes(d, nodes)
	return found
}

// fetchOnNodes fetches every service with an instance on one of nodes.
func (w *watch) fetchOnNodes(d *dcWatch, nodes map[string]bool) {
	if len(nodes) == 0 {
		return
	}
	for name, s := range d.svcs {
		for _, n := range s.nodes {
			if nodes[n] {
				w.enqueue(d, name, true)
				break
			}
		}
	}
}

func sameTags(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func (w *watch) handleChecks(d *dcWatch, ev event) {
	if ev.reset {
		w.resync(d, "index_reset")
		return
	}
	dirtyNodes := map[string]bool{}
	if ev.status == api.HealthAny {
		// The first listing of this generation: every check.
		checks := checkMap(ev.checks)
		d.unhealthy = map[string]map[string]checkInfo{api.HealthCritical: {}, api.HealthWarning: {}}
		for k, c := range checks {
			// Fetches of this listing may have raced the check: a
			// service's index is at least that of its checks' writes.
			if s := d.svcs[c.service]; s != nil && s.index > 0 && s.index < c.modify {
				w.touch(d, c, dirtyNodes)
			}
			if set := d.unhealthy[c.status]; set != nil {
				set[k] = c
			}
		}
		d.checks, d.checksSeen = checks, true
	} else {
		// The checks in one failing state: one that enters or leaves
		// the set is a health flip (or a failing check created or
		// deleted). A check rewritten in the same state (its output
		// changed) changes nothing served.
		set, prev := checkMap(ev.checks), d.unhealthy[ev.status]
		for k, c := range set {
			if old, ok := prev[k]; !ok || old.service != c.service {
				w.touch(d, c, dirtyNodes)
			}
			d.checks[k] = c
		}
		for k, old := range prev {
			if _, ok := set[k]; !ok {
				w.touch(d, old, dirtyNodes)
				// Passing now, or deleted (its service is fetched
				// either way): which, and when, is not known.
				if held, ok := d.checks[k]; ok && held.status == ev.status {
					held.status = statusLeft
					d.checks[k] = held
				}
			}
		}
		d.unhealthy[ev.status] = set
	}
	w.fetchOnNodes(d, dirtyNodes)
	for index := range d.unexplained {
		if w.attribute(d, index) {
			delete(d.unexplained, index)
		}
	}
	if ev.status == api.HealthAny && len(d.unexplained) > 0 {
		w.explain(d) // catalog changes seen before this baseline
	}
	w.checkListed(d)
}

// handleExplain settles the unexplained catalog indexes. First from the
// checks table's index: a catalog index above it wrote no check, and is
// left to a sweep. Then, if any is at or below it, from a full listing
// diffed against the last one: the services whose checks were created,
// changed or removed since are fetched; an index a check was created or
// written at is attributed, and so is the table's own index if a check was
// deleted (the table's index is that of its last write); the others are
// left to a sweep.
func (w *watch) handleExplain(d *dcWatch, ev event) {
	w.log.Debug("consul attribution", "datacenter", dcLabel(d.name), "full", ev.full, "checks_index", ev.index, "unexplained", len(d.unexplained))
	sweep := false
	if !ev.full {
		list := false
		for index := range d.unexplained {
			if index > ev.index {
				delete(d.unexplained, index)
				sweep = true
			} else {
				list = true
			}
		}
		if sweep {
			w.sweep(d, "unattributed")
		}
		if list {
			w.m.listings.Inc()
			ctx, gen, name := d.ctx, d.gen, d.name
			w.goFunc(func() { w.listChecks(ctx, name, gen, true) })
			return
		}
		w.explained(d)
		return
	}
	checks := checkMap(ev.checks)
	dirtyNodes := map[string]bool{}
	deleted := false
	for k, c := range checks {
		old, ok := d.checks[k]
		if ok && old.status == statusLeft && c.status == api.HealthPassing {
			continue // its service was fetched when it left the failing set
		}
		if !ok || old.status != c.status || old.service != c.service {
			w.touch(d, c, dirtyNodes)
		}
	}
	for k, old := range d.checks {
		if _, ok := checks[k]; !ok && old.status != statusLeft {
			// (A check that left a failing set and is gone now was
			// deleted then or since: its service was fetched, but the
			// index it went at is not known.)
			deleted = true
			w.touch(d, old, dirtyNodes)
		}
	}
	w.fetchOnNodes(d, dirtyNodes)
	d.checks = checks
	for index := range d.unexplained {
		switch {
		case w.attribute(d, index), deleted && index == ev.index:
			delete(d.unexplained, index)
		case index > ev.index && d.explainAgain:
			// Seen after this listing was read: the next one decides.
		default:
			delete(d.unexplained, index)
			sweep = true
		}
	}
	if sweep {
		w.sweep(d, "unattributed")
	}
	w.explained(d)
}

// explained ends an attribution, and starts the next if one was asked for
// meanwhile.
func (w *watch) explained(d *dcWatch) {
	d.explaining = false
	if d.explainAgain {
		d.explainAgain = false
		if len(d.unexplained) > 0 {
			w.explain(d)
		}
	}
}

// touch fetches the service of a check, or for a node check marks its node
// (every service on it is fetched).
func (w *watch) touch(d *dcWatch, c checkInfo, dirtyNodes map[string]bool) {
	if c.service == "" {
		dirtyNodes[c.node] = true
	} else if _, ok := d.names[c.service]; ok {
		w.enqueue(d, c.service, true)
	}
}

func checkMap(list api.HealthChecks) map[string]checkInfo {
	checks := make(map[string]checkInfo, len(list))
	for _, c := range list {
		checks[c.Node+"/"+c.CheckID] = checkInfo{service: c.ServiceName, node: c.Node, status: c.Status,
			createIndex: c.CreateIndex, modify: c.ModifyIndex}
	}
	return checks
}

func (w *watch) handleFetch(d *dcWatch, ev event) {
	s := d.svcs[ev.name]
	if ev.probe {
		if s == nil || ev.index != s.index {
			w.enqueue(d, ev.name, true)
		}
		return
	}
	defer w.checkListed(d)
	delete(d.awaiting, ev.name)
	if _, listed := d.names[ev.name]; !listed {
		return // the catalog is the authority on which services exist
	}
	if s != nil && s.index != 0 && ev.index <= s.index {
		return // not newer than what is held (a stale read)
	}
	if s == nil {
		s = &dcService{}
		d.svcs[ev.name] = s
	}
	s.index = ev.index
	p, rejected := w.mapper.mapService(d.dcName(ev.entries), ev.name, ev.entries)
	s.nodes = s.nodes[:0]
	for _, e := range ev.entries {
		if e.Node != nil {
			s.nodes = append(s.nodes, e.Node.Node)
		}
	}
	rejects := make(map[string]string, len(rejected))
	for _, rj := range rejected {
		rejects[rj.record] = rj.err.Error()
		if s.rejects[rj.record] != rj.err.Error() {
			w.m.rejected.WithLabelValues(rejectReason(rj.err)).Inc()
			w.sink.Rejected(rj.record, rj.err)
		}
	}
	s.rejects = rejects
	w.setPart(d, ev.name, p)
}

// dcName is the datacenter's name for locality and record names: the one
// configured, or for the agent's own the one Consul reports on its nodes.
func (d *dcWatch) dcName(entries []*api.ServiceEntry) string {
	if d.name != "" {
		return d.name
	}
	for _, e := range entries {
		if e.Node != nil && e.Node.Datacenter != "" {
			return e.Node.Datacenter
		}
	}
	return "local"
}

func rejectReason(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "address"):
		return "address"
	case strings.Contains(msg, "port"):
		return "port"
	case strings.Contains(msg, "name"):
		return "name"
	}
	return "other"
}

func (w *watch) checkListed(d *dcWatch) {
	if !d.listed && d.catalogSeen && d.checksSeen && len(d.awaiting) == 0 {
		d.listed = true
		d.lastSweep = time.Now()
	}
}

// setPart replaces the part one datacenter contributes for a service and
// marks the keys it affects.
func (w *watch) setPart(d *dcWatch, name string, p *part) {
	ref := partRef{d.name, name}
	s := d.svcs[name]
	if s == nil {
		if p == nil {
			return
		}
		s = &dcService{}
		d.svcs[name] = s
	}
	if old := s.part; old != nil {
		w.dirty[old.key] = true
		if refs := w.byKey[old.key]; refs != nil {
			delete(refs, ref)
			if len(refs) == 0 {
				delete(w.byKey, old.key)
			}
		}
	}
	s.part = p
	if p != nil {
		w.dirty[p.key] = true
		refs := w.byKey[p.key]
		if refs == nil {
			refs = map[partRef]bool{}
			w.byKey[p.key] = refs
		}
		refs[ref] = true
	}
}

// startSweep probes every service of a datacenter for its index.
func (w *watch) startSweep(d *dcWatch, reason string) {
	w.m.sweeps.WithLabelValues(reason).Inc()
	d.lastSweep, d.sweepDue = time.Now(), false
	for name := range d.names {
		w.enqueue(d, name, false)
	}
}

// sweep starts a sweep for an unattributed change, or schedules one when
// the last was less than SweepInterval ago.
func (w *watch) sweep(d *dcWatch, reason string) {
	if !d.listed {
		return // the listing in progress fetches everything anyway
	}
	if wait := w.cfg.SweepInterval - time.Since(d.lastSweep); wait > 0 {
		if !d.sweepDue {
			d.sweepDue = true
			w.armSweepTimer()
		}
		return
	}
	w.startSweep(d, reason)
}

// armSweepTimer sets the sweep timer to the earliest datacenter due.
func (w *watch) armSweepTimer() {
	var next time.Duration = -1
	for _, d := range w.dcs {
		if d.sweepDue {
			wait := max(w.cfg.SweepInterval-time.Since(d.lastSweep), 0)
			if next < 0 || wait < next {
				next = wait
			}
		}
	}
	if next >= 0 {
		w.sweepTimer.Reset(next)
	}
}

// ---------------------------------------------------------------------------
// Reports.

// flush reports what changed: a Replace once every datacenter is listed
// after a (re)start, else an Update or Delete per changed service.
func (w *watch) flush() {
	if w.replacePending {
		if !w.dcsSet {
			return
		}
		for _, d := range w.dcs {
			if !d.listed {
				return
			}
		}
		all := make([]model.Service, 0, len(w.byKey))
		clear(w.reported)
		for key := range w.byKey {
			if svc, ok := w.service(key); ok {
				w.reported[key] = svc
				all = append(all, svc)
			}
		}
		sort.Slice(all, func(i, j int) bool { return all[i].Key().String() < all[j].Key().String() })
		clear(w.dirty)
		w.replacePending = false
		w.synced = true
		w.sink.Replace(all)
	} else if w.synced {
		keys := make([]model.ServiceKey, 0, len(w.dirty))
		for k := range w.dirty {
			keys = append(keys, k)
		}
		clear(w.dirty)
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, key := range keys {
			old, had := w.reported[key]
			svc, ok := w.service(key)
			switch {
			case ok && (!had || !reflect.DeepEqual(old, svc)):
				w.reported[key] = svc
				w.sink.Update(svc)
			case !ok && had:
				delete(w.reported, key)
				w.sink.Delete(key)
			}
		}
	}
	if w.unreachable && w.synced && !w.replacePending {
		for _, d := range w.dcs {
			if len(d.failing) > 0 {
				return
			}
		}
		w.unreachable = false
		w.sink.Unreachable(nil)
	}
}

// service merges the parts of key from every datacenter. Two Consul
// services whose names sanitise to the same key do not merge: the smaller
// name wins and the other is rejected.
func (w *watch) service(key model.ServiceKey) (model.Service, bool) {
	refs := w.byKey[key]
	var parts []*part
	winner := ""
	for ref := range refs {
		if winner == "" || ref.name < winner {
			winner = ref.name
		}
	}
	for ref := range refs {
		d := w.dcs[ref.dc]
		if d == nil || d.svcs[ref.name] == nil || d.svcs[ref.name].part == nil {
			continue
		}
		if ref.name != winner {
			if !w.collided[ref] {
				w.collided[ref] = true
				err := fmt.Errorf("its ServiceEntry %s is taken by consul service %q (names sanitise to the same)", key, winner)
				w.m.rejected.WithLabelValues("name").Inc()
				w.sink.Rejected(recordName(d.svcs[ref.name].part.dc, ref.name, "", ""), err)
			}
			continue
		}
		delete(w.collided, ref)
		parts = append(parts, d.svcs[ref.name].part)
	}
	if len(parts) == 0 {
		return model.Service{}, false
	}
	return merge(parts), true
}
