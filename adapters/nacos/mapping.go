package nacos

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"unicode/utf8"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// The mapping of one Nacos service (namespace, group, service) onto one model.Service, rule by
// rule as docs/adapters/nacos.md lists them. It is a pure function of the service's state and
// the configuration: the same answer maps the same way whatever order it lists instances in.

// Reasons a record is not served (registry.Reason).
const (
	reasonAddress   = "address"
	reasonPort      = "port"
	reasonWeight    = "weight"
	reasonProtocol  = "protocol"
	reasonDuplicate = "duplicate"
	reasonName      = "name"
	reasonHost      = "host"
)

// mapped is one Nacos service mapped.
type mapped struct {
	// service is meaningful when err is nil. Its Ports are empty when no instance gave one (none
	// is left, or every one was rejected): a ServiceEntry needs a port, so the caller serves the
	// ports it reported last for the key (the instances, none, are what changed) or deletes it.
	service model.Service
	// err: the service is refused whole (its name, host, ports); the caller records it under
	// serviceRecord(ref). Nil for a service Dubbo keeps for its consumers (skip).
	err error
	// skip: the service is none to serve (Dubbo's consumers:, configurators:, routers:
	// services), silently: no service, no rejection.
	skip bool
	// rejected are the instances left out, by instanceRecord, and why (registry.Reason).
	rejected map[string]error
	// panic: the protect threshold is reached (the server said so, or
	// Naming.ProtectThreshold): every enabled instance is served, healthy or not.
	panic bool
}

// serviceRecord names a service for an operator: "public/DEFAULT_GROUP/orders", bounded.
func serviceRecord(ref wire.Ref) string {
	group := cmp.Or(ref.Group, defaultGroup)
	return registry.Cut(namespaceOf(ref.Namespace)+"/"+group+"/"+ref.Service, registry.MaxRecordLen)
}

// instanceRecord names an instance for an operator: "public/DEFAULT_GROUP/orders
// 10.0.0.1:8080", bounded (the service part is cut first, so the address stays readable).
func instanceRecord(ref wire.Ref, in wire.Instance) string {
	addr := net.JoinHostPort(registry.Cut(in.IP, 64), strconv.Itoa(in.Port))
	if in.ClusterName != "" && in.ClusterName != defaultCluster {
		addr += " (cluster " + registry.Cut(in.ClusterName, 64) + ")"
	}
	return registry.Cut(serviceRecord(ref), registry.MaxRecordLen-len(addr)-1) + " " + addr
}

// Weights: a Nacos weight is a float, default 1, which Nacos servers keep from 0 to 10000
// (Polaris's Nacos API: 0 to 1000, whole numbers); an endpoint's is a whole number. Weights are
// scaled by weightScale (1 -> 100, Dubbo's default weight), a positive weight is at least 1
// after rounding, and weights over maxWeight count as maxWeight.
const (
	weightScale = 100
	maxWeight   = 10000
)

// Labels: at most maxLabels per instance, values of at most maxLabelValue characters (longer
// ones are left out rather than cut and hashed by the core into something no selector
// matches), as registry/dubbo's Labels.
const (
	maxLabels     = 32
	maxLabelValue = model.MaxLabelValue
)

// notLabel reports the metadata keys that are no labels: Nacos's preserved metadata
// (PreservedMetadataKeys: heart-beat and deletion timeouts, the instance ID generator, the
// register source) and Polaris's internal keys (internal-nacos-cluster, internal-nacos-service,
// internal-nacos-clientconnId, internal-lastheartbeat, ...), which Polaris's Nacos API adds to
// every instance's metadata (model/instance.go PrepareSpecInstance): the connection ID changes at
// every reconnection of the registering client and the heartbeat time at every beat, so as
// labels they would change an endpoint for nothing.
func notLabel(key string) bool {
	return strings.HasPrefix(key, "preserved.") || strings.HasPrefix(key, "internal-")
}

// mapService maps the state info of service ref.
func (m *mapper) mapService(ref wire.Ref, info *wire.ServiceInfo) mapped {
	if m.naming.Dubbo {
		if out, ok := m.mapDubbo(ref, info); ok {
			return out
		}
	}
	return m.mapPlain(ref, info)
}

