// Package importfilter decides which of a registry's services and instances Galleon imports:
// the per-registry import filters (--include-services, --exclude-labels, ... on a binary; an
// entry's filters: in galleon-fleet's registry list). The pipeline applies a Filter to every
// service an adapter reports, so everything after it (the emptiness rule, conversion, the
// fleet's Merger) sees the registry as if it held only what the filters keep. What a filter
// leaves out is counted, not rejected: it is not malformed.
//
// The rules, each an include list and an exclude list; an exclude wins over an include, and an
// empty include list keeps everything:
//   - services by name (model.Service.Name, as the adapter names the ServiceEntry) and by
//     namespace (model.Service.Namespace), glob patterns in path.Match syntax ("orders-*",
//     "team-?", "[a-c]*");
//   - instances by label selector, "key=value" or "key" alone (the key present, any value),
//     matched against the instance's labels over the service's (an instance label wins), as
//     they are served: sanitised to Kubernetes label syntax (model.Labels);
//   - instances by the CIDR blocks their address is in; an instance whose address is a host
//     name, not an IP address, is kept by the CIDR rules.
//
// An instance left out by the instance rules is dropped from its service. A service whose
// every instance is left out (it had at least one) is left out whole, as a registry holding no
// instance of it would not list it; a service reported with no instance is judged by its name,
// namespace and own labels.
package importfilter

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strings"

	"github.com/galleon-mesh/galleon/model"
)

// The settings' names: the daemon's flags without "--", and the keys of a fleet entry's
// filters.
const (
	IncludeServices      = "include-services"
	ExcludeServices      = "exclude-services"
	IncludeNamespaces    = "include-namespaces"
	ExcludeNamespaces    = "exclude-namespaces"
	IncludeLabels        = "include-labels"
	ExcludeLabels        = "exclude-labels"
	IncludeInstanceCIDRs = "include-instance-cidrs"
	ExcludeInstanceCIDRs = "exclude-instance-cidrs"
)

// Settings are a registry's import filters as given: lists of patterns, selectors and CIDR
// blocks. The zero value filters nothing.
type Settings struct {
	IncludeServices      []string `yaml:"include-services" json:"include-services,omitempty"`
	ExcludeServices      []string `yaml:"exclude-services" json:"exclude-services,omitempty"`
	IncludeNamespaces    []string `yaml:"include-namespaces" json:"include-namespaces,omitempty"`
	ExcludeNamespaces    []string `yaml:"exclude-namespaces" json:"exclude-namespaces,omitempty"`
	IncludeLabels        []string `yaml:"include-labels" json:"include-labels,omitempty"`
	ExcludeLabels        []string `yaml:"exclude-labels" json:"exclude-labels,omitempty"`
	IncludeInstanceCIDRs []string `yaml:"include-instance-cidrs" json:"include-instance-cidrs,omitempty"`
	ExcludeInstanceCIDRs []string `yaml:"exclude-instance-cidrs" json:"exclude-instance-cidrs,omitempty"`
}

// IsZero says whether s filters nothing.
func (s Settings) IsZero() bool {
	for _, l := range s.lists() {
		if len(*l.values) > 0 {
			return false
		}
	}
	return true
}

// Names returns the names of the settings s sets, in a fixed order.
func (s Settings) Names() []string {
	var out []string
	for _, l := range s.lists() {
		if len(*l.values) > 0 {
			out = append(out, l.name)
		}
	}
	return out
}

type namedList struct {
	name   string
	values *[]string
}

func (s *Settings) lists() []namedList {
	return []namedList{
		{IncludeServices, &s.IncludeServices}, {ExcludeServices, &s.ExcludeServices},
		{IncludeNamespaces, &s.IncludeNamespaces}, {ExcludeNamespaces, &s.ExcludeNamespaces},
		{IncludeLabels, &s.IncludeLabels}, {ExcludeLabels, &s.ExcludeLabels},
		{IncludeInstanceCIDRs, &s.IncludeInstanceCIDRs}, {ExcludeInstanceCIDRs, &s.ExcludeInstanceCIDRs},
	}
}

