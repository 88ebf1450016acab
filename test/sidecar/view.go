package sidecar

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	dnsproto "istio.io/istio/pkg/dns/proto"
)

// Cluster names istiod gives its catch-all clusters (pilot/pkg/networking/util).
const (
	PassthroughCluster = "PassthroughCluster"
	BlackHoleCluster   = "BlackHoleCluster"
)

const (
	typeHCM           = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	typeTCPProxy      = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
	typeHTTPInspector = "type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3.HttpInspector"
	nameHTTPInspector = "envoy.filters.listener.http_inspector"
	// rawBuffer is the transport protocol Envoy gives a connection no listener filter named:
	// plain text (tls_inspector sets the same for non-TLS bytes).
	rawBuffer = "raw_buffer"
)

// View is what one sidecar received from istiod: the resources of each type, by name.
type View struct {
	Pod             Pod
	Listeners       map[string]*listenerv3.Listener
	Clusters        map[string]*clusterv3.Cluster
	LoadAssignments map[string]*endpointv3.ClusterLoadAssignment // by EDS service name
	Routes          map[string]*routev3.RouteConfiguration
	NameTable       *dnsproto.NameTable
	Versions        map[string]string // type URL -> version_info of its last response
}

// Destination is where the sidecar sends a connection or request.
type Destination struct {
	Listener    string // the listener that accepted the connection
	FilterChain string // the name of the filter chain it matched ("" if the chain has none)
	// Closed: no filter chain matched and the listener has no default chain, so Envoy closes
	// the connection.
	Closed bool

	// Cluster is the tcp_proxy's cluster, or the HTTP route's. WeightedClusters is set instead
	// when the tcp_proxy or route splits traffic.
	Cluster          string
	WeightedClusters []WeightedCluster

	// HTTP: the chain ends in an HTTP connection manager with route config RouteConfig. Dial
	// stops there; HTTP goes on to the virtual host and route.
	HTTP           bool
	RouteConfig    string
	VirtualHost    string
	Route          string
	NoRoute        bool   // no virtual host or no route matched: Envoy answers 404
	DirectResponse uint32 // the route answers itself with this status
	Redirect       bool   // the route answers with a redirect
}

// WeightedCluster is one cluster of a weighted split.
type WeightedCluster struct {
	Name   string
	Weight uint32
}

// Passthrough reports whether the connection leaves to its original destination.
func (d Destination) Passthrough() bool { return d.Cluster == PassthroughCluster }

// BlackHole reports whether the connection is dropped by istiod's BlackHoleCluster.
func (d Destination) BlackHole() bool { return d.Cluster == BlackHoleCluster }

func (d Destination) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "listener %s chain %q", d.Listener, d.FilterChain)
	switch {
	case d.Closed:
		b.WriteString(": no chain matched, connection closed")
		return b.String()
	case d.HTTP:
		fmt.Fprintf(&b, " HTTP route config %q", d.RouteConfig)
		if d.VirtualHost != "" || d.NoRoute {
			fmt.Fprintf(&b, " vhost %q route %q", d.VirtualHost, d.Route)
		}
	}
	switch {
	case d.NoRoute:
		b.WriteString(": no route (404)")
	case d.DirectResponse != 0:
		fmt.Fprintf(&b, ": direct response %d", d.DirectResponse)
	case d.Redirect:
		b.WriteString(": redirect")
	case d.Cluster != "":
		fmt.Fprintf(&b, " -> %s", d.Cluster)
	case len(d.WeightedClusters) > 0:
		fmt.Fprintf(&b, " -> %v", d.WeightedClusters)
	}
	return b.String()
}

// connection is what Envoy's filter chain match sees of a downstream connection.
type connection struct {
	ip        netip.Addr // original destination
	port      uint32
	sni       string   // requested server name ("" for plain text)
	transport string   // detected transport protocol
	alpn      []string // requested / detected application protocols
}

// Dial says where the sidecar sends a plain-text TCP connection the application opened to
// ip:port (captured by iptables to the virtual outbound listener). For a chain that ends in an
// HTTP connection manager it stops at the route config name: see HTTP.
func (v *View) Dial(ip string, port uint32) (Destination, error) {
	d, _, err := v.connect(ip, port, false)
	return d, err
}

