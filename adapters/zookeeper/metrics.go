package zookeeper

import (
	"errors"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/registry"
)

// metrics are the adapter's own; the core's (unreachable, records rejected by reason, services
// served) are on the same /metrics page. The nodes the adapter rejects are counted there, by the
// reason each rejection carries (bad, registry.Reason): galleon_registry_records_rejected_total.
type metrics struct {
	requests *prometheus.CounterVec
	sessions *prometheus.CounterVec
	relists  *prometheus.CounterVec
	// Issue 27: answers over the client's limit, reads backing off, silent servers, retired
	// services.
	oversized  prometheus.Counter
	backingOff *prometheus.GaugeVec
	silences   prometheus.Counter
	retired    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_zookeeper_requests_total",
			Help: "Reads sent to ZooKeeper, by operation (children, data, exists, probe) and result (ok, no_node, connection, error). Each but probe sets the watch that says when to read again; probe is an exists of the root sent on an idle connection to check that the server answers.",
		}, []string{"op", "result"}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_zookeeper_session_events_total",
			Help: "Session events, by event: established (the first session, or a new one after an expiry), expired (the server ended the session: every watch is lost), reconnected (a new connection within the session: watches kept).",
		}, []string{"event"}),
		relists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_zookeeper_relists_total",
			Help: "Reads of every known path, by reason (session_expired: watches lost; periodic: --zk-relist-interval).",
		}, []string{"reason"}),
	}
	m.oversized = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "galleon_zookeeper_oversized_answers_total",
		Help: "Answers larger than --zk-max-buffer. Each broke the client's connection; the path read is rejected (the root: the registry reported unreachable), what was read of it before stays served, and it is read again with a backoff from 10s to 5m.",
	})
	m.backingOff = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "galleon_zookeeper_reads_backing_off",
		Help: "Znodes whose last read failed for another reason than the connection, read again with a backoff (1s doubling to 5m; oversized from 10s), by cause (acl: the node's ACL refuses this client; oversized: the answer was over --zk-max-buffer; other).",
	}, []string{"cause"})
	m.silences = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "galleon_zookeeper_server_silences_total",
		Help: "Times the connected server owed answers and sent nothing for --zk-unreachable-after (a paused or overloaded server): each is reported unreachable until it answers again.",
	})
	m.retired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "galleon_zookeeper_services_retired_total",
		Help: "Services deleted because they had no instance for --zk-retire-empty-after while their znode stayed (a Dubbo group and version no provider registers any more, a persistent application node).",
	})
	for _, c := range []string{causeACL, causeOversized, causeOther} {
		m.backingOff.WithLabelValues(c) // present at 0
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.sessions, m.relists, m.oversized, m.backingOff, m.silences, m.retired)
	}
	return m
}

// request counts one read and its result.
func (m *metrics) request(op string, err error) {
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, zk.ErrNoNode):
		result = "no_node"
	case errConnection(err):
		result = "connection"
	default:
		result = "error"
	}
	m.requests.WithLabelValues(op, result).Inc()
}

// Reasons a node is rejected (the reason label of the core's galleon_registry_records_rejected_total).
const (
	reasonURL       = "url"
	reasonJSON      = "json"
	reasonAddress   = "address"
	reasonPort      = "port"
	reasonParameter = "parameter"
	reasonSize      = "size"
	reasonRead      = "read"
	reasonDuplicate = "duplicate"
	reasonOverride  = "override"
	reasonOther     = "other"
)

// bad gives err the reason it is counted under (registry.Reason).
func bad(reason string, err error) error { return registry.Reason(reason, err) }
