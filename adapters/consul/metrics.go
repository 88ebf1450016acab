package consul

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the adapter's own; the core's (unreachable, records
// rejected, services served) are on the same /metrics page. Records
// rejected are the core's alone: galleon_registry_records_rejected_total
// counts them by the reason the mapping gives (see rejection.go).
type metrics struct {
	requests    *prometheus.CounterVec
	wakeups     *prometheus.CounterVec
	refetched   *prometheus.CounterVec
	resyncs     *prometheus.CounterVec
	sweeps      *prometheus.CounterVec
	listings    prometheus.Counter
	lastContact *prometheus.GaugeVec
	stale       *prometheus.GaugeVec
	bodyBytes   *prometheus.CounterVec
	wireBytes   prometheus.Counter

	serviceWatches prometheus.Gauge
	connections    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_consul_requests_total",
			Help: "HTTP requests to the Consul agent, by endpoint (catalog_services, health_state, health_service, catalog_datacenters, other) and result (2xx, 4xx, 5xx, error).",
		}, []string{"endpoint", "result"}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_consul_blocking_wakeups_total",
			Help: "Blocking queries that returned, by signal (catalog; critical and warning: the failing checks; service: a service's own watch) and whether the index moved (changed, unchanged, reset).",
		}, []string{"signal", "outcome"}),
		refetched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_consul_services_fetched_total",
			Help: "Per-service requests, by kind: fetch (all instances), probe (index only, during a sweep) or watch (a blocking query of a service's own watch).",
		}, []string{"kind"}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_consul_resyncs_total",
			Help: "Full re-listings of a datacenter, by reason (start, index_reset, outage, datacenter_added).",
		}, []string{"reason"}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_consul_sweeps_total",
			Help: "Index sweeps over the services of a datacenter that have no watch of their own, by reason (unattributed: the catalog changed and no signal said which service; periodic).",
		}, []string{"reason"}),
		listings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "galleon_consul_check_listings_total",
			Help: "Non-blocking listings of every check, read to attribute a catalog change that changed no name or tag (a checked instance registered or deregistered) to its service.",
		}),
		lastContact: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "galleon_consul_last_success_timestamp_seconds",
			Help: "Unix time of the last successful request to each datacenter.",
		}, []string{"datacenter"}),
		stale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "galleon_consul_stale",
			Help: "1 while requests to the datacenter fail and its last good state is served.",
		}, []string{"datacenter"}),
		bodyBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_consul_response_bytes_total",
			Help: "Bytes of response bodies read from the Consul agent, decoded (after gzip), by endpoint.",
		}, []string{"endpoint"}),
		wireBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "galleon_consul_received_bytes_total",
			Help: "Bytes read from the connections to the Consul agent, as on the wire (gzip-compressed bodies, headers included).",
		}),
		serviceWatches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_consul_service_watches",
			Help: "Services followed by a blocking query of their own (--" + flagServiceWatches + ").",
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_consul_connections",
			Help: "Connections open to the Consul agent (it allows 200 per client by default: http_max_conns_per_client).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.wakeups, m.refetched, m.resyncs, m.sweeps, m.listings, m.lastContact, m.stale, m.bodyBytes, m.wireBytes, m.serviceWatches, m.connections)
	}
	return m
}

func (m *metrics) request(endpoint, result string) {
	m.requests.WithLabelValues(endpoint, result).Inc()
}

func (m *metrics) contact(dc string, ok bool) {
	if ok {
		m.lastContact.WithLabelValues(dcLabel(dc)).Set(float64(time.Now().UnixNano()) / 1e9)
		m.stale.WithLabelValues(dcLabel(dc)).Set(0)
	} else {
		m.stale.WithLabelValues(dcLabel(dc)).Set(1)
	}
}

// dcLabel names the agent's own datacenter (queried without ?dc=) "local".
func dcLabel(dc string) string {
	if dc == "" {
		return "local"
	}
	return dc
}
