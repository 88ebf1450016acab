package eureka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// The fetch protocol of Netflix's DiscoveryClient, with its known failure modes closed:
//
//   - At start, GET /apps: the full listing. Then GET /apps/delta every PollInterval; a delta
//     lists every change of the server's delta window (ADDED, MODIFIED, DELETED by instance),
//     applied to the local copy by ApplyDelta.
//   - After each delta the local apps__hashcode (Eureka's rule: instances counted by status) is
//     compared with the server's. A mismatch means a change was missed: one full fetch repairs
//     it. It is scheduled at a random point of the next PollInterval, so that a fleet of
//     adapters that all see the same mismatch does not fetch the full listing at once, and a
//     mismatch that persists (a server whose hashcode and delta disagree) backs off, doubling
//     up to maxMismatchBackoff: never a storm of full fetches (Netflix/eureka#1528).
//   - After an outage longer than DeltaWindow the deltas no longer cover what was missed: the
//     next fetch is a full one. After a shorter outage a delta that reconciles is enough.
//   - One server is read at a time. When it fails the next is tried at once; the failed one is
//     probed in the background with back-off and reported Degraded until it answers again.
//     The adapter stays on the server that works until the primary (the first of
//     --eureka-urls) answers a probe again: then its full listing is fetched, and read from
//     then on unless it would remove most of what is served (failback).
//   - Emptiness is a claim that needs evidence. A full listing that would remove every
//     application, or more than half of them, while the adapter serves some is what a server
//     restarted empty or a peer not yet synced answers. It is held, not applied (WARN, once),
//     and the full listing is asked for again at each poll, from another server first when
//     there are several; it is applied when a second answer agrees (it too would remove that
//     much), and forgotten when an answer does not (a server that lists the applications
//     clears it). The core holds a large removal once more (--removal-hold), so one bad answer
//     never empties the mesh.
//
// Everything but the probes runs in Run's goroutine; probes only report their result.

// Back-off bounds.
const (
	minRetry = 500 * time.Millisecond // first retry after every server failed
	maxRetry = 30 * time.Second
	minProbe = time.Second // first probe of a failed server
	maxProbe = 2 * time.Minute
	// standbyProbe is how often a server the adapter is not reading, and that answered last
	// time, is probed: a standby that died is reported before a failover needs it.
	standbyProbe       = time.Minute
	maxMismatchBackoff = 5 * time.Minute
	// maxLoggedRejections bounds the log lines of new rejections per fetch; /debug/status and
	// the metric have them all.
	maxLoggedRejections = 20
)

type poller struct {
	r   *Registry
	rec *registry.Reconciler
	// http is this Run's client: its idle connections close when Run returns.
	http *http.Client

	// apps is the local copy of the registry; nil before the first full listing.
	apps *Applications
	// Per application (upper-case name): the service it maps to and its mapping.
	appSvc map[string]string
	built  map[string]model.Service
	mapRej map[string]map[string]error
	// byName: service name -> applications mapping to it. Only the smallest name is served.
	byName  map[string]map[string]bool
	nameRej map[string]error // application record -> why it is not served (reasonName)
	// transient are delta entries that could not be applied (reasonAction), until the next full
	// listing.
	transient map[string]error
	// told: rejections already logged and counted, record -> message.
	told map[string]string

	cur     int
	servers []serverState
	probes  chan probeResult
	wg      sync.WaitGroup

	lastOK, lastFull time.Time
	outage           bool          // every server failed the last attempt
	retry            time.Duration // wait before the next attempt while every server fails
	fullDue          time.Time     // a full fetch is scheduled for then; zero: none
	fullWhy          string
	// mismatchBackoff is the least time between two full fetches for a mismatch; it doubles
	// while mismatches keep coming and is reset by a delta that reconciles.
	mismatchBackoff  time.Duration
	lastMismatchFull time.Time
	// mismatchTold: a mismatch was logged and no delta has reconciled since (one line an
	// episode, however long the server's hashcode disagrees).
	mismatchTold bool

	// suspect is a full listing held unapplied: it would remove too much (see suspicious).
	suspect *suspicion
	// failback: the primary answered a probe while another server is read; its full listing
	// is tried at the next step. failbackTold: a refused failback was logged.
	failback, failbackTold bool
	// failbackBackoff is the wait before the primary is asked again after its listing was
	// refused for a failback: doubling from minProbe to maxProbe, reset when it is read.
	failbackBackoff time.Duration
}

