// Package subset decides which services each sink receives: the legacy MCP
// design's "distribute a subset of config space to subsets of component
// instances", for MCP over xDS and legacy MCP alike.
//
// Operators write Rules (a YAML file, see Load). Each Subset names the sinks
// it is for, by node id, metadata (xDS node metadata) or annotations (MCP
// SinkNode annotations), and the services they receive, by namespace,
// registry, host or label. A sink takes the first subset that selects it;
// a sink no subset selects receives everything.
//
// A Router holds one snapshot.View per subset: each view shares the store's
// encoded resources and follows every change in the same Apply, so serving
// subsets costs one filter call per changed resource per subset, and no
// encoding.
package subset

import (
	"fmt"
	"path"
	"strings"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// Rules is the whole configuration: subsets, tried in order.
type Rules struct {
	Subsets []Subset `json:"subsets" yaml:"subsets"`
}

// Subset is one group of sinks and what they receive.
type Subset struct {
	// Name identifies the subset in logs, metrics and /debug/status.
	Name string `json:"name" yaml:"name"`
	// Sinks selects the sinks this subset is for.
	Sinks SinkSelector `json:"sinks" yaml:"sinks"`
	// Services selects what they receive.
	Services ServiceSelector `json:"services" yaml:"services"`
}

// SinkSelector selects sinks by what they say of themselves in their first
// request. Every field given must match; a selector with no field matches
// no sink (a subset for nobody is a mistake, and Validate says so).
type SinkSelector struct {
	// IDs are patterns (path.Match syntax: *, ?, [...]) of which the node id
	// must match one. istiod's is "sidecar~<ip>~<pod>.<namespace>~<namespace>.svc.cluster.local".
	IDs []string `json:"ids,omitempty" yaml:"ids,omitempty"`
	// Metadata must all be present, with values matching the patterns, among
	// the sink's labels: an xDS node's string metadata fields (istiod sends
	// ISTIO_REVISION when it runs a revision) or a legacy MCP SinkNode's
	// annotations.
	Metadata map[string]string `json:"metadata,omitempty" yaml:"metadata,omitempty"`
}

// ServiceSelector selects services. Every field given must match; within a
// list, one match is enough. An empty selector selects every service.
type ServiceSelector struct {
	// Namespaces are patterns of the namespace the service is served in.
	Namespaces []string `json:"namespaces,omitempty" yaml:"namespaces,omitempty"`
	// Registries are patterns of the registry's name ("consul", "file").
	Registries []string `json:"registries,omitempty" yaml:"registries,omitempty"`
	// Hosts are patterns of which at least one of the service's hosts must
	// match one. As in Istio, a leading "*." matches any number of labels
	// ("*.consul" matches "web.service.consul"); elsewhere * stands within
	// one label ("web-*.service.consul").
	Hosts []string `json:"hosts,omitempty" yaml:"hosts,omitempty"`
	// Labels must all be present on the service with matching values.
	Labels map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
}

// Validate checks the rules and says what to fix.
func (r *Rules) Validate() error {
	seen := map[string]bool{}
	for i, s := range r.Subsets {
		where := fmt.Sprintf("subsets[%d]", i)
		if s.Name == "" {
			return fmt.Errorf("%s: name is required", where)
		}
		where = fmt.Sprintf("subset %q", s.Name)
		if seen[s.Name] {
			return fmt.Errorf("%s: name used twice", where)
		}
		seen[s.Name] = true
		if len(s.Sinks.IDs) == 0 && len(s.Sinks.Metadata) == 0 {
			return fmt.Errorf("%s: sinks selects nobody: give ids or metadata", where)
		}
		patterns := map[string][]string{"sinks.ids": s.Sinks.IDs, "services.namespaces": s.Services.Namespaces,
			"services.registries": s.Services.Registries, "services.hosts": s.Services.Hosts}
		for field, list := range patterns {
			for _, p := range list {
				if err := checkPattern(p); err != nil {
					return fmt.Errorf("%s: %s: %w", where, field, err)
				}
			}
		}
		for field, m := range map[string]map[string]string{"sinks.metadata": s.Sinks.Metadata, "services.labels": s.Services.Labels} {
			for k, v := range m {
				if k == "" {
					return fmt.Errorf("%s: %s: empty key", where, field)
				}
				if err := checkPattern(v); err != nil {
					return fmt.Errorf("%s: %s[%s]: %w", where, field, k, err)
				}
			}
		}
	}
	return nil
}

func checkPattern(p string) error {
	if p == "" {
		return fmt.Errorf("empty pattern")
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("pattern %q: %w", p, err)
	}
	return nil
}

// Selects reports whether the selector picks sink.
func (s *SinkSelector) Selects(sink snapshot.Client) bool {
	if len(s.IDs) == 0 && len(s.Metadata) == 0 {
		return false
	}
	if len(s.IDs) > 0 && !matchAny(s.IDs, sink.ID, false) {
		return false
	}
	return matchLabels(s.Metadata, sink.Labels)
}

// Keeps reports whether the selector picks the service a resource was made
// from. A resource with no Origin is kept only by the empty selector.
func (s *ServiceSelector) Keeps(o *snapshot.Origin) bool {
	if s.empty() {
		return true
	}
	if o == nil {
		return false
	}
	if len(s.Namespaces) > 0 && !matchAny(s.Namespaces, o.Namespace, false) {
		return false
	}
	if len(s.Registries) > 0 && !matchAny(s.Registries, o.Registry, false) {
		return false
	}
	if len(s.Hosts) > 0 {
		found := false
		for _, h := range o.Hosts {
			if matchAny(s.Hosts, h, true) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return matchLabels(s.Labels, o.Labels)
}

func (s *ServiceSelector) empty() bool {
	return len(s.Namespaces)+len(s.Registries)+len(s.Hosts)+len(s.Labels) == 0
}

// matchAny reports whether value matches one of the patterns. For host
// names, * stands for one DNS label, so patterns match label by label.
func matchAny(patterns []string, value string, host bool) bool {
	for _, p := range patterns {
		if host {
			if matchHost(p, value) {
				return true
			}
			continue
		}
		if ok, _ := path.Match(p, value); ok {
			return true
		}
	}
	return false
}

func matchHost(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok && strings.HasPrefix(suffix, ".") &&
		!strings.ContainsAny(suffix, "*?[") {
		return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
	}
	pl, hl := strings.Split(pattern, "."), strings.Split(host, ".")
	if len(pl) != len(hl) {
		return false
	}
	for i := range pl {
		if ok, _ := path.Match(pl[i], hl[i]); !ok {
			return false
		}
	}
	return true
}

func matchLabels(want, have map[string]string) bool {
	for k, p := range want {
		v, ok := have[k]
		if !ok {
			return false
		}
		if m, _ := path.Match(p, v); !m {
			return false
		}
	}
	return true
}
