// Package pipeline turns what an adapter reports into snapshots: it is the
// core's registry.Sink. Reports are recorded cheaply, coalesced over a
// quiet period (bounded by a maximum delay), then each changed service is
// converted, validated and applied to the snapshot store in one batch.
//
// Work per flush is proportional to what changed: a service reported again
// unchanged is not converted, and a converted resource whose bytes did not
// change makes no new version.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/internal/importfilter"
	"github.com/galleon-mesh/galleon/internal/parallel"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/snapshot/protoenc"
	"github.com/galleon-mesh/galleon/internal/vip"
	"github.com/galleon-mesh/galleon/model"
)

// Config tunes a Pipeline.
type Config struct {
	// Registry is the name of the registry the adapter watches ("consul"),
	// recorded on every resource served (convert.Options.Registry) so that
	// adapters need not say it: the daemon passes its Spec.Registry.
	Registry string
	Convert  convert.Options
	// Quiet is how long reports must stop before a flush; 0 means 100ms.
	Quiet time.Duration
	// MaxDelay bounds how long a steady stream of reports can hold a flush
	// back; 0 means 1s.
	MaxDelay time.Duration
	Logger   *slog.Logger
	// Registerer receives the pipeline's metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// VIPs, when set, gives every service that needs one an address (see
	// addressHost); the pipeline owns it from then on. Nil: services are
	// served with the addresses the registry gives, or none.
	VIPs *vip.Allocator
	// RemovalHold is how long a flush's removals are held when they would
	// take away every served service or more than RemovalHoldShare
	// percent of them (see hold.go); 0 turns the rule off.
	RemovalHold time.Duration
	// RemovalHoldShare is the percentage of served services a flush may
	// remove without a hold (registries of holdMinServices services or
	// more); 100: only removing every service is held.
	RemovalHoldShare int
	// Applied, when set, is called after each flush that published a new,
	// ready snapshot, with its sequence and when the oldest report it holds
	// came in: what the change -> every sink ACKed latency is measured
	// from (serve.ChangeAcks.Changed).
	Applied func(seq uint64, reported time.Time)
	// Forward, when set, makes the pipeline an intake for one registry of
	// several (the fleet): each flush hands the changes of its services,
	// after the emptiness rule, to Forward instead of converting them
	// (nil: removed), with synced true from the registry's first full
	// listing on, and reported, when the oldest report of the flush came
	// in (what change -> every sink ACKed is measured from: Backdate). The
	// store is never written; what Forward is handed belongs to it. Called
	// from the Run goroutine only.
	Forward func(changes map[model.ServiceKey]*model.Service, synced bool, reported time.Time)
	// LabelledRegisterer says that Registerer adds the registry label to
	// every metric itself (the fleet wraps one per registry), so the
	// pipeline adds none of its own.
	LabelledRegisterer bool
	// Filter, when set, is the registry's import filters, applied to every
	// report (filter.go); SetFilter replaces it. Nil: everything is imported.
	Filter *importfilter.Filter
}

// DefaultQuiet and DefaultMaxDelay are the coalescing defaults;
// DefaultRemovalHold and DefaultRemovalHoldShare the emptiness rule's
// (hold.go): two minutes outlast a Eureka server's restart with its
// clients re-registering every 30 s, and a registry that restarts empty
// and fills again.
const (
	DefaultQuiet            = 100 * time.Millisecond
	DefaultMaxDelay         = time.Second
	DefaultRemovalHold      = 2 * time.Minute
	DefaultRemovalHoldShare = 50
)