// instance is one well-formed Nacos instance, mapped.
type instance struct {
	in     *wire.Instance // as received
	record string
	inst   model.Instance
	port   model.Port
	ports  []model.Port // Dubbo: every port it serves (Dubbo 3: "dubbo.endpoints")
	enable bool         // enabled (disabled: Draining, whatever else)
	weight uint32       // scaled (0: Draining)
}

// sortedInstances are info's instances in (IP, port, cluster, instance ID) order, the order
// every rule that picks "the first" instance follows.
func sortedInstances(info *wire.ServiceInfo) []*wire.Instance {
	if info == nil {
		return nil
	}
	out := make([]*wire.Instance, len(info.Hosts))
	for i := range info.Hosts {
		out[i] = &info.Hosts[i]
	}
	slices.SortFunc(out, func(a, b *wire.Instance) int {
		return cmp.Or(strings.Compare(a.IP, b.IP), cmp.Compare(a.Port, b.Port),
			strings.Compare(a.ClusterName, b.ClusterName), strings.Compare(a.InstanceID, b.InstanceID))
	})
	return out
}

// checkInstance checks the parts of in every mapping reads: address, port, weight. It returns
// the address as served (an IP in its canonical form, or a host name lower-cased) and the
// scaled weight.
func checkInstance(in *wire.Instance) (addr string, weight uint32, err error) {
	ip := net.ParseIP(in.IP)
	switch {
	case ip != nil && ip.IsUnspecified():
		return "", 0, registry.Reason(reasonAddress, fmt.Errorf("ip %s is unspecified: an instance registers the address it is reached on", in.IP))
	case ip != nil:
		addr = ip.String()
	default:
		host := strings.ToLower(in.IP)
		if host == "" || len(host) > model.MaxDNSSubdomain || strings.Contains(host, "..") || model.HostName(host) != strings.TrimSuffix(host, ".") || strings.HasPrefix(host, "*") {
			return "", 0, registry.Reason(reasonAddress, fmt.Errorf("ip %s is neither an IP address nor a host name", registry.Quote(in.IP)))
		}
		addr = strings.TrimSuffix(host, ".")
	}
	if in.Port < 1 || in.Port > 65535 {
		return "", 0, registry.Reason(reasonPort, fmt.Errorf("port %d: want 1 to 65535", in.Port))
	}
	w := in.Weight
	if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
		return "", 0, registry.Reason(reasonWeight, fmt.Errorf("weight %v: want a number from 0 to %d", w, maxWeight))
	}
	return addr, scaleWeight(w), nil
}

// scaleWeight is the endpoint weight of Nacos weight w (checked: finite, not negative).
func scaleWeight(w float64) uint32 {
	if w == 0 {
		return 0
	}
	return uint32(max(1, math.Round(min(w, maxWeight)*weightScale)))
}

// health is an instance's health before the protect threshold: disabled or weight 0 is
// Draining (Nacos's clients never pick either: NacosNamingService.selectInstances keeps
// healthy, enabled instances of weight > 0), unhealthy is Unhealthy.
func health(in *wire.Instance, weight uint32) model.Health {
	switch {
	case !in.Enabled || weight == 0:
		return model.Draining
	case !in.Healthy:
		return model.Unhealthy
	}
	return model.Healthy
}

// protect applies the protect threshold to the mapped instances of one service: when the server
// says it applied it (info.ReachProtectionThreshold: it then lists every unhealthy instance as
// healthy already), or when at most Naming.ProtectThreshold of the enabled instances are
// healthy (Nacos's ServiceUtil.selectInstancesWithHealthyProtection: healthy/all <= threshold),
// every Unhealthy instance is served as Healthy. Draining ones (disabled, weight 0) stay out. It
// reports whether the threshold is reached.
func (m *mapper) protect(info *wire.ServiceInfo, insts []*instance) bool {
	reached := info != nil && info.ReachProtectionThreshold
	if !reached && m.naming.ProtectThreshold > 0 {
		enabled, healthy := 0, 0
		for _, i := range insts {
			if i.in.Enabled {
				enabled++
				if i.in.Healthy {
					healthy++
				}
			}
		}
		reached = enabled > 0 && float64(healthy)/float64(enabled) <= m.naming.ProtectThreshold
	}
	if !reached {
		return false
	}
	for _, i := range insts {
		if i.inst.Health == model.Unhealthy {
			i.inst.Health = model.Healthy
		}
	}
	return true
}

