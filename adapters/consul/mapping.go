package consul

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/hashicorp/consul/api"

	"github.com/galleon-mesh/galleon/model"
)

// Meta keys and tags the mapping reads (documented in
// docs/adapters/consul.md).
const (
	metaProtocol = "protocol"
	metaExternal = "external"
)

// Consul's maintenance-mode check IDs: an instance in maintenance is
// alive on purpose and must get no new traffic (model.Draining).
const (
	nodeMaintenance    = "_node_maintenance"
	serviceMaintenance = "_service_maintenance:"
)

// protocolNamed maps a lower-case protocol name, as users write it in meta
// or tags, to Istio's.
func protocolNamed(name string) (model.Protocol, bool) {
	switch name {
	case "http":
		return model.ProtocolHTTP, true
	case "https":
		return model.ProtocolHTTPS, true
	case "http2":
		return model.ProtocolHTTP2, true
	case "grpc":
		return model.ProtocolGRPC, true
	case "tcp":
		return model.ProtocolTCP, true
	case "tls":
		return model.ProtocolTLS, true
	case "mongo":
		return model.ProtocolMongo, true
	case "mysql":
		return model.ProtocolMySQL, true
	case "redis":
		return model.ProtocolRedis, true
	case "udp":
		return model.ProtocolUDP, true
	}
	return "", false
}

// mapper turns what Consul returns for one service in one datacenter into
// the part of a model.Service it contributes. It is a pure function of its
// configuration and input.
type mapper struct {
	cfg         Config
	host        *template.Template
	hostPerDC   bool
	wantWarning bool
}

func newMapper(cfg Config) (*mapper, error) {
	t, err := parseHostTemplate(cfg.HostTemplate)
	if err != nil {
		return nil, err
	}
	return &mapper{cfg: cfg, host: t, hostPerDC: perDatacenterHosts(t), wantWarning: cfg.IncludeWarning}, nil
}

// part is one datacenter's contribution to a service.
type part struct {
	key        model.ServiceKey
	dc         string
	consulName string
	host       string
	external   bool
	exportTo   []string
	ports      []model.Port     // sorted by number
	instances  []model.Instance // sorted by ID
}

// rejection is a malformed record of a service: an instance, or the whole
// service (instance ""). err carries the reason it is counted under (see
// malformed).
type rejection struct {
	record string
	err    error
}

// recordName names an instance record the way an operator finds it in
// Consul; with id == "" it names the service.
func recordName(dc, service, id, node string) string {
	if id == "" {
		return fmt.Sprintf("consul service %s/%s", dc, service)
	}
	return fmt.Sprintf("consul service %s/%s instance %s on node %s", dc, service, id, node)
}

// mapService maps the entries of service name in datacenter dc (all
// instances, healthy or not, as /v1/health/service/<name> returns them).
// It returns nil when nothing of the service can be served (no entries, a
// non-typical kind, every instance malformed) and the rejected records.
func (m *mapper) mapService(dc, name string, entries []*api.ServiceEntry) (*part, []rejection) {
	if len(entries) == 0 {
		return nil, nil
	}
	// Sidecar proxies, gateways and the like are Consul Connect plumbing,
	// not services a mesh client calls.
	for _, e := range entries {
		if e.Service != nil && e.Service.Kind != api.ServiceKindTypical {
			return nil, nil
		}
	}
	svcName, host, err := m.names(dc, name, entries)
	if err != nil {
		return nil, []rejection{{recordName(dc, name, "", ""), err}}
	}
	p := &part{dc: dc, consulName: name, host: host}
	rejected := m.mapInstances(p, entries)
	if len(p.instances) == 0 {
		return nil, rejected
	}
	namespace, exportTo, external := m.serviceSettings(dc, p.instances, entries)
	p.key = model.ServiceKey{Namespace: namespace, Name: svcName}
	p.external = external
	p.exportTo = slices.Clone(exportTo)
	return p, rejected
}

// names returns the ServiceEntry's name and host for service name in dc,
// or the rejection of the whole service.
func (m *mapper) names(dc, name string, entries []*api.ServiceEntry) (svcName, host string, err error) {
	svcName = model.DNSLabel(name)
	if svcName == "" {
		return "", "", malformedf(reasonName, "service name %q has nothing left after sanitising to a DNS-1123 label", name)
	}
	if m.hostPerDC {
		svcName = model.DNSLabel(svcName + "-" + dc)
	}
	consulNS, partition := m.cfg.ConsulNamespace, m.cfg.Partition
	if s := entries[0].Service; s != nil {
		if s.Namespace != "" {
			consulNS = s.Namespace
		}
		if s.Partition != "" {
			partition = s.Partition
		}
	}
	var b bytes.Buffer
	if err := m.host.Execute(&b, newHostData(name, dc, consulNS, partition)); err != nil {
		// Counted as other: what fails may be the template as much as
		// the record it renders.
		return "", "", malformedf(reasonOther, "--%s: %w", flagHostTemplate, err)
	}
	host = model.HostName(b.String())
	if host == "" {
		return "", "", malformedf(reasonName, "--%s renders %q, which is not a host name", flagHostTemplate, b.String())
	}
	return svcName, host, nil
}