// Pipeline is the core's Sink. Create it with New, run it with Run.
type Pipeline struct {
	cfg     Config
	store   *snapshot.Store
	log     *slog.Logger
	metrics *metrics
	wake    chan struct{}

	rejections rejections
	// filter is the import filters applied to reports (filter.go).
	filter atomic.Pointer[importfilter.Filter]

	// invalid are the services the core could not serve at their last
	// report, and dropped the instances it left out of each service
	// served (their rejection records): what to clear when they are fine.
	// Owned by the Run goroutine.
	invalid map[model.ServiceKey]bool
	dropped map[model.ServiceKey][]string
	// degradedMu guards degraded: the parts of the registry down now
	// (part -> error).
	degradedMu sync.Mutex
	degraded   map[string]string

	mu       sync.Mutex // guards the reports below
	replace  map[model.ServiceKey]*model.Service
	replaced bool
	pending  map[model.ServiceKey]*model.Service // nil value: deleted
	// filtered is what the import filters leave out now.
	filtered    filteredState
	firstReport time.Time
	lastReport  time.Time
	unreachable error
	// unreachableSince is when unreachable last went from nil to an error.
	unreachableSince time.Time
	// started is when the pipeline was made: the registry's state is
	// "known current" as of then until its first listing.
	started time.Time

	// Owned by the Run goroutine.
	served map[model.ServiceKey]*servedService
	owners map[resourceKey]model.ServiceKey
	synced bool
	// addressed is the host each reported service holds an allocated
	// address for, and users how many services hold each such host: a
	// host leaves the allocator with its last service.
	addressed map[model.ServiceKey]string
	users     refCounts[string]
	// given are the single addresses each reported service's registry
	// gave, and givenUsers how many services give each: the allocator
	// never hands them out.
	given      map[model.ServiceKey][]netip.Addr
	givenUsers refCounts[netip.Addr]
	// unaddressed is the hosts the allocator could place nowhere at the
	// last flush, so that the range filling up is logged once.
	unaddressed int
	// hold is the removal the emptiness rule holds now (hold.go).
	hold holdState

	statusMu sync.Mutex
	status   Status
}

// servedService is what one registry service currently contributes.
type servedService struct {
	model     *model.Service
	addresses []string // allocated, served in place of model.Addresses (empty)
	// dns: its ServiceEntry has resolution DNS, so istiod makes each of
	// its endpoint changes a full push (isDNSTypeServiceEntry in
	// pilot/pkg/serviceregistry/serviceentry).
	dns       bool
	resources []resourceKey
}

type resourceKey struct {
	kind snapshot.Kind
	name string
}

// Status is the pipeline's state, for health checks and debugging.
type Status struct {
	// Synced is true once the registry's first full listing is served.
	Synced bool
	// Unreachable is the registry's last connection error, nil when fine:
	// the state served is the last good one.
	Unreachable error
	Services    int
	LastFlush   time.Time
	Seq         uint64
	// Held is the removal the emptiness rule holds now, nil when none.
	Held *Hold
	// FilteredServices and FilteredInstances are what the import filters
	// leave out now (filter.go).
	FilteredServices, FilteredInstances int
}

// New returns a pipeline that applies to store.
func New(store *snapshot.Store, cfg Config) *Pipeline {
	if cfg.Quiet <= 0 {
		cfg.Quiet = DefaultQuiet
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.MaxDelay < cfg.Quiet {
		cfg.MaxDelay = cfg.Quiet
	}
	if cfg.RemovalHoldShare <= 0 || cfg.RemovalHoldShare > 100 {
		cfg.RemovalHoldShare = DefaultRemovalHoldShare
	}
	cfg.Convert.Registry = cfg.Registry
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pipeline{
		cfg:     cfg,
		store:   store,
		log:     log,
		wake:    make(chan struct{}, 1),
		pending: map[model.ServiceKey]*model.Service{},
		served:  map[model.ServiceKey]*servedService{},
		owners:  map[resourceKey]model.ServiceKey{},
		started: time.Now(),

		addressed: map[model.ServiceKey]string{},
		users:     refCounts[string]{},

		given:      map[model.ServiceKey][]netip.Addr{},
		givenUsers: refCounts[netip.Addr]{},
	}
	registryLabel := cfg.Registry
	if cfg.LabelledRegisterer {
		registryLabel = ""
	}
	p.metrics = newMetrics(cfg.Registerer, registryLabel, p.lastKnownCurrent)
	p.rejections = rejections{log: log, metrics: p.metrics}
	p.filter.Store(cfg.Filter)
	if cfg.Filter != nil {
		log.Info("import filters: what they leave out is not served, and counted (galleon_registry_filtered_services, _instances)", cfg.Filter.Describe()...)
	}
	p.invalid = map[model.ServiceKey]bool{}
	p.dropped = map[model.ServiceKey][]string{}
	return p
}

// lastKnownCurrent is when the state served was last known to match the
// registry, as the adapter reports it: now while the registry is reachable
// and has been listed; the moment it was reported unreachable while it is;
// the pipeline's start until the first listing is served.
func (p *Pipeline) lastKnownCurrent() time.Time {
	p.statusMu.Lock()
	synced := p.status.Synced
	p.statusMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !synced:
		return p.started
	case p.unreachable != nil:
		return p.unreachableSince
	}
	return time.Now()
}

