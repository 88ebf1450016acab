package istiod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ErrMetricNotFound is returned (wrapped) by Metric when no series matches. istiod only exports a
// series once it has been recorded, so for counters it usually means zero.
var ErrMetricNotFound = errors.New("metric not found")

// Metrics fetches and parses the Prometheus text exposition of the monitoring port's /metrics.
func (i *Istiod) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	body, err := i.Get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	return ParseMetrics(body)
}

// ParseMetrics parses a Prometheus text exposition (istiod's /metrics, or a Galleon binary's:
// the demo reads both the same way).
func ParseMetrics(body []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics: %w", err)
	}
	return fams, nil
}

// MetricValue is Metric on families already read (ParseMetrics): the sum of the series of name
// whose labels include labels, or an error wrapping ErrMetricNotFound.
func MetricValue(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, error) {
	return metricValue(fams, name, labels)
}

// Metric returns the sum of every series of metric name whose labels include all of labels
// (nil matches every series). Histogram and summary series are addressed the way they are
// exposed: name_count, name_sum, and name_bucket with an "le" label.
// Example: Metric(ctx, "pilot_inbound_updates", map[string]string{"type": "eds"}).
func (i *Istiod) Metric(ctx context.Context, name string, labels map[string]string) (float64, error) {
	fams, err := i.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	return metricValue(fams, name, labels)
}

func metricValue(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, error) {
	fam, suffix := fams[name], ""
	if fam == nil {
		for _, s := range []string{"_count", "_sum", "_bucket"} {
			if base, ok := strings.CutSuffix(name, s); ok {
				if f := fams[base]; f != nil && (f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY) {
					fam, suffix = f, s
				}
				break
			}
		}
	}
	if fam == nil {
		return 0, fmt.Errorf("%s%s: %w", name, fmtLabels(labels), ErrMetricNotFound)
	}
	var le string
	want := labels
	if suffix == "_bucket" {
		var ok bool
		if le, ok = labels["le"]; !ok {
			return 0, fmt.Errorf("%s: a bucket needs an \"le\" label", name)
		}
		want = make(map[string]string, len(labels))
		for k, v := range labels {
			if k != "le" {
				want[k] = v
			}
		}
	}
	var sum float64
	found := false
	for _, m := range fam.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		v, ok, err := sampleValue(fam.GetType(), m, suffix, le)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if ok {
			sum += v
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("%s%s: %w", name, fmtLabels(labels), ErrMetricNotFound)
	}
	return sum, nil
}