// mapInstances maps every entry into p's instances (sorted by ID) and
// ports (sorted by number), and returns the entries rejected.
func (m *mapper) mapInstances(p *part, entries []*api.ServiceEntry) []rejection {
	var rejected []rejection
	protoByPort := map[uint32]model.Protocol{}
	protoFrom := map[uint32]string{} // port -> ID of the instance that chose its protocol
	for _, e := range entries {
		inst, port, proto, err := m.mapInstance(p.dc, e)
		if err != nil {
			node, id := "", ""
			if e.Node != nil {
				node = e.Node.Node
			}
			if e.Service != nil {
				id = e.Service.ID
			}
			rejected = append(rejected, rejection{recordName(p.dc, p.consulName, id, node), err})
			continue
		}
		p.instances = append(p.instances, inst)
		// The protocol of a port shared by instances that disagree comes
		// from the instance with the smallest ID: deterministic whatever
		// the order Consul lists them in.
		if prev, ok := protoFrom[port]; !ok || inst.ID < prev {
			protoFrom[port] = inst.ID
			protoByPort[port] = proto
		}
	}
	slices.SortFunc(p.instances, func(a, b model.Instance) int { return strings.Compare(a.ID, b.ID) })
	for port, proto := range protoByPort {
		p.ports = append(p.ports, model.Port{Number: port, Protocol: proto})
	}
	p.ports = model.SortedPorts(p.ports)
	return rejected
}

// serviceSettings reads the service-wide settings instance meta carries
// (namespace, exportTo, external) over the mapped instances, sorted by ID:
// each comes from the smallest instance ID that has it, deterministic
// whatever the order Consul lists them in.
func (m *mapper) serviceSettings(dc string, instances []model.Instance, entries []*api.ServiceEntry) (namespace string, exportTo []string, external bool) {
	namespace, exportTo = m.cfg.Namespace, m.cfg.ExportTo
	var nsFound, exportFound bool
	byID := make(map[string]*api.ServiceEntry, len(entries))
	for _, e := range entries {
		if e.Service != nil && e.Node != nil {
			byID[instanceID(dc, e.Node.Node, e.Service.ID)] = e
		}
	}
	for _, inst := range instances {
		meta := byID[inst.ID].Service.Meta
		if v := meta[m.cfg.NamespaceMetaKey]; m.cfg.NamespaceMetaKey != "" && v != "" && !nsFound {
			if ns := model.DNSLabel(v); ns != "" {
				namespace, nsFound = ns, true
			}
		}
		if v, ok := meta[m.cfg.ExportToMetaKey]; m.cfg.ExportToMetaKey != "" && ok && !exportFound {
			exportTo, exportFound = splitList(v), true
		}
		if ext, err := strconv.ParseBool(strings.TrimSpace(meta[metaExternal])); err == nil && ext {
			external = true
		}
	}
	return namespace, exportTo, external
}

func instanceID(dc, node, serviceID string) string { return dc + "/" + node + "/" + serviceID }

// mapInstance maps one entry, or says why it is malformed (an error made
// by malformed).
func (m *mapper) mapInstance(dc string, e *api.ServiceEntry) (model.Instance, uint32, model.Protocol, error) {
	fail := func(err error) (model.Instance, uint32, model.Protocol, error) { return model.Instance{}, 0, "", err }
	if e.Service == nil || e.Node == nil {
		return fail(malformed(reasonOther, errors.New("entry without service or node")))
	}
	s := e.Service
	if s.ID == "" {
		return fail(malformed(reasonOther, errors.New("instance has no ID")))
	}
	addr, port := m.address(e)
	if addr == "" {
		return fail(malformed(reasonAddress, errors.New("no address: neither the service nor its node has one")))
	}
	if err := checkAddress(addr); err != nil {
		return fail(err)
	}
	if port < 1 || port > 65535 {
		return fail(malformedf(reasonPort, "port %d: want 1 to 65535", port))
	}
	inst := model.Instance{
		ID:       instanceID(dc, e.Node.Node, s.ID),
		Address:  addr,
		Labels:   instanceLabels(s.Tags, s.Meta),
		Locality: dc,
	}
	inst.Health = m.health(e)
	inst.Weight = weight(s.Weights, inst.Health == model.Healthy && worstStatus(e.Checks) == api.HealthWarning)
	return inst, uint32(port), protocolOf(s.Tags, s.Meta), nil
}