// Filter is a registry's import filters, checked. A nil *Filter keeps everything.
type Filter struct {
	settings                     Settings
	includeNames, excludeNames   []string
	includeNS, excludeNS         []string
	includeLabels, excludeLabels []selector
	includeCIDRs, excludeCIDRs   []netip.Prefix
}

// selector is one label selector: key=value, or key alone (any value).
type selector struct {
	key, value string
	anyValue   bool
}

// New checks s and returns its Filter, nil when s filters nothing. Each problem names its
// setting as prefix+name (prefix "--" for flags, "filters: " for a list entry) and says what
// to write instead.
func New(s Settings, prefix string) (*Filter, error) {
	if s.IsZero() {
		return nil, nil
	}
	f := &Filter{settings: s}
	var errs []error
	add := func(setting, value, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s%s %q: %s", prefix, setting, value, fmt.Sprintf(format, args...)))
	}
	f.includeNames = patterns(s.IncludeServices, IncludeServices, add)
	f.excludeNames = patterns(s.ExcludeServices, ExcludeServices, add)
	f.includeNS = patterns(s.IncludeNamespaces, IncludeNamespaces, add)
	f.excludeNS = patterns(s.ExcludeNamespaces, ExcludeNamespaces, add)
	f.includeLabels = selectors(s.IncludeLabels, IncludeLabels, add)
	f.excludeLabels = selectors(s.ExcludeLabels, ExcludeLabels, add)
	f.includeCIDRs = prefixes(s.IncludeInstanceCIDRs, IncludeInstanceCIDRs, add)
	f.excludeCIDRs = prefixes(s.ExcludeInstanceCIDRs, ExcludeInstanceCIDRs, add)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return f, nil
}

type problem func(setting, value, format string, args ...any)

func patterns(values []string, setting string, add problem) []string {
	var out []string
	for _, v := range values {
		p := strings.TrimSpace(v)
		if p == "" {
			add(setting, v, "empty: want a glob pattern such as orders-* (path.Match syntax: *, ?, [a-z])")
			continue
		}
		if _, err := path.Match(p, ""); err != nil {
			add(setting, v, "not a glob pattern (%v): want path.Match syntax, e.g. orders-*, team-?, [a-c]*; escape a literal *, ? or [ with \\", err)
			continue
		}
		out = append(out, p)
	}
	return out
}

func selectors(values []string, setting string, add problem) []selector {
	var out []selector
	for _, v := range values {
		key, value, hasValue := strings.Cut(strings.TrimSpace(v), "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if key == "" {
			add(setting, v, "want key=value, or key alone for any value (a Consul tag canary is the label canary; a tag or meta env=prod is env=prod)")
			continue
		}
		// Labels are served sanitised (model.Labels): a selector only matches that form.
		served := model.Labels(map[string]string{key: value})
		if _, ok := served[key]; !ok || served[key] != value {
			add(setting, v, "no label can be served as that (labels are sanitised to Kubernetes label syntax: a key of at most 63 letters, digits, '-', '_' and '.', with an optional DNS-subdomain prefix and '/', and a value of the same characters): write the label as it is served%s", suggestion(served, hasValue))
			continue
		}
		out = append(out, selector{key: key, value: value, anyValue: !hasValue})
	}
	return out
}

// suggestion names the sanitised form of a selector, when there is one.
func suggestion(served map[string]string, hasValue bool) string {
	for k, v := range served {
		if hasValue {
			return fmt.Sprintf(", %s=%s", k, v)
		}
		return ", " + k
	}
	return ""
}

func prefixes(values []string, setting string, add problem) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range values {
		s := strings.TrimSpace(v)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			if a, aerr := netip.ParseAddr(s); aerr == nil {
				add(setting, v, "an address, not a CIDR block: write %s", netip.PrefixFrom(a, a.BitLen()))
			} else {
				add(setting, v, "not a CIDR block: want e.g. 10.0.0.0/8 or fd00::/8")
			}
			continue
		}
		if p.Masked() != p {
			add(setting, v, "has host bits set: write %s", p.Masked())
			continue
		}
		out = append(out, p)
	}
	return out
}