// suspicion is a held full listing: which server answered it, when, and what it listed.
type suspicion struct {
	from     int
	since    time.Time
	apps     int
	removing int
}

type serverState struct {
	down    bool
	err     error
	next    time.Time // when to probe it (zero: at once) unless it is the server in use
	backoff time.Duration
	probing bool
}

type probeResult struct {
	i   int
	err error
}

func newPoller(r *Registry, sink registry.Sink) *poller {
	return &poller{
		r:         r,
		rec:       registry.NewReconciler(sink),
		http:      newHTTPClient(&r.cfg),
		appSvc:    map[string]string{},
		built:     map[string]model.Service{},
		mapRej:    map[string]map[string]error{},
		byName:    map[string]map[string]bool{},
		nameRej:   map[string]error{},
		transient: map[string]error{},
		told:      map[string]string{},
		servers:   make([]serverState, len(r.servers)),
		probes:    make(chan probeResult),
	}
}

func (p *poller) run(ctx context.Context) error {
	// Probes stop with ctx; Run returns once they have, and its connections are closed.
	defer p.http.CloseIdleConnections()
	defer p.wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case pr := <-p.probes:
			p.probed(pr)
			continue
		case <-timer.C:
		}
		wait := p.step(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.startProbes(ctx)
		timer.Reset(wait)
	}
}

// step fetches once (full or delta, from the first server that answers), applies it and
// returns how long to wait before the next step.
func (p *poller) step(ctx context.Context) time.Duration {
	now := time.Now()
	if p.failback && p.cur != 0 && p.apps != nil && p.suspect == nil && !p.outage {
		if wait, ok := p.tryFailback(ctx); ok || ctx.Err() != nil {
			return wait
		}
	}
	p.failback = false
	kind, why := p.nextFetch(now)
	var f *fetched
	var i int
	var err error
	if p.suspect != nil && len(p.r.servers) > 1 {
		f, i, err = p.fetchConfirm(ctx)
	} else {
		f, i, err = p.fetchAny(ctx, kind, p.cur)
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		if !p.outage {
			p.r.log.Warn("no Eureka server answers: serving the last state", "err", err)
		}
		p.outage = true
		p.rec.Unreachable(err)
		p.retry = min(max(2*p.retry, minRetry), maxRetry, p.r.cfg.PollInterval)
		return p.retry
	}
	wasOutage := p.outage
	if wasOutage {
		p.r.log.Info("a Eureka server answers again", "server", p.r.servers[i].name)
	}
	p.outage, p.retry = false, 0
	p.lastOK = time.Now()
	if kind == kindFull && p.hold(f, i) {
		return p.r.cfg.PollInterval
	}
	p.use(i)
	if kind == kindFull {
		p.applyFull(f, why)
	} else if err := p.applyDelta(f, wasOutage); err != nil {
		// The local copy would grow over a limit: keep the last state, as for a listing
		// over it, and relist (refused too while the registry stays that large).
		p.r.log.Warn("a Eureka delta would take the registry over a limit: serving the last state", "err", err)
		p.outage = true
		p.rec.Unreachable(err)
		p.scheduleFull(fullMismatch, now)
		return p.r.cfg.PollInterval
	}
	wait := p.r.cfg.PollInterval
	if !p.fullDue.IsZero() {
		wait = min(wait, max(time.Until(p.fullDue), 0))
	}
	return wait
}