// HTTP says where the sidecar sends a plain-text HTTP/1.1 request "GET /" with Host host
// (which may carry ":port") on a connection to ip:port.
func (v *View) HTTP(ip string, port uint32, host string) (Destination, error) {
	d, h, err := v.connect(ip, port, true)
	if err != nil || h == nil {
		return d, err // no HTTP connection manager: the bytes go where Dial says
	}
	rc := h.GetRouteConfig() // inline
	if rc == nil {
		if rc = v.Routes[d.RouteConfig]; rc == nil {
			return d, fmt.Errorf("sidecar: route config %q of listener %s was not fetched", d.RouteConfig, d.Listener)
		}
	}
	vh, err := virtualHostFor(rc, h, host, port)
	if err != nil {
		return d, fmt.Errorf("sidecar: route config %q: %w", d.RouteConfig, err)
	}
	if vh == nil {
		d.NoRoute = true
		return d, nil
	}
	d.VirtualHost = vh.GetName()
	r, err := firstRoute(vh, "/")
	if err != nil {
		return d, fmt.Errorf("sidecar: route config %q virtual host %q: %w", d.RouteConfig, vh.GetName(), err)
	}
	if r == nil {
		d.NoRoute = true
		return d, nil
	}
	d.Route = r.GetName()
	switch a := r.GetAction().(type) {
	case *routev3.Route_Route:
		switch {
		case a.Route.GetCluster() != "":
			d.Cluster = a.Route.GetCluster()
		case a.Route.GetWeightedClusters() != nil:
			for _, c := range a.Route.GetWeightedClusters().GetClusters() {
				d.WeightedClusters = append(d.WeightedClusters, WeightedCluster{c.GetName(), c.GetWeight().GetValue()})
			}
		default:
			return d, fmt.Errorf("sidecar: route %q of virtual host %q: unsupported cluster specifier %T", r.GetName(), vh.GetName(), a.Route.GetClusterSpecifier())
		}
	case *routev3.Route_DirectResponse:
		d.DirectResponse = a.DirectResponse.GetStatus()
	case *routev3.Route_Redirect:
		d.Redirect = true
	default:
		return d, fmt.Errorf("sidecar: route %q of virtual host %q: unsupported action %T", r.GetName(), vh.GetName(), a)
	}
	return d, nil
}

// connect picks the listener and filter chain for a connection to ip:port and reads its
// terminal filter. isHTTP: the connection carries HTTP/1.1, which an http_inspector detects.
func (v *View) connect(ip string, port uint32, isHTTP bool) (Destination, *hcmv3.HttpConnectionManager, error) {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return Destination{}, nil, fmt.Errorf("sidecar: %w", err)
	}
	addr = addr.Unmap()
	virtual, err := v.virtualOutbound()
	if err != nil {
		return Destination{}, nil, err
	}
	l, err := v.listenerFor(virtual, addr, port)
	if err != nil {
		return Destination{}, nil, err
	}
	d := Destination{Listener: l.GetName()}
	c := connection{ip: addr, port: port, transport: rawBuffer}
	if isHTTP {
		// The virtual listener's listener filters run before the hand-off, the target's after.
		for _, ll := range []*listenerv3.Listener{virtual, l} {
			detects, err := hasHTTPInspector(ll)
			if err != nil {
				return d, nil, err
			}
			if detects {
				c.alpn = []string{"http/1.1"}
			}
		}
	}
	fc, err := selectFilterChain(l, c)
	if err != nil {
		return d, nil, fmt.Errorf("sidecar: listener %s: %w", l.GetName(), err)
	}
	if fc == nil {
		d.Closed = true
		return d, nil, nil
	}
	d.FilterChain = fc.GetName()
	h, err := terminalFilter(&d, fc)
	if err != nil {
		return d, nil, fmt.Errorf("sidecar: listener %s chain %q: %w", l.GetName(), fc.GetName(), err)
	}
	return d, h, nil
}