// Status returns the pipeline's current state.
func (p *Pipeline) Status() Status {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	s := p.status
	p.mu.Lock()
	s.Unreachable = p.unreachable
	s.FilteredServices, s.FilteredInstances = len(p.filtered.services), p.filtered.instanceTotal
	p.mu.Unlock()
	return s
}

// Replace implements registry.Sink.
func (p *Pipeline) Replace(services []model.Service) {
	var all map[model.ServiceKey]*model.Service
	var filtered filteredState
	if f := p.filter.Load(); f != nil {
		all, filtered = replaceFiltered(f, services)
	} else {
		all = make(map[model.ServiceKey]*model.Service, len(services))
		for i := range services {
			all[services[i].Key()] = &services[i]
		}
	}
	p.mu.Lock()
	p.replace, p.replaced = all, true
	clear(p.pending) // the full listing supersedes earlier reports
	if p.filtered.services != nil || p.filtered.instances != nil || filtered.services != nil || filtered.instances != nil {
		p.filtered = filtered
		p.filteredCounts()
	}
	p.reported()
	p.mu.Unlock()
}

// Update implements registry.Sink. A service the import filters leave out
// is reported as removed.
func (p *Pipeline) Update(service model.Service) {
	f := p.filter.Load()
	kept, dropped := f.Apply(&service)
	p.mu.Lock()
	if kept {
		p.pending[service.Key()] = &service
	} else {
		p.pending[service.Key()] = nil
	}
	if f != nil || p.filtered.services != nil || p.filtered.instances != nil {
		p.filtered.note(service.Key(), kept, dropped)
		p.filteredCounts()
	}
	p.reported()
	p.mu.Unlock()
}

// Delete implements registry.Sink.
func (p *Pipeline) Delete(key model.ServiceKey) {
	p.mu.Lock()
	p.pending[key] = nil
	if p.filtered.services != nil || p.filtered.instances != nil {
		p.filtered.note(key, true, 0)
		p.filteredCounts()
	}
	p.reported()
	p.mu.Unlock()
}

// Unreachable implements registry.Sink.
func (p *Pipeline) Unreachable(err error) {
	p.mu.Lock()
	was := p.unreachable
	p.unreachable = err
	if err != nil && was == nil {
		p.unreachableSince = time.Now()
	}
	p.mu.Unlock()
	switch {
	case err != nil && was == nil:
		p.metrics.unreachable.Set(1)
		p.statusMu.Lock()
		synced := p.status.Synced
		p.statusMu.Unlock()
		text := Cut(err.Error(), MaxErrorLen)
		if synced {
			p.log.Warn("registry unreachable: serving the last good state", "error", text)
		} else {
			p.log.Warn("registry unreachable: nothing is served until it has been listed once", "error", text)
		}
	case err == nil && was != nil:
		p.metrics.unreachable.Set(0)
		p.log.Info("registry reachable again")
		p.poke() // a hold waiting for the registry to be reachable is judged again
	}
}