// nextFetch says whether the next fetch is a full one, and why.
func (p *poller) nextFetch(now time.Time) (fetchKind, string) {
	switch {
	case p.apps == nil:
		return kindFull, fullStart
	case p.suspect != nil:
		return kindFull, fullConfirm
	case now.Sub(p.lastOK) > p.r.cfg.DeltaWindow:
		return kindFull, fullOutage
	case !p.fullDue.IsZero() && !now.Before(p.fullDue):
		return kindFull, p.fullWhy
	}
	if every := p.relistEvery(); every > 0 && now.Sub(p.lastFull) >= every {
		return kindFull, fullPeriodic
	}
	return kindDelta, ""
}

// relistEvery is how often a full listing is due anyway: RelistInterval, or more often with
// MaxLeaseAge, whose renewal times only full listings carry.
func (p *poller) relistEvery() time.Duration {
	every := p.r.cfg.RelistInterval
	if a := p.r.cfg.MaxLeaseAge; a > 0 && (every <= 0 || a/2 < every) {
		every = a / 2
	}
	return every
}

// fetchAny fetches from server start (the one in use, or another to confirm a suspicious
// answer), else from the others in turn, and says which answered; the caller decides whether
// to read that server from then on (use). A server that fails is marked down (and probed
// later); while another answers it is reported Degraded. When none answers the error names
// each failure.
func (p *poller) fetchAny(ctx context.Context, kind fetchKind, start int) (*fetched, int, error) {
	n := len(p.r.servers)
	var errs []error
	now := time.Now()
	// First start, then those not known to be down, then (only if those all failed) the ones
	// that are down and not yet due for a probe. The server in use is always asked, even
	// while a probe of it runs.
	order := make([]int, 0, n)
	order = append(order, start)
	for pass := 0; pass < 2; pass++ {
		for k := 1; k < n; k++ {
			i := (start + k) % n
			s := &p.servers[i]
			if s.probing && i != p.cur {
				continue
			}
			up := !s.down || !now.Before(s.next)
			if (pass == 0) == up {
				order = append(order, i)
			}
		}
	}
	for _, i := range order {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		f, err := p.fetchFrom(ctx, i, kind)
		if err == nil {
			p.serverUp(i)
			p.reportDown()
			return f, i, nil
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		p.serverDown(i, err)
		errs = append(errs, err)
	}
	return nil, 0, errors.Join(errs...)
}

// fetchConfirm asks for the full listing again while a suspicious one is held, from the
// other servers first (a server restarted empty answers the same again) and then from the one
// that sent it, until one lists the applications: a server that does is preferred to any that
// does not. It returns that answer, else the last that agreed with the held one.
func (p *poller) fetchConfirm(ctx context.Context) (*fetched, int, error) {
	n := len(p.r.servers)
	now := time.Now()
	var last *fetched
	lastI := 0
	var errs []error
	for k := 1; k <= n; k++ {
		i := (p.suspect.from + k) % n
		s := &p.servers[i]
		if i != p.suspect.from && (s.probing || s.down && now.Before(s.next)) {
			continue // being probed, or down and not due: its probe says when it is back
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		f, err := p.fetchFrom(ctx, i, kindFull)
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, ctx.Err()
			}
			p.serverDown(i, err)
			errs = append(errs, err)
			continue
		}
		p.serverUp(i)
		last, lastI = f, i
		if _, bad := p.suspicious(f.apps); !bad {
			break
		}
	}
	p.reportDown()
	if last == nil {
		return nil, 0, errors.Join(errs...)
	}
	return last, lastI, nil
}

// use makes server i the one read from now on.
func (p *poller) use(i int) {
	if i == p.cur {
		return
	}
	if i == 0 {
		p.r.log.Info("reading the primary Eureka server again", "server", p.r.servers[i].name, "instead_of", p.r.servers[p.cur].name)
	} else {
		p.r.log.Warn("reading another Eureka server", "server", p.r.servers[i].name, "instead_of", p.r.servers[p.cur].name)
	}
	if p.cur == 0 && !p.servers[0].down {
		// Left for its answer, not for failing: probe it soon, not a standbyProbe later.
		p.servers[0].next = time.Now().Add(jitter(minProbe))
	}
	if i == 0 {
		p.failbackBackoff = 0
	}
	p.cur = i
	p.failback, p.failbackTold = false, false
}