// virtualOutbound is the listener iptables redirects outbound connections to: the outbound
// listener with use_original_dst.
func (v *View) virtualOutbound() (*listenerv3.Listener, error) {
	var found []*listenerv3.Listener
	for _, l := range v.Listeners {
		if l.GetUseOriginalDst().GetValue() && l.GetTrafficDirection() != corev3.TrafficDirection_INBOUND {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("sidecar: %d outbound listeners with use_original_dst, want 1 (listeners %v)", len(found), Names(v.Listeners))
	}
	return found[0], nil
}

// listenerFor is the listener Envoy's use_original_dst hands a connection to ip:port to: one
// whose address (or additional address) is exactly ip:port, else the wildcard of ip's family
// on port (for IPv4, also [::]:port with ipv4_compat), else the virtual listener itself.
func (v *View) listenerFor(virtual *listenerv3.Listener, ip netip.Addr, port uint32) (*listenerv3.Listener, error) {
	var exact, wildcard, compat []*listenerv3.Listener
	for _, name := range Names(v.Listeners) {
		l := v.Listeners[name]
		if l == virtual {
			continue
		}
		for _, sa := range socketAddresses(l) {
			if sa.GetPortValue() != port {
				continue
			}
			a, err := netip.ParseAddr(sa.GetAddress())
			if err != nil {
				continue // not an IP address: never a hand-off target
			}
			a = a.Unmap()
			switch {
			case a == ip:
				exact = append(exact, l)
			case a.IsUnspecified() && a.Is4() == ip.Is4():
				wildcard = append(wildcard, l)
			case a.IsUnspecified() && ip.Is4() && sa.GetIpv4Compat():
				compat = append(compat, l)
			}
		}
	}
	for _, ls := range [][]*listenerv3.Listener{exact, wildcard, compat} {
		switch len(ls) {
		case 0:
			continue
		case 1:
			return ls[0], nil
		default:
			return nil, fmt.Errorf("sidecar: listeners %s and %s both listen on %s: Envoy rejects the second",
				ls[0].GetName(), ls[1].GetName(), net.JoinHostPort(ip.String(), strconv.Itoa(int(port))))
		}
	}
	return virtual, nil
}

func socketAddresses(l *listenerv3.Listener) []*corev3.SocketAddress {
	var out []*corev3.SocketAddress
	if sa := l.GetAddress().GetSocketAddress(); sa != nil {
		out = append(out, sa)
	}
	for _, a := range l.GetAdditionalAddresses() {
		if sa := a.GetAddress().GetSocketAddress(); sa != nil {
			out = append(out, sa)
		}
	}
	return out
}

func hasHTTPInspector(l *listenerv3.Listener) (bool, error) {
	for _, f := range l.GetListenerFilters() {
		if f.GetName() != nameHTTPInspector && f.GetTypedConfig().GetTypeUrl() != typeHTTPInspector {
			continue
		}
		if f.GetFilterDisabled() != nil {
			return false, fmt.Errorf("sidecar: listener %s: unsupported listener shape: http_inspector with filter_disabled", l.GetName())
		}
		return true, nil
	}
	return false, nil
}

// selectFilterChain is Envoy's filter chain match (FilterChainManagerImpl::findFilterChain): each
// criterion in turn keeps the chains that match it most specifically, with no going back to a
// less specific one when a later criterion then fails; nil when no chain matched and the
// listener has no default chain (Envoy closes the connection).
func selectFilterChain(l *listenerv3.Listener, c connection) (*listenerv3.FilterChain, error) {
	if l.GetFilterChainMatcher() != nil {
		return nil, fmt.Errorf("unsupported listener shape: filter_chain_matcher (the unified matcher API) is not modelled")
	}
	cands := l.GetFilterChains()
	cands = byDestinationPort(cands, c.port)
	cands, err := byDestinationIP(cands, c.ip)
	if err != nil {
		return nil, err
	}
	cands = byServerName(cands, c.sni)
	cands = keepFirst(cands, []string{c.transport}, func(m *listenerv3.FilterChainMatch) []string {
		if p := m.GetTransportProtocol(); p != "" {
			return []string{p}
		}
		return nil
	})
	cands = keepFirst(cands, c.alpn, (*listenerv3.FilterChainMatch).GetApplicationProtocols)
	for _, fc := range cands {
		m := fc.GetFilterChainMatch()
		if len(m.GetDirectSourcePrefixRanges()) > 0 || m.GetSourceType() != listenerv3.FilterChainMatch_ANY ||
			len(m.GetSourcePrefixRanges()) > 0 || len(m.GetSourcePorts()) > 0 {
			return nil, fmt.Errorf("unsupported listener shape: chain %q matches on the source, which is not modelled", fc.GetName())
		}
	}
	switch len(cands) {
	case 0:
		return l.GetDefaultFilterChain(), nil
	case 1:
		return cands[0], nil
	}
	return nil, fmt.Errorf("chains %q and %q have the same match: Envoy rejects such a listener", cands[0].GetName(), cands[1].GetName())
}

func keep(cands []*listenerv3.FilterChain, ok func(*listenerv3.FilterChainMatch) bool) []*listenerv3.FilterChain {
	var out []*listenerv3.FilterChain
	for _, fc := range cands {
		if ok(fc.GetFilterChainMatch()) {
			out = append(out, fc)
		}
	}
	return out
}

// keepFirst keeps the chains that list the first of values any chain lists, else the chains
// that list nothing (Envoy's transport and application protocol steps).
func keepFirst(cands []*listenerv3.FilterChain, values []string, listed func(*listenerv3.FilterChainMatch) []string) []*listenerv3.FilterChain {
	for _, v := range values {
		if m := keep(cands, func(m *listenerv3.FilterChainMatch) bool { return slices.Contains(listed(m), v) }); len(m) > 0 {
			return m
		}
	}
	return keep(cands, func(m *listenerv3.FilterChainMatch) bool { return len(listed(m)) == 0 })
}

// byDestinationPort: chains naming the port if any, else chains naming no port.
func byDestinationPort(cands []*listenerv3.FilterChain, port uint32) []*listenerv3.FilterChain {
	if m := keep(cands, func(m *listenerv3.FilterChainMatch) bool {
		return m.GetDestinationPort() != nil && m.GetDestinationPort().GetValue() == port
	}); len(m) > 0 {
		return m
	}
	return keep(cands, func(m *listenerv3.FilterChainMatch) bool { return m.GetDestinationPort() == nil })
}

// byDestinationIP: the chains with the longest prefix_ranges entry containing ip; no
// prefix_ranges counts as /0.
func byDestinationIP(cands []*listenerv3.FilterChain, ip netip.Addr) ([]*listenerv3.FilterChain, error) {
	best := -1
	var out []*listenerv3.FilterChain
	for _, fc := range cands {
		n, err := longestPrefix(fc.GetFilterChainMatch().GetPrefixRanges(), ip)
		if err != nil {
			return nil, fmt.Errorf("chain %q: %w", fc.GetName(), err)
		}
		switch {
		case n > best:
			best, out = n, []*listenerv3.FilterChain{fc}
		case n == best && n >= 0:
			out = append(out, fc)
		}
	}
	return out, nil
}

// longestPrefix is the length of the longest range containing ip, 0 when there are no ranges,
// -1 when no range contains it.
func longestPrefix(ranges []*corev3.CidrRange, ip netip.Addr) (int, error) {
	if len(ranges) == 0 {
		return 0, nil
	}
	best := -1
	for _, r := range ranges {
		a, err := netip.ParseAddr(r.GetAddressPrefix())
		if err != nil {
			return 0, fmt.Errorf("prefix range %q: %w", r.GetAddressPrefix(), err)
		}
		p, err := a.Unmap().Prefix(int(r.GetPrefixLen().GetValue()))
		if err != nil {
			return 0, fmt.Errorf("prefix range %s/%d: %w", r.GetAddressPrefix(), r.GetPrefixLen().GetValue(), err)
		}
		if p.Contains(ip) && p.Bits() > best {
			best = p.Bits()
		}
	}
	return best, nil
}

// byServerName: for an SNI, chains listing it, else those listing the longest "*.suffix" of it;
// chains listing no server names otherwise, and always without SNI.
func byServerName(cands []*listenerv3.FilterChain, sni string) []*listenerv3.FilterChain {
	lists := func(name string) func(*listenerv3.FilterChainMatch) bool {
		return func(m *listenerv3.FilterChainMatch) bool { return slices.Contains(m.GetServerNames(), name) }
	}
	if sni != "" {
		if m := keep(cands, lists(sni)); len(m) > 0 {
			return m
		}
		for i := strings.IndexByte(sni, '.'); i > 0 && i < len(sni)-1; {
			if m := keep(cands, lists("*"+sni[i:])); len(m) > 0 {
				return m
			}
			next := strings.IndexByte(sni[i+1:], '.')
			if next < 0 {
				break
			}
			i += next + 1
		}
	}
	return keep(cands, func(m *listenerv3.FilterChainMatch) bool { return len(m.GetServerNames()) == 0 })
}

// terminalFilter reads the chain's last network filter (Envoy's terminal one) into d; it returns
// the HTTP connection manager when that is what it is.
func terminalFilter(d *Destination, fc *listenerv3.FilterChain) (*hcmv3.HttpConnectionManager, error) {
	fs := fc.GetFilters()
	if len(fs) == 0 {
		return nil, fmt.Errorf("no filters")
	}
	last := fs[len(fs)-1]
	switch last.GetTypedConfig().GetTypeUrl() {
	case typeTCPProxy:
		tp := &tcpv3.TcpProxy{}
		if err := last.GetTypedConfig().UnmarshalTo(tp); err != nil {
			return nil, err
		}
		d.Cluster = tp.GetCluster()
		for _, c := range tp.GetWeightedClusters().GetClusters() {
			d.WeightedClusters = append(d.WeightedClusters, WeightedCluster{c.GetName(), c.GetWeight()})
		}
		if d.Cluster == "" && len(d.WeightedClusters) == 0 {
			return nil, fmt.Errorf("tcp_proxy without a cluster")
		}
		return nil, nil
	case typeHCM:
		h, err := hcmOf(last)
		if err != nil {
			return nil, err
		}
		d.HTTP = true
		switch {
		case h.GetRds() != nil:
			d.RouteConfig = h.GetRds().GetRouteConfigName()
		case h.GetRouteConfig() != nil:
			d.RouteConfig = h.GetRouteConfig().GetName()
		default:
			return nil, fmt.Errorf("unsupported HTTP connection manager: neither rds nor route_config")
		}
		return h, nil
	}
	return nil, fmt.Errorf("unsupported terminal filter %q (%s)", last.GetName(), last.GetTypedConfig().GetTypeUrl())
}

func hcmOf(f *listenerv3.Filter) (*hcmv3.HttpConnectionManager, error) {
	h := &hcmv3.HttpConnectionManager{}
	if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
		return nil, fmt.Errorf("filter %q: %w", f.GetName(), err)
	}
	return h, nil
}

