package pipeline

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/model"
)

// The emptiness rule. An empty or mostly empty answer is what a registry
// that lost its data, a server not yet synced with its peers, a standby
// after a failover, or a typo in a path all look like: one answer like
// that must not take every service out of the mesh. So a flush that would
// remove every served service, or more than Config.RemovalHoldShare percent
// of them, holds those removals: the services stay served, the hold is
// logged, metered and shown in /readyz and /debug/status, and
//   - a later report that lists them again (a Replace that holds them, an
//     Update) ends the hold for those it lists, and whatever removal is
//     left is judged again by the same rule;
//   - once the hold has lasted Config.RemovalHold with the registry
//     reachable, the removals are applied: the registry has said the same
//     for that long, which is the confirmation.
// An adapter gathers the evidence during the window (asks again, asks
// another server); the core decides, so that no adapter, a partner's
// included, can empty a sink by one bad answer.

// holdMinServices is the fewest services served for the share rule to
// apply: removing two of three services is an operator's everyday change,
// removing every one is not.
const holdMinServices = 10

// maxHoldExamples bounds the services a hold names in /debug/status.
const maxHoldExamples = 10

// Hold is a removal held by the emptiness rule.
type Hold struct {
	// Services are how many served services the registry's answer would
	// remove, of Of served.
	Services int `json:"services"`
	Of       int `json:"of"`
	// Since is when the hold began, ApplyAt when the removals will be
	// applied if the registry keeps saying the same.
	Since   time.Time `json:"since"`
	ApplyAt time.Time `json:"applyAt"`
	// Examples are some of the services held, sorted.
	Examples []string `json:"examples"`
}

// holdState is the Run goroutine's record of a hold.
type holdState struct {
	keys  map[model.ServiceKey]struct{}
	since time.Time
}

// holdMetrics meters the emptiness rule.
type holdMetrics struct {
	held  prometheus.Gauge
	holds *prometheus.CounterVec
}

func newHoldMetrics() holdMetrics {
	m := holdMetrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_registry_removals_held",
			Help: "Services the registry's latest answer would remove that are still served, held by the emptiness rule (the answer removes them all, or more than --removal-hold-share percent) until it is confirmed for --removal-hold. Alert on it being above 0.",
		}),
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_registry_removal_holds_total",
			Help: "Removals held by the emptiness rule, by how each hold ended: begun, released (the registry listed the services again) or confirmed (applied after --removal-hold).",
		}, []string{"event"}),
	}
	for _, e := range []string{"begun", "released", "confirmed"} {
		m.holds.WithLabelValues(e)
	}
	return m
}

func (m holdMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.held, m.holds}
}

// exceeds says whether removing n of total served services calls for a hold.
func (p *Pipeline) exceeds(n, total int) bool {
	if n == 0 || p.cfg.RemovalHold <= 0 {
		return false
	}
	return n == total || total >= holdMinServices && n*100 > p.cfg.RemovalHoldShare*total
}

// holdRemovals applies the emptiness rule to work, the changes of one flush
// (nil: removed): it takes out of work the removals it holds and puts back
// those it confirms. Only the Run goroutine calls it.
func (p *Pipeline) holdRemovals(work map[model.ServiceKey]*model.Service) {
	if p.cfg.RemovalHold <= 0 {
		return
	}
	var removals []model.ServiceKey
	for key, svc := range work {
		if svc == nil && p.served[key] != nil {
			removals = append(removals, key)
		}
	}
	for key := range p.hold.keys {
		// Held and not reported since: still removed, as far as the
		// registry has said. (Reported again: work says what it is now.)
		if _, reported := work[key]; !reported && p.served[key] != nil {
			removals = append(removals, key)
		}
	}
	total := len(p.served)
	now := time.Now()
	held := len(p.hold.keys) > 0
	if !p.exceeds(len(removals), total) {
		if held {
			p.log.Info("registry lists the held services again: removal hold ended", "removed_now", len(removals), "served", total, "held_for", now.Sub(p.hold.since).Round(time.Millisecond))
			p.metrics.holds.WithLabelValues("released").Inc()
		}
		for _, key := range removals {
			work[key] = nil
		}
		p.setHold(holdState{}, total)
		return
	}
	p.mu.Lock()
	reachable := p.unreachable == nil
	p.mu.Unlock()
	since := p.hold.since
	if !held {
		since = now
		p.metrics.holds.WithLabelValues("begun").Inc()
		p.log.Warn("registry answer would remove most served services: still serving them until the answer is confirmed",
			"removed", len(removals), "served", total, "share_limit_percent", p.cfg.RemovalHoldShare,
			"apply_at", now.Add(p.cfg.RemovalHold).Format(time.RFC3339), "examples", examples(removals))
	}
	if now.Sub(since) >= p.cfg.RemovalHold && reachable {
		p.log.Warn("registry answer confirmed: removing the held services", "removed", len(removals), "served", total,
			"held_for", now.Sub(since).Round(time.Millisecond))
		p.metrics.holds.WithLabelValues("confirmed").Inc()
		for _, key := range removals {
			work[key] = nil
		}
		p.setHold(holdState{}, total)
		return
	}
	keys := make(map[model.ServiceKey]struct{}, len(removals))
	for _, key := range removals {
		keys[key] = struct{}{}
		delete(work, key)
	}
	p.setHold(holdState{keys: keys, since: since}, total)
}

// setHold records h as the hold now, for Status and the metric.
func (p *Pipeline) setHold(h holdState, served int) {
	p.hold = h
	p.metrics.held.Set(float64(len(h.keys)))
	var status *Hold
	if len(h.keys) > 0 {
		keys := make([]model.ServiceKey, 0, len(h.keys))
		for k := range h.keys {
			keys = append(keys, k)
		}
		status = &Hold{Services: len(h.keys), Of: served, Since: h.since, ApplyAt: h.since.Add(p.cfg.RemovalHold), Examples: examples(keys)}
	}
	p.statusMu.Lock()
	p.status.Held = status
	p.statusMu.Unlock()
}

// holdDue is when the hold must be judged again without a report: when it
// may be confirmed. Zero without a hold, and once that time has passed
// with the hold still standing (the registry was unreachable then): its
// coming back (Unreachable(nil)) or its next report wakes the pipeline.
func (p *Pipeline) holdDue() time.Time {
	if len(p.hold.keys) == 0 {
		return time.Time{}
	}
	due := p.hold.since.Add(p.cfg.RemovalHold)
	if !time.Now().Before(due) {
		return time.Time{}
	}
	return due
}

// examples names a few of keys, sorted, cut to a bounded length.
func examples(keys []model.ServiceKey) []string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.String()
	}
	slices.Sort(names)
	names = names[:min(len(names), maxHoldExamples)]
	for i := range names {
		names[i] = Cut(names[i], MaxRecordLen)
	}
	return names
}