// suspicious says whether a full listing would remove every application the local copy
// holds, or more than half of them: what a server restarted empty, or a peer not yet synced,
// answers. It says how many it would remove.
func (p *poller) suspicious(next *Applications) (int, bool) {
	if p.apps == nil || len(p.apps.Apps) == 0 {
		return 0, false // nothing served: nothing to lose
	}
	listed := make(map[string]bool, len(next.Apps))
	for _, app := range next.Apps {
		listed[strings.ToUpper(app.Name)] = true
	}
	removing := 0
	for _, app := range p.apps.Apps {
		if !listed[strings.ToUpper(app.Name)] {
			removing++
		}
	}
	return removing, len(next.Apps) == 0 || 2*removing > len(p.apps.Apps)
}

// hold decides what to do with a full listing from server i: false to apply it, true when it
// is held as suspicious (the first such answer; the next full fetch confirms or clears it).
func (p *poller) hold(f *fetched, i int) bool {
	removing, bad := p.suspicious(f.apps)
	m := p.r.metrics
	switch {
	case bad && p.suspect == nil:
		p.suspect = &suspicion{from: i, since: time.Now(), apps: len(f.apps.Apps), removing: removing}
		m.suspect.WithLabelValues(suspectHeld).Inc()
		m.holding.Set(1)
		p.r.log.Warn("a Eureka server's full listing would remove most applications: holding it until another answer confirms it",
			"server", p.r.servers[i].name, "served", len(p.apps.Apps), "listed", len(f.apps.Apps), "removing", removing)
		return true
	case bad:
		p.r.log.Warn("a second Eureka answer confirms the removal: applying it",
			"server", p.r.servers[i].name, "first", p.r.servers[p.suspect.from].name, "listed", len(f.apps.Apps),
			"removing", removing, "held", time.Since(p.suspect.since).Round(time.Millisecond))
		m.suspect.WithLabelValues(suspectConfirmed).Inc()
	case p.suspect != nil:
		p.r.log.Info("a Eureka server lists the applications again: the held listing is dropped",
			"server", p.r.servers[i].name, "listed", len(f.apps.Apps), "held_from", p.r.servers[p.suspect.from].name)
		m.suspect.WithLabelValues(suspectCleared).Inc()
	default:
		return false
	}
	p.suspect = nil
	m.holding.Set(0)
	return false
}

// tryFailback fetches the primary's full listing while another server is read, and reads the
// primary again unless its listing would remove most of what is served (a primary restarted
// empty is not preferred to a standby that lists the applications). ok is true when the
// primary is read again (wait is then the next step's).
func (p *poller) tryFailback(ctx context.Context) (wait time.Duration, ok bool) {
	p.failback = false
	f, err := p.fetchFrom(ctx, 0, kindFull)
	if err != nil {
		if ctx.Err() == nil {
			p.serverDown(0, err)
			p.reportDown()
		}
		return 0, false
	}
	p.serverUp(0)
	if removing, bad := p.suspicious(f.apps); bad {
		if !p.failbackTold {
			p.r.log.Warn("the primary Eureka server answers again but would remove most applications: staying on the standby",
				"primary", p.r.servers[0].name, "standby", p.r.servers[p.cur].name, "served", len(p.apps.Apps),
				"listed", len(f.apps.Apps), "removing", removing)
			p.failbackTold = true
		}
		p.r.metrics.suspect.WithLabelValues(suspectFailback).Inc()
		p.failbackBackoff = min(max(2*p.failbackBackoff, minProbe), maxProbe)
		p.servers[0].next = time.Now().Add(jitter(p.failbackBackoff))
		return 0, false
	}
	p.lastOK = time.Now()
	p.use(0)
	p.applyFull(f, fullFailback)
	return p.r.cfg.PollInterval, true
}

