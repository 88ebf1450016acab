package zookeeper

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/template"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// layout is one way of keeping services in ZooKeeper: where a service's instance nodes are and
// what one holds. There are the Curator / Spring Cloud Zookeeper layout (curator), the Dubbo 2
// interface-level layout (dubbo, in dubbo.go), the Dubbo 3 application-level layout (dubbo3, in
// dubbo3.go) and a root the Curator and Dubbo 3 layouts share (shared, in layouts.go).
type layout interface {
	// isService says whether the root's child name holds services (Dubbo keeps other things
	// beside the interfaces: mapping, config, metadata).
	isService(name string) bool
	// instancesPath is the znode whose children are the instances of service name: the root's
	// child itself, or a node under it (then the adapter watches the root's child for it to
	// appear while it is missing).
	instancesPath(root, name string) string
	// overridesPath is the znode whose children are operators' rules that change the service's
	// instances (Dubbo's configurators, parsed by parseOverride), or "" when the layout has
	// none. The adapter watches it like instancesPath.
	overridesPath(root, name string) string
	// readsData: the instance is in the node's data, read and watched; else it is all in the
	// node's name and parseInstance gets nil data.
	readsData() bool
	// parseInstance reads the instance node id of service name. errNotInstance: the node is no
	// instance and is left out without a rejection.
	parseInstance(name, id string, data []byte) (endpoint, error)
}

// errNotInstance is what parseInstance returns for a node that is well-formed but not an
// instance (a Dubbo URL whose side is consumer).
var errNotInstance = errors.New("not an instance")

// endpoint is one well-formed instance node: the instance and the service ports it serves.
type endpoint struct {
	inst  model.Instance
	ports []model.Port
	// svc names the service the instance belongs to, when a service znode holds several
	// (Dubbo: one per group and version); nil means the service znode's own name. Shared by
	// the instances of a service (sharedParts): never modified.
	svc *hostData
	// kind is the layout the node was read as: in a root Curator and Dubbo 3 share, each node's.
	kind layoutKind
}

// host is the service e names (the zero value for the service znode's own).
func (e *endpoint) host() hostData {
	if e.svc == nil {
		return hostData{}
	}
	return *e.svc
}

// Spring Cloud Zookeeper's status metadata (StatusConstants).
const (
	statusKey          = "instance_status"
	statusUp           = "UP"
	statusOutOfService = "OUT_OF_SERVICE"
	protocolKey        = "protocol"
)

// curator is the Apache Curator ServiceDiscovery layout, which Spring Cloud Zookeeper uses:
// <root>/<name>/<id>, each node holding a ServiceInstance as JSON.
type curator struct{}

// curatorInstance is Curator's ServiceInstance as JsonInstanceSerializer writes it. Ports are
// int64 so that a negative or too large one decodes and is rejected with a clear message.
type curatorInstance struct {
	Name        string          `json:"name"`
	ID          string          `json:"id"`
	Address     string          `json:"address"`
	Port        *int64          `json:"port"`
	SSLPort     *int64          `json:"sslPort"`
	Payload     json.RawMessage `json:"payload"`
	ServiceType string          `json:"serviceType"`
}

// springPayload is Spring Cloud Zookeeper's payload, ZookeeperInstance:
// {"@class": "...ZookeeperInstance", "id": "...", "name": "...", "metadata": {...}}.
type springPayload struct {
	Class    string                     `json:"@class"`
	Metadata map[string]json.RawMessage `json:"metadata"`
}

func (curator) isService(string) bool                  { return true }
func (curator) instancesPath(root, name string) string { return root + "/" + name }
func (curator) overridesPath(string, string) string    { return "" }
func (curator) readsData() bool                        { return true }

func (curator) parseInstance(_, id string, data []byte) (endpoint, error) {
	if dubboCategories[id] && len(bytes.TrimSpace(data)) == 0 {
		// <root>/<interface>/providers: a Dubbo 2 registry read as Curator's.
		return endpoint{}, bad(reasonLayout, fmt.Errorf("%s is the name of a Dubbo 2 interface's child, not of an instance, and holds no data: this is a Dubbo 2 registry; read it with --%s=%s (root %s by default)", registry.Quote(id), flagLayout, LayoutDubbo, DefaultDubboRoot))
	}
	var ci curatorInstance
	return curatorEndpoint(id, data, &ci, readSpring)
}

// How curatorEndpoint reads an instance: as Spring's (the Curator layout, which rejects a Dubbo 3
// instance), as Dubbo 3's, or as whichever it is (a root both layouts share: dubbo3Sign).
type readMode uint8

