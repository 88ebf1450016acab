package zookeeper

import (
	"errors"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/internal/rejection"
)

// metrics are the adapter's own; the core's (unreachable, records rejected, services served)
// are on the same /metrics page.
type metrics struct {
	requests *prometheus.CounterVec
	sessions *prometheus.CounterVec
	relists  *prometheus.CounterVec
	rejected *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_zookeeper_requests_total",
			Help: "Reads sent to ZooKeeper, by operation (children, data, exists) and result (ok, no_node, connection, error). Each sets the watch that says when to read again.",
		}, []string{"op", "result"}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_zookeeper_session_events_total",
			Help: "Session events, by event: established (the first session, or a new one after an expiry), expired (the server ended the session: every watch is lost), reconnected (a new connection within the session: watches kept).",
		}, []string{"event"}),
		relists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_zookeeper_relists_total",
			Help: "Reads of every known path, by reason (session_expired: watches lost; periodic: --zk-relist-interval).",
		}, []string{"reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_zookeeper_records_rejected_total",
			Help: "ZooKeeper nodes skipped as malformed, counted each time one is read, by reason (url, json, address, port, parameter, size, read, duplicate, override, other). /debug/status names the nodes.",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.sessions, m.relists, m.rejected)
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

// Reasons a node is rejected (the label of galleon_zookeeper_records_rejected_total).
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

// bad gives err the reason it is counted under (rejection.Error, shared by the adapters).
func bad(reason string, err error) error { return rejection.With(reason, err) }

// reasonOf is the reason err was given, or other.
func reasonOf(err error) string { return rejection.Of(err, reasonOther) }
