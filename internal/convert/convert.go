// Package convert turns one registry-neutral model.Service into the Istio
// resources Galleon serves: a ServiceEntry, plus one WorkloadEntry per served
// instance in WorkloadEntry mode.
//
// Conversion is a pure function: the same service always gives the same
// resources, byte for byte under deterministic proto marshalling, whatever
// the order of its instances, hosts, ports or map entries. That property is
// what lets the server hash resources into versions and keep endpoint-only
// changes cheap for istiod (an unchanged ServiceEntry must marshal to the
// same bytes).
//
// Every resource is validated with istiod's own rules before it is returned
// (see validate.go), because istiod silently drops what it cannot accept.
package convert

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/model"
)

// Kind is the kind of an Istio resource Convert produces.
type Kind int

const (
	// KindServiceEntry is a networking.istio.io ServiceEntry.
	KindServiceEntry Kind = iota
	// KindWorkloadEntry is a networking.istio.io WorkloadEntry.
	KindWorkloadEntry
)

// String returns the Kubernetes kind name.
func (k Kind) String() string {
	switch k {
	case KindServiceEntry:
		return "ServiceEntry"
	case KindWorkloadEntry:
		return "WorkloadEntry"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Mode chooses how instances are represented.
type Mode int

const (
	// ModeServiceEntry (the default) puts the instances inline in the
	// ServiceEntry as endpoints: one resource per service.
	ModeServiceEntry Mode = iota
	// ModeWorkloadEntry gives the ServiceEntry a workloadSelector and turns
	// each served instance into its own WorkloadEntry, so that an instance
	// change touches one small resource instead of the whole service.
	ModeWorkloadEntry
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case ModeServiceEntry:
		return "ServiceEntry"
	case ModeWorkloadEntry:
		return "WorkloadEntry"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

const (
	// AnnotationRegistry records the registry a resource came from, so
	// operators can tell sources apart and collisions can be reported.
	AnnotationRegistry = "galleon.io/registry"
	// LabelService is the label that ties a service's WorkloadEntries to
	// its ServiceEntry's workloadSelector in WorkloadEntry mode. Its value
	// is the ServiceEntry's (sanitised) name.
	LabelService = "galleon.io/service"
	// LabelNoEndpoints ("none") marks a STATIC ServiceEntry served inline with no endpoint:
	// see convert.
	LabelNoEndpoints = "galleon.io/endpoints"
)

// Options tune a conversion. The zero value is ModeServiceEntry without a
// panic threshold.
type Options struct {
	Mode Mode
	// Registry names the registry the service comes from ("consul", "file"), recorded on the
	// resources (AnnotationRegistry) so that operators can tell sources apart; the daemon
	// sets it, not the adapter.
	Registry string
	// PanicThresholdPercent: when >0 and fewer than this percent of a
	// service's instances are Healthy, serve every instance except
	// Draining ones (Nacos/Envoy "panic" mode): when most instances look
	// unhealthy the health signal is more likely wrong than the instances,
	// and sending traffic everywhere beats sending it to a few survivors
	// or nowhere. 0 = off.
	PanicThresholdPercent int
	// OmitNoEndpointsLabel leaves LabelNoEndpoints off. istiod 1.30 and
	// later send a STATIC ServiceEntry's whole endpoint list as an EDS
	// update, an empty one included (the krt rewrite of
	// serviceentry/controller.go, pushServiceEndpointUpdates), so the
	// label only costs them two full pushes per service that loses its
	// last endpoint and gets one back. Only for sinks that are all 1.30+.
	OmitNoEndpointsLabel bool
}

// Resource is one Istio config object ready to serve.
type Resource struct {
	Kind        Kind
	Namespace   string
	Name        string
	Labels      map[string]string
	Annotations map[string]string
	// Spec is *networkingv1alpha3.ServiceEntry or
	// *networkingv1alpha3.WorkloadEntry (istio.io/api/networking/v1alpha3).
	Spec proto.Message
}

// FullName returns "namespace/name", the MCP resource name.
func (r Resource) FullName() string { return r.Namespace + "/" + r.Name }

// Error is what Convert returns for a service it cannot serve. It names the
// service as the registry gave it and lists every reason.
type Error struct {
	Registry string
	Service  model.ServiceKey
	Reasons  []error
}

// Error returns all reasons on one line, which suits logs and the
// Rejected report of a registry.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "service %q", e.Service.String())
	if e.Registry != "" {
		fmt.Fprintf(&b, " from registry %q", e.Registry)
	}
	b.WriteString(" cannot be served: ")
	for i, r := range e.Reasons {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(r.Error())
	}
	return b.String()
}

// Unwrap returns the reasons, for errors.Is and errors.As.
func (e *Error) Unwrap() []error { return e.Reasons }

// Convert maps one service to its resources: the ServiceEntry first, then
// WorkloadEntries sorted by name. Every resource is validated with istiod's
// rules; on failure it returns an *Error that names the service and every
// reason, and no resources.
//
// Mapping rules, beyond those in the Options and model documentation:
//   - Namespace and name are sanitised DNS-1123 labels.
//   - Hosts are sanitised, de-duplicated and sorted; addresses de-duplicated
//     and sorted; exportTo de-duplicated in order ("." counts as the
//     namespace itself).
//   - Ports are sorted by number. A port's name is the model's name,
//     sanitised, or "<protocol>-<number>" in lower case; protocols are upper
//     case, empty meaning TCP.
//   - Only Healthy instances are served (see PanicThresholdPercent). An
//     endpoint's ports map a port name to the instance's port only where
//     that differs from the service port, which keeps resources small.
//   - ResolutionAuto is STATIC when every served address is an IP (or a
//     unix:// socket, or empty), DNS otherwise. With ResolutionNone istiod
//     forwards to the original destination and forbids endpoints, so no
//     endpoints or WorkloadEntries are produced at all.
//
// Convert never modifies svc, but the resources may share its maps (labels that need no
// repair are not copied): svc must not be modified afterwards, which the registry.Sink
// contract already asks of every service the core receives.
func Convert(svc model.Service, opts Options) ([]Resource, error) {
	c, err := ConvertService(svc, opts)
	return c.Resources, err
}

// Converted is a service's resources and what was left out of them.
type Converted struct {
	// Resources: the ServiceEntry first, then WorkloadEntries sorted by
	// name.
	Resources []Resource
	// Dropped are the served instances that failed istiod's rules on
	// their own (a label, a locality, an address): they are left out and
	// the rest of the service is served, so that one bad instance neither
	// freezes its service at the previous version nor keeps a new service
	// from being served. Sorted by instance ID.
	Dropped []DroppedInstance
	// Rescaled are the localities whose endpoint weights added up to more
	// than Envoy accepts (2^32-1) and were scaled down in proportion.
	Rescaled []string
}

// DroppedInstance is an instance left out of its service, and why.
type DroppedInstance struct {
	ID, Address string
	Reason      error
}

// ConvertService is Convert that leaves out each instance failing
// validation on its own (Converted.Dropped) instead of refusing the
// service, and scales down endpoint weights that overflow Envoy's limit
// (Converted.Rescaled). It returns an *Error only for what is wrong with
// the service itself: its name, hosts, ports, resolution, exportTo.
func ConvertService(svc model.Service, opts Options) (Converted, error) {
	c := converter{svc: &svc, opts: opts}
	out := c.convert()
	if len(c.errs) > 0 {
		return Converted{}, &Error{Registry: opts.Registry, Service: svc.Key(), Reasons: c.errs}
	}
	return Converted{Resources: out, Dropped: c.dropped, Rescaled: c.rescaled}, nil
}

// converter holds the state of one conversion.
type converter struct {
	svc  *model.Service
	opts Options
	errs errorList
	// dropped: instances left out, rescaled: localities whose weights
	// were scaled down (ConvertService).
	dropped  []DroppedInstance
	rescaled []string

	namespace, name string
	ports           []port // sorted by number
}

// port is a service port with its final name and protocol.
type port struct {
	number   uint32
	name     string
	protocol string
}

// served pairs an instance with the workload built from it.
type served struct {
	inst *model.Instance
	we   *networking.WorkloadEntry
}

func (c *converter) convert() []Resource {
	svc := c.svc
	if c.opts.Mode != ModeServiceEntry && c.opts.Mode != ModeWorkloadEntry {
		c.errs.addf("options: unknown mode %d", int(c.opts.Mode))
		return nil
	}
	c.namespace = model.DNSLabel(svc.Namespace)
	if c.namespace == "" {
		c.errs.addf("namespace %q has nothing left after sanitising to a DNS-1123 label", svc.Namespace)
	}
	c.name = model.DNSLabel(svc.Name)
	if c.name == "" {
		c.errs.addf("name %q has nothing left after sanitising to a DNS-1123 label", svc.Name)
	}
	c.ports = convertPorts(svc.Ports)

	instances := servedInstances(svc.Instances, c.opts.PanicThresholdPercent)
	// Resolution is decided from every instance, served or not: were it
	// decided from the served ones, a health flip could move a service
	// between DNS and STATIC, which istiod can only apply with a full push.
	all := make([]*model.Instance, len(svc.Instances))
	for i := range svc.Instances {
		all[i] = &svc.Instances[i]
	}
	resolution, ok := c.resolution(all)
	if !ok {
		return nil
	}

	se := &networking.ServiceEntry{
		Hosts:      c.convertHosts(svc.Hosts),
		Addresses:  sortedUnique(svc.Addresses),
		Ports:      make([]*networking.ServicePort, len(c.ports)),
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: resolution,
		ExportTo:   dedupeExportTo(c.namespace, svc.ExportTo),
	}
	if svc.Location == model.MeshExternal {
		se.Location = networking.ServiceEntry_MESH_EXTERNAL
	}
	for i, p := range c.ports {
		se.Ports[i] = &networking.ServicePort{Number: p.number, Protocol: p.protocol, Name: p.name}
	}

	// With resolution NONE istiod forbids endpoints: the instances have
	// nothing to contribute.
	var workloads []served
	if resolution != networking.ServiceEntry_NONE {
		workloads = c.workloads(instances, resolution)
		switch {
		case c.opts.Mode == ModeServiceEntry:
			for _, w := range workloads {
				se.Endpoints = append(se.Endpoints, w.we)
			}
		case c.name != "": // WorkloadEntry mode needs the name for its selector
			se.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{LabelService: c.name}}
		}
	}

	annotations := maps.Clone(svc.Annotations)
	if c.opts.Registry != "" {
		if annotations == nil {
			annotations = make(map[string]string, 1)
		}
		annotations[AnnotationRegistry] = c.opts.Registry
	}
	labels := model.Labels(svc.Labels)
	if c.opts.Mode == ModeServiceEntry && resolution == networking.ServiceEntry_STATIC && len(se.Endpoints) == 0 && !c.opts.OmitNoEndpointsLabel {
		// istiod (1.29 and before) applies an update of a STATIC ServiceEntry's endpoints
		// alone as an EDS update of the hosts the new endpoints belong to: when none is left,
		// none is updated and proxies keep the last endpoint for good. A label change is a
		// service change, which makes istiod rebuild the service's endpoints (to none) in a
		// full push. See docs/architecture.md, "The last endpoint".
		labels = maps.Clone(labels) // model.Labels may return svc.Labels itself
		if labels == nil {
			labels = make(map[string]string, 1)
		}
		labels[LabelNoEndpoints] = "none"
	}
	seRes := Resource{
		Kind:        KindServiceEntry,
		Namespace:   c.namespace,
		Name:        c.name,
		Labels:      labels,
		Annotations: nilIfEmpty(annotations),
		Spec:        se,
	}
	c.errs.addAll("", validateResourceMeta(&seRes))
	// Every endpoint passed validateWorkload in workloads, or was dropped.
	c.errs.addAll("", validateServiceEntryShape(c.namespace, se))
	out := []Resource{seRes}
	if se.WorkloadSelector != nil {
		out = append(out, c.workloadEntries(workloads)...)
	}
	return out
}

// resolution maps the model's resolution, deciding Auto from the served
// addresses.
func (c *converter) resolution(instances []*model.Instance) (networking.ServiceEntry_Resolution, bool) {
	switch c.svc.Resolution {
	case model.ResolutionAuto:
		for _, inst := range instances {
			a := inst.Address
			// An empty address (a workload behind a network gateway) and
			// a unix socket are only valid with STATIC.
			if a != "" && !isIP(a) && !strings.HasPrefix(a, unixPrefix) {
				return networking.ServiceEntry_DNS, true
			}
		}
		return networking.ServiceEntry_STATIC, true
	case model.ResolutionStatic:
		return networking.ServiceEntry_STATIC, true
	case model.ResolutionDNS:
		return networking.ServiceEntry_DNS, true
	case model.ResolutionNone:
		return networking.ServiceEntry_NONE, true
	}
	c.errs.addf("resolution: unknown model value %d", int(c.svc.Resolution))
	return 0, false
}

// servedInstances picks the instances that receive traffic: the Healthy
// ones, or in panic mode every one that is not Draining. Draining instances
// are never served: they are alive on purpose but must get no new traffic.
func servedInstances(all []model.Instance, thresholdPercent int) []*model.Instance {
	healthy := 0
	for i := range all {
		if all[i].Health == model.Healthy {
			healthy++
		}
	}
	panicMode := thresholdPercent > 0 && len(all) > 0 && healthy*100 < thresholdPercent*len(all)
	out := make([]*model.Instance, 0, len(all))
	for i := range all {
		h := all[i].Health
		if h == model.Healthy || panicMode && h != model.Draining {
			out = append(out, &all[i])
		}
	}
	return out
}

// convertPorts sorts the ports by number and names them. Ties (duplicate
// numbers, which validation rejects) are broken by name and protocol so that
// even the error message does not depend on input order.
func convertPorts(in []model.Port) []port {
	out := make([]port, 0, len(in))
	for _, p := range in {
		protocol := strings.ToUpper(string(p.Protocol))
		if protocol == "" {
			protocol = string(model.ProtocolTCP)
		}
		name := model.DNSLabel(p.Name)
		if name == "" {
			// Sanitised because some protocols (HTTP_PROXY) are not
			// valid in a port name as they are.
			name = model.DNSLabel(protocol + "-" + strconv.FormatUint(uint64(p.Number), 10))
		}
		out = append(out, port{number: p.Number, name: name, protocol: protocol})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.number != b.number {
			return a.number < b.number
		}
		if a.name != b.name {
			return a.name < b.name
		}
		return a.protocol < b.protocol
	})
	return out
}

