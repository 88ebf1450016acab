// Package model holds the registry-neutral description of services and their
// instances. Adapters translate their registry's records into these plain
// types; the rest of Galleon (conversion, snapshots, streaming) never sees a
// registry-specific type.
//
// The types are plain data: no methods with side effects, no hidden state,
// safe to copy. A Service owns its Instances; an update always carries the
// complete new state of one service.
package model

import (
	"sort"
	"strings"
)

// Protocol is an Istio port protocol name, upper case as Istio spells it
// (HTTP, HTTPS, HTTP2, GRPC, TCP, TLS, MONGO, MYSQL, REDIS, UDP).
type Protocol string

// Istio's port protocols. Anything else is rejected by validation.
const (
	ProtocolHTTP  Protocol = "HTTP"
	ProtocolHTTPS Protocol = "HTTPS"
	ProtocolHTTP2 Protocol = "HTTP2"
	ProtocolGRPC  Protocol = "GRPC"
	ProtocolTCP   Protocol = "TCP"
	ProtocolTLS   Protocol = "TLS"
	ProtocolMongo Protocol = "MONGO"
	ProtocolMySQL Protocol = "MYSQL"
	ProtocolRedis Protocol = "REDIS"
	ProtocolUDP   Protocol = "UDP"
)

// ParseProtocol reads an Istio protocol name in any case ("grpc", "HTTP2"); ok is false for any
// other name.
func ParseProtocol(s string) (p Protocol, ok bool) {
	switch p := Protocol(strings.ToUpper(strings.TrimSpace(s))); p {
	case ProtocolHTTP, ProtocolHTTPS, ProtocolHTTP2, ProtocolGRPC, ProtocolTCP, ProtocolTLS,
		ProtocolMongo, ProtocolMySQL, ProtocolRedis, ProtocolUDP:
		return p, true
	}
	return "", false
}

// Location says whether a service is part of the mesh.
type Location int

const (
	// MeshInternal is the default: the service's workloads run sidecars.
	MeshInternal Location = iota
	// MeshExternal marks a service outside the mesh (no mTLS to it).
	MeshExternal
)

// Resolution says how Envoy finds the service's endpoints.
type Resolution int

const (
	// ResolutionAuto picks STATIC when every instance address is an IP and
	// DNS otherwise. It is the default.
	ResolutionAuto Resolution = iota
	// ResolutionStatic uses the instance addresses as given (IPs).
	ResolutionStatic
	// ResolutionDNS resolves instance addresses (host names) with DNS.
	ResolutionDNS
	// ResolutionNone passes traffic through to the original destination.
	ResolutionNone
)

// Health is an instance's health as the registry reports it, already mapped
// by the adapter onto Galleon's three states.
type Health int

const (
	// Healthy instances receive traffic.
	Healthy Health = iota
	// Unhealthy instances are left out of the endpoints.
	Unhealthy
	// Draining instances (Eureka OUT_OF_SERVICE, Consul maintenance) are
	// alive but must receive no new traffic; they are left out like
	// Unhealthy ones, and never counted as healthy by a panic threshold.
	Draining
)

// ServiceKey identifies a service within one registry: the namespace and
// name of the resources it becomes.
type ServiceKey struct {
	Namespace string
	Name      string
}

// String returns "namespace/name", the MCP resource name form.
func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// Port is one port a service exposes.
type Port struct {
	// Number is the port clients call.
	Number uint32
	// Protocol is the port's protocol; empty means TCP.
	Protocol Protocol
	// Name is optional; the default is "<protocol>-<number>" in lower case.
	Name string
}

// Service is one registry service and its instances: the complete state
// that becomes one ServiceEntry (and, in WorkloadEntry mode, one
// WorkloadEntry per instance).
type Service struct {
	// Namespace and Name become the resource's "<namespace>/<name>".
	Namespace string
	Name      string
	// Hosts are the names clients use. At least one is required.
	Hosts []string
	// Addresses are optional virtual IPs or CIDRs for the hosts. When the
	// registry gives none, the core allocates one per host
	// (--vip-allocate, docs/vips.md): leave it empty unless the registry
	// really has an address for the service.
	Addresses []string
	// Ports the service exposes.
	Ports []Port
	// Labels are copied onto the resource's metadata.
	Labels map[string]string
	// Annotations are copied onto the resource's metadata.
	Annotations map[string]string
	// Location is MeshInternal unless the registry says otherwise.
	Location Location
	// Resolution is ResolutionAuto unless the registry says otherwise.
	Resolution Resolution
	// ExportTo lists the namespaces the service is visible to; empty means
	// everywhere.
	ExportTo []string
	// Instances are every known instance, healthy or not. Conversion decides
	// which ones become endpoints.
	Instances []Instance
}

// Key returns the service's identity.
func (s *Service) Key() ServiceKey { return ServiceKey{Namespace: s.Namespace, Name: s.Name} }

// Instance is one running copy of a service.
type Instance struct {
	// ID is unique within the service and stable across restarts of the
	// adapter; it names the WorkloadEntry in WorkloadEntry mode.
	ID string
	// Address is an IP address or a host name.
	Address string
	// Ports maps a service port number to the port this instance listens
	// on. A service port missing here is served on the same number.
	Ports map[uint32]uint32
	// Labels become endpoint labels (and WorkloadEntry labels).
	Labels map[string]string
	// Locality is "region/zone/subzone"; any part may be empty.
	Locality string
	// Network names the instance's network for multi-network meshes.
	Network string
	// Weight is the relative load-balancing weight; 0 means the default.
	Weight uint32
	// Health decides whether the instance receives traffic.
	Health Health
	// ServiceAccount is the workload identity, if the registry knows it.
	ServiceAccount string
}

// SortedPorts returns a copy of ports ordered by number, the order in which
// they appear in generated resources.
func SortedPorts(ports []Port) []Port {
	out := append([]Port(nil), ports...)
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}
