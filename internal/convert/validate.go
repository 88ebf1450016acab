package convert

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/model"
)

// Validation re-implements the rules istiod applies to ServiceEntry and
// WorkloadEntry (istio/istio pkg/config/validation: ValidateServiceEntry,
// validateWorkloadEntry, validateExportTo, ValidateAlphaWorkloadSelector and
// the helpers in pkg/config/validation/agent and pkg/config/labels).
//
// It matters because istiod never NACKs what an MCP source sends: it drops an
// invalid resource with a log line, so the only place a bad resource can be
// reported with its reasons is here, before it is served. Importing istiod's
// own package is not an option: it drags in most of Kubernetes.
//
// Differences from istiod, all stricter and all deliberate:
//   - Some istiod warnings are errors here, because Galleon never wants what
//     they describe: partial wildcard hosts ("*foo.com"), a workloadSelector
//     without labels (it would select every workload in the namespace).
//   - A ServiceEntry needs at least one port (istiod accepts none, which
//     serves nothing).
//   - workloadSelector labels must have label syntax (istiod only refuses
//     empty keys and '*'): a selector that no valid label matches selects
//     nothing.
//   - The CRD schema's per-field limits are enforced too (list sizes, string
//     lengths, label value length), so that a served resource is also valid
//     as a Kubernetes object. The schema's cap of 4096 endpoints is not: over
//     MCP istiod takes more, and WorkloadEntry mode exists for large services.
//   - Envoy rejects a locality whose endpoint weights add up to more than
//     2^32-1; istiod does not check that, so it is checked here.
//   - Messages name the field and the value, and map entries are checked in
//     sorted order so that the same resource always gives the same message.
//
// Warnings istiod prints but does not act on (TCP ports without addresses,
// several hosts with an address and a TCP port under DNS resolution) are not
// reported.

const (
	// unixPrefix marks a Unix domain socket address, valid only for
	// STATIC resolution.
	unixPrefix = "unix://"

	// Limits from the ServiceEntry and WorkloadEntry CRD schemas.
	maxHosts          = 256
	maxAddresses      = 256
	maxAddressLen     = 64
	maxPorts          = 256
	maxWorkloadPorts  = 128
	maxWorkloadLabels = 256
	maxWorkloadAddr   = 256
	maxNetworkLen     = 2048
	maxLocalityLen    = 2048
	maxServiceAccount = 253
	maxDomainLen      = 255
)

// errorList collects reasons; nil and empty mean valid.
type errorList []error

func (l *errorList) addf(format string, args ...any) {
	*l = append(*l, fmt.Errorf(format, args...))
}

// addAll adds every reason in more, each prefixed with prefix (no prefix
// when it is empty).
func (l *errorList) addAll(prefix string, more []error) {
	for _, err := range more {
		if prefix != "" {
			err = fmt.Errorf("%s: %w", prefix, err)
		}
		*l = append(*l, err)
	}
}

// ValidateServiceEntry checks se with istiod's rules (see the package
// comment on validation above). It returns nil when se is valid, otherwise
// an error joining every reason found (errors.Join), each naming the field
// and the value at fault.
//
// The resource's namespace is not known here, so "." and the namespace's own
// name in exportTo are not detected as duplicates; Validate and Convert,
// which know it, do detect them.
func ValidateServiceEntry(se *networking.ServiceEntry) error {
	return errors.Join(validateServiceEntry("", se)...)
}

// ValidateWorkloadEntry checks a standalone WorkloadEntry with istiod's rules:
// address required (an IP, a host name or unix://path), valid port names and
// numbers, valid labels. Without the ServiceEntry that selects it, port names
// cannot be checked against the service's ports; Convert does that.
func ValidateWorkloadEntry(we *networking.WorkloadEntry) error {
	if we == nil {
		return errors.New("workload entry is nil")
	}
	return errors.Join(validateWorkload(we, nil, addrAny)...)
}

// validateServiceEntry returns every reason se is invalid. namespace is the
// resource's namespace, used to spot "." and the namespace in exportTo as
// duplicates; it may be empty when unknown.
func validateServiceEntry(namespace string, se *networking.ServiceEntry) []error {
	return validateServiceEntryWith(namespace, se, true)
}

