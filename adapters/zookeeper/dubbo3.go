package zookeeper

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
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
	// protocols maps a Dubbo protocol name to its protocol: registry/dubbo's defaults with the
	// overrides.
	protocols dubboreg.Protocols
}

func newDubbo3(overrides map[string]string) dubbo3 {
	return dubbo3{protocols: newDubbo(overrides).protocols}
}

// The Dubbo 3 metadata read here are registry/dubbo's (EndpointsKey, RevisionKey).
const (
	dubbo3Endpoints = dubboreg.EndpointsKey
	dubbo3Revision  = dubboreg.RevisionKey
)

// dubboCategories are the children of a Dubbo 2 interface znode. With register-mode all (Dubbo
// 3's default) and a registry group, Dubbo 3 writes its interfaces and its applications under the
// same root: a child of this name is no instance, so an interface znode is left out silently.
var dubboCategories = map[string]bool{"providers": true, "consumers": true, "configurators": true, "routers": true}

// isService: the root may be shared with the interfaces (dubboCategories), the mapping, the
// config center and the metadata report when the registry has a group (they all take it as
// their root): those are no applications.
func (dubbo3) isService(name string) bool { return !dubboNonInterfaces[name] }

func (d dubbo3) parseInstance(app, id string, data []byte) (endpoint, error) {
	if dubboCategories[id] {
		return endpoint{}, errNotInstance
	}
	// Address, instance ID, health, and the checks of the JSON and of its ports.
	var ci curatorInstance
	e, err := curatorEndpoint(id, data, &ci, readDubbo3)
	if err != nil {
		return endpoint{}, err
	}
	return d.finish(app, e, &ci)
}

// finish reads what Dubbo 3 adds to the Curator instance ci of application app, read as e: its
// ports, labels and service.
func (d dubbo3) finish(app string, e endpoint, ci *curatorInstance) (endpoint, error) {
	raw, err := endpointsOf(ci.Payload)
	if err != nil {
		return endpoint{}, err
	}
	e.ports, err = d.protocols.Endpoints(raw)
	if err != nil {
		return endpoint{}, err
	}
	if len(e.ports) == 0 {
		// No endpoints: the instance's port, which Dubbo takes from its preferred protocol's
		// URL; the protocol is not recorded, Dubbo's default is assumed.
		if ci.Port == nil {
			return endpoint{}, bad(reasonPort, fmt.Errorf(`no "port" and no metadata %q: give the port the instance listens on`, dubbo3Endpoints))
		}
		e.ports = []model.Port{d.protocols.Port(uint32(*ci.Port), "dubbo")} // checked by curator
	}
	e.inst.Labels = dubboreg.Labels(e.inst.Labels, nil)
	e.svc = &hostData{Name: dubboreg.ServiceName(app, "", "")}
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
		return "", bad(reasonParameter, fmt.Errorf(`metadata %q is %s, not a string: Dubbo writes the JSON array as a string, e.g. "[{\"port\":20880,\"protocol\":\"dubbo\"}]"`, dubbo3Endpoints, registry.Shown(string(raw))))
	}
	return strings.TrimSpace(s), nil
}

var _ layout = dubbo3{}
