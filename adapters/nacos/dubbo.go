package nacos

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
)

// Dubbo on Nacos. Dubbo registers in Nacos in two ways (apache/dubbo, dubbo-registry-nacos):
//
//   - Dubbo 2's interface level (NacosRegistry): one Nacos service per (category, interface,
//     version, group), named "<category>:<interface>:<version>:<group>" (NacosServiceName,
//     getServiceName: the category then URL.getColonSeparatedKey(), version and group empty
//     when unset: "providers:org.apache.demo.DemoService::"), in the Nacos group of the
//     registry URL's group parameter (DEFAULT_GROUP by default). One instance per provider URL:
//     its IP and port, metadata the URL's parameters plus "protocol" (the URL's scheme), "path"
//     and "category" (createInstance).
//   - Dubbo 3's application level (NacosServiceDiscovery): one Nacos service per application,
//     named after it, one instance per process, whose metadata holds Dubbo's own keys:
//     "dubbo.endpoints" (the protocols and their ports), "dubbo.metadata.revision", ...
//     (NacosNamingServiceUtils.toInstance copies the ServiceInstance's metadata).
//
// Both map to the ServiceEntry name and host galleon-zookeeper gives the same interface or
// application, through registry/dubbo: the name ServiceName(interface, group, version) or
// ServiceName(application, "", ""), the host DubboHostTemplate, the ports and their protocols
// Protocols.Port and Protocols.Endpoints. The Nacos namespace and group are not part of the
// name, as the ZooKeeper root is not: the same interface in two Nacos groups is one name, and
// the second (in namespace, group, service order) is reported as a collision by the registry.

// Dubbo's categories, the first segment of an interface-level service name.
const (
	dubboProviders = "providers"
)

// dubboSkipped are the categories whose services are no services to serve: consumers register
// to be seen by Dubbo Admin, configurators and routers hold rules (URLs of other schemes).
var dubboSkipped = [...]string{"consumers", "configurators", "routers"}

// dubboInterface parses an interface-level service name: ok is false when name is not one
// (not four ':'-separated segments, as Dubbo's isConformRules checks, or an unknown category).
func dubboInterface(name string) (category, iface, version, group string, ok bool) {
	parts := strings.Split(name, ":")
	if len(parts) != 4 {
		return "", "", "", "", false
	}
	switch c := parts[0]; {
	case c == dubboProviders, slices.Contains(dubboSkipped[:], c):
		return c, parts[1], parts[2], parts[3], true
	}
	return "", "", "", "", false
}

// unwatched reports a service there is nothing to serve of, whatever it holds: with the Dubbo
// mapping on, Dubbo's consumers:, configurators: and routers: services (D2). They are not
// subscribed: every Dubbo consumer registers one, and each would cost a subscription, its
// pushes and its refreshes for nothing.
func (m *mapper) unwatched(ref wire.Ref) bool {
	if !m.naming.Dubbo {
		return false
	}
	category, _, _, _, ok := dubboInterface(ref.Service)
	return ok && category != dubboProviders
}

// mapDubbo maps ref when it is Dubbo's: ok is false when it is not (a plain service).
func (m *mapper) mapDubbo(ref wire.Ref, info *wire.ServiceInfo) (mapped, bool) {
	if category, iface, version, group, ok := dubboInterface(ref.Service); ok {
		if category != dubboProviders {
			return mapped{skip: true}, true
		}
		if iface == "" {
			return mapped{err: registry.Reason(reasonName, errors.New("a Dubbo service name with no interface: want providers:<interface>:<version>:<group>"))}, true
		}
		return m.mapDubboService(ref, info, iface, group, version, false), true
	}
	for i := range infoHosts(info) {
		if dubboreg.ApplicationKey(info.Hosts[i].Metadata) != "" {
			return m.mapDubboService(ref, info, ref.Service, "", "", true), true
		}
	}
	return mapped{}, false
}

func infoHosts(info *wire.ServiceInfo) []wire.Instance {
	if info == nil {
		return nil
	}
	return info.Hosts
}