// validateServiceEntryShape is validateServiceEntry for a ServiceEntry whose
// endpoints were each checked with validateWorkload already (Convert checks
// and drops them one by one): it checks how many there are and their
// weights, not each one again.
func validateServiceEntryShape(namespace string, se *networking.ServiceEntry) []error {
	return validateServiceEntryWith(namespace, se, false)
}

func validateServiceEntryWith(namespace string, se *networking.ServiceEntry, endpoints bool) []error {
	if se == nil {
		return []error{errors.New("service entry is nil")}
	}
	var errs errorList

	if ws := se.WorkloadSelector; ws != nil {
		errs.addAll("workloadSelector", validateSelector(ws.Labels))
		if se.Endpoints != nil {
			// istiod tests the slice for nil, not for length, so an
			// empty non-nil list is refused too.
			errs.addf("endpoints and workloadSelector are both set: only one is allowed")
		}
	}

	validateHosts(&errs, se)
	validateAddresses(&errs, se)
	servicePorts := validatePorts(&errs, se)
	validateResolution(&errs, se, servicePorts, endpoints)

	// Envoy cannot tell hosts apart on a plain TCP port, so several hosts
	// need every port to be HTTP or TLS (whose Host header or SNI names the
	// host) unless resolution is NONE, where hosts are ignored.
	if se.Resolution != networking.ServiceEntry_NONE && len(se.Hosts) > 1 {
		for i, p := range se.Ports {
			if p == nil {
				continue
			}
			if pr := parseProtocol(p.Protocol); !isHTTPProtocol(pr) && !isTLSProtocol(pr) {
				errs.addf("ports[%d]: protocol %q cannot serve %d hosts: several hosts need HTTP or TLS ports (Envoy cannot tell hosts apart on plain TCP)",
					i, p.Protocol, len(se.Hosts))
				break
			}
		}
	}

	errs.addAll("", validateExportTo(namespace, se.ExportTo))
	errs.addAll("", validateWeights(se.Endpoints))
	for i, san := range se.SubjectAltNames {
		if !utf8.ValidString(san) {
			errs.addf("subjectAltNames[%d]: %q is not valid UTF-8", i, san)
		}
	}
	return errs
}

func validateHosts(errs *errorList, se *networking.ServiceEntry) {
	if len(se.Hosts) == 0 {
		errs.addf("hosts: at least one host is required")
	}
	if len(se.Hosts) > maxHosts {
		errs.addf("hosts: %d hosts, at most %d are allowed", len(se.Hosts), maxHosts)
	}
	for i, h := range se.Hosts {
		if h == "*" {
			errs.addf("hosts[%d]: %q: the full wildcard is not allowed", i, h)
			continue
		}
		if err := validateWildcardDomain(h); err != nil {
			errs.addf("hosts[%d]: %v", i, err)
			continue
		}
		// istiod only warns about partial wildcards; they match nothing
		// useful, so Galleon refuses them.
		if se.Resolution != networking.ServiceEntry_DYNAMIC_DNS &&
			strings.Contains(h, "*") && !strings.HasPrefix(h, "*.") {
			errs.addf("hosts[%d]: partial wildcard %q is not allowed (only a leading \"*.\")", i, h)
		}
	}
}

func validateAddresses(errs *errorList, se *networking.ServiceEntry) {
	if len(se.Addresses) > maxAddresses {
		errs.addf("addresses: %d addresses, at most %d are allowed", len(se.Addresses), maxAddresses)
	}
	cidr := false
	for i, a := range se.Addresses {
		cidr = cidr || strings.Contains(a, "/")
		if len(a) > maxAddressLen {
			errs.addf("addresses[%d]: %q is longer than %d bytes", i, a, maxAddressLen)
		}
		if err := validateIPSubnet(a); err != nil {
			errs.addf("addresses[%d]: %v", i, err)
		}
	}
	if cidr && se.Resolution != networking.ServiceEntry_NONE && se.Resolution != networking.ServiceEntry_STATIC {
		errs.addf("addresses: CIDR addresses are allowed only with resolution NONE or STATIC, not %s", se.Resolution)
	}
}