func sampleValue(typ dto.MetricType, m *dto.Metric, suffix, le string) (float64, bool, error) {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue(), true, nil
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue(), true, nil
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), true, nil
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		h := m.GetHistogram()
		switch suffix {
		case "_count":
			return float64(h.GetSampleCount()), true, nil
		case "_sum":
			return h.GetSampleSum(), true, nil
		case "_bucket":
			for _, b := range h.GetBucket() {
				if fmt.Sprint(b.GetUpperBound()) == le || (le == "+Inf" && b.GetUpperBound() > 1e308) {
					return float64(b.GetCumulativeCount()), true, nil
				}
			}
			if le == "+Inf" {
				return float64(h.GetSampleCount()), true, nil
			}
			return 0, false, nil
		}
		return 0, false, errors.New("is a histogram: use the _count, _sum or _bucket series")
	case dto.MetricType_SUMMARY:
		s := m.GetSummary()
		switch suffix {
		case "_count":
			return float64(s.GetSampleCount()), true, nil
		case "_sum":
			return s.GetSampleSum(), true, nil
		}
		return 0, false, errors.New("is a summary: use the _count or _sum series")
	}
	return 0, false, fmt.Errorf("unsupported metric type %v", typ)
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k {
				found = lp.GetValue() == v
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func fmtLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	var parts []string
	for k, v := range labels {
		parts = append(parts, fmt.Sprintf("%s=%q", k, v))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// counter reads a counter-like series, treating "not exported yet" as 0.
func (i *Istiod) counter(ctx context.Context, name string, labels map[string]string) (float64, error) {
	v, err := i.Metric(ctx, name, labels)
	if errors.Is(err, ErrMetricNotFound) {
		return 0, nil
	}
	return v, err
}

// FullPushes is the number of full pushes istiod has done: pilot_pushcontext_init_seconds_count.
//
// Evidence (istio 1.29.2, module istio.io/istio@v0.0.0-20260409200358-0c774325b938):
//   - pilot/pkg/xds/discovery.go:258-283 DiscoveryServer.Push: a request with Full=false returns
//     right after AdsPushAll (line 259-264, no push context); a full one builds a new PushContext
//     (initPushContext, line 276) and records its duration once in pushContextInitTime (line 279).
//   - pilot/pkg/xds/monitoring.go:63-67 pushContextInitTime is the distribution
//     "pilot_pushcontext_init_seconds", so its _count counts full pushes (after debouncing:
//     several changes within PILOT_DEBOUNCE_AFTER=100ms merge into one push).
//   - pilot/pkg/serviceregistry/serviceentry/controller.go:381-500 serviceEntryHandler: an update
//     whose model.Service set is unchanged (only endpoints differ, resolution not DNS) calls
//     edsUpdate only (line 469-474, no full push); a changed service (hosts, ports, labels,
//     resolution, ...) or an add/delete issues ConfigUpdate{Full: true} (line 493-499).
//   - pilot_xds_pushes counts pushes to connected proxies and stays absent when none is
//     connected, so it cannot be used here.
//
// Observed with a test ADS source: 1 after the initial sync; unchanged by an endpoint-only
// ServiceEntry update (the log says "full=false", pilot_inbound_updates{type="eds"} +1); +1 for a
// port change ("full=true").
//
// Releases that build a push context for every push (Release.PushContextEveryPush, the 1.31
// development line) have no full/EDS-only distinction left in that metric, nor any metric that
// tells without a connected proxy. There, FullPushes counts the push requests that carry a config
// other than endpoints: istiod logs each one at debug level on its "push" scope ("push triggered
// configs=[...]", pilot/pkg/xds/discovery.go ConfigUpdate, skipped when
// OnlyHasConfigsOfKind(Endpoints)), which Start turns on for those releases. These are counted
// before debouncing, so a change can count more than once; 0 still means no change but
// endpoints reached the push queue. A request whose configs are all of kind Address is not
// counted either: in ambient mode istiod's ambient index sends every workload change as one
// (ambient/ambientindex.go PushXdsAddress, Full=false, reason "ambient"), and neither CDS nor LDS
// of a sidecar is rebuilt for it (xds/cds.go, xds/lds.go: kind.Address among the skipped kinds).
func (i *Istiod) FullPushes(ctx context.Context) (float64, error) {
	if i.Release.PushContextEveryPush() {
		return i.nonEndpointPushes(), nil
	}
	return i.counter(ctx, "pilot_pushcontext_init_seconds_count", nil)
}

// nonEndpointPushes counts nonEndpointPushLog lines in the log, reading only what was logged
// since the last call: complete lines are counted once, a line still being written waits for the
// next call.
func (i *Istiod) nonEndpointPushes() float64 {
	i.pushLog.mu.Lock()
	defer i.pushLog.mu.Unlock()
	added := i.LogSince(i.pushLog.offset)
	if end := strings.LastIndexByte(added, '\n'); end >= 0 {
		i.pushLog.count += countNonEndpointPushes(added[:end+1])
		i.pushLog.offset += int64(end + 1)
	}
	return float64(i.pushLog.count)
}

// countNonEndpointPushes counts the lines of log that log a push request with a config of a kind
// other than Address ("push triggered configs=[Address//... Address//...] reasons=[ambient]").
func countNonEndpointPushes(log string) int {
	n := 0
	for line := range strings.Lines(log) {
		_, rest, ok := strings.Cut(line, nonEndpointPushLog+"[")
		if !ok {
			continue
		}
		configs, _, _ := strings.Cut(rest, "]")
		for c := range strings.FieldsSeq(configs) {
			if !strings.HasPrefix(c, "Address/") {
				n++
				break
			}
		}
	}
	return n
}

// nonEndpointPushLog is what istiod 1.31 logs (scope "push", debug) for a push request that
// carries a config other than endpoints.
const nonEndpointPushLog = "push triggered configs="

// InboundUpdates is pilot_inbound_updates{type=typ}: "config" (every push request, full or not:
// pilot/pkg/xds/discovery.go:311), "eds" (endpoint updates, eds.go:50,73), "svc" (service
// updates, eds.go:38), "svcdelete". An endpoint-only ServiceEntry change raises "eds" (and
// "config") but not FullPushes.
func (i *Istiod) InboundUpdates(ctx context.Context, typ string) (float64, error) {
	return i.counter(ctx, "pilot_inbound_updates", map[string]string{"type": typ})
}

// PushCounters is a snapshot, from one /metrics scrape, of the counters that tell what istiod did
// with config changes. Missing series (nothing recorded yet) read as 0.
type PushCounters struct {
	// FullPushes is pilot_pushcontext_init_seconds_count (see FullPushes).
	FullPushes float64
	// Debounces is pilot_debounce_time_count: merged push requests that left the debouncer, full
	// or EDS-only (pilot/pkg/xds/discovery.go debounce). Once it has grown past a snapshot taken
	// before a change, istiod has decided whether that change needs a full push.
	Debounces float64
	// EDSUpdates is pilot_inbound_updates{type="eds"}.
	EDSUpdates float64
	// ConfigUpdates is pilot_inbound_updates{type="config"}.
	ConfigUpdates float64
}

// PushCounters reads PushCounters.
func (i *Istiod) PushCounters(ctx context.Context) (PushCounters, error) {
	fams, err := i.Metrics(ctx)
	if err != nil {
		return PushCounters{}, err
	}
	get := func(name string, labels map[string]string) (float64, error) {
		v, err := metricValue(fams, name, labels)
		if errors.Is(err, ErrMetricNotFound) {
			return 0, nil
		}
		return v, err
	}
	var c PushCounters
	for _, f := range []struct {
		dst    *float64
		name   string
		labels map[string]string
	}{
		{&c.FullPushes, "pilot_pushcontext_init_seconds_count", nil},
		{&c.Debounces, "pilot_debounce_time_count", nil},
		{&c.EDSUpdates, "pilot_inbound_updates", map[string]string{"type": "eds"}},
		{&c.ConfigUpdates, "pilot_inbound_updates", map[string]string{"type": "config"}},
	} {
		if *f.dst, err = get(f.name, f.labels); err != nil {
			return PushCounters{}, err
		}
	}
	if i.Release.PushContextEveryPush() {
		// Read after the scrape, so a push request the scrape reflects is counted.
		c.FullPushes = i.nonEndpointPushes()
	}
	return c, nil
}

// WaitPushed waits until istiod has dispatched a push after the snapshot before (Debounces grew)
// and returns the new counters. Take the snapshot while istiod is idle, make a change, wait until
// ConfigDump shows it, then call WaitPushed; comparing FullPushes tells whether the change caused
// a full push. Debouncing waits PILOT_DEBOUNCE_AFTER (100ms) of quiet, up to 10s.
func (i *Istiod) WaitPushed(ctx context.Context, before PushCounters) (PushCounters, error) {
	var now PushCounters
	err := i.WaitFor(ctx, func() (bool, error) {
		var err error
		now, err = i.PushCounters(ctx)
		return err == nil && now.Debounces > before.Debounces, err
	})
	return now, err
}
