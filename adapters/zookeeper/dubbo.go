package zookeeper

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
)

// dubbo is the Dubbo 2 interface-level layout: <root>/<interface>/providers/<provider URL>, the
// URL (dubbo://10.0.0.1:20880/org.apache.demo.DemoService?group=g1&version=1.0.0&...)
// URL-encoded as the child's name. The node's data (empty or the same URL) is not read: a
// provider joining or leaving costs one read of its interface's providers children.
type dubbo struct {
	// protocols maps a URL scheme to its protocol: registry/dubbo's defaults with the overrides.
	protocols dubboreg.Protocols
}

// dubboNonInterfaces are the children of Dubbo's root that are not interfaces (Dubbo 3's
// interface-to-application mapping, the config center, the metadata report). Java interface
// names are never these.
var dubboNonInterfaces = map[string]bool{"mapping": true, "config": true, "metadata": true}

var knownProtocols = []string{"HTTP", "HTTPS", "HTTP2", "GRPC", "TCP", "TLS", "MONGO", "MYSQL", "REDIS", "UDP"}

// protocolOf checks a protocol name given on the command line.
func protocolOf(s string) (model.Protocol, error) {
	if p, ok := model.ParseProtocol(s); ok {
		return p, nil
	}
	return "", fmt.Errorf("unknown protocol %q", s)
}

// newDubbo returns the layout with the protocol overrides; a wrong entry, which Config.validate
// reports, is left out.
func newDubbo(overrides map[string]string) dubbo {
	protocols, _ := dubboreg.NewProtocols(overrides)
	return dubbo{protocols: protocols}
}

func (dubbo) isService(name string) bool             { return !dubboNonInterfaces[name] }
func (dubbo) instancesPath(root, name string) string { return root + "/" + name + "/providers" }
func (dubbo) overridesPath(root, name string) string { return root + "/" + name + "/configurators" }
func (dubbo) readsData() bool                        { return false }

// providerURL is a parsed provider URL.
type providerURL struct {
	scheme  string
	ip      string
	port    uint32
	path    string
	params  url.Values
	encoded bool // the input was URL-encoded (a znode name), not the URL itself
}

// parseProviderURL parses a provider URL, URL-encoded (as a znode name) or not (as node data).
// Its errors say which part is wrong and quote at most a short, cut piece of it, never the URL:
// a provider URL may carry a token or a password, and the rejection is logged and shown in
// /debug/status (the record, the node's path, names the provider, redacted: redactRecord).
func parseProviderURL(raw string) (providerURL, error) {
	var pu providerURL
	s := raw
	if !strings.Contains(s, "://") {
		dec, err := url.QueryUnescape(s)
		if err != nil {
			return pu, bad(reasonURL, fmt.Errorf("the node's name is not a URL-encoded provider URL (%v): want <protocol>://<ip>:<port>/<interface>?<parameters>, URL-encoded", escapeErr(err)))
		}
		s, pu.encoded = dec, true
	}
	if !strings.Contains(s, "://") {
		return pu, bad(reasonURL, fmt.Errorf("%s has no \"://\": not a provider URL; want <protocol>://<ip>:<port>/<interface>?<parameters>", registry.Quote(redactURL(s))))
	}
	u, err := url.Parse(s)
	if err != nil {
		return pu, bad(reasonURL, fmt.Errorf("not a provider URL: %v", urlErr(err)))
	}
	if u.Scheme == "" {
		return pu, bad(reasonURL, errors.New("the provider URL has no protocol: want <protocol>://<ip>:<port>/<interface>?<parameters>"))
	}
	if u.Host == "" {
		return pu, bad(reasonURL, fmt.Errorf("the %s provider URL has no address: want %s://<ip>:<port>/<interface>?<parameters>", registry.Quote(u.Scheme), registry.Shorten(u.Scheme, registry.MaxQuoted)))
	}
	pu.scheme = strings.ToLower(u.Scheme)
	if pu.params, err = url.ParseQuery(u.RawQuery); err != nil {
		return pu, bad(reasonParameter, fmt.Errorf("the provider URL's parameters: %v", escapeErr(err)))
	}
	// A consumer (or anything but a provider) is no instance, whatever its address.
	if side := pu.params.Get("side"); pu.scheme == "consumer" || side != "" && side != "provider" {
		return pu, errNotInstance
	}
	host, port := u.Hostname(), u.Port()
	ip := net.ParseIP(host)
	if ip == nil {
		return pu, bad(reasonAddress, fmt.Errorf("address %s is not an IP address: a provider registers the IP address it is reached on", registry.Quote(host)))
	}
	if ip.IsUnspecified() {
		return pu, bad(reasonAddress, fmt.Errorf("address %s is unspecified: a provider registers the address it is reached on", host))
	}
	n, err := strconv.ParseUint(port, 10, 32)
	if err != nil || n < 1 || n > 65535 {
		return pu, bad(reasonPort, fmt.Errorf("port %s: want 1 to 65535", registry.Quote(port)))
	}
	pu.ip, pu.port = ip.String(), uint32(n)
	pu.path = strings.TrimPrefix(u.Path, "/")
	return pu, nil
}