// Settings returns the settings f was made from.
func (f *Filter) Settings() Settings {
	if f == nil {
		return Settings{}
	}
	return f.settings
}

// Describe lists the filters set, as key-value pairs for a log line.
func (f *Filter) Describe() []any {
	if f == nil {
		return nil
	}
	var out []any
	s := f.settings
	for _, l := range s.lists() {
		if len(*l.values) > 0 {
			out = append(out, strings.ReplaceAll(l.name, "-", "_"), strings.Join(*l.values, ","))
		}
	}
	return out
}

// Apply filters svc in place: it says whether the service is kept, and how many instances the
// instance rules left out (of a service left out whole by them too). svc.Instances is replaced
// by a new slice when instances are left out; the old one is not written to, since the
// adapter's bookkeeping (registry.Reconciler) may share it. A nil f keeps everything.
func (f *Filter) Apply(svc *model.Service) (kept bool, droppedInstances int) {
	if f == nil {
		return true, 0
	}
	if !f.keepNamed(svc.Name, f.includeNames, f.excludeNames) || !f.keepNamed(svc.Namespace, f.includeNS, f.excludeNS) {
		return false, 0
	}
	if !f.filtersInstances() {
		return true, 0
	}
	if len(svc.Instances) == 0 {
		return f.keepLabels(svc.Labels, nil), 0
	}
	var keep []model.Instance
	for i := range svc.Instances {
		inst := &svc.Instances[i]
		ok := f.keepLabels(svc.Labels, inst.Labels) && f.keepAddress(inst.Address)
		switch {
		case !ok && keep == nil:
			keep = make([]model.Instance, i, len(svc.Instances)-1)
			copy(keep, svc.Instances[:i])
		case !ok:
		case keep != nil:
			keep = append(keep, *inst)
		}
	}
	if keep == nil {
		return true, 0
	}
	dropped := len(svc.Instances) - len(keep)
	svc.Instances = keep
	return len(keep) > 0, dropped
}

func (f *Filter) filtersInstances() bool {
	return len(f.includeLabels)+len(f.excludeLabels)+len(f.includeCIDRs)+len(f.excludeCIDRs) > 0
}

// keepNamed applies a pair of pattern lists to a name.
func (f *Filter) keepNamed(name string, include, exclude []string) bool {
	if matchAny(exclude, name) {
		return false
	}
	return len(include) == 0 || matchAny(include, name)
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok { // checked in New
			return true
		}
	}
	return false
}

// keepLabels applies the label selectors to an instance's labels over its service's, as they
// are served: sanitised (model.Labels, which returns a map already valid as it is).
func (f *Filter) keepLabels(service, instance map[string]string) bool {
	if len(f.includeLabels)+len(f.excludeLabels) == 0 {
		return true
	}
	service, instance = model.Labels(service), model.Labels(instance)
	matches := func(sel selector) bool {
		v, ok := instance[sel.key]
		if !ok {
			v, ok = service[sel.key]
		}
		return ok && (sel.anyValue || v == sel.value)
	}
	for _, sel := range f.excludeLabels {
		if matches(sel) {
			return false
		}
	}
	if len(f.includeLabels) == 0 {
		return true
	}
	for _, sel := range f.includeLabels {
		if matches(sel) {
			return true
		}
	}
	return false
}

// keepAddress applies the CIDR rules to an instance address; a host name is kept.
func (f *Filter) keepAddress(address string) bool {
	if len(f.includeCIDRs)+len(f.excludeCIDRs) == 0 {
		return true
	}
	a, err := netip.ParseAddr(address)
	if err != nil {
		return true
	}
	a = a.Unmap().WithZone("")
	for _, p := range f.excludeCIDRs {
		if p.Contains(a) {
			return false
		}
	}
	if len(f.includeCIDRs) == 0 {
		return true
	}
	for _, p := range f.includeCIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
