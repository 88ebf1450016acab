package benchrun

import "testing"

func TestMetricSum(t *testing.T) {
	text := `# HELP galleon_eureka_requests_total requests
# TYPE galleon_eureka_requests_total counter
galleon_eureka_requests_total{kind="delta",result="ok"} 12
galleon_eureka_requests_total{kind="delta",result="error"} 1
galleon_eureka_requests_total{kind="full",result="ok"} 2
galleon_eureka_requests_total_extra 99
galleon_peer_reput_seconds_sum 0.0123
galleon_peer_reput_seconds_count 5
`
	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{"galleon_eureka_requests_total", "", 15},
		{"galleon_eureka_requests_total", `kind="delta"`, 13},
		{"galleon_eureka_requests_total", `kind="delta",result="ok"`, 12},
		{"galleon_eureka_requests_total", `result="ok"`, 14},
		{"galleon_peer_reput_seconds_sum", "", 0.0123},
		{"galleon_peer_reput_seconds_count", "", 5},
		{"galleon_missing", "", 0},
	} {
		if got := MetricSum(text, c.name, c.label); got != c.want {
			t.Errorf("MetricSum(%s, %s) = %v, want %v", c.name, c.label, got, c.want)
		}
	}
}