// urlErr is the reason url.Parse gave, without the URL it quotes (*url.Error.Error() holds the
// whole input).
func urlErr(err error) string {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return escapeErr(ue.Err)
	}
	return escapeErr(err)
}

// escapeErr is the text of an error of net/url, which quotes at most a few bytes of its input
// (an escape, a port), cut in case a later version quotes more.
func escapeErr(err error) string { return registry.Shorten(err.Error(), 2*registry.MaxQuoted) }

func (d dubbo) parseInstance(iface, id string, _ []byte) (endpoint, error) {
	pu, err := parseProviderURL(id)
	if err != nil {
		return endpoint{}, err
	}
	q := pu.params
	// The address is the ID's host part, not a string of its own: one allocation per provider
	// less (JoinHostPort puts an IPv6 address in brackets).
	instID := net.JoinHostPort(pu.ip, strconv.Itoa(int(pu.port)))
	at := strings.Index(instID, pu.ip)
	e := endpoint{kind: kindDubbo, inst: model.Instance{
		ID:      instID,
		Address: instID[at : at+len(pu.ip)],
		Health:  model.Healthy,
	}}
	if w := q.Get("weight"); w != "" {
		n, err := strconv.ParseUint(w, 10, 32)
		if err != nil {
			return endpoint{}, bad(reasonParameter, fmt.Errorf("weight %s: want a whole number from 0 to %d", registry.Quote(w), uint32(math.MaxUint32)))
		}
		e.inst.Weight = uint32(n)
	}
	// Disabled by the provider's own URL: never served, but kept visible, like Spring's
	// OUT_OF_SERVICE. An operator's override (configurators) may enable it again.
	if strings.EqualFold(q.Get("enabled"), "false") || strings.EqualFold(q.Get("disabled"), "true") {
		e.inst.Health = model.Draining
	}
	e.inst.Labels = dubboreg.ProviderLabels(q.Get)
	e.ports = []model.Port{d.protocols.Port(pu.port, pu.scheme)}
	group, version := q.Get("group"), q.Get("version")
	// Copies: group and version are substrings of the decoded URL, which is not kept.
	group, version = strings.Clone(group), strings.Clone(version)
	e.svc = &hostData{Name: dubboreg.ServiceName(iface, group, version), Interface: iface, Group: group, Version: version}
	return e, nil
}

// override is one of Dubbo 2's dynamic configuration rules under <interface>/configurators, as
// Dubbo Admin writes them to disable a provider or change its weight:
// override://10.0.0.1:20880/org.apache.demo.DemoService?category=configurators&disabled=true,
// URL-encoded as the node's name. The rules for which providers one applies to follow Dubbo's
// AbstractConfigurator (see docs/adapters/zookeeper.md).
type override struct {
	ip   string // "" for every host (0.0.0.0, anyhost)
	port uint32 // 0 for every port
	// application, group and version restrict the rule when set ("*" is unset).
	application, group, version string
	// disabled: leave out (disable), serve again a provider that a broader rule or its own URL
	// disabled (enable), or leave as it is (keep).
	disabled  switchRule
	weight    uint32
	hasWeight bool
}

// switchRule is what an override says of a provider's being served. Plain values, so that two
// parses of the same rules compare equal.
type switchRule uint8

const (
	keep switchRule = iota
	disable
	enable
)