// fetchFrom is one request to server i, counted.
func (p *poller) fetchFrom(ctx context.Context, i int, kind fetchKind) (*fetched, error) {
	s := &p.r.servers[i]
	f, err := p.r.fetch(ctx, p.http, s, kind)
	m := p.r.metrics
	if err != nil {
		if ctx.Err() == nil {
			m.requests.WithLabelValues(s.name, string(kind), resultOf(err)).Inc()
			if resultOf(err) == resultMalformed {
				m.rejected.WithLabelValues(reasonDocument).Inc()
			}
		}
		return nil, err
	}
	m.requests.WithLabelValues(s.name, string(kind), resultOK).Inc()
	m.wireBytes.WithLabelValues(string(kind)).Add(float64(f.wire))
	m.bodyBytes.WithLabelValues(string(kind)).Add(float64(f.body))
	m.fetchDuration.WithLabelValues(string(kind)).Observe(f.took.Seconds())
	return f, nil
}

func (p *poller) serverUp(i int) {
	s := &p.servers[i]
	if s.down {
		p.r.log.Info("Eureka server answers again", "server", p.r.servers[i].name)
		p.rec.Degraded(p.r.servers[i].name, nil)
	}
	*s = serverState{probing: s.probing, next: time.Now().Add(jitter(standbyProbe))}
	p.r.metrics.serverUp.WithLabelValues(p.r.servers[i].name).Set(1)
}

func (p *poller) serverDown(i int, err error) {
	s := &p.servers[i]
	if !s.down {
		p.r.log.Warn("Eureka server failed", "server", p.r.servers[i].name, "err", err)
	}
	s.down, s.err = true, err
	s.backoff = min(max(2*s.backoff, minProbe), maxProbe)
	s.next = time.Now().Add(jitter(s.backoff))
	p.r.metrics.serverUp.WithLabelValues(p.r.servers[i].name).Set(0)
}

// reportDown reports the servers down while another answers (the Reconciler repeats nothing).
func (p *poller) reportDown() {
	for i := range p.servers {
		if s := &p.servers[i]; s.down {
			p.rec.Degraded(p.r.servers[i].name, s.err)
		}
	}
}

// startProbes probes the servers other than the one in use that are due, one request each, in
// the background: a failed one with back-off, a standby every standbyProbe.
func (p *poller) startProbes(ctx context.Context) {
	now := time.Now()
	for i := range p.servers {
		s := &p.servers[i]
		if s.probing || i == p.cur || now.Before(s.next) {
			continue
		}
		s.probing = true
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_, err := p.fetchFrom(ctx, i, kindDelta)
			select {
			case p.probes <- probeResult{i, err}:
			case <-ctx.Done():
			}
		}()
	}
}

func (p *poller) probed(pr probeResult) {
	p.servers[pr.i].probing = false
	if pr.err != nil {
		p.serverDown(pr.i, pr.err)
		if !p.outage {
			p.rec.Degraded(p.r.servers[pr.i].name, pr.err)
		}
		return
	}
	wasDown := p.servers[pr.i].down
	p.serverUp(pr.i)
	if pr.i == 0 && p.cur != 0 {
		p.failback = true // tried at the next step
	}
	if wasDown && !p.outage && p.apps != nil {
		p.rec.Flush() // tells Degraded(server, nil); nothing else is pending
	}
}

// jitter is d plus up to a fifth of d more, at random.
func jitter(d time.Duration) time.Duration { return d + rand.N(d/5+1) }

