package fleet

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// mergeMetrics meter the Merger.
type mergeMetrics struct {
	hosts      prometheus.Gauge
	collisions *prometheus.GaugeVec
}

func newMergeMetrics(reg prometheus.Registerer) *mergeMetrics {
	m := &mergeMetrics{
		hosts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_fleet_hosts",
			Help: "Hosts the fleet serves, each from one ServiceEntry, merged from every registry of the list.",
		}),
		collisions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "galleon_fleet_host_collisions",
			Help: "Hosts more than one registry service has now, by outcome: merged, preferred or rejected (by a hosts rule), conflict (a merge whose ports differ) or unplanned (no rule: the registry listed first is served). Alert on conflict and unplanned above 0; /debug/status lists them.",
		}, []string{"outcome"}),
	}
	for _, o := range outcomes() {
		m.collisions.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.hosts, m.collisions)
	}
	return m
}

// collisionLogBurst is how many collision lines the Merger writes a
// minute: a registry flapping between two hosts must not flood the log.
const collisionLogBurst = 20

// logLimit lets burst lines through per window and counts the rest, which
// the next line let through reports.
type logLimit struct {
	burst      int
	window     time.Duration
	start      time.Time
	written    int
	suppressed int
}

func (l *logLimit) log(log *slog.Logger, level slog.Level, msg string, args ...any) {
	now := time.Now()
	if now.Sub(l.start) >= l.window {
		l.start, l.written = now, 0
	}
	if l.written >= l.burst {
		l.suppressed++
		return
	}
	l.written++
	if l.suppressed > 0 {
		args = append(args, "earlier_lines_suppressed", l.suppressed)
		l.suppressed = 0
	}
	log.Log(context.Background(), level, msg, args...)
}