// validatePorts checks the service ports and returns the set of their
// names, which endpoint port maps must draw from.
func validatePorts(errs *errorList, se *networking.ServiceEntry) map[string]bool {
	if len(se.Ports) == 0 {
		errs.addf("ports: at least one port is required")
	}
	if len(se.Ports) > maxPorts {
		errs.addf("ports: %d ports, at most %d are allowed", len(se.Ports), maxPorts)
	}
	names := make(map[string]bool, len(se.Ports))
	numbers := make(map[uint32]bool, len(se.Ports))
	for i, p := range se.Ports {
		if p == nil {
			errs.addf("ports[%d]: is null", i)
			continue
		}
		if names[p.Name] {
			errs.addf("ports[%d]: name %q is used twice", i, p.Name)
		}
		names[p.Name] = true
		if numbers[p.Number] {
			errs.addf("ports[%d]: number %d is used twice", i, p.Number)
		}
		numbers[p.Number] = true
		if !model.IsDNSLabel(p.Name) {
			errs.addf("ports[%d]: name %q is not a valid port name (a DNS-1123 label: [a-zA-Z0-9-], at most 63, alphanumeric at both ends)", i, p.Name)
		}
		if p.Protocol != "" && parseProtocol(p.Protocol) == "" {
			errs.addf("ports[%d]: protocol %q is not one of Istio's (%s)", i, p.Protocol, strings.Join(istioProtocols, ", "))
		}
		if !validPort(p.Number) {
			errs.addf("ports[%d]: number %d is not in 1..65535", i, p.Number)
		}
		if p.TargetPort != 0 && !validPort(p.TargetPort) {
			errs.addf("ports[%d]: targetPort %d is not in 1..65535", i, p.TargetPort)
		}
	}
	return names
}

// validateResolution applies the rules that depend on the resolution mode,
// most of them about endpoints.
func validateResolution(errs *errorList, se *networking.ServiceEntry, servicePorts map[string]bool, endpoints bool) {
	switch se.Resolution {
	case networking.ServiceEntry_NONE:
		if len(se.Endpoints) != 0 {
			errs.addf("endpoints: resolution NONE passes traffic to the original destination, so no endpoints may be given (got %d)", len(se.Endpoints))
		}
	case networking.ServiceEntry_STATIC:
		for i, ep := range se.Endpoints {
			if !endpoints {
				break
			}
			if ep == nil {
				errs.addf("endpoints[%d]: is null", i)
				continue
			}
			if werrs := validateWorkload(ep, servicePorts, addrStatic); len(werrs) > 0 {
				errs.addAll(endpointPrefix(i, ep), werrs) // formatted only when needed: one per endpoint was a tenth of a flush
			}
		}
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		if len(se.Endpoints) == 0 {
			// Without endpoints Envoy resolves the hosts themselves,
			// which a wildcard cannot be.
			for i, h := range se.Hosts {
				if err := validateFQDN(h); err != nil {
					errs.addf("hosts[%d]: resolution %s without endpoints resolves the hosts, so they must be plain host names: %v", i, se.Resolution, err)
					break
				}
			}
		}
		if se.Resolution == networking.ServiceEntry_DNS_ROUND_ROBIN && len(se.Endpoints) > 1 {
			errs.addf("endpoints: resolution %s allows at most 1 endpoint, got %d", se.Resolution, len(se.Endpoints))
		}
		for i, ep := range se.Endpoints {
			if !endpoints {
				break
			}
			if ep == nil {
				errs.addf("endpoints[%d]: is null", i)
				continue
			}
			if werrs := validateWorkload(ep, servicePorts, addrDNS); len(werrs) > 0 {
				errs.addAll(endpointPrefix(i, ep), werrs) // formatted only when needed: one per endpoint was a tenth of a flush
			}
		}
	case networking.ServiceEntry_DYNAMIC_DNS:
		for i, h := range se.Hosts {
			if !strings.HasPrefix(h, "*") {
				errs.addf("hosts[%d]: %q must be a wildcard for resolution %s", i, h, se.Resolution)
			}
		}
		if len(se.Addresses) != 0 {
			errs.addf("addresses: must be empty for resolution %s", se.Resolution)
		}
		if len(se.Endpoints) != 0 {
			errs.addf("endpoints: must be empty for resolution %s", se.Resolution)
		}
		for i, p := range se.Ports {
			if p == nil {
				continue
			}
			if pr := parseProtocol(p.Protocol); pr != "HTTP" && pr != "TLS" {
				errs.addf("ports[%d]: protocol %q: only HTTP and TLS are supported for resolution %s", i, p.Protocol, se.Resolution)
			}
		}
		if se.Location != networking.ServiceEntry_MESH_EXTERNAL {
			errs.addf("location: must be MESH_EXTERNAL for resolution %s", se.Resolution)
		}
	default:
		errs.addf("resolution: unsupported value %d", int32(se.Resolution))
	}
}