// applyFull makes a full listing the local copy.
func (p *poller) applyFull(f *fetched, why string) {
	now := time.Now()
	old := p.apps
	p.apps = f.apps
	p.lastFull, p.fullDue = now, time.Time{}
	if why == fullMismatch {
		p.mismatchBackoff = min(max(2*p.mismatchBackoff, p.r.cfg.PollInterval), maxMismatchBackoff)
		p.lastMismatchFull = now
	}
	p.r.metrics.fullFetches.WithLabelValues(why).Inc()
	var changed []string
	if old == nil || p.r.cfg.MaxLeaseAge > 0 {
		// Every application: with MaxLeaseAge an unchanged listing can age out of it.
		changed = appNames(old, f.apps)
	} else {
		changed = Diff(old, f.apps)
	}
	clear(p.transient)
	p.remap(changed, now)
	p.reject()
	p.r.log.Info("fetched the full listing", "reason", why, "applications", len(f.apps.Apps), "changed", len(changed),
		"skipped", len(f.apps.Skipped), "bytes", f.wire, "took", f.took.Round(time.Millisecond))
	p.rec.Flush()
}

// applyDelta applies a delta; wasOutage says every server failed until this answer. It
// refuses (and applies nothing of) a delta that takes the local copy over --eureka-max-apps
// or --eureka-max-instances.
func (p *poller) applyDelta(f *fetched, wasOutage bool) error {
	now := time.Now()
	next, res := ApplyDelta(p.apps, f.apps)
	if err := p.checkLimits(next); err != nil {
		return err
	}
	p.apps = next
	for _, s := range res.Unapplied {
		p.transient[recordName(s.App, s.InstanceID)] = bad(s.Reason, s.Err)
	}
	p.remap(res.Changed, now)
	p.reject()
	if len(res.Changed) > 0 {
		p.r.log.Debug("applied a delta", "changed", len(res.Changed), "added", res.Added, "modified", res.Modified, "deleted", res.Deleted)
	}
	if !res.Reconciled {
		p.r.metrics.mismatches.Inc()
		p.scheduleFull(fullMismatch, now)
		// Once an episode: a server whose hashcode never agrees would log every poll.
		level := slog.LevelDebug
		if !p.mismatchTold {
			level, p.mismatchTold = slog.LevelInfo, true
		}
		p.r.log.Log(context.Background(), level, "apps__hashcode differs from the server's after a delta: a full fetch is scheduled",
			"local", res.Hashcode, "server", cut(f.apps.AppsHashcode), "at", p.fullDue.Format(time.RFC3339Nano))
		if wasOutage {
			// Changes may have been missed in the outage: serve nothing new until the full
			// listing (the Reconciler's rule: relist before ending an outage).
			return nil
		}
	} else {
		p.mismatchBackoff, p.mismatchTold = 0, false
		if wasOutage {
			p.rec.Resumed()
		}
	}
	p.rec.Flush()
	return nil
}

// checkLimits refuses a local copy over --eureka-max-apps or --eureka-max-instances (a delta
// can grow it past what a listing may hold).
func (p *poller) checkLimits(a *Applications) error {
	cfg := &p.r.cfg
	if len(a.Apps) > cfg.MaxApps {
		return fmt.Errorf("%w (raise %s if the registry really is this large)",
			&LimitError{What: LimitApplications, Limit: int64(cfg.MaxApps)}, limitFlag(LimitApplications))
	}
	n := len(a.Skipped)
	for _, app := range a.Apps {
		n += len(app.Instances)
	}
	if n > cfg.MaxInstances {
		return fmt.Errorf("%w (raise %s if the registry really is this large)",
			&LimitError{What: LimitInstances, Limit: int64(cfg.MaxInstances)}, limitFlag(LimitInstances))
	}
	return nil
}

// scheduleFull schedules one full fetch at a random point of the next PollInterval, no sooner
// than the mismatch back-off allows; one already scheduled stands.
func (p *poller) scheduleFull(why string, now time.Time) {
	if !p.fullDue.IsZero() {
		return
	}
	at := now.Add(rand.N(p.r.cfg.PollInterval))
	if earliest := p.lastMismatchFull.Add(p.mismatchBackoff); at.Before(earliest) {
		at = earliest
	}
	p.fullDue, p.fullWhy = at, why
}