// virtualHostFor is Envoy's virtual host selection for a Host header: after port stripping
// (ignore_port_in_host_matching, strip_any_host_port, strip_matching_host_port), an exact
// domain, then the longest "*suffix" domain, then the longest "prefix*" domain, then "*";
// the wildcard must stand for at least one character. Matching is case-insensitive.
func virtualHostFor(rc *routev3.RouteConfiguration, h *hcmv3.HttpConnectionManager, host string, port uint32) (*routev3.VirtualHost, error) {
	host = strings.ToLower(host)
	if name, p, ok := splitHostPort(host); ok {
		if rc.GetIgnorePortInHostMatching() || h.GetStripAnyHostPort() || (h.GetStripMatchingHostPort() && p == port) {
			host = name
		}
	}
	var exact, star *routev3.VirtualHost
	var suffix, prefix *routev3.VirtualHost
	suffixLen, prefixLen := -1, -1
	for _, vh := range rc.GetVirtualHosts() {
		if vh.GetMatcher() != nil {
			return nil, fmt.Errorf("unsupported virtual host %q: matcher", vh.GetName())
		}
		for _, d := range vh.GetDomains() {
			d = strings.ToLower(d)
			switch {
			case d == "*":
				star = first(star, vh)
			case d == host:
				exact = first(exact, vh)
			case strings.HasPrefix(d, "*"):
				s := d[1:]
				if len(host) > len(s) && strings.HasSuffix(host, s) && len(s) > suffixLen {
					suffix, suffixLen = vh, len(s)
				}
			case strings.HasSuffix(d, "*"):
				p := d[:len(d)-1]
				if len(host) > len(p) && strings.HasPrefix(host, p) && len(p) > prefixLen {
					prefix, prefixLen = vh, len(p)
				}
			}
		}
	}
	for _, vh := range []*routev3.VirtualHost{exact, suffix, prefix, star} {
		if vh != nil {
			return vh, nil
		}
	}
	return nil, nil
}