func endpointPrefix(i int, ep *networking.WorkloadEntry) string {
	return fmt.Sprintf("endpoints[%d] (address %q)", i, ep.Address)
}

// addrRule says which workload addresses are acceptable.
type addrRule int

const (
	// addrAny: a standalone WorkloadEntry, which may be selected by a
	// STATIC or a DNS ServiceEntry: IP, host name or unix://.
	addrAny addrRule = iota
	// addrStatic: an endpoint of a STATIC ServiceEntry: IP or unix://.
	addrStatic
	// addrDNS: an endpoint of a DNS ServiceEntry: IP or host name.
	addrDNS
)

// validateWorkload checks a WorkloadEntry, standalone or inline as a
// ServiceEntry endpoint. servicePorts, when not nil, are the port names of
// the ServiceEntry it belongs to.
func validateWorkload(we *networking.WorkloadEntry, servicePorts map[string]bool, rule addrRule) []error {
	var errs errorList
	addr := we.Address
	unix := false
	if len(addr) > maxWorkloadAddr {
		errs.addf("address %q is longer than %d bytes", addr, maxWorkloadAddr)
	}
	switch {
	case rule == addrDNS:
		if !isIP(addr) && validateFQDN(addr) != nil {
			errs.addf("address %q is not an IP address or a valid host name (resolution DNS)", addr)
		}
	case addr == "":
		// An empty address is istiod's way of naming a workload behind
		// a network gateway: it is valid only with a network.
		if we.Network == "" {
			errs.addf("address is required (it may be empty only when network is set)")
		}
	case strings.HasPrefix(addr, unixPrefix):
		unix = true
		if err := validateUnixAddress(strings.TrimPrefix(addr, unixPrefix)); err != nil {
			errs.addf("address %q: %v", addr, err)
		}
		if len(we.Ports) != 0 {
			errs.addf("address %q is a unix socket, which must not have ports", addr)
		}
	case isIP(addr):
	case rule == addrStatic:
		errs.addf("address %q is not an IP address or unix:// path (resolution STATIC)", addr)
	default:
		if validateFQDN(addr) != nil {
			errs.addf("address %q is not an IP address, a valid host name or a unix:// path", addr)
		}
	}
	if unix && servicePorts != nil && len(servicePorts) != 1 {
		errs.addf("address %q is a unix socket, which needs exactly 1 service port, not %d", addr, len(servicePorts))
	}

	if len(we.Ports) > maxWorkloadPorts {
		errs.addf("ports: %d ports, at most %d are allowed", len(we.Ports), maxWorkloadPorts)
	}
	for _, name := range sortedKeys(we.Ports) {
		port := we.Ports[name]
		if servicePorts != nil && !servicePorts[name] {
			errs.addf("port %q is not a port of the service entry", name)
		}
		if !model.IsDNSLabel(name) {
			errs.addf("port %q: the name is not a valid port name (a DNS-1123 label)", name)
		}
		if !validPort(port) {
			errs.addf("port %q: target port %d is not in 1..65535", name, port)
		}
	}

	if len(we.Labels) > maxWorkloadLabels {
		errs.addf("labels: %d labels, at most %d are allowed", len(we.Labels), maxWorkloadLabels)
	}
	errs.addAll("", validateLabels(we.Labels))
	if len(we.Network) > maxNetworkLen {
		errs.addf("network: longer than %d bytes", maxNetworkLen)
	}
	if len(we.Locality) > maxLocalityLen {
		errs.addf("locality: longer than %d bytes", maxLocalityLen)
	}
	if len(we.ServiceAccount) > maxServiceAccount {
		errs.addf("serviceAccount %q: longer than %d bytes", we.ServiceAccount, maxServiceAccount)
	}
	// Proto3 strings must be UTF-8 or the resource cannot be marshalled;
	// these fields are free text that no other rule looks at.
	for _, f := range [...]struct{ name, value string }{
		{"network", we.Network}, {"locality", we.Locality}, {"serviceAccount", we.ServiceAccount},
	} {
		if !utf8.ValidString(f.value) {
			errs.addf("%s %q is not valid UTF-8", f.name, f.value)
		}
	}
	return errs
}

