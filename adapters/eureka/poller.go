package eureka

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/internal/wire"
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
	apps *wire.Applications
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
	// told: rejections already logged, record -> message.
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

// jitter is d plus up to a fifth of d more, at random.
func jitter(d time.Duration) time.Duration { return d + rand.N(d/5+1) }

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