func first(have, vh *routev3.VirtualHost) *routev3.VirtualHost {
	if have != nil {
		return have
	}
	return vh
}

// splitHostPort splits "name:port" and "[v6]:port"; ok is false without a port.
func splitHostPort(host string) (string, uint32, bool) {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || (strings.Contains(host[:i], ":") && !strings.HasSuffix(host[:i], "]")) {
		return host, 0, false
	}
	p, err := strconv.ParseUint(host[i+1:], 10, 16)
	if err != nil {
		return host, 0, false
	}
	return host[:i], uint32(p), true
}

// firstRoute is the first route of vh whose match takes a request for path with no headers
// other than Host; a route that matches on anything else fails the lookup (not modelled).
func firstRoute(vh *routev3.VirtualHost, path string) (*routev3.Route, error) {
	for _, r := range vh.GetRoutes() {
		m := r.GetMatch()
		if len(m.GetHeaders()) > 0 || len(m.GetQueryParameters()) > 0 || m.GetGrpc() != nil || m.GetTlsContext() != nil ||
			len(m.GetDynamicMetadata()) > 0 || len(m.GetFilterState()) > 0 || m.GetRuntimeFraction() != nil {
			return nil, fmt.Errorf("route %q: unsupported match on more than the path: %v", r.GetName(), m)
		}
		fold := func(s string) string { return s }
		if cs := m.GetCaseSensitive(); cs != nil && !cs.GetValue() {
			fold = strings.ToLower
		}
		var ok bool
		switch ps := m.GetPathSpecifier().(type) {
		case *routev3.RouteMatch_Prefix:
			ok = strings.HasPrefix(fold(path), fold(ps.Prefix))
		case *routev3.RouteMatch_Path:
			ok = fold(path) == fold(ps.Path)
		case *routev3.RouteMatch_PathSeparatedPrefix:
			p := ps.PathSeparatedPrefix
			ok = path == p || strings.HasPrefix(path, p+"/")
		default:
			return nil, fmt.Errorf("route %q: unsupported path match %T", r.GetName(), ps)
		}
		if ok {
			return r, nil
		}
	}
	return nil, nil
}

