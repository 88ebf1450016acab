package dubbo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// PortName is the name of a port serving Dubbo's own protocol (dubbo) as TCP: Istio reads the
// protocol from the prefix (tcp), and the name says what runs on it.
const PortName = "tcp-dubbo"

// DefaultProtocols describes the protocols of Dubbo's protocol names (URL schemes) before
// overrides, for a flag's help. A name not listed is TCP.
const DefaultProtocols = "dubbo=TCP, tri=GRPC, grpc=GRPC, rest=HTTP, http=HTTP, https=HTTPS (others: TCP)"

// defaultProtocol is the protocol of Dubbo protocol name (lower case) before overrides.
func defaultProtocol(name string) (model.Protocol, bool) {
	switch name {
	case "dubbo":
		return model.ProtocolTCP, true
	case "tri", "grpc":
		return model.ProtocolGRPC, true
	case "rest", "http":
		return model.ProtocolHTTP, true
	case "https":
		return model.ProtocolHTTPS, true
	}
	return "", false
}

// Reasons the errors of this package are counted under (registry.Reason).
const (
	// ReasonParameter: a parameter or metadata value is malformed ("dubbo.endpoints").
	ReasonParameter = "parameter"
	// ReasonPort: a port is missing or out of range, or there are too many.
	ReasonPort = "port"
)

// MaxPorts is the most ports a ServiceEntry may have (the CRD's limit): an instance listing more
// would make its whole service invalid.
const MaxPorts = 256

// MaxProtocolsPerPort bounds the protocols one port of "dubbo.endpoints" may name (Dubbo's port
// unification serves a handful), so that a crafted list costs no quadratic search.
const MaxProtocolsPerPort = 16

// Protocols maps Dubbo protocol names (URL schemes: dubbo, tri, rest, ...) onto Istio
// protocols: DefaultProtocols with an operator's overrides. The zero value has no overrides.
// It is not modified after NewProtocols returns it.
type Protocols struct {
	overrides map[string]model.Protocol // lower-case name -> protocol
}

// NewProtocols returns the protocols with overrides (name -> Istio protocol name in any case,
// e.g. {"hessian": "HTTP"}). Each entry that is wrong (an empty name, a protocol Istio does not
// know) is left out and named in err, to be reported against the flag that gave it.
func NewProtocols(overrides map[string]string) (Protocols, error) {
	p := Protocols{overrides: make(map[string]model.Protocol, len(overrides))}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(overrides)) {
		v := overrides[name]
		proto, ok := model.ParseProtocol(v)
		key := strings.ToLower(strings.TrimSpace(name))
		if !ok || key == "" {
			errs = append(errs, fmt.Errorf("%s=%s: want name=protocol, protocol one of HTTP, HTTPS, HTTP2, GRPC, TCP, TLS, MONGO, MYSQL, REDIS, UDP", name, v))
			continue
		}
		p.overrides[key] = proto
	}
	return p, errors.Join(errs...)
}

// Of is the protocol of Dubbo protocol name (any case): the override, else the default, else
// TCP.
func (p Protocols) Of(name string) model.Protocol {
	name = strings.ToLower(name)
	if proto, ok := p.overrides[name]; ok {
		return proto
	}
	if proto, ok := defaultProtocol(name); ok {
		return proto
	}
	return model.ProtocolTCP
}

// Port is port number n serving the Dubbo protocols names (lower case; one for a Dubbo 2
// provider URL, several for Dubbo 3's port unification). Several protocols on one number that
// Istio would not speak alike are opaque TCP, the one protocol that carries them all. A port
// serving dubbo as TCP is named PortName; other ports get the core's default name.
func (p Protocols) Port(n uint32, names ...string) model.Port {
	port := model.Port{Number: n}
	for i, name := range names {
		proto := p.Of(name)
		if i > 0 && proto != port.Protocol {
			proto = model.ProtocolTCP
		}
		port.Protocol = proto
	}
	if port.Protocol == model.ProtocolTCP && slices.Contains(names, "dubbo") {
		port.Name = PortName
	}
	return port
}

// endpoint is one element of "dubbo.endpoints" (DefaultServiceInstance.Endpoint).
type endpoint struct {
	Port     json.RawMessage `json:"port"`
	Protocol *string         `json:"protocol"`
}

// Endpoints maps the text of a Dubbo 3 instance's metadata "dubbo.endpoints" (a JSON array, as
// a string, of {"port": <number>, "protocol": <name>}, ProtocolPortsMetadataCustomizer) onto
// service ports: one per port number, in number order, each as Port makes it. An empty text or
// "[]" gives none: Dubbo's consumers then use the instance's own port, and so must the caller.
// Errors carry ReasonParameter or ReasonPort and quote at most a short, cut piece of text.
func (p Protocols) Endpoints(text string) ([]model.Port, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil, nil
	}
	var eps []endpoint
	if err := json.Unmarshal([]byte(text), &eps); err != nil {
		return nil, registry.Reason(ReasonParameter, fmt.Errorf(`metadata %q %s: not a JSON array of {"port": <number>, "protocol": <name>}: %v`, EndpointsKey, registry.Quote(text), registry.Shorten(err.Error(), 2*registry.MaxQuoted)))
	}
	byNumber := map[uint32][]string{}
	for i, ep := range eps {
		proto := ""
		if ep.Protocol != nil {
			proto = strings.ToLower(strings.TrimSpace(*ep.Protocol))
		}
		if proto == "" {
			return nil, registry.Reason(ReasonParameter, fmt.Errorf(`metadata %q entry %d has no "protocol": want the Dubbo protocol name (dubbo, tri, rest, ...)`, EndpointsKey, i+1))
		}
		raw := bytes.TrimSpace(ep.Port)
		if len(raw) == 0 || string(raw) == "null" {
			return nil, registry.Reason(ReasonPort, fmt.Errorf(`metadata %q entry %d (%s) has no "port": want 1 to 65535`, EndpointsKey, i+1, registry.Shown(proto)))
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || n < 1 || n > 65535 {
			return nil, registry.Reason(ReasonPort, fmt.Errorf(`metadata %q entry %d (%s): "port" %s: want a whole number from 1 to 65535`, EndpointsKey, i+1, registry.Shown(proto), registry.Shown(string(raw))))
		}
		if !slices.Contains(byNumber[uint32(n)], proto) {
			if len(byNumber[uint32(n)]) == MaxProtocolsPerPort {
				return nil, registry.Reason(ReasonPort, fmt.Errorf(`metadata %q names more than %d protocols on port %d`, EndpointsKey, MaxProtocolsPerPort, n))
			}
			byNumber[uint32(n)] = append(byNumber[uint32(n)], proto)
		}
		if len(byNumber) > MaxPorts {
			// The instance alone would make its service invalid: the caller leaves it out and
			// serves the rest of the service.
			return nil, registry.Reason(ReasonPort, fmt.Errorf(`metadata %q lists more than %d ports, the most a ServiceEntry may have`, EndpointsKey, MaxPorts))
		}
	}
	out := make([]model.Port, 0, len(byNumber))
	for _, n := range slices.Sorted(maps.Keys(byNumber)) {
		out = append(out, p.Port(n, byNumber[n]...))
	}
	return out, nil
}