// parseOverride parses one child of <interface>/configurators. errNotInstance: a node Dubbo
// writes that is no rule for providers (empty://, a consumer-side rule, a rule whose
// enabled=false switches it off).
func parseOverride(raw string) (override, error) {
	var o override
	dec, err := url.QueryUnescape(raw)
	if err != nil {
		return o, fmt.Errorf("the node's name is not a URL-encoded override URL (%v): want override://<ip>[:<port>]/<interface>?<parameters>, URL-encoded", escapeErr(err))
	}
	u, err := url.Parse(dec)
	if err != nil {
		return o, fmt.Errorf("not an override URL: %v", urlErr(err))
	}
	switch strings.ToLower(u.Scheme) {
	case "override":
	case "empty", "absent":
		return o, errNotInstance // Dubbo's "no rule" markers; absent rules are Dubbo 2.5's deletions
	default:
		if u.Scheme == "" {
			return o, fmt.Errorf("%s is not an override URL: want override://<ip>[:<port>]/<interface>?<parameters>", registry.Quote(redactURL(dec)))
		}
		return o, fmt.Errorf("a URL of protocol %s is not an override URL: want override://<ip>[:<port>]/<interface>?<parameters>", registry.Quote(u.Scheme))
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return o, fmt.Errorf("the override's parameters: %v", escapeErr(err))
	}
	if side := q.Get("side"); side != "" && side != "provider" {
		return o, errNotInstance
	}
	if strings.EqualFold(q.Get("enabled"), "false") {
		return o, errNotInstance
	}
	switch host := u.Hostname(); {
	case host == "" || host == "0.0.0.0" || host == "*" || strings.EqualFold(q.Get("anyhost"), "true"):
	default:
		ip := net.ParseIP(host)
		if ip == nil {
			return o, fmt.Errorf("address %s is not an IP address (nor 0.0.0.0 for every provider)", registry.Quote(host))
		}
		o.ip = ip.String()
	}
	if p := u.Port(); p != "" && p != "0" {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil || n < 1 || n > 65535 {
			return o, fmt.Errorf("port %s: want 1 to 65535, or none for every port", registry.Quote(p))
		}
		o.port = uint32(n)
	}
	for k, dst := range map[string]*string{"application": &o.application, "group": &o.group, "version": &o.version} {
		if v := q.Get(k); v != "*" {
			*dst = v
		}
	}
	if v := q.Get("disabled"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return o, fmt.Errorf("disabled=%s: want true or false", registry.Quote(v))
		}
		o.disabled = enable
		if b {
			o.disabled = disable
		}
	}
	if v := q.Get("weight"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return o, fmt.Errorf("weight=%s: want a whole number from 0 to %d", registry.Quote(v), uint32(math.MaxUint32))
		}
		o.weight, o.hasWeight = uint32(n), true
	}
	if o.disabled == keep && !o.hasWeight {
		// A rule about something the mesh does not serve (timeout, loadbalance, ...).
		return o, errNotInstance
	}
	return o, nil
}

// applies reports whether o is about provider e.
func (o override) applies(e *endpoint) bool {
	if o.ip != "" && o.ip != e.inst.Address {
		return false
	}
	if o.port != 0 && (len(e.ports) == 0 || e.ports[0].Number != o.port) {
		return false
	}
	return (o.application == "" || o.application == e.inst.Labels["application"]) &&
		(o.group == "" || o.group == e.host().Group) &&
		(o.version == "" || o.version == e.host().Version)
}

// withOverrides returns e as the rules make it. Like Dubbo, rules for every host apply first and
// rules for one host after them, so the more specific rule wins; rules of one kind apply in the
// order of their node names, so the result does not depend on the order they were read in.
func withOverrides(e *endpoint, rules []override) *endpoint {
	out := e
	for _, anyHost := range []bool{true, false} {
		for _, o := range rules {
			if (o.ip == "") != anyHost || !o.applies(e) {
				continue
			}
			if out == e {
				c := *e
				out = &c
			}
			switch o.disabled {
			case disable:
				out.inst.Health = model.Draining
			case enable:
				out.inst.Health = model.Healthy
			}
			if o.hasWeight {
				out.inst.Weight = o.weight
			}
		}
	}
	return out
}