// Degraded implements registry.Sink: one part of the registry is down
// (err != nil) or back (nil). At most MaxDegradedParts are kept; the
// registry chooses how many parts it names.
func (p *Pipeline) Degraded(part string, err error) {
	part = Cut(part, MaxRecordLen)
	p.degradedMu.Lock()
	defer p.degradedMu.Unlock()
	if p.degraded == nil {
		p.degraded = map[string]string{}
	}
	_, was := p.degraded[part]
	switch {
	case err == nil && was:
		delete(p.degraded, part)
		p.log.Info("registry part reachable again", "part", part)
	case err == nil:
	case !was && len(p.degraded) >= MaxDegradedParts:
		p.log.Warn("registry part unreachable (not listed in /debug/status: too many parts down)", "part", part, "error", Cut(err.Error(), MaxErrorLen))
	default:
		if !was {
			p.log.Warn("registry part unreachable: serving what was last listed from it", "part", part, "error", Cut(err.Error(), MaxErrorLen))
		}
		p.degraded[part] = Cut(err.Error(), MaxErrorLen)
	}
	p.metrics.degradedParts.Set(float64(len(p.degraded)))
}

// MaxDegradedParts bounds the unreachable parts of a registry kept for
// /debug/status and /readyz.
const MaxDegradedParts = 64

// DegradedParts returns the parts of the registry down now, with their
// errors.
func (p *Pipeline) DegradedParts() map[string]string {
	p.degradedMu.Lock()
	defer p.degradedMu.Unlock()
	return maps.Clone(p.degraded)
}

// Backdate says that the reports since the last flush stand for registry
// changes first reported at t, earlier than they reached this pipeline
// (the fleet's serving pipeline, fed by intakes that coalesced them
// first): change -> every sink ACKed (Config.Applied) is measured from t.
// A zero t, or one later than the reports, changes nothing.
func (p *Pipeline) Backdate(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !t.IsZero() && !p.firstReport.IsZero() && t.Before(p.firstReport) {
		p.firstReport = t
	}
}

// reported notes a report; p.mu is held.
func (p *Pipeline) reported() {
	now := time.Now()
	if p.firstReport.IsZero() {
		p.firstReport = now
	}
	p.lastReport = now
	p.poke()
}

// poke wakes the Run goroutine.
func (p *Pipeline) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run coalesces reports and applies them until ctx is cancelled.
func (p *Pipeline) Run(ctx context.Context) error {
	holdTimer := time.NewTimer(time.Hour)
	holdTimer.Stop()
	defer holdTimer.Stop()
	for {
		if due := p.holdDue(); !due.IsZero() {
			holdTimer.Reset(time.Until(due))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-holdTimer.C: // a held removal may be confirmed: flush with no report
		case <-p.wake:
			holdTimer.Stop()
			if err := p.waitQuiet(ctx); err != nil {
				return err
			}
		}
		p.flush()
	}
}