// appNames lists every application either registry holds.
func appNames(a, b *Applications) []string {
	seen := map[string]string{}
	for _, r := range []*Applications{a, b} {
		if r == nil {
			continue
		}
		for _, app := range r.Apps {
			seen[strings.ToUpper(app.Name)] = app.Name
		}
	}
	return slices.Sorted(maps.Values(seen))
}

// remap maps the named applications again from the local copy and tells the Reconciler about
// the services they affect.
func (p *poller) remap(names []string, now time.Time) {
	if len(names) == 0 {
		return
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[strings.ToUpper(n)] = true
	}
	found := make(map[string]*Application, len(names))
	for i := range p.apps.Apps {
		a := &p.apps.Apps[i]
		if k := strings.ToUpper(a.Name); want[k] {
			found[k] = a
		}
	}
	affected := map[string]bool{}
	for key := range want {
		old, had := p.appSvc[key]
		newName := ""
		delete(p.mapRej, key)
		delete(p.nameRej, key)
		delete(p.built, key)
		if app, ok := found[key]; ok {
			m := p.r.mapApplication(app, now)
			if len(m.rejected) > 0 {
				p.mapRej[key] = m.rejected
			}
			switch {
			case !m.ok:
			case m.svc.Name == "":
				p.nameRej[key] = bad(reasonName, fmt.Errorf("application name %q has no letter or digit: it cannot name a ServiceEntry", app.Name))
			default:
				newName = m.svc.Name
				p.built[key] = m.svc
			}
		}
		if had && old != newName {
			delete(p.byName[old], key)
			affected[old] = true
		}
		if newName == "" {
			delete(p.appSvc, key)
			continue
		}
		p.appSvc[key] = newName
		if p.byName[newName] == nil {
			p.byName[newName] = map[string]bool{}
		}
		p.byName[newName][key] = true
		affected[newName] = true
	}
	for name := range affected {
		owners := p.byName[name]
		k := model.ServiceKey{Namespace: p.r.cfg.Namespace, Name: name}
		if len(owners) == 0 {
			delete(p.byName, name)
			p.rec.Remove(k)
			continue
		}
		keys := slices.Sorted(maps.Keys(owners))
		p.rec.Set(p.built[keys[0]])
		delete(p.nameRej, keys[0])
		for _, other := range keys[1:] {
			p.nameRej[other] = bad(reasonName, fmt.Errorf("maps to ServiceEntry %s, which application %s already has: rename one", name, keys[0]))
		}
	}
}

// reject tells the Reconciler every record not served now, and logs and counts those new
// since the last time (at most maxLoggedRejections lines).
func (p *poller) reject() {
	all := map[string]error{}
	for _, s := range p.apps.Skipped {
		all[recordName(s.App, s.InstanceID)] = bad(s.Reason, s.Err)
	}
	for _, m := range p.mapRej {
		maps.Copy(all, m)
	}
	for app, err := range p.nameRej {
		all[app] = err
	}
	maps.Copy(all, p.transient)
	p.rec.SetRejections(all)
	logged, more := 0, 0
	for _, record := range slices.Sorted(maps.Keys(all)) {
		err := all[record]
		if p.told[record] == err.Error() {
			continue
		}
		p.told[record] = err.Error()
		p.r.metrics.rejected.WithLabelValues(reasonOf(err)).Inc()
		if logged < maxLoggedRejections {
			app, id, _ := strings.Cut(record, "/")
			p.r.log.Warn("skipped a Eureka instance", "app", app, "instance", id, "reason", reasonOf(err), "err", err)
			logged++
		} else {
			more++
		}
	}
	if more > 0 {
		p.r.log.Warn("skipped more Eureka instances (see /debug/status)", "count", more)
	}
	for record := range p.told {
		if _, ok := all[record]; !ok {
			delete(p.told, record)
		}
	}
}
