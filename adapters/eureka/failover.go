package eureka

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/internal/wire"
)

// Which server is read: failover to the next that answers, probes of the others with back-off,
// failback to the primary, and the evidence a full listing that would remove most applications
// needs before it is applied (see the protocol in poller.go).

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
func (p *poller) suspicious(next *wire.Applications) (int, bool) {
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
