package eureka

import "github.com/prometheus/client_golang/prometheus"

// metrics are the adapter's own; the core's (unreachable, records rejected, services served)
// are on the same /metrics page. Every label value is bounded: servers by --eureka-urls
// (at most maxServers), the others by the constants of this package.
type metrics struct {
	requests      *prometheus.CounterVec
	wireBytes     *prometheus.CounterVec
	bodyBytes     *prometheus.CounterVec
	fullFetches   *prometheus.CounterVec
	mismatches    prometheus.Counter
	serverUp      *prometheus.GaugeVec
	fetchDuration *prometheus.HistogramVec
	suspect       *prometheus.CounterVec
	holding       prometheus.Gauge
}

// Reasons for a full fetch (the label of galleon_eureka_full_fetches_total).
const (
	fullStart    = "start"    // the first listing
	fullMismatch = "mismatch" // a delta left the local apps__hashcode unlike the server's
	fullOutage   = "outage"   // no answer for longer than --eureka-delta-window
	fullPeriodic = "periodic" // --eureka-relist-interval (or --eureka-max-lease-age)
	fullConfirm  = "confirm"  // a held listing that would remove most applications, asked for again
	fullFailback = "failback" // the primary answers again while a standby is read
)

// Outcomes of a suspicious full listing, one that would remove every application or more than
// half of them (the label of galleon_eureka_suspicious_listings_total).
const (
	suspectHeld      = "held"      // the first such answer: held, not applied
	suspectConfirmed = "confirmed" // a second answer agreed: applied
	suspectCleared   = "cleared"   // an answer listing the applications: the held one dropped
	suspectFailback  = "failback"  // the primary's answer, not read: the standby is kept
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_eureka_requests_total",
			Help: "Requests to Eureka servers, by server (a --eureka-urls entry without credentials), kind (full: /apps, delta: /apps/delta) and result (ok, unreachable, status, malformed).",
		}, []string{"server", "kind", "result"}),
		wireBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_eureka_response_wire_bytes_total",
			Help: "Bytes of listings received as sent (gzip-compressed when the server compresses), by kind (full, delta).",
		}, []string{"kind"}),
		bodyBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_eureka_response_bytes_total",
			Help: "Bytes of listings decoded (after decompression), by kind (full, delta).",
		}, []string{"kind"}),
		fullFetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_eureka_full_fetches_total",
			Help: "Full listings fetched, by reason (start, mismatch: a delta did not reconcile with apps__hashcode, outage: longer than --eureka-delta-window, periodic: --eureka-relist-interval or --eureka-max-lease-age, confirm: a held listing that would remove most applications asked for again, failback: the primary answers again while a standby is read).",
		}, []string{"reason"}),
		mismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "galleon_eureka_hashcode_mismatches_total",
			Help: "Deltas after which the local apps__hashcode differed from the server's. Each schedules one full fetch, jittered, and no more than one per back-off period.",
		}),
		serverUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "galleon_eureka_server_up",
			Help: "1 when the server answered its last request, 0 when it failed; by server. The adapter reads one server at a time and probes failed ones with back-off.",
		}, []string{"server"}),
		fetchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "galleon_eureka_fetch_duration_seconds",
			Help:    "Time to fetch and decode a listing, by kind (full, delta).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"kind"}),
		suspect: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_eureka_suspicious_listings_total",
			Help: "Full listings that would remove every application served or more than half of them, by outcome (held: the first, not applied; confirmed: a second answer agreed, applied; cleared: an answer listing the applications came first, the held one dropped; failback: the primary's listing, so the standby stays read).",
		}, []string{"outcome"}),
		holding: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_eureka_listing_held",
			Help: "1 while a full listing that would remove most applications is held, unapplied, until a second answer confirms or clears it.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.wireBytes, m.bodyBytes, m.fullFetches, m.mismatches, m.serverUp, m.fetchDuration,
			m.suspect, m.holding)
	}
	return m
}