// waitQuiet returns once no report came for the quiet period, or the
// oldest unflushed report is MaxDelay old. The registry's first full listing
// does not wait: nothing is served yet, so there is nothing to coalesce it
// with, and every sink waits for it (readiness, istiod's first push).
func (p *Pipeline) waitQuiet(ctx context.Context) error {
	for {
		p.mu.Lock()
		first, last, replaced := p.firstReport, p.lastReport, p.replaced
		p.mu.Unlock()
		if first.IsZero() || (replaced && !p.synced) {
			return nil
		}
		due := last.Add(p.cfg.Quiet)
		if limit := first.Add(p.cfg.MaxDelay); limit.Before(due) {
			due = limit
		}
		wait := time.Until(due)
		if wait <= 0 {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// flush converts what was reported since the last flush and applies it.
func (p *Pipeline) flush() {
	p.mu.Lock()
	replace, replaced, pending := p.replace, p.replaced, p.pending
	p.replace, p.replaced, p.pending = nil, false, map[model.ServiceKey]*model.Service{}
	reported := p.firstReport
	p.firstReport, p.lastReport = time.Time{}, time.Time{}
	p.mu.Unlock()

	start := time.Now()
	work := pending
	if replaced {
		work = replace
		for key := range p.served {
			if _, kept := replace[key]; !kept {
				work[key] = nil
			}
		}
		for key, svc := range pending {
			work[key] = svc
		}
	}

	p.holdRemovals(work)
	if p.cfg.Forward != nil {
		p.forward(work, replaced, reported)
		return
	}
	if p.cfg.VIPs != nil {
		p.allocate(work)
	}
	jobs := make([]serviceJob, 0, len(work))
	for key, svc := range work {
		j := serviceJob{key: key, svc: svc}
		if host := p.addressed[key]; host != "" && svc != nil {
			j.addresses = p.cfg.VIPs.Addrs(host)
		}
		jobs = append(jobs, j)
	}
	p.convertAll(jobs)
	var changes []snapshot.Change
	for i := range jobs {
		changes = p.serviceChanges(&jobs[i], changes)
	}
	ready := p.synced || replaced
	before := p.store.Current().Seq
	snap, diffs, err := p.store.Apply(changes, ready)
	if err != nil {
		// A bug, not bad input: the store refuses the whole batch and keeps
		// serving what it had.
		p.log.Error("snapshot not applied", "error", err)
		return
	}
	if snap.Seq != before && snap.Ready && p.cfg.Applied != nil {
		p.cfg.Applied(snap.Seq, reported)
	}
	if replaced && !p.synced {
		p.synced = true
		p.log.Info("registry synced", "services", len(p.served), "seq", snap.Seq)
	}
	elapsed := time.Since(start)
	p.metrics.flushSeconds.Observe(elapsed.Seconds())
	p.metrics.services.Set(float64(len(p.served)))
	for kind, d := range diffs {
		k := kind.String()
		p.metrics.changes.WithLabelValues(k, "added").Add(float64(len(d.Added)))
		p.metrics.changes.WithLabelValues(k, "updated").Add(float64(len(d.Updated) - len(d.EndpointOnly)))
		p.metrics.changes.WithLabelValues(k, "endpoint_only").Add(float64(len(d.EndpointOnly)))
		p.metrics.changes.WithLabelValues(k, "removed").Add(float64(len(d.Removed)))
		p.log.Debug("snapshot", "seq", snap.Seq, "kind", k, "added", len(d.Added), "updated", len(d.Updated),
			"endpoint_only", len(d.EndpointOnly), "removed", len(d.Removed), "took", elapsed)
	}
	p.statusMu.Lock()
	p.status.Synced = p.synced
	p.status.Services = len(p.served)
	p.status.LastFlush = time.Now()
	p.status.Seq = snap.Seq
	p.statusMu.Unlock()
}

// forward hands one flush's changes to Config.Forward, leaving out the
// services reported again unchanged, and keeps what was handed on as served.
func (p *Pipeline) forward(work map[model.ServiceKey]*model.Service, replaced bool, reported time.Time) {
	for key, svc := range work {
		old := p.served[key]
		switch {
		case svc == nil && old == nil:
			delete(work, key)
		case svc == nil:
			delete(p.served, key)
		case old != nil && reflect.DeepEqual(old.model, svc):
			delete(work, key)
		default:
			p.served[key] = &servedService{model: svc}
		}
	}
	first := replaced && !p.synced
	if first {
		p.synced = true
		p.log.Info("registry synced", "services", len(p.served))
	}
	if len(work) > 0 || first {
		p.cfg.Forward(work, p.synced, reported)
	}
	p.metrics.services.Set(float64(len(p.served)))
	p.statusMu.Lock()
	p.status.Synced = p.synced
	p.status.Services = len(p.served)
	p.status.LastFlush = time.Now()
	p.statusMu.Unlock()
}

// serviceJob is one reported service of a flush and, once converted, its objects.
type serviceJob struct {
	key       model.ServiceKey
	svc       *model.Service // nil: deleted
	addresses []string       // allocated for svc, if any
	unchanged bool           // svc is what is served already
	objects   []*snapshot.Object
	dns       bool // the ServiceEntry's resolution is DNS
	dropped   []convert.DroppedInstance
	err       error
}

// convertParallelMin is the smallest flush whose conversions are spread over GOMAXPROCS
// goroutines: below it, starting them costs more than it saves.
const convertParallelMin = 256

// convertAll compares each reported service with what is served and converts and encodes the
// changed ones. That is most of a flush's work and needs nothing but the service, so a large
// flush (a start, a resync after an outage) does it on every core; the rest of the flush, which
// claims resource names and updates the served state, stays on this goroutine.
func (p *Pipeline) convertAll(jobs []serviceJob) {
	one := func(j *serviceJob) {
		if j.svc == nil {
			return
		}
		if old := p.served[j.key]; old != nil && slices.Equal(old.addresses, j.addresses) && reflect.DeepEqual(old.model, j.svc) {
			j.unchanged = true
			return
		}
		j.objects, j.dns, j.dropped, j.err = p.objects(j.svc, j.addresses)
	}
	parallel.For(len(jobs), convertParallelMin, func(i int) { one(&jobs[i]) })
}

// serviceChanges appends the snapshot changes that make j.key's resources
// match j.svc (nil: deleted), converted by convertAll. A service that cannot
// be converted keeps what it served before: a bad update never wipes a
// working service.
func (p *Pipeline) serviceChanges(j *serviceJob, changes []snapshot.Change) []snapshot.Change {
	key, svc := j.key, j.svc
	old := p.served[key]
	if svc == nil {
		if old == nil {
			p.noteService(key, nil, nil, nil) // it may have been rejected
			return changes
		}
		for _, rk := range old.resources {
			changes = append(changes, snapshot.Change{Kind: rk.kind, Name: rk.name})
			delete(p.owners, rk)
		}
		delete(p.served, key)
		p.countDNS(old, nil)
		p.noteService(key, nil, nil, nil)
		return changes
	}
	if j.unchanged {
		return changes
	}
	objects, err := j.objects, j.err
	if err == nil {
		err = p.claim(key, objects)
	}
	if err != nil {
		p.metrics.servicesRejected.Inc()
		if old != nil {
			err = fmt.Errorf("%w (its previous version stays served)", err)
		} else {
			err = fmt.Errorf("%w (not served)", err)
		}
		p.noteService(key, err, nil, nil)
		return changes
	}
	var dropped []string
	var droppedErrs []error
	for _, d := range j.dropped {
		dropped = append(dropped, instanceRecord(key, d.ID))
		droppedErrs = append(droppedErrs, fmt.Errorf("instance %q (address %q) left out of its service, which is served without it: %w", d.ID, d.Address, d.Reason))
	}
	p.noteService(key, nil, dropped, droppedErrs)
	if old == nil || !slices.Equal(old.model.Hosts, svc.Hosts) {
		p.logRewrittenHosts(key, svc)
	}
	next := &servedService{model: svc, addresses: j.addresses, dns: j.dns, resources: make([]resourceKey, 0, len(objects))}
	for _, obj := range objects {
		rk := resourceKey{obj.Kind, obj.Name}
		next.resources = append(next.resources, rk)
		p.owners[rk] = key
		changes = append(changes, snapshot.Change{Kind: obj.Kind, Name: obj.Name, Object: obj})
	}
	if old != nil {
		for _, rk := range old.resources {
			if p.owners[rk] == key && !containsKey(next.resources, rk) {
				changes = append(changes, snapshot.Change{Kind: rk.kind, Name: rk.name})
				delete(p.owners, rk)
			}
		}
	}
	p.served[key] = next
	p.countDNS(old, next)
	return changes
}

// countDNS keeps galleon_dns_resolution_services as a service goes from
// was to now (either nil).
func (p *Pipeline) countDNS(was, now *servedService) {
	if was != nil && was.dns {
		p.metrics.dnsServices.Dec()
	}
	if now != nil && now.dns {
		p.metrics.dnsServices.Inc()
	}
}

// claim refuses objects whose names another service's resources hold already.
func (p *Pipeline) claim(key model.ServiceKey, objects []*snapshot.Object) error {
	for _, obj := range objects {
		if owner, taken := p.owners[resourceKey{obj.Kind, obj.Name}]; taken && owner != key {
			return fmt.Errorf("%s %s is already served for service %q: names collide after sanitising", obj.Kind, obj.Name, owner.String())
		}
	}
	return nil
}

// logRewrittenHosts says which of a service's hosts are served under
// another name (a_b.example.com as a-b.example.com: '_' is not allowed in a
// DNS name), once per change of the service's hosts, so that an operator
// looking for the registry's name in istiod finds out why it is not there.
// A change of case alone is not a rewrite: DNS names are case-insensitive.
func (p *Pipeline) logRewrittenHosts(key model.ServiceKey, svc *model.Service) {
	for _, h := range svc.Hosts {
		if s := model.HostName(h); s != "" && s != strings.ToLower(h) {
			p.rejections.logRateLimited(slog.LevelInfo, "host_rewritten", "host rewritten to a valid DNS name",
				"service", Cut(key.String(), MaxRecordLen), "registry", p.cfg.Registry, "host", Cut(h, MaxRecordLen), "served_as", s)
		}
	}
}

// objects converts svc, with addresses allocated for it if any, and encodes
// its resources for the store. It reads nothing but its arguments and the
// configuration: convertAll calls it concurrently.
func (p *Pipeline) objects(svc *model.Service, addresses []string) (objects []*snapshot.Object, dns bool, dropped []convert.DroppedInstance, err error) {
	in := *svc
	if len(addresses) > 0 {
		in.Addresses = addresses
	}
	converted, err := convert.ConvertService(in, p.cfg.Convert)
	if err != nil {
		return nil, false, nil, err
	}
	resources := converted.Resources
	origin := originOf(p.cfg.Registry, svc.Annotations, resources)
	objects = make([]*snapshot.Object, 0, len(resources))
	for _, r := range resources {
		if se, ok := r.Spec.(*networking.ServiceEntry); ok {
			dns = se.Resolution == networking.ServiceEntry_DNS || se.Resolution == networking.ServiceEntry_DNS_ROUND_ROBIN
		}
		obj, err := encode(r)
		if err != nil {
			return nil, false, nil, err
		}
		obj.Origin = origin
		objects = append(objects, obj)
	}
	return objects, dns, converted.Dropped, nil
}

// originOf describes, for config subset rules, the service resources were
// converted from, as served: sanitised namespace, hosts and labels, taken
// from its ServiceEntry. Without a registry of the pipeline's own (the
// fleet's, which serves several) the service's galleon.io/registry
// annotation names it; a host merged from several registries lists them
// there, and the first is the one subset rules see.
func originOf(registry string, annotations map[string]string, resources []convert.Resource) *snapshot.Origin {
	if registry == "" {
		registry, _, _ = strings.Cut(annotations[convert.AnnotationRegistry], ",")
	}
	o := &snapshot.Origin{Registry: registry}
	for _, r := range resources {
		if spec, ok := r.Spec.(*networking.ServiceEntry); ok {
			o.Service, o.Namespace, o.Hosts, o.Labels = r.FullName(), r.Namespace, spec.Hosts, r.Labels
			break
		}
	}
	return o
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// encode marshals a resource once. A ServiceEntry is marshalled in two
// parts, everything but the endpoints and then the endpoints; the two
// concatenated are a valid encoding of the whole (protobuf merges repeated
// fields), and the hash of the first part tells an endpoint-only change
// apart without a second marshal.
func encode(r convert.Resource) (*snapshot.Object, error) {
	obj := &snapshot.Object{
		Name:        r.FullName(),
		Labels:      r.Labels,
		Annotations: r.Annotations,
	}
	switch spec := r.Spec.(type) {
	case *networking.ServiceEntry:
		obj.Kind = snapshot.ServiceEntry
		endpoints := spec.Endpoints
		spec.Endpoints = nil
		shape, err := deterministic.Marshal(spec)
		spec.Endpoints = endpoints
		if err != nil {
			return nil, err
		}
		obj.Shape = xxhash.Sum64(shape)
		obj.Body = shape
		if len(endpoints) > 0 {
			// Most of the bytes, and every map, are the endpoints': protoenc writes them as
			// deterministic marshalling would, without its reflection.
			obj.Body = protoenc.AppendEndpoints(shape, endpoints)
		}
	case *networking.WorkloadEntry:
		obj.Kind = snapshot.WorkloadEntry
		body := protoenc.AppendWorkloadEntry(nil, spec)
		obj.Body = body
		obj.Shape = xxhash.Sum64(body) // every WorkloadEntry change counts as a change
	default:
		return nil, errors.New("unsupported resource spec " + fmt.Sprintf("%T", r.Spec))
	}
	return obj, nil
}

func containsKey(list []resourceKey, k resourceKey) bool {
	for _, x := range list {
		if x == k {
			return true
		}
	}
	return false
}

type metrics struct {
	recordsRejected *prometheus.CounterVec
	// recordsRejectedNow is how many records are malformed now (rejected
	// and not cleared).
	recordsRejectedNow prometheus.Gauge
	degradedParts      prometheus.Gauge
	servicesRejected   prometheus.Counter
	unreachable        prometheus.Gauge
	services           prometheus.Gauge
	changes            *prometheus.CounterVec
	flushSeconds       prometheus.Histogram
	// dnsServices: served ServiceEntries with resolution DNS.
	dnsServices prometheus.Gauge
	addressMetrics
	holdMetrics
	filterMetrics
}

// newMetrics makes the pipeline's metrics; lastKnownCurrent feeds
// galleon_registry_last_sync_timestamp_seconds, labelled with registry.
func newMetrics(reg prometheus.Registerer, registry string, lastKnownCurrent func() time.Time) *metrics {
	m := &metrics{
		addressMetrics: newAddressMetrics(),
		holdMetrics:    newHoldMetrics(),
		filterMetrics:  newFilterMetrics(),
		dnsServices: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_dns_resolution_services",
			Help: "Services served with resolution DNS (an instance address is a host name): istiod makes every endpoint change of these a full push, not an EDS update.",
		}),
		recordsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_registry_records_rejected_total",
			Help: "Registry records skipped because they are malformed (see the log line naming each), by the reason the adapter gives (\"other\" when it gives none).",
		}, []string{"reason"}),
		// Not galleon_registry_records_rejected: in OpenMetrics that is
		// the family name of the counter above.
		recordsRejectedNow: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_registry_malformed_records",
			Help: "Registry records malformed now, the adapter's and the services and instances the core could not serve: rejected, and not yet fixed or removed (the first 1000 are kept with their text, /debug/status lists 100 of them).",
		}),
		degradedParts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_registry_degraded_parts",
			Help: "Parts of the registry (datacenters, servers, ensemble members) that cannot be reached while the rest can; what was last listed from them is served.",
		}),
		servicesRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "galleon_services_rejected_total",
			Help: "Service updates not served because conversion or validation failed; the previous version stays served.",
		}),
		unreachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_registry_unreachable",
			Help: "1 while the registry cannot be reached and the last good state is served (stale).",
		}),
		services: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_services", Help: "Registry services currently served.",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_resource_changes_total",
			Help: "Resource changes applied to snapshots, by kind and change (added, updated, endpoint_only, removed).",
		}, []string{"kind", "change"}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "galleon_flush_seconds",
			Help:    "Time to convert a batch of registry changes and apply it to the snapshot.",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5},
		}),
	}
	m.recordsRejected.WithLabelValues(reasonOther) // 0, not absent, until the first rejection
	var constLabels prometheus.Labels
	if registry != "" {
		constLabels = prometheus.Labels{"registry": registry}
	}
	lastSync := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "galleon_registry_last_sync_timestamp_seconds",
		Help:        "When the state served was last known to match the registry (Unix time): now while it is reachable and listed, the moment it was reported unreachable while it is not, the process start until the first listing. Alert on time() minus this.",
		ConstLabels: constLabels,
	}, func() float64 { return float64(lastKnownCurrent().UnixNano()) / 1e9 })
	if reg != nil {
		reg.MustRegister(m.recordsRejected, m.recordsRejectedNow, m.degradedParts, m.servicesRejected, m.unreachable, m.services, m.changes, m.flushSeconds, lastSync,
			m.addressedHosts, m.unaddressedHosts, m.addressesMoved, m.dnsServices)
		reg.MustRegister(m.holdMetrics.collectors()...)
		reg.MustRegister(m.filterMetrics.collectors()...)
	}
	return m
}
