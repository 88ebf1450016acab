package nacos

import "github.com/prometheus/client_golang/prometheus"

// metrics are the adapter's own; the core's (unreachable, records rejected, services served)
// are on the same /metrics page. Every label value is bounded: servers by --nacos-servers (at
// most maxServers), the others by the constants of this package. No service, namespace or
// group name is a label value: a registry chooses those.
type metrics struct {
	pushes            *prometheus.CounterVec
	requests          *prometheus.CounterVec
	subscriptions     prometheus.Gauge
	connects          *prometheus.CounterVec
	serverUp          *prometheus.GaugeVec
	panicking         prometheus.Gauge
	panics            prometheus.Counter
	discoveryDuration prometheus.Histogram
	syncDuration      prometheus.Histogram
	overLimit         prometheus.Gauge
	refreshChanges    prometheus.Counter
}

// Outcomes of a push (the label of galleon_nacos_pushes_total).
const (
	pushApplied  = "applied"  // applied and mapped (reported if it changed anything)
	pushStale    = "stale"    // older (lastRefTime) than the state held: ignored
	pushUnknown  = "unknown"  // for a service not subscribed (any more): ignored
	pushOverflow = "overflow" // more distinct services pending than bounded: all resubscribed
)

// Kinds of request (the label of galleon_nacos_requests_total).
const (
	reqConnect     = "connect"     // a gRPC connection's setup (ServerCheck, stream, ConnectionSetup)
	reqList        = "list"        // a page of a service listing
	reqSubscribe   = "subscribe"   // gRPC SubscribeServiceRequest
	reqUnsubscribe = "unsubscribe" // gRPC SubscribeServiceRequest with subscribe false
	reqInstances   = "instances"   // HTTP GET /v1/ns/instance/list (the 1.x watch and its poll)
	reqNamespaces  = "namespaces"  // HTTP GET /v1/console/namespaces
	reqProbe       = "probe"       // a check of a server not in use
	reqRefresh     = "refresh"     // gRPC SubscribeServiceRequest again, the safety net for a lost push
)

// Results of a request.
const (
	resultOK          = "ok"
	resultServerError = "server_error" // the server answered an error
	resultMalformed   = "malformed"    // an answer that could not be decoded, or over a limit
	resultUnreachable = "unreachable"  // no answer: connection refused, lost, timed out
)

// Reasons a connection was made (the label of galleon_nacos_connects_total).
const (
	connectStart     = "start"    // the first
	connectLost      = "lost"     // the last one was lost (server restart, ConnectResetRequest, health check)
	connectRetry     = "retry"    // every server failed the last attempt
	connectOverflow  = "overflow" // pushes were lost (more pending than bounded): resubscribe all
	connectAPIChange = "api"      // --nacos-api auto moved between gRPC and HTTP
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_nacos_pushes_total",
			Help: "Service states pushed by the server (gRPC NotifySubscriberRequest, or the UDP push of the HTTP API), by outcome (applied; stale: older than the state held; unknown: a service not subscribed; overflow: over the bound of pending pushes, so every service was subscribed again).",
		}, []string{"outcome"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_nacos_requests_total",
			Help: "Requests to Nacos servers, by server (a --nacos-servers entry), kind (connect, list, subscribe, unsubscribe, instances, namespaces, probe, refresh) and result (ok, server_error, malformed, unreachable).",
		}, []string{"server", "kind", "result"}),
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_nacos_subscriptions",
			Help: "Services watched: subscribed over gRPC, or polled with the UDP push over HTTP.",
		}),
		connects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_nacos_connects_total",
			Help: "Connections made to a server after which every service was subscribed again, by reason (start; lost: the last connection was lost; retry: every server had failed; overflow: pushes were lost; api: --nacos-api auto moved between gRPC and HTTP).",
		}, []string{"reason"}),
		serverUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "galleon_nacos_server_up",
			Help: "1 when the server answered its last request or probe, 0 when it failed; by server. The adapter reads one server at a time and probes the others.",
		}, []string{"server"}),
		panicking: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_nacos_services_protect_threshold",
			Help: "Services whose protect threshold is reached now: too few instances healthy, so every enabled instance is served, as Nacos clients do.",
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "galleon_nacos_protect_threshold_reached_total",
			Help: "Times a service reached its protect threshold (each episode counted once, when it begins).",
		}),
		discoveryDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "galleon_nacos_discovery_duration_seconds",
			Help:    "Time to read every service listing watched (all pages of every namespace and group), once per --nacos-discovery-interval.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "galleon_nacos_sync_duration_seconds",
			Help:    "Time from a connection's setup to every service listed and subscribed: the start, and every reconnect.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 9),
		}),
		overLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_nacos_services_over_limit",
			Help: "Services listed but not watched because there are more than --nacos-max-services.",
		}),
		refreshChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "galleon_nacos_refresh_changes_total",
			Help: "Service states that only the periodic refresh (--nacos-refresh-interval) brought: the refresh found a state that differed from the one held, and no push brought it within " + pushGrace.String() + ". Each is a push the server lost or never sent (polaris-server 1.18.1 sends none for a service outside DEFAULT_GROUP).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.pushes, m.requests, m.subscriptions, m.connects, m.serverUp, m.panicking, m.panics,
			m.discoveryDuration, m.syncDuration, m.overLimit, m.refreshChanges)
	}
	return m
}