// convertHosts sanitises, sorts and de-duplicates hosts, dropping any that
// sanitise to nothing. If that leaves none of several, it says which were
// dropped and why, rather than only that a host is required.
func (c *converter) convertHosts(in []string) []string {
	out := make([]string, 0, len(in))
	for _, h := range in {
		if s := model.HostName(h); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 && len(in) > 0 {
		c.errs.addf("hosts: %q left no host name after sanitising: a host must have a letter or digit in each label, and a bare \"*\" (every host) cannot be served by a ServiceEntry", in)
	}
	return sortedUnique(out)
}

// sortedUnique returns a sorted copy of in without duplicates, or nil.
func sortedUnique(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// dedupeExportTo drops repeated entries, keeping the first, where "." and
// the namespace's own name count as the same entry. Order is kept: it is
// the registry's to choose, and validation reports combinations istiod
// refuses.
func dedupeExportTo(namespace string, in []string) []string {
	if len(in) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(in))
	out := make([]string, 0, len(in))
	for _, e := range in {
		key := e
		if e == "." && namespace != "" {
			key = namespace
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, e)
		}
	}
	return out
}

// workloads builds the workload of every served instance, sorted by
// address, then instance ID, then content, so that input order never shows.
// An instance whose workload fails istiod's rules is dropped (c.dropped),
// and weights that overflow a locality are scaled down (c.rescaled).
func (c *converter) workloads(instances []*model.Instance, resolution networking.ServiceEntry_Resolution) []served {
	servicePorts := make(map[string]bool, len(c.ports))
	for _, p := range c.ports {
		servicePorts[p.name] = true
	}
	// The address rule of the ServiceEntry's resolution: in WorkloadEntry
	// mode too, a STATIC ServiceEntry silently leaves out a WorkloadEntry
	// whose address is a host name.
	rule := addrDNS
	if resolution == networking.ServiceEntry_STATIC {
		rule = addrStatic
	}
	out := make([]served, 0, len(instances))
	for _, inst := range instances {
		we := c.workload(inst)
		errs := validateWorkload(we, servicePorts, rule)
		if c.opts.Mode == ModeWorkloadEntry && len(we.Labels) >= maxWorkloadLabels {
			errs = append(errs, fmt.Errorf("labels: %d labels, and its WorkloadEntry needs one more (%s): at most %d are allowed", len(we.Labels), LabelService, maxWorkloadLabels))
		}
		if len(errs) > 0 {
			c.dropped = append(c.dropped, DroppedInstance{ID: inst.ID, Address: inst.Address, Reason: errors.Join(errs...)})
			continue
		}
		out = append(out, served{inst: inst, we: we})
	}
	if len(c.dropped) > 0 {
		slices.SortFunc(c.dropped, func(a, b DroppedInstance) int { return strings.Compare(a.ID, b.ID) })
	}
	c.rescaled = rescaleWeights(out)
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.inst.Address != b.inst.Address {
			return a.inst.Address < b.inst.Address
		}
		if a.inst.ID != b.inst.ID {
			return a.inst.ID < b.inst.ID
		}
		// Only instances sharing address and ID get here (a registry
		// bug, but one that must not make the output order random).
		return bytes.Compare(marshal(a.we), marshal(b.we)) < 0
	})
	return out
}