const (
	readSpring readMode = iota
	readDubbo3
	readAuto
)

// dubboInstanceClass is the payload's "@class" of Dubbo 3's application instances, which
// dubbo-go writes too.
const dubboInstanceClass = "org.apache.dubbo.registry.zookeeper.ZookeeperInstance"

// dubbo3Sign says why an instance with payload class and metadata meta is a Dubbo 3
// application instance ("" when it is not): the class, or metadata only Dubbo writes.
func dubbo3Sign(class string, meta map[string]string) string {
	if class == dubboInstanceClass {
		return `payload "@class" ` + dubboInstanceClass
	}
	for _, k := range []string{dubbo3Endpoints, dubbo3Revision} {
		if _, ok := meta[k]; ok {
			return fmt.Sprintf("metadata %q", k)
		}
	}
	return ""
}

// curatorEndpoint decodes instance node id into ci and reads the endpoint from it; dubbo3 reads
// more of ci, without decoding the node again. A Spring instance (the Curator layout, mode
// readSpring, or readAuto for a node without Dubbo 3's signs) has its port's protocol in its
// metadata "protocol" (Dubbo 3's ports say theirs); Dubbo 3's instances are not Spring's. The
// endpoint's kind says which it was read as.
func curatorEndpoint(id string, data []byte, ci *curatorInstance, mode readMode) (endpoint, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return endpoint{}, bad(reasonJSON, errors.New("the node holds no data: want a Curator ServiceInstance as JSON"))
	}
	if err := json.Unmarshal(data, ci); err != nil {
		return endpoint{}, bad(reasonJSON, fmt.Errorf("not a Curator ServiceInstance in JSON: %s", registry.Shorten(err.Error(), 2*registry.MaxQuoted)))
	}
	if ci.Address == "" {
		return endpoint{}, bad(reasonAddress, errors.New(`no "address": give the instance's IP address or host name`))
	}
	if strings.ContainsAny(ci.Address, " /\t\n") {
		return endpoint{}, bad(reasonAddress, fmt.Errorf(`"address" %s is neither an IP address nor a host name`, registry.Quote(ci.Address)))
	}
	meta, class := metadata(ci.Payload)
	why := dubbo3Sign(class, meta)
	if mode == readAuto {
		mode = readSpring
		if why != "" {
			mode = readDubbo3
		}
	}
	spring := mode == readSpring
	if why != "" && spring {
		// A Dubbo 3 application instance (Java Dubbo or dubbo-go) read as Spring's: its ports
		// would be served as HTTP and Dubbo's bookkeeping as labels.
		return endpoint{}, bad(reasonLayout, fmt.Errorf("a Dubbo 3 application instance (%s), not a Spring Cloud Zookeeper one: read this root with --%s=%s (or --%s=%s,%s when Spring's instances share it)", why, flagLayout, LayoutDubbo3, flagLayout, LayoutCurator, LayoutDubbo3))
	}
	e := endpoint{inst: model.Instance{ID: id, Address: ci.Address, Labels: meta, Health: model.Healthy}}
	if !spring {
		e.kind = kindDubbo3
	}
	if v, ok := meta[statusKey]; ok {
		switch strings.ToUpper(v) {
		case statusUp:
		case statusOutOfService:
			e.inst.Health = model.Draining
		default:
			// DOWN, STARTING, UNKNOWN: not ready for traffic. Fail closed.
			e.inst.Health = model.Unhealthy
		}
		delete(meta, statusKey)
	}
	proto := model.ProtocolHTTP
	if v := strings.TrimSpace(meta[protocolKey]); v != "" && spring {
		// Every port of a ServiceEntry must have a protocol Istio knows: an instance naming
		// another would have its whole service refused, so it is left out.
		proto = model.Protocol(strings.ToUpper(v))
		if !proto.Valid() {
			return endpoint{}, bad(reasonProtocol, fmt.Errorf(`metadata %q %s is not a protocol Istio serves: want one of HTTP, HTTPS, HTTP2, GRPC, GRPC-WEB, TCP, TLS, UDP, MONGO, MYSQL, REDIS (any case)`, protocolKey, registry.Quote(v)))
		}
	}
	if ci.Port != nil {
		if *ci.Port < 1 || *ci.Port > 65535 {
			return endpoint{}, bad(reasonPort, fmt.Errorf(`"port" %d: want 1 to 65535`, *ci.Port))
		}
		e.ports = append(e.ports, model.Port{Number: uint32(*ci.Port), Protocol: proto})
	}
	if ci.SSLPort != nil && *ci.SSLPort != 0 {
		if *ci.SSLPort < 1 || *ci.SSLPort > 65535 {
			return endpoint{}, bad(reasonPort, fmt.Errorf(`"sslPort" %d: want 1 to 65535 (or null)`, *ci.SSLPort))
		}
		if ci.Port != nil && *ci.SSLPort == *ci.Port {
			return endpoint{}, bad(reasonPort, fmt.Errorf(`"sslPort" %d is "port" too: one port cannot be both plain and TLS`, *ci.SSLPort))
		}
		e.ports = append(e.ports, model.Port{Number: uint32(*ci.SSLPort), Protocol: model.ProtocolHTTPS})
	}
	if len(e.ports) == 0 {
		return endpoint{}, bad(reasonPort, errors.New(`no "port" and no "sslPort": give the port the instance listens on`))
	}
	if len(e.inst.Labels) == 0 {
		e.inst.Labels = nil
	}
	return e, nil
}