// validateWeights checks Envoy's rule that the load-balancing weights of the
// endpoints of one locality add up to at most 2^32-1; istiod does not check
// it and Envoy would reject the whole cluster. Weight 0 counts as 1, the
// weight istiod sends for it.
func validateWeights(endpoints []*networking.WorkloadEntry) []error {
	sums := map[string]uint64{}
	for _, ep := range endpoints {
		if ep == nil {
			continue
		}
		sums[ep.Locality] += uint64(max(ep.Weight, 1))
	}
	var errs errorList
	for _, loc := range sortedKeys(sums) {
		if sums[loc] > math.MaxUint32 {
			errs.addf("endpoints: weights in locality %q add up to %d, more than Envoy's limit of %d", loc, sums[loc], uint64(math.MaxUint32))
		}
	}
	return errs
}

// rescaleWeights scales down, in proportion, the weights of the endpoints of
// each locality whose weights add up to more than Envoy accepts
// (validateWeights), keeping each at least 1, and returns those localities,
// sorted. The ratios between instances, which are what weights mean, stay
// as close as integers allow.
func rescaleWeights(workloads []served) []string {
	sums := map[string]uint64{}
	for _, w := range workloads {
		sums[w.we.Locality] += uint64(max(w.we.Weight, 1))
	}
	var over []string
	for loc, sum := range sums {
		if sum > math.MaxUint32 {
			over = append(over, loc)
		}
	}
	if len(over) == 0 {
		return nil
	}
	slices.Sort(over)
	for _, loc := range over {
		sum, n := sums[loc], uint64(0)
		for _, w := range workloads {
			if w.we.Locality == loc {
				n++
			}
		}
		// Each weight w becomes max(1, w*(budget>>16)/(sum>>16)), in 64 bits
		// without overflow. Those add up to at most budget plus 2^16 (the
		// error of sum>>16), and raising weights to 1 adds at most n: hence
		// a budget of MaxUint32 - n - 2^17.
		budget := uint64(math.MaxUint32) - n - 1<<17
		for _, w := range workloads {
			if w.we.Locality != loc {
				continue
			}
			scaled := uint64(max(w.we.Weight, 1)) * (budget >> 16) / (sum >> 16)
			w.we.Weight = uint32(max(min(scaled, math.MaxUint32), 1))
		}
	}
	return over
}

// validateSelector checks workloadSelector labels as istiod does (no empty
// key, no '*'), plus label syntax, and refuses an empty selector, which
// istiod only warns about although it selects every workload in the
// namespace.
func validateSelector(labels map[string]string) []error {
	var errs errorList
	if len(labels) == 0 {
		errs.addf("no labels: it would select every workload in the namespace")
	}
	for _, k := range sortedKeys(labels) {
		v := labels[k]
		if k == "" {
			errs.addf("empty label key (value %q)", v)
			continue
		}
		if strings.Contains(k, "*") || strings.Contains(v, "*") {
			errs.addf("label %q=%q: wildcards are not supported in a selector", k, v)
		}
	}
	errs.addAll("", validateLabels(labels))
	return errs
}

// validateLabels checks Kubernetes label syntax as istiod does
// (pkg/config/labels.Instance.Validate), plus Kubernetes' limit of 63 bytes
// on values.
func validateLabels(labels map[string]string) []error {
	var errs errorList
	for _, k := range sortedKeys(labels) {
		v := labels[k]
		if err := validateLabelKey(k); err != nil {
			errs.addf("label %q: %v", k, err)
		}
		if v != "" && !model.IsQualifiedName(v) {
			errs.addf("label %q: value %q is not valid ([A-Za-z0-9._-], alphanumeric at both ends)", k, v)
		} else if len(v) > model.MaxLabelValue {
			errs.addf("label %q: value %q is longer than %d bytes", k, v, model.MaxLabelValue)
		}
	}
	return errs
}

