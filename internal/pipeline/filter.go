package pipeline

import (
	"reflect"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/internal/importfilter"
	"github.com/galleon-mesh/galleon/model"
)

// Import filters (internal/importfilter) are applied as the adapter reports, before anything
// is recorded: a service the filters leave out is as if the registry did not hold it (a
// Replace leaves it out, an Update of it is its removal), and the instances they leave out
// are dropped from their service. So the emptiness rule, conversion and the fleet's Merger see
// the filtered registry. What is left out is counted (filteredState), not rejected.

// filteredState is what the filters leave out now, by service; guarded by Pipeline.mu.
type filteredState struct {
	// services are the services left out whole; instances how many instances the instance
	// rules left out, by service (those of a service left out whole included).
	services  map[model.ServiceKey]struct{}
	instances map[model.ServiceKey]int
	// instanceTotal is the sum of instances.
	instanceTotal int
}

// filterMetrics meter what the import filters leave out now.
type filterMetrics struct {
	filteredServices  prometheus.Gauge
	filteredInstances prometheus.Gauge
}

func newFilterMetrics() filterMetrics {
	return filterMetrics{
		filteredServices: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_registry_filtered_services",
			Help: "Registry services the import filters (--include-services, --exclude-labels, ...) leave out now: not served, not rejected.",
		}),
		filteredInstances: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_registry_filtered_instances",
			Help: "Registry instances the import filters' instance rules (labels, CIDRs) leave out of their services now: not served, not rejected.",
		}),
	}
}

func (m filterMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.filteredServices, m.filteredInstances}
}

// SetFilter replaces the import filters. It applies to reports from then on: call it while
// the adapter is stopped and before it starts again, so that its first listing (a Replace)
// is filtered anew; the emptiness rule judges that listing as any other.
func (p *Pipeline) SetFilter(f *importfilter.Filter) {
	if old := p.filter.Swap(f); reflect.DeepEqual(old.Settings(), f.Settings()) {
		return // the same filters, made again (a list re-read)
	}
	if f == nil {
		p.log.Info("import filters removed: the registry is served whole from its next listing")
		return
	}
	p.log.Info("import filters changed: applied from the registry's next listing", f.Describe()...)
}

// Filter returns the import filters applied now, nil when none.
func (p *Pipeline) Filter() *importfilter.Filter {
	return p.filter.Load()
}

// note records key's filtering: left out whole (kept false), and the instances left out.
func (st *filteredState) note(key model.ServiceKey, kept bool, dropped int) {
	if !kept {
		if st.services == nil {
			st.services = map[model.ServiceKey]struct{}{}
		}
		st.services[key] = struct{}{}
	} else {
		delete(st.services, key)
	}
	st.instanceTotal -= st.instances[key]
	delete(st.instances, key)
	if dropped > 0 {
		if st.instances == nil {
			st.instances = map[model.ServiceKey]int{}
		}
		st.instances[key] = dropped
		st.instanceTotal += dropped
	}
}

// filteredCounts publishes the counts; p.mu is held.
func (p *Pipeline) filteredCounts() {
	p.metrics.filteredServices.Set(float64(len(p.filtered.services)))
	p.metrics.filteredInstances.Set(float64(p.filtered.instanceTotal))
}

// Filtered returns how many services the import filters leave out now, and how many
// instances.
func (p *Pipeline) Filtered() (services, instances int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.filtered.services), p.filtered.instanceTotal
}

// replaceFiltered filters a full listing: the services kept, by key, and what was left out.
// p.mu is not held: the filtering of a large listing does not block the Run goroutine.
func replaceFiltered(f *importfilter.Filter, services []model.Service) (map[model.ServiceKey]*model.Service, filteredState) {
	all := make(map[model.ServiceKey]*model.Service, len(services))
	var st filteredState
	for i := range services {
		svc := &services[i]
		kept, dropped := f.Apply(svc)
		st.note(svc.Key(), kept, dropped)
		if kept {
			all[svc.Key()] = svc
		} else {
			delete(all, svc.Key()) // a later report of one key wins, kept or not
		}
	}
	return all, st
}
