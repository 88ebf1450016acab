// Module whose only purpose is to pin, with a committed go.sum, the upstream module that ships
// the Prometheus Operator's ServiceMonitor CRD the deploy tests apply before the chart's
// ServiceMonitor (toolcache.ServiceMonitorCRD: `go run ./internal/testing/devtool crds`, and
// `devtool build kube`). Nothing here is compiled.
module galleon-crds

go 1.25

require github.com/prometheus-operator/prometheus-operator v0.85.0
