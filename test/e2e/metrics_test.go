package e2e

import (
	"bytes"
	"context"
	"fmt"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
)

// get fetches path from the binary's HTTP port (--http) and returns the body of a 2xx answer.
func (g *galleon) get(ctx context.Context, path string) ([]byte, error) {
	return serverproc.Get(ctx, nil, "http://"+g.HTTPAddr+path, 10*time.Second)
}

// scrapeMetrics reads /metrics of a Galleon binary: the families and the text as served.
func scrapeMetrics(ctx context.Context, g *galleon) (map[string]*dto.MetricFamily, []byte, error) {
	body, err := g.get(ctx, "/metrics")
	if err != nil {
		return nil, nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, nil, fmt.Errorf("parsing /metrics: %w", err)
	}
	return fams, body, nil
}

// matching are the series of name whose labels include labels (every series for none).
func matching(fams map[string]*dto.MetricFamily, name string, labels map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		match := true
		for k, v := range labels {
			if have[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, m)
		}
	}
	return out
}

// metricSum is the sum of the counter or gauge series of name whose labels include labels, and
// whether there was one.
func metricSum(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	ms := matching(fams, name, labels)
	var sum float64
	for _, m := range ms {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum, len(ms) > 0
}