// validateExportTo applies istiod's exportTo rules for a ServiceEntry: no
// duplicates ("." counts as the namespace itself), each entry ".", "*", "~"
// or a DNS-1123 namespace name, "*" and "~" only alone.
func validateExportTo(namespace string, exportTo []string) []error {
	var errs errorList
	seen := make(map[string]bool, len(exportTo))
	for i, e := range exportTo {
		key := e
		if e == "." && namespace != "" {
			key = namespace
		}
		if seen[key] {
			if namespace != "" && key == namespace {
				errs.addf("exportTo[%d]: %q is listed twice (\".\" stands for the resource's namespace %q)", i, e, namespace)
			} else {
				errs.addf("exportTo[%d]: %q is listed twice", i, e)
			}
			continue
		}
		if e != "." && e != "*" && e != "~" && !model.IsDNSLabel(e) {
			errs.addf("exportTo[%d]: %q is not \".\", \"*\", \"~\" or a namespace name (DNS-1123 label)", i, e)
			continue
		}
		seen[key] = true
	}
	if len(exportTo) > 1 {
		if seen["*"] {
			errs.addf("exportTo: \"*\" (everyone) cannot be combined with other entries")
		}
		if seen["~"] {
			errs.addf("exportTo: \"~\" (no one) cannot be combined with other entries")
		}
	}
	return errs
}

// validateResourceMeta checks a resource's Kubernetes-style metadata, which
// istiod keys its store by and which a CRD would need.
func validateResourceMeta(r *Resource) []error {
	var errs errorList
	if !model.IsDNSLabel(r.Namespace) || strings.ToLower(r.Namespace) != r.Namespace {
		errs.addf("namespace %q is not a DNS-1123 label (lower case [a-z0-9-], at most 63)", r.Namespace)
	}
	if !model.IsDNSSubdomain(r.Name) {
		errs.addf("name %q is not a DNS-1123 subdomain (lower case [a-z0-9.-], at most 253)", r.Name)
	}
	errs.addAll("metadata", validateLabels(r.Labels))
	for _, k := range sortedKeys(r.Annotations) {
		if err := validateLabelKey(k); err != nil {
			errs.addf("metadata: annotation %q: %v", k, err)
		}
		if v := r.Annotations[k]; !utf8.ValidString(v) {
			errs.addf("metadata: annotation %q: value %q is not valid UTF-8", k, v)
		}
	}
	return errs
}

// Validate checks a whole resource: its metadata (namespace, name, labels,
// annotation keys) and its spec, which must match its Kind. It is what
// Convert applies to everything it returns, exported for resources built or
// changed elsewhere. A WorkloadEntry is checked standalone, as
// ValidateWorkloadEntry does.
func Validate(r Resource) error {
	errs := errorList(validateResourceMeta(&r))
	switch r.Kind {
	case KindServiceEntry:
		se, ok := r.Spec.(*networking.ServiceEntry)
		if !ok {
			errs.addf("spec is %T, not a ServiceEntry", r.Spec)
			break
		}
		errs.addAll("", validateServiceEntry(r.Namespace, se))
	case KindWorkloadEntry:
		we, ok := r.Spec.(*networking.WorkloadEntry)
		if !ok || we == nil {
			errs.addf("spec is %T, not a WorkloadEntry", r.Spec)
			break
		}
		errs.addAll("", validateWorkload(we, nil, addrAny))
	default:
		errs.addf("unknown kind %d", int(r.Kind))
	}
	return errors.Join(errs...)
}

// --- syntax helpers, mirroring istio/istio pkg/config/labels and
// pkg/config/validation/agent; byte loops instead of regexps because they
// run for every label of every endpoint.

func validPort(p uint32) bool { return p >= 1 && p <= 65535 }

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// isWildcardDNS1123Label matches istiod's first-label rule for hosts: "*",
// or a label optionally prefixed with "*" or "*-".
func isWildcardDNS1123Label(s string) bool {
	if len(s) > model.MaxDNSLabel {
		return false
	}
	switch {
	case s == "*":
		return true
	case strings.HasPrefix(s, "*-") && model.IsDNSLabel(s[2:]):
		return true
	case strings.HasPrefix(s, "*"):
		return model.IsDNSLabel(s[1:])
	}
	return model.IsDNSLabel(s)
}

// validateLabelKey checks an optional DNS prefix (at most 253 bytes) and
// "/", then a qualified name of at most 63 bytes.
func validateLabelKey(k string) error {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name = k
	}
	if hasPrefix {
		if len(prefix) > model.MaxDNSSubdomain {
			return fmt.Errorf("key prefix is longer than %d bytes", model.MaxDNSSubdomain)
		}
		for _, l := range strings.Split(prefix, ".") {
			if !model.IsDNSLabel(l) {
				return errors.New("key prefix is not a DNS subdomain")
			}
		}
	}
	if !model.IsQualifiedName(name) {
		return errors.New("key name is not valid ([A-Za-z0-9._-], alphanumeric at both ends, optionally after a DNS prefix and \"/\")")
	}
	if len(name) > model.MaxDNSLabel {
		return fmt.Errorf("key name is longer than %d bytes", model.MaxDNSLabel)
	}
	return nil
}