// mapDubboService maps a Dubbo interface (iface, group, version) or, app set, a Dubbo 3
// application (iface is its name), as galleon-zookeeper's Dubbo layouts do.
func (m *mapper) mapDubboService(ref wire.Ref, info *wire.ServiceInfo, iface, group, version string, app bool) mapped {
	out := mapped{}
	var kept []*instance
	seen := map[string]string{}
	for _, in := range sortedInstances(info) {
		rec := instanceRecord(ref, *in)
		i, err := m.dubboInstance(in, rec, app)
		if errors.Is(err, errNotProvider) {
			continue
		}
		if err == nil {
			err = firstOf(seen, i)
		}
		if err != nil {
			out.reject(rec, err)
			continue
		}
		kept = append(kept, i)
	}
	out.panic = m.protect(info, kept)
	kept = m.admitDubbo(kept, &out)
	if !app {
		kept = mergeHosts(kept)
	}
	svc := model.Service{Namespace: m.istioNamespace(kept), Name: dubboreg.ServiceName(iface, group, version)}
	byNumber := map[uint32]model.Port{}
	svc.Instances = make([]model.Instance, 0, len(kept))
	for _, i := range kept {
		svc.Instances = append(svc.Instances, i.inst)
		for _, p := range i.ports {
			if _, ok := byNumber[p.Number]; !ok {
				byNumber[p.Number] = p
			}
		}
	}
	shareLabels(svc.Instances)
	svc.Ports = model.SortedPorts(slices.Collect(maps.Values(byNumber)))
	uniqueNames(svc.Ports)
	hd := dubboHostData{Name: svc.Name, Namespace: svc.Namespace, NacosNamespace: nameLabel(namespaceOf(ref.Namespace), ""), NacosGroup: groupLabel(ref.Group)}
	if !app {
		hd.Interface, hd.Group, hd.Version = iface, group, version
	}
	host, err := hostOf(m.dubboHost, hd, hd.Name+"."+hd.Namespace+".dubbo", flagDubboHostTemplate)
	if err != nil {
		out.err = err
		return out
	}
	svc.Hosts = []string{host}
	out.service = svc
	return out
}

// errNotProvider: an instance of a providers: service that says it is no provider (side
// consumer), left out silently as galleon-zookeeper does.
var errNotProvider = errors.New("not a provider")

// dubboInstance maps one instance of a Dubbo service. A Dubbo 2 provider's protocol is its
// metadata "protocol" (the URL's scheme; dubbo when absent), its labels the URL parameters
// galleon-zookeeper serves (dubbo.ProviderLabels), its weight the URL's "weight" parameter when
// it has one (what Dubbo's load balancers read) else the Nacos weight; enabled=false or
// disabled=true in its parameters drains it, as in ZooKeeper. A Dubbo 3 instance's ports are
// its "dubbo.endpoints" (else its port as dubbo), its labels its metadata but Dubbo's
// bookkeeping (dubbo.Labels).
func (m *mapper) dubboInstance(in *wire.Instance, rec string, app bool) (*instance, error) {
	addr, weight, err := checkInstance(in)
	if err != nil {
		return nil, err
	}
	meta := in.Metadata
	i := &instance{in: in, record: rec, enable: in.Enabled}
	i.inst = model.Instance{ID: net.JoinHostPort(addr, strconv.Itoa(in.Port)), Address: addr}
	skip := func(k string) bool { return notLabel(k) || k == m.naming.NamespaceMetaKey }
	if app {
		if i.ports, err = m.protocols.Endpoints(meta[dubboreg.EndpointsKey]); err != nil {
			return nil, err
		}
		if len(i.ports) == 0 {
			i.ports = []model.Port{m.protocols.Port(uint32(in.Port), "dubbo")}
		}
		i.inst.Labels = dubboreg.Labels(meta, skip)
	} else {
		if side := meta["side"]; side != "" && side != "provider" {
			return nil, errNotProvider
		}
		scheme := strings.ToLower(strings.TrimSpace(cmp.Or(meta["protocol"], "dubbo")))
		i.ports = []model.Port{m.protocols.Port(uint32(in.Port), scheme)}
		i.inst.Labels = dubboreg.ProviderLabels(func(k string) string {
			if skip(k) {
				return ""
			}
			return meta[k]
		})
		if w := meta["weight"]; w != "" {
			n, err := strconv.ParseUint(w, 10, 32)
			if err != nil {
				return nil, registry.Reason(reasonWeight, fmt.Errorf("metadata weight=%s: want a whole number from 0 to %d", registry.Quote(w), uint32(1<<32-1)))
			}
			weight = uint32(n)
		}
	}
	if c := m.cluster(in, &i.inst); c != nil && len(i.inst.Labels) < maxLabels {
		if i.inst.Labels == nil {
			i.inst.Labels = map[string]string{}
		}
		i.inst.Labels[clusterLabel] = c[clusterLabel]
	}
	i.weight, i.inst.Weight = weight, weight
	i.inst.Health = health(in, weight)
	if !app && (strings.EqualFold(meta["enabled"], "false") || strings.EqualFold(meta["disabled"], "true")) {
		i.inst.Health = model.Draining
	}
	return i, nil
}

