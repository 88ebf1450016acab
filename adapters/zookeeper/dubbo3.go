package zookeeper

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/galleon-mesh/galleon/model"
)

// dubbo3 is Dubbo 3's application-level (service discovery) layout. ZookeeperServiceDiscovery
// registers each instance of an application with Curator's ServiceDiscovery:
// <root>/<application>/<ip:port>, root /services unless the registry URL's rootPath (or, when
// rootPath is left at /services, its group) names another. The node holds a Curator
// ServiceInstance (CuratorFrameworkUtils.build) whose payload is Dubbo's ZookeeperInstance:
//
//	{"name": "demo-provider", "id": "10.0.0.1:20880", "address": "10.0.0.1", "port": 20880,
//	 "payload": {"@class": "org.apache.dubbo.registry.zookeeper.ZookeeperInstance",
//	             "id": "10.0.0.1:20880", "name": "demo-provider",
//	             "metadata": {"dubbo.endpoints": "[{\"port\":20880,\"protocol\":\"dubbo\"},{\"port\":50051,\"protocol\":\"tri\"}]",
//	                          "dubbo.metadata.revision": "9ab5a0c2c4a1c5a1", "dubbo.metadata.storage-type": "local", ...}},
//	 "serviceType": "DYNAMIC", ...}
//
// One service per application; the instance is read as in the Curator layout (address, health),
// its ports from the metadata "dubbo.endpoints" with the Dubbo 2 layout's protocols, its labels
// from the metadata but Dubbo's bookkeeping. See docs/adapters/zookeeper.md.
type dubbo3 struct {
	curator
	// protocols maps a Dubbo protocol name to its protocol: dubboProtocols with the overrides.
	protocols map[string]model.Protocol
}

func newDubbo3(overrides map[string]string) dubbo3 {
	return dubbo3{protocols: newDubbo(overrides).protocols}
}

// Dubbo 3's instance metadata (ServiceInstanceMetadataUtils, MetadataServiceURLParamsMetadataCustomizer,
// DefaultMetadataParamsFilter).
const (
	// dubbo3Endpoints is ENDPOINTS: a JSON array, as a string, of the protocols the instance
	// serves and their ports (ProtocolPortsMetadataCustomizer).
	dubbo3Endpoints = "dubbo.endpoints"
	// dubbo3Revision is EXPORTED_SERVICES_REVISION_PROPERTY_NAME: the hash of the
	// application's exported services, which consumers use to fetch its interfaces.
	dubbo3Revision = "dubbo.metadata.revision"
	// dubbo3RevisionLabel is the label the revision is served as.
	dubbo3RevisionLabel = "dubbo-revision"
	// dubbo3Bookkeeping is the prefix of Dubbo's own metadata (endpoints, metadata service URL
	// parameters and URLs, storage type, cluster): none of it is a label.
	dubbo3Bookkeeping = "dubbo."
	// maxDubbo3Labels bounds an instance's labels: Dubbo copies instance parameters and
	// environment labels (DUBBO_LABELS) into the metadata, and every label is in the
	// WorkloadEntry istiod pushes.
	maxDubbo3Labels = 32
	// maxDubbo3LabelValue is Kubernetes' label value limit: a longer value (a JSON blob, a URL)
	// is left out rather than cut and hashed by the core into something no selector matches.
	maxDubbo3LabelValue = 63
)

// dubbo3NotLabels are metadata Dubbo writes that are no labels: the time the provider URL was
// made (it changes at every restart), and the MetadataService's version.
var dubbo3NotLabels = map[string]bool{"timestamp": true, "meta-v": true}

// dubboCategories are the children of a Dubbo 2 interface znode. With register-mode all (Dubbo
// 3's default) and a registry group, Dubbo 3 writes its interfaces and its applications under the
// same root: a child of this name is no instance, so an interface znode is left out silently.
var dubboCategories = map[string]bool{"providers": true, "consumers": true, "configurators": true, "routers": true}

// isService: the root may be shared with the interfaces (dubboCategories), the mapping, the
// config center and the metadata report when the registry has a group (they all take it as
// their root): those are no applications.
func (dubbo3) isService(name string) bool { return !dubboNonInterfaces[name] }

// dubbo3Endpoint is one element of "dubbo.endpoints" (DefaultServiceInstance.Endpoint).
type dubbo3Endpoint struct {
	Port     json.RawMessage `json:"port"`
	Protocol *string         `json:"protocol"`
}

func (d dubbo3) parseInstance(app, id string, data []byte) (endpoint, error) {
	if dubboCategories[id] {
		return endpoint{}, errNotInstance
	}
	// Address, instance ID, health, and the checks of the JSON and of its ports.
	var ci curatorInstance
	e, err := curatorEndpoint(id, data, &ci, false)
	if err != nil {
		return endpoint{}, err
	}
	raw, err := endpointsOf(ci.Payload)
	if err != nil {
		return endpoint{}, err
	}
	e.ports, err = d.ports(raw)
	if err != nil {
		return endpoint{}, err
	}
	if len(e.ports) == 0 {
		// No endpoints: the instance's port, which Dubbo takes from its preferred protocol's
		// URL; the protocol is not recorded, Dubbo's default is assumed.
		if ci.Port == nil {
			return endpoint{}, bad(reasonPort, fmt.Errorf(`no "port" and no metadata %q: give the port the instance listens on`, dubbo3Endpoints))
		}
		e.ports = []model.Port{d.port(uint32(*ci.Port), []string{"dubbo"})} // checked by curator
	}
	e.inst.Labels = dubbo3Labels(e.inst.Labels)
	e.svc = hostData{Name: dubboName(app, "", "")}
	return e, nil
}