// shareLabels makes the instances whose labels are equal share one map. A service's instances
// mostly carry the same metadata (a Spring Cloud or Dubbo application's replicas), and a map per
// instance was the adapter's largest cost at 10,000 services x 10 (docs/benchmarks.md, the heap
// profile). The maps are never modified once mapped: the adapter maps a new state into new
// maps, and the Sink treats what it is given as read-only (registry.Sink). The table lives for
// one mapping: nothing the registry sends outlives the service that holds it.
func shareLabels(insts []model.Instance) {
	if len(insts) < 2 {
		return
	}
	var sets map[string]map[string]string
	var key []byte
	for n := range insts {
		l := insts[n].Labels
		if len(l) == 0 {
			continue
		}
		key = registry.AppendLabelKey(key[:0], l)
		if have, ok := sets[string(key)]; ok {
			insts[n].Labels = have
			continue
		}
		if sets == nil {
			sets = map[string]map[string]string{}
		}
		sets[string(key)] = l
	}
}

// labels are an instance's endpoint labels: its metadata but Nacos's and Polaris's bookkeeping
// (notLabel) and skip's keys, values over 63 characters left out, then at most 32 in key order
// after first (the cluster label), which goes first. nil when none.
func labels(meta map[string]string, first map[string]string, skip func(string) bool) map[string]string {
	out := maps.Clone(first)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range sortedKeys(meta) {
		if len(out) >= maxLabels {
			break
		}
		v := meta[k]
		if notLabel(k) || skip(k) || utf8.RuneCountInString(v) > maxLabelValue {
			continue
		}
		if _, taken := out[k]; !taken {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// cluster is what an instance's cluster adds: a label (ClusterAsLabel) or its locality
// (ClusterAsLocality: the region; Nacos's cluster names are [0-9a-zA-Z-], no '/'). The cluster
// DEFAULT adds nothing.
func (m *mapper) cluster(in *wire.Instance, inst *model.Instance) map[string]string {
	name := strings.TrimSpace(in.ClusterName)
	if name == "" || name == defaultCluster {
		return nil // Nacos's cluster of an instance registered without one
	}
	if m.asLocality {
		if !strings.Contains(name, "/") {
			inst.Locality = name
		}
		return nil
	}
	return map[string]string{clusterLabel: name}
}

// istioNamespace is the service's Istio namespace: the value of NamespaceMetaKey of the first
// instance that has a usable one, else Naming.Namespace.
func (m *mapper) istioNamespace(insts []*instance) string {
	if k := m.naming.NamespaceMetaKey; k != "" {
		for _, i := range insts {
			if v := strings.TrimSpace(i.in.Metadata[k]); v != "" && model.CheckNamespace(v) == nil {
				return v
			}
		}
	}
	return m.naming.Namespace
}

// mapPlain maps a service that is not Dubbo's: one port, the number most of its instances
// register (the smaller on a tie), of the protocol of the first instance on it; an instance
// on another number is reached on its own (Instance.Ports), since a Nacos client calls any
// instance of a service on the port that instance registered.
func (m *mapper) mapPlain(ref wire.Ref, info *wire.ServiceInfo) mapped {
	out := mapped{}
	rn := refName{namespace: namespaceOf(ref.Namespace), group: cmp.Or(ref.Group, defaultGroup), service: ref.Service}
	if ref.Service == "" {
		out.err = registry.Reason(reasonName, errors.New("the service has no name"))
		return out
	}
	var kept []*instance
	seen := map[string]string{}
	for _, in := range sortedInstances(info) {
		rec := instanceRecord(ref, *in)
		i, err := m.plainInstance(in, rec)
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
	svc := model.Service{Namespace: m.istioNamespace(kept), Name: serviceName(rn)}
	uses := map[uint32]int{}
	for _, i := range kept {
		uses[i.port.Number]++
	}
	var port model.Port
	for _, n := range slices.Sorted(maps.Keys(uses)) {
		if port.Number == 0 || uses[n] > uses[port.Number] {
			port.Number = n
		}
	}
	for _, i := range kept {
		if port.Protocol == "" && i.port.Number == port.Number {
			port.Protocol = i.port.Protocol
		}
	}
	svc.Instances = make([]model.Instance, 0, len(kept))
	for _, i := range kept {
		if i.port.Number != port.Number {
			i.inst.Ports = map[uint32]uint32{port.Number: i.port.Number}
		}
		svc.Instances = append(svc.Instances, i.inst)
	}
	shareLabels(svc.Instances)
	if port.Number != 0 {
		svc.Ports = []model.Port{port}
	}
	hd := hostData{Name: svc.Name, Service: nameLabel(rn.service, ""), Group: groupLabel(rn.group), Namespace: nameLabel(rn.namespace, "")}
	if len(kept) > 0 {
		hd.Metadata = kept[0].in.Metadata
	}
	host, err := hostOf(m.host, hd, hd.Service+"."+hd.Group+"."+hd.Namespace+".nacos", flagHostTemplate)
	if err != nil {
		out.err = err
		return out
	}
	svc.Hosts = []string{host}
	out.service = svc
	return out
}

// firstOf records i's address and port in seen, or says which instance had them first: two
// instances of one service on one address and port (registered in two clusters) are one
// endpoint, the first in instance order.
func firstOf(seen map[string]string, i *instance) error {
	if other, dup := seen[i.inst.ID]; dup {
		return registry.Reason(reasonDuplicate, fmt.Errorf("%s is instance %s's address and port too (registered twice, in another cluster?): one endpoint serves them", i.inst.ID, registry.Quote(other)))
	}
	seen[i.inst.ID] = cmp.Or(i.in.InstanceID, i.record)
	return nil
}

// plainInstance maps one instance of a plain service.
func (m *mapper) plainInstance(in *wire.Instance, rec string) (*instance, error) {
	addr, weight, err := checkInstance(in)
	if err != nil {
		return nil, err
	}
	proto := model.ProtocolHTTP
	if v := strings.TrimSpace(in.Metadata[m.naming.ProtocolKey]); v != "" {
		p, ok := model.ParseProtocol(v)
		if !ok {
			return nil, registry.Reason(reasonProtocol, fmt.Errorf("metadata %s=%s names no Istio protocol: want http, http2, grpc, https, tcp, tls, mongo, mysql, redis or udp", registry.Quote(m.naming.ProtocolKey), registry.Quote(v)))
		}
		proto = p
	}
	i := &instance{in: in, record: rec, weight: weight, enable: in.Enabled,
		port: model.Port{Number: uint32(in.Port), Protocol: proto}}
	i.inst = model.Instance{
		ID:      net.JoinHostPort(addr, strconv.Itoa(in.Port)),
		Address: addr,
		Weight:  weight,
		Health:  health(in, weight),
	}
	i.inst.Labels = labels(in.Metadata, m.cluster(in, &i.inst), func(k string) bool {
		return k == m.naming.ProtocolKey || k == m.naming.NamespaceMetaKey
	})
	return i, nil
}

// hostOf renders the host template with hd (a hostData or dubboHostData); fallback is the host
// of the default template. A template that renders no host name for this service, or one with
// an empty label (".default-group.mesh": a metadata key this service's instance lacks), falls
// back to it: the empty label would make services that differ only there share a host.
func hostOf(t *template.Template, hd any, fallback, flag string) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, hd); err == nil {
		s := b.String()
		if h := model.HostName(s); h != "" && !strings.HasPrefix(s, ".") && !strings.Contains(s, "..") {
			return h, nil
		}
	}
	if h := model.HostName(fallback); h != "" {
		return h, nil
	}
	return "", registry.Reason(reasonHost, fmt.Errorf("--%s renders no host name for this service", flag))
}

// reject records why the instance of record rec is left out.
func (o *mapped) reject(rec string, err error) {
	if o.rejected == nil {
		o.rejected = map[string]error{}
	}
	o.rejected[rec] = err
}