var _ layout = dubbo{}

// merger is implemented by a layout whose instance nodes of one service must be merged before
// they are served: Dubbo 2 registers one provider URL per protocol, so a host exporting an
// interface over dubbo and tri has two nodes, which must be one endpoint (see mergeHosts).
type merger interface {
	merge(eps []*endpoint, labels *labelSets) []*endpoint
}

func (dubbo) merge(eps []*endpoint, labels *labelSets) []*endpoint { return mergeHosts(eps, labels) }

// mergeHosts merges the providers of one service (interface, group, version) that share an
// address into one endpoint, serving every port of their URLs. The providers come with the
// operators' overrides applied, each to its own URL, so every port has its own health and
// weight; a ServiceEntry endpoint serves every port of its ServiceEntry (istiod's
// serviceentry/conversion.go makes one instance per endpoint and service port, on the number
// of the endpoint's ports entry for it or else the service port's own), so the merge cannot
// keep one port out of one host's endpoint, and decides for the host:
//
//   - ID: the ID of the provider with the smallest port number, <ip>:<port>: independent of
//     the order the nodes were read in, the same as before for a host with one protocol.
//   - health: Healthy when every port is; else the health of the smallest port that is not
//     (Draining, in Dubbo 2). Fail closed: a port an operator disabled must get no traffic from
//     the mesh, and the host's endpoint cannot leave that port alone, so the whole host is
//     drained, its other ports too.
//   - weight: the smallest weight its ports have, a port without one (URL and overrides) not
//     counting; 0 (the core's default) when none has one. A weight lowered on one port is kept
//     on that port, so on the host.
//   - labels: the union of the URLs' labels; on a conflict, the smallest port's value.
//   - ports: every port, in number order; Instance.Ports stays nil, since every Dubbo port is
//     served on its own number (the model's default).
//
// eps is returned as it is when no two providers share an address.
func mergeHosts(eps []*endpoint, labels *labelSets) []*endpoint {
	byAddr := make(map[string]int, len(eps))
	shared := false
	for _, e := range eps {
		byAddr[e.inst.Address]++
		shared = shared || byAddr[e.inst.Address] > 1
	}
	if !shared {
		return eps
	}
	groups := map[string][]*endpoint{}
	out := make([]*endpoint, 0, len(byAddr))
	for _, e := range eps {
		if byAddr[e.inst.Address] == 1 {
			out = append(out, e)
			continue
		}
		groups[e.inst.Address] = append(groups[e.inst.Address], e)
	}
	for _, addr := range slices.Sorted(maps.Keys(groups)) {
		out = append(out, mergeHost(groups[addr], labels))
	}
	return out
}

// mergeHost merges the providers of one address (at least two), by mergeHosts' rules.
func mergeHost(group []*endpoint, labels *labelSets) *endpoint {
	group = slices.Clone(group)
	slices.SortFunc(group, func(a, b *endpoint) int {
		if c := cmp.Compare(firstPort(a), firstPort(b)); c != 0 {
			return c
		}
		return strings.Compare(a.inst.ID, b.inst.ID)
	})
	m := *group[0]
	m.ports = nil
	m.inst.Weight = 0
	sameLabels := true
	for _, e := range group {
		m.ports = append(m.ports, e.ports...)
		if m.inst.Health == model.Healthy && e.inst.Health != model.Healthy {
			m.inst.Health = e.inst.Health
		}
		if w := e.inst.Weight; w != 0 && (m.inst.Weight == 0 || w < m.inst.Weight) {
			m.inst.Weight = w
		}
		sameLabels = sameLabels && maps.Equal(e.inst.Labels, group[0].inst.Labels)
	}
	if !sameLabels {
		union := map[string]string{}
		for i := len(group) - 1; i >= 0; i-- { // the smallest port last: its values win
			maps.Copy(union, group[i].inst.Labels)
		}
		m.inst.Labels = labels.intern(union)
	}
	return &m
}

// firstPort is the smallest port number of e (a Dubbo 2 provider has one).
func firstPort(e *endpoint) uint32 {
	var n uint32
	for _, p := range e.ports {
		if n == 0 || p.Number < n {
			n = p.Number
		}
	}
	return n
}

var _ merger = dubbo{}