// address picks the instance's address and port by AddressSource.
func (m *mapper) address(e *api.ServiceEntry) (string, int) {
	s := e.Service
	if src := m.cfg.AddressSource; src != AddressService {
		if ta, ok := s.TaggedAddresses[src]; ok && ta.Address != "" {
			port := s.Port
			if ta.Port != 0 {
				port = ta.Port
			}
			return ta.Address, port
		}
		if a := e.Node.TaggedAddresses[src]; a != "" {
			return a, s.Port
		}
	}
	if s.Address != "" {
		return s.Address, s.Port
	}
	return e.Node.Address, s.Port
}

// checkAddress accepts an IP address or a DNS host name; its errors are
// address rejections.
func checkAddress(a string) error {
	if net.ParseIP(a) != nil {
		return nil
	}
	if len(a) > 253 {
		return malformedf(reasonAddress, "address %q is neither an IP address nor a host name (too long)", a)
	}
	for _, label := range strings.Split(strings.TrimSuffix(a, "."), ".") {
		ok := label != "" && len(label) <= 63 && label[0] != '-' && label[len(label)-1] != '-'
		for i := 0; ok && i < len(label); i++ {
			c := label[i]
			ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
		}
		if !ok {
			return malformedf(reasonAddress, "address %q is neither an IP address nor a host name", a)
		}
	}
	return nil
}

// health maps the instance's node and service checks: any maintenance
// check makes it Draining; otherwise the worst status decides, warning
// counting as healthy only with IncludeWarning. No check at all is
// passing, as in Consul.
func (m *mapper) health(e *api.ServiceEntry) model.Health {
	for _, c := range e.Checks {
		if c.CheckID == nodeMaintenance || strings.HasPrefix(c.CheckID, serviceMaintenance) {
			return model.Draining
		}
	}
	switch worstStatus(e.Checks) {
	case api.HealthPassing:
		return model.Healthy
	case api.HealthWarning:
		if m.wantWarning {
			return model.Healthy
		}
	}
	return model.Unhealthy
}

// worstStatus returns passing, warning or critical (anything unknown
// counts as critical).
func worstStatus(checks api.HealthChecks) string {
	worst := api.HealthPassing
	for _, c := range checks {
		switch c.Status {
		case api.HealthPassing:
		case api.HealthWarning:
			if worst == api.HealthPassing {
				worst = api.HealthWarning
			}
		default:
			return api.HealthCritical
		}
	}
	return worst
}

// weight maps Consul's DNS weights onto the endpoint weight. Consul's
// default (1) becomes the model's default (0): equal weights either way,
// and smaller resources.
func weight(w api.AgentWeights, warning bool) uint32 {
	v := w.Passing
	if warning {
		v = w.Warning
	}
	if v <= 1 {
		return 0
	}
	return uint32(v)
}

// instanceLabels builds endpoint labels from tags ("key=value",
// "key|value", or a bare "key" with an empty value) and service meta,
// meta winning over tags. They are sanitised to Kubernetes label syntax;
// pairs that cannot be repaired are dropped.
func instanceLabels(tags []string, meta map[string]string) map[string]string {
	if len(tags) == 0 && len(meta) == 0 {
		return nil
	}
	raw := make(map[string]string, len(tags)+len(meta))
	for _, t := range tags {
		k, v := splitTag(t)
		if k != "" {
			raw[k] = v
		}
	}
	for k, v := range meta {
		raw[k] = v
	}
	return model.Labels(raw)
}

func splitTag(t string) (string, string) {
	if k, v, ok := strings.Cut(t, "="); ok {
		return strings.TrimSpace(k), strings.TrimSpace(v)
	}
	if k, v, ok := strings.Cut(t, "|"); ok {
		return strings.TrimSpace(k), strings.TrimSpace(v)
	}
	return strings.TrimSpace(t), ""
}

// protocolOf reads the instance's protocol: meta "protocol", then a tag
// "protocol=x" or "protocol|x", then a bare tag naming a protocol ("http",
// "grpc"); TCP otherwise, and for names Istio does not know.
func protocolOf(tags []string, meta map[string]string) model.Protocol {
	if p, ok := protocolNamed(strings.ToLower(strings.TrimSpace(meta[metaProtocol]))); ok {
		return p
	}
	for _, t := range tags {
		if k, v := splitTag(t); strings.EqualFold(k, metaProtocol) {
			if p, ok := protocolNamed(strings.ToLower(v)); ok {
				return p
			}
		}
	}
	for _, t := range tags {
		if p, ok := protocolNamed(strings.ToLower(strings.TrimSpace(t))); ok {
			return p
		}
	}
	return model.ProtocolTCP
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
