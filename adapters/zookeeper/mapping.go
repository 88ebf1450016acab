package zookeeper

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/template"

	"github.com/galleon-mesh/galleon/common/model"
)

// layout is one way of keeping services in ZooKeeper: where a service's instance nodes are and
// what one holds. Step 1 has the Curator / Spring Cloud Zookeeper layout; the Dubbo interface-
// and application-level layouts slot in here (their instances are children of
// <root>/<interface>/providers, one URL-encoded dubbo:// URL per child name, no data).
type layout interface {
	// instancesPath is the znode whose children are the instances of service name.
	instancesPath(root, name string) string
	// parseInstance reads the instance node id of service name.
	parseInstance(name, id string, data []byte) (endpoint, error)
}

// endpoint is one well-formed instance node: the instance and the service ports it serves.
type endpoint struct {
	inst  model.Instance
	ports []model.Port
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
	Metadata map[string]json.RawMessage `json:"metadata"`
}

func (curator) instancesPath(root, name string) string { return root + "/" + name }

func (curator) parseInstance(name, id string, data []byte) (endpoint, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return endpoint{}, errors.New("the node holds no data: want a Curator ServiceInstance as JSON")
	}
	var ci curatorInstance
	if err := json.Unmarshal(data, &ci); err != nil {
		return endpoint{}, fmt.Errorf("not a Curator ServiceInstance in JSON: %w", err)
	}
	if ci.Address == "" {
		return endpoint{}, errors.New(`no "address": give the instance's IP address or host name`)
	}
	if strings.ContainsAny(ci.Address, " /\t\n") {
		return endpoint{}, fmt.Errorf(`"address" %q is neither an IP address nor a host name`, ci.Address)
	}
	meta := metadata(ci.Payload)
	e := endpoint{inst: model.Instance{ID: id, Address: ci.Address, Labels: meta, Health: model.Healthy}}
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
	if v := meta[protocolKey]; v != "" {
		proto = model.Protocol(strings.ToUpper(v))
	}
	if ci.Port != nil {
		if *ci.Port < 1 || *ci.Port > 65535 {
			return endpoint{}, fmt.Errorf(`"port" %d: want 1 to 65535`, *ci.Port)
		}
		e.ports = append(e.ports, model.Port{Number: uint32(*ci.Port), Protocol: proto})
	}
	if ci.SSLPort != nil && *ci.SSLPort != 0 {
		if *ci.SSLPort < 1 || *ci.SSLPort > 65535 {
			return endpoint{}, fmt.Errorf(`"sslPort" %d: want 1 to 65535 (or null)`, *ci.SSLPort)
		}
		if ci.Port != nil && *ci.SSLPort == *ci.Port {
			return endpoint{}, fmt.Errorf(`"sslPort" %d is "port" too: one port cannot be both plain and TLS`, *ci.SSLPort)
		}
		e.ports = append(e.ports, model.Port{Number: uint32(*ci.SSLPort), Protocol: model.ProtocolHTTPS})
	}
	if len(e.ports) == 0 {
		return endpoint{}, errors.New(`no "port" and no "sslPort": give the port the instance listens on`)
	}
	if len(e.inst.Labels) == 0 {
		e.inst.Labels = nil
	}
	return e, nil
}

// metadata returns Spring's payload metadata as strings: strings as they are, numbers and
// booleans as their JSON text; anything else (objects, arrays, null) is left out. A payload of
// another shape (Curator allows any) has no metadata: that is not an error.
func metadata(payload json.RawMessage) map[string]string {
	if len(payload) == 0 {
		return nil
	}
	var p springPayload
	if err := json.Unmarshal(payload, &p); err != nil || len(p.Metadata) == 0 {
		return nil
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
	return out
}

// buildService maps the well-formed instance nodes of a service onto the model. ports are the
// ports reported last, kept when no instance is left (a ServiceEntry needs a port; the service
// then has no endpoints rather than stale ones). ok is false when the service has neither an
// instance nor ports reported before: there is nothing valid to serve yet.
func buildService(ns, name string, host *template.Template, endpoints []*endpoint, last []model.Port) (svc model.Service, ok bool, err error) {
	svc = model.Service{Namespace: ns, Name: name}
	var b strings.Builder
	if err := host.Execute(&b, hostData{Name: name, Namespace: ns}); err != nil {
		return svc, false, fmt.Errorf("--zk-host-template: %w", err)
	}
	svc.Hosts = []string{b.String()}
	// Instances in ID order, so that a port the instances disagree on takes the protocol of the
	// smallest ID, whatever order the nodes were read in.
	slices.SortFunc(endpoints, func(a, b *endpoint) int { return strings.Compare(a.inst.ID, b.inst.ID) })
	byNumber := map[uint32]model.Port{}
	for _, e := range endpoints {
		inst := e.inst
		inst.Labels = cloneMap(inst.Labels)
		svc.Instances = append(svc.Instances, inst)
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
	if len(svc.Ports) == 0 {
		if len(last) == 0 {
			return svc, false, nil
		}
		svc.Ports = slices.Clone(last)
	}
	return svc, true, nil
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
