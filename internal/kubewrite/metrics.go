package kubewrite

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	writes    *prometheus.CounterVec
	objects   *prometheus.GaugeVec
	pending   prometheus.Gauge
	conflicts prometheus.Gauge
	writing   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_kubernetes_writes_total",
			Help: "Requests that write the Kubernetes API, by kind and result: applied, deleted, conflict (another owner's object, left alone), invalid (refused by validation), missing_namespace, forbidden and failed (retried), created (a namespace); and objects not written because their namespace is not in --kubernetes-namespaces (outside_namespaces).",
		}, []string{"kind", "result"}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "galleon_kubernetes_objects",
			Help: "Objects of this owner the API server holds, by kind, as far as the writer knows.",
		}, []string{"kind"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_kubernetes_pending",
			Help: "Objects waiting for a write: queued, retried after a failure, or out of the snapshot and waiting for the removal delay.",
		}),
		conflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_kubernetes_conflicts",
			Help: "Names the snapshot holds whose object belongs to another owner (left alone).",
		}),
		writing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_kubernetes_writing",
			Help: "1 while this process writes the Kubernetes API: always with no lease, only while it holds the lease with one (--kubernetes-lease).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.writes, m.objects, m.pending, m.conflicts, m.writing} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