// validateDNS1123Labels is istiod's check of the labels of a domain: each a
// DNS-1123 label, the top-level one not all digits (which would make an IP
// address a host name), a trailing dot allowed.
// domain is the whole host name, for messages; labels the part to check.
func validateDNS1123Labels(domain, labels string) error {
	parts := strings.Split(labels, ".")
	if tld := parts[len(parts)-1]; tld != "" {
		if _, err := strconv.Atoi(tld); err == nil {
			return fmt.Errorf("%q is not a valid host name: the top-level label %q is all digits", domain, tld)
		}
	}
	for i, l := range parts {
		if i == len(parts)-1 && l == "" {
			return nil
		}
		if !model.IsDNSLabel(l) {
			return fmt.Errorf("%q is not a valid host name: label %q is not a DNS-1123 label", domain, l)
		}
	}
	return nil
}

func checkDomainLength(domain string) error {
	if len(domain) > maxDomainLen {
		return fmt.Errorf("%q is longer than %d bytes", domain, maxDomainLen)
	}
	if domain == "" {
		return errors.New("empty host name")
	}
	return nil
}

// validateFQDN is istiod's agent.ValidateFQDN: a plain host name.
func validateFQDN(domain string) error {
	if err := checkDomainLength(domain); err != nil {
		return err
	}
	return validateDNS1123Labels(domain, domain)
}

// validateWildcardDomain is istiod's agent.ValidateWildcardDomain: a host
// name whose first label may be a wildcard.
func validateWildcardDomain(domain string) error {
	if err := checkDomainLength(domain); err != nil {
		return err
	}
	first, rest, hasRest := strings.Cut(domain, ".")
	if !isWildcardDNS1123Label(first) {
		return fmt.Errorf("%q is not a valid host name: label %q is not a DNS-1123 label", domain, first)
	}
	if hasRest {
		return validateDNS1123Labels(domain, rest)
	}
	return nil
}

// validateIPSubnet is istiod's agent.ValidateIPSubnet: an IP or a CIDR.
func validateIPSubnet(s string) error {
	if strings.Count(s, "/") == 1 {
		if _, err := netip.ParsePrefix(s); err != nil {
			return fmt.Errorf("%q is not a valid CIDR block", s)
		}
		return nil
	}
	if !isIP(s) {
		return fmt.Errorf("%q is not a valid IP address", s)
	}
	return nil
}

// validateUnixAddress is istiod's ValidateUnixAddress: an absolute file path
// or an abstract socket name starting with '@'.
func validateUnixAddress(addr string) error {
	switch {
	case addr == "":
		return errors.New("unix socket path is empty")
	case strings.HasPrefix(addr, "@"):
		return nil
	case !path.IsAbs(addr) || strings.HasSuffix(addr, "/"):
		return fmt.Errorf("%q is not an absolute path to a file", addr)
	}
	return nil
}

// istioProtocols are the port protocols istiod accepts (case-insensitively,
// pkg/config/protocol.Parse), in the spelling used in messages.
var istioProtocols = []string{"HTTP", "HTTPS", "HTTP2", "HTTP_PROXY", "GRPC", "GRPC-WEB", "TCP", "TLS", "UDP", "MONGO", "MYSQL", "REDIS"}

// parseProtocol returns the protocol in upper case, or "" when istiod does
// not know it.
func parseProtocol(p string) string {
	up := strings.ToUpper(p)
	for _, known := range istioProtocols {
		if up == known {
			return up
		}
	}
	return ""
}

// isHTTPProtocol and isTLSProtocol mirror protocol.Instance.IsHTTP / IsTLS.
func isHTTPProtocol(p string) bool {
	switch p {
	case "HTTP", "HTTP2", "HTTP_PROXY", "GRPC", "GRPC-WEB":
		return true
	}
	return false
}

func isTLSProtocol(p string) bool { return p == "HTTPS" || p == "TLS" }

// sortedKeys returns m's keys in order, so that checks and messages over a
// map come out the same every time.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// isAlnum says whether r is an ASCII letter or digit.
func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}
