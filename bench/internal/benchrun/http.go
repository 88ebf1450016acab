package benchrun

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/serverproc"
)

// HTTPOK reports whether GET url answers 2xx within timeout (curl -f).
func HTTPOK(ctx context.Context, url string, timeout time.Duration) bool {
	_, err := HTTPGet(ctx, url, timeout)
	return err == nil
}

// HTTPGet is the body of GET url, an error unless it answers 2xx within timeout.
func HTTPGet(ctx context.Context, url string, timeout time.Duration) ([]byte, error) {
	return serverproc.Get(ctx, nil, url, timeout)
}

// MetricSum is the sum of the samples of metric name in Prometheus text exposition whose label
// set contains label (e.g. `kind="delta"`; "" for all); 0 when there are none.
func MetricSum(text, name, label string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !(f[0] == name || strings.HasPrefix(f[0], name+"{")) {
			continue
		}
		if label != "" && !strings.Contains(f[0], label) {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			sum += v
		}
	}
	return sum
}