// metadata returns Spring's payload metadata as strings: strings as they are, numbers and
// booleans as their JSON text; anything else (objects, arrays, null) is left out. A payload of
// another shape (Curator allows any) has no metadata: that is not an error. class is the
// payload's "@class".
func metadata(payload json.RawMessage) (meta map[string]string, class string) {
	if len(payload) == 0 {
		return nil, ""
	}
	var p springPayload
	if err := json.Unmarshal(payload, &p); err != nil || len(p.Metadata) == 0 {
		return nil, p.Class
	}
	out := make(map[string]string, len(p.Metadata))
	for k, raw := range p.Metadata {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			out[k] = s
			continue
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9' || string(raw) == "true" || string(raw) == "false") {
			out[k] = string(raw)
		}
	}
	return out, p.Class
}

// buildService is mapService for a caller that keeps only the ports served last: an empty
// service keeps them as they are.
func buildService(hd hostData, host *template.Template, endpoints []*endpoint, last []model.Port) (svc model.Service, ok bool, err error) {
	svc, _, ok, err = mapService(hd, host, endpoints, portMemory{ports: last})
	return svc, ok, err
}

// mapService maps the well-formed instance nodes of a service onto the model, their
// contributions to its ports admitted already (admitPorts). mem is what the service keeps of
// its ports for when no instance is left (a ServiceEntry needs a port; the service then has no
// endpoints rather than stale ones), next what it keeps after this state (portMemory). ok is
// false when the service has neither an instance nor ports kept: there is nothing valid to
// serve yet.
func mapService(hd hostData, host *template.Template, endpoints []*endpoint, mem portMemory) (svc model.Service, next portMemory, ok bool, err error) {
	svc = model.Service{Namespace: hd.Namespace, Name: hd.Name}
	var b strings.Builder
	if err := host.Execute(&b, hd); err != nil {
		return svc, mem, false, fmt.Errorf("--%s: %w", flagHostTemplate, err)
	}
	svc.Hosts = []string{b.String()}
	// Instances in ID order, so that a port the instances disagree on takes the protocol of the
	// smallest ID, whatever order the nodes were read in.
	slices.SortFunc(endpoints, func(a, b *endpoint) int { return strings.Compare(a.inst.ID, b.inst.ID) })
	// The Sink keeps the slice: no spare capacity (append's doubling left a third of it
	// unused).
	svc.Instances = make([]model.Instance, 0, len(endpoints))
	byNumber := map[uint32]model.Port{}
	for _, e := range endpoints {
		// inst.Labels is shared, not copied: neither the adapter nor the Sink modifies it (see
		// labelSets).
		svc.Instances = append(svc.Instances, e.inst)
		for _, p := range e.ports {
			if _, ok := byNumber[p.Number]; !ok {
				byNumber[p.Number] = p
			}
		}
	}
	for _, p := range byNumber {
		svc.Ports = append(svc.Ports, p)
	}
	svc.Ports = model.SortedPorts(svc.Ports)
	next = mem.after(svc.Ports, len(endpoints))
	if len(svc.Ports) == 0 {
		if len(mem.ports) == 0 {
			return svc, next, false, nil
		}
		svc.Ports = model.SortedPorts(mem.ports)
	}
	uniqueNames(svc.Ports)
	return svc, next, true, nil
}

// uniqueNames makes the port names unique, as they must be in a ServiceEntry: two ports named
// alike (tcp-dubbo on 20880 and 20881) are told apart by their number. Default names
// (<protocol>-<number>, given by the core to a port without one) are unique by their number.
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