// admitDubbo leaves out, with a rejection, each instance whose ports would give the service
// more than dubbo.MaxPorts ports (in instance order: the first ones keep theirs).
func (m *mapper) admitDubbo(insts []*instance, out *mapped) []*instance {
	numbers := map[uint32]bool{}
	kept := insts[:0:0]
	for _, i := range insts {
		var added []uint32
		for _, p := range i.ports {
			if !numbers[p.Number] && !slices.Contains(added, p.Number) {
				added = append(added, p.Number)
			}
		}
		if len(numbers)+len(added) > dubboreg.MaxPorts {
			out.reject(i.record, registry.Reason(reasonPort, fmt.Errorf("left out of its service: its ports would give the service more than %d ports, the most a ServiceEntry may have", dubboreg.MaxPorts)))
			continue
		}
		for _, n := range added {
			numbers[n] = true
		}
		kept = append(kept, i)
	}
	return kept
}

// mergeHosts merges the providers of one Dubbo 2 service that share an address (a host
// exporting the interface over dubbo and tri registers one Nacos instance per protocol) into
// one endpoint serving every port, by galleon-zookeeper's rules (its mergeHosts): the ID of the
// smallest port's provider; Healthy when every port is, else the health of the smallest port
// that is not (fail closed: the endpoint serves every port); the smallest weight of its ports,
// 0 not counting; the labels' union, the smallest port's values winning. Hosts with one
// provider are kept as they are, in their order; merged hosts follow, in address order.
func mergeHosts(insts []*instance) []*instance {
	byAddr := make(map[string][]*instance, len(insts))
	for _, i := range insts {
		byAddr[i.inst.Address] = append(byAddr[i.inst.Address], i)
	}
	if len(byAddr) == len(insts) {
		return insts
	}
	out := make([]*instance, 0, len(byAddr))
	for _, i := range insts {
		if len(byAddr[i.inst.Address]) == 1 {
			out = append(out, i)
		}
	}
	for _, addr := range slices.Sorted(maps.Keys(byAddr)) {
		if group := byAddr[addr]; len(group) > 1 {
			out = append(out, mergeHost(group))
		}
	}
	return out
}

// mergeHost merges the providers of one address (at least two), by mergeHosts' rules.
func mergeHost(group []*instance) *instance {
	group = slices.Clone(group)
	slices.SortFunc(group, func(a, b *instance) int {
		return cmp.Or(cmp.Compare(a.in.Port, b.in.Port), strings.Compare(a.inst.ID, b.inst.ID))
	})
	m := *group[0]
	m.ports, m.inst.Weight = nil, 0
	union := map[string]string{}
	for j := len(group) - 1; j >= 0; j-- { // the smallest port last: its values win
		maps.Copy(union, group[j].inst.Labels)
	}
	for _, g := range group {
		m.ports = append(m.ports, g.ports...)
		if m.inst.Health == model.Healthy && g.inst.Health != model.Healthy {
			m.inst.Health = g.inst.Health
		}
		if w := g.inst.Weight; w != 0 && (m.inst.Weight == 0 || w < m.inst.Weight) {
			m.inst.Weight = w
		}
	}
	m.inst.Labels = nil
	if len(union) > 0 {
		m.inst.Labels = union
	}
	return &m
}

// uniqueNames makes the port names unique, as they must be in a ServiceEntry: two ports named
// alike (tcp-dubbo on 20880 and 20881) are told apart by their number, as galleon-zookeeper
// does.
func uniqueNames(ports []model.Port) {
	names := map[string]int{}
	for _, p := range ports {
		if p.Name != "" {
			names[p.Name]++
		}
	}
	for i, p := range ports {
		if names[p.Name] > 1 {
			ports[i].Name = fmt.Sprintf("%s-%d", p.Name, p.Number)
		}
	}
}