// Endpoints are the "ip:port" addresses of a cluster's endpoints, sorted: its EDS load
// assignment, or the load_assignment of a STATIC or DNS cluster. Health status is not looked at.
func (v *View) Endpoints(cluster string) ([]string, error) {
	c, ok := v.Clusters[cluster]
	if !ok {
		return nil, fmt.Errorf("sidecar: no cluster %q (%d clusters)", cluster, len(v.Clusters))
	}
	var cla *endpointv3.ClusterLoadAssignment
	switch {
	case c.GetClusterType() != nil:
		return nil, fmt.Errorf("sidecar: cluster %q: custom cluster type %q", cluster, c.GetClusterType().GetName())
	case c.GetType() == clusterv3.Cluster_EDS:
		if cla, ok = v.LoadAssignments[edsServiceName(c)]; !ok {
			return nil, fmt.Errorf("sidecar: EDS cluster %q: load assignment %q was not fetched", cluster, edsServiceName(c))
		}
	case c.GetType() == clusterv3.Cluster_STATIC || c.GetType() == clusterv3.Cluster_STRICT_DNS || c.GetType() == clusterv3.Cluster_LOGICAL_DNS:
		cla = c.GetLoadAssignment()
	default:
		return nil, fmt.Errorf("sidecar: cluster %q has type %v: no endpoints of its own", cluster, c.GetType())
	}
	var out []string
	for _, lle := range cla.GetEndpoints() {
		for _, e := range lle.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			if sa == nil {
				return nil, fmt.Errorf("sidecar: cluster %q: endpoint without a socket address: %v", cluster, e)
			}
			out = append(out, net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))))
		}
	}
	sort.Strings(out)
	return out, nil
}

// Resolve is what the sidecar's DNS proxy (istio-agent, DNS capture) answers for host from the
// NDS name table: a non-Kubernetes entry answers its own name only; a Kubernetes one also
// "short.namespace", "short.namespace.svc" and, in the pod's namespace, "short" (and its
// deprecated alt_hosts). Search-domain expansion is not modelled. The IPs are sorted; nil means
// the proxy does not answer (the query goes to the upstream resolver).
func (v *View) Resolve(host string) []string {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	var out []string
	for name, ni := range v.NameTable.GetTable() {
		if slices.Contains(v.altHosts(name, ni), host) {
			out = append(out, ni.GetIps()...)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// altHosts mirrors istio-agent's BuildAlternateHosts / generateAltHosts (pkg/dns/client/dns.go),
// for a pod whose domain is "<namespace>.svc.cluster.local".
func (v *View) altHosts(name string, ni *dnsproto.NameTable_NameInfo) []string {
	if ni.GetRegistry() != "Kubernetes" {
		return []string{name}
	}
	const proxyDomain = "svc.cluster.local"
	out := []string{name}
	if !strings.HasSuffix(name, proxyDomain) {
		return out
	}
	short, ns := ni.GetShortname(), ni.GetNamespace()
	out = append(out, short+"."+ns, short+"."+ns+".svc")
	if ns == v.Pod.Namespace {
		out = append(out, short)
	}
	//lint:ignore SA1019 deprecated, but istio-agent still reads it
	return append(out, ni.GetAltHosts()...)
}