// endpointsOf returns the text of the metadata "dubbo.endpoints", "" when it is absent, null or
// empty. Dubbo's metadata are strings: any other JSON value is rejected (metadata leaves
// arrays and objects out, and the instance would silently get the fallback port).
func endpointsOf(payload json.RawMessage) (string, error) {
	// Only the one key is decoded: the others are skipped without a map (metadata decoded
	// them already, and an instance may carry thousands).
	var p struct {
		Metadata struct {
			Endpoints json.RawMessage `json:"dubbo.endpoints"`
		} `json:"metadata"`
	}
	if len(payload) == 0 || json.Unmarshal(payload, &p) != nil {
		return "", nil
	}
	raw := bytes.TrimSpace(p.Metadata.Endpoints)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", bad(reasonParameter, fmt.Errorf(`metadata %q is %s, not a string: Dubbo writes the JSON array as a string, e.g. "[{\"port\":20880,\"protocol\":\"dubbo\"}]"`, dubbo3Endpoints, shown(string(raw))))
	}
	return strings.TrimSpace(s), nil
}

// ports maps "dubbo.endpoints" onto service ports: one per port number, in number order. An
// empty list (or "[]") gives none: Dubbo's consumers then use the instance's port, and so does
// parseInstance.
func (d dubbo3) ports(text string) ([]model.Port, error) {
	if text == "" {
		return nil, nil
	}
	var eps []dubbo3Endpoint
	if err := json.Unmarshal([]byte(text), &eps); err != nil {
		return nil, bad(reasonParameter, fmt.Errorf(`metadata %q %s: not a JSON array of {"port": <number>, "protocol": <name>}: %v`, dubbo3Endpoints, quote(text), cut(err.Error(), 2*maxQuoted)))
	}
	byNumber := map[uint32][]string{}
	for i, ep := range eps {
		proto := ""
		if ep.Protocol != nil {
			proto = strings.ToLower(strings.TrimSpace(*ep.Protocol))
		}
		if proto == "" {
			return nil, bad(reasonParameter, fmt.Errorf(`metadata %q entry %d has no "protocol": want the Dubbo protocol name (dubbo, tri, rest, ...)`, dubbo3Endpoints, i+1))
		}
		raw := bytes.TrimSpace(ep.Port)
		if len(raw) == 0 || string(raw) == "null" {
			return nil, bad(reasonPort, fmt.Errorf(`metadata %q entry %d (%s) has no "port": want 1 to 65535`, dubbo3Endpoints, i+1, shown(proto)))
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || n < 1 || n > 65535 {
			return nil, bad(reasonPort, fmt.Errorf(`metadata %q entry %d (%s): "port" %s: want a whole number from 1 to 65535`, dubbo3Endpoints, i+1, shown(proto), shown(string(raw))))
		}
		if !slices.Contains(byNumber[uint32(n)], proto) {
			if len(byNumber[uint32(n)]) == maxProtocolsPerPort {
				return nil, bad(reasonPort, fmt.Errorf(`metadata %q names more than %d protocols on port %d`, dubbo3Endpoints, maxProtocolsPerPort, n))
			}
			byNumber[uint32(n)] = append(byNumber[uint32(n)], proto)
		}
		if len(byNumber) > maxServicePorts {
			// Istio's limit for a ServiceEntry: the instance alone would make its service
			// invalid, so it is left out and the rest of the service served.
			return nil, bad(reasonPort, fmt.Errorf(`metadata %q lists more than %d ports, the most a ServiceEntry may have`, dubbo3Endpoints, maxServicePorts))
		}
	}
	var out []model.Port
	for _, n := range slices.Sorted(maps.Keys(byNumber)) {
		out = append(out, d.port(n, byNumber[n]))
	}
	return out, nil
}

// port is port number n serving the Dubbo protocols names. Several protocols on one number
// (Dubbo 3's port unification) that Istio would not speak alike are opaque TCP, the one
// protocol that carries them all. A port serving dubbo as TCP is named tcp-dubbo.
func (d dubbo3) port(n uint32, names []string) model.Port {
	p := model.Port{Number: n}
	for i, name := range names {
		proto, ok := d.protocols[name]
		if !ok {
			proto = model.ProtocolTCP
		}
		if i > 0 && proto != p.Protocol {
			proto = model.ProtocolTCP
		}
		p.Protocol = proto
	}
	if p.Protocol == model.ProtocolTCP && slices.Contains(names, "dubbo") {
		p.Name = dubboPortName
	}
	return p
}

// dubbo3Labels are the endpoint labels of an instance's metadata: Dubbo's bookkeeping left out,
// the revision as dubbo-revision, values over 63 characters left out, then at most 32 labels,
// the revision first and the others in key order. Keys and values are otherwise as registered:
// the core repairs them to Kubernetes label syntax (model.Labels).
func dubbo3Labels(meta map[string]string) map[string]string {
	out := map[string]string{}
	if v, ok := meta[dubbo3Revision]; ok && utf8.RuneCountInString(v) <= maxDubbo3LabelValue {
		out[dubbo3RevisionLabel] = v
	}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		if len(out) == maxDubbo3Labels {
			break
		}
		v := meta[k]
		if strings.HasPrefix(k, dubbo3Bookkeeping) || dubbo3NotLabels[k] || utf8.RuneCountInString(v) > maxDubbo3LabelValue {
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

// maxProtocolsPerPort bounds the protocols one port of "dubbo.endpoints" may name (Dubbo's port
// unification serves a handful), so that a crafted list costs no quadratic search.
const maxProtocolsPerPort = 16

var _ layout = dubbo3{}