// workload maps one instance to a WorkloadEntry (an inline endpoint or,
// with the selector label added, a standalone WorkloadEntry).
func (c *converter) workload(inst *model.Instance) *networking.WorkloadEntry {
	we := &networking.WorkloadEntry{
		Address:        inst.Address,
		Labels:         model.Labels(inst.Labels),
		Network:        inst.Network,
		Locality:       inst.Locality,
		Weight:         inst.Weight,
		ServiceAccount: inst.ServiceAccount,
	}
	for _, p := range c.ports {
		// A port the instance serves on the service's own number needs
		// no entry: Istio uses the service port then.
		if target, ok := inst.Ports[p.number]; ok && target != p.number {
			if we.Ports == nil {
				we.Ports = make(map[string]uint32, len(c.ports))
			}
			we.Ports[p.name] = target
		}
	}
	return we
}

// workloadEntries turns the served workloads into WorkloadEntry resources
// selecting the ServiceEntry's workloadSelector, sorted by name.
func (c *converter) workloadEntries(workloads []served) []Resource {
	names := workloadNames(c.name, workloads)
	var annotations map[string]string
	// Without a registry of the options' own (the fleet's pipeline, which serves several), the
	// service names its registries in its annotation, as its ServiceEntry does.
	if registry := cmp.Or(c.opts.Registry, c.svc.Annotations[AnnotationRegistry]); registry != "" {
		annotations = map[string]string{AnnotationRegistry: registry}
	}

	out := make([]Resource, 0, len(workloads))
	specs := make([]*networking.WorkloadEntry, 0, len(workloads))
	byName := make(map[string]*model.Instance, len(workloads))
	for i, w := range workloads {
		name := names[i]
		if other, dup := byName[name]; dup {
			// Instance IDs are unique in a well-formed registry: keep the
			// first (workloads are sorted, so the same one every time).
			c.dropped = append(c.dropped, DroppedInstance{ID: w.inst.ID, Address: w.inst.Address,
				Reason: fmt.Errorf("instance %q also becomes WorkloadEntry %q (instance IDs must be unique)", other.ID, name)})
			continue
		}
		byName[name] = w.inst

		labels := make(map[string]string, len(w.we.Labels)+1)
		for k, v := range w.we.Labels {
			labels[k] = v
		}
		labels[LabelService] = c.name // must win, or the selector misses it
		w.we.Labels = labels

		r := Resource{
			Kind:      KindWorkloadEntry,
			Namespace: c.namespace,
			Name:      name,
			// Metadata labels repeat the spec's so that kubectl-style
			// tools can list a service's WorkloadEntries.
			Labels:      maps.Clone(labels),
			Annotations: maps.Clone(annotations),
			Spec:        w.we,
		}
		prefix := fmt.Sprintf("workloadentry %q (instance %q)", name, w.inst.ID)
		c.errs.addAll(prefix, validateResourceMeta(&r)) // the spec passed validateWorkload in workloads
		out = append(out, r)
		specs = append(specs, w.we)
	}
	c.errs.addAll("workloadentries", validateWeights(specs))
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// workloadNames names each workload's WorkloadEntry "<service>-<sanitised
// instance ID>". Instance IDs that become equal after sanitising all get a
// hash of their raw ID appended, whatever the input order; so do IDs that
// sanitise to nothing or that would make the name too long.
func workloadNames(service string, workloads []served) []string {
	base := make([]string, len(workloads))
	count := make(map[string]int, len(workloads))
	for i, w := range workloads {
		base[i] = workloadName(service, w.inst.ID, false)
		count[base[i]]++
	}
	for i, w := range workloads {
		if count[base[i]] > 1 {
			base[i] = workloadName(service, w.inst.ID, true)
		}
	}
	return base
}

// workloadName builds one WorkloadEntry name, a DNS-1123 subdomain of at
// most 253 bytes. With withHash, or when the sanitised ID is empty or too
// long, the name ends in a hash of the raw ID, keeping as much of the
// sanitised ID as fits so that the name stays readable.
func workloadName(service, id string, withHash bool) string {
	sid := model.Subdomain(id)
	if !withHash && sid != "" && len(service)+1+len(sid) <= model.MaxDNSSubdomain {
		return service + "-" + sid
	}
	hash := model.ShortHash(id)
	if room := model.MaxDNSSubdomain - len(service) - 1 - len(hash) - 1; len(sid) > room {
		sid = strings.TrimFunc(sid[:room], func(r rune) bool { return !isAlnum(r) })
	}
	if sid == "" {
		return service + "-" + hash
	}
	return service + "-" + sid + "-" + hash
}

// marshal is deterministic proto marshalling, the form resources are
// hashed and compared in.
func marshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		// Only invalid UTF-8 in a string field fails, and then the
		// resource could not be served anyway; an empty key still sorts
		// deterministically.
		return nil
	}
	return b
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}
