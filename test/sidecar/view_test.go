package sidecar

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	dnsproto "istio.io/istio/pkg/dns/proto"
)

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func tcpChain(t testing.TB, name, cluster string, m *listenerv3.FilterChainMatch) *listenerv3.FilterChain {
	return &listenerv3.FilterChain{Name: name, FilterChainMatch: m, Filters: []*listenerv3.Filter{{
		Name:       "envoy.filters.network.tcp_proxy",
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, &tcpv3.TcpProxy{StatPrefix: cluster, ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: cluster}})},
	}}}
}

func httpChain(t testing.TB, name, rds string, m *listenerv3.FilterChainMatch) *listenerv3.FilterChain {
	h := &hcmv3.HttpConnectionManager{StatPrefix: name, RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: rds}}}
	return &listenerv3.FilterChain{Name: name, FilterChainMatch: m, Filters: []*listenerv3.Filter{
		{Name: "istio.stats"}, // not terminal: ignored
		{Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, h)}},
	}}
}

func address(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// outboundListener is a listener as istiod builds one per service address and port (bind_to_port
// false, reached only through the virtual listener's hand-off).
func outboundListener(ip string, port uint32, chains ...*listenerv3.FilterChain) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name: ip + "_" + strconv.Itoa(int(port)), Address: address(ip, port), BindToPort: wrapperspb.Bool(false),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND, FilterChains: chains,
	}
}

// virtualOutbound is istiod 1.29's virtual outbound listener.
func virtualOutbound(t testing.TB) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name: "virtualOutbound", Address: address("0.0.0.0", 15001), UseOriginalDst: wrapperspb.Bool(true),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		FilterChains: []*listenerv3.FilterChain{
			tcpChain(t, "virtualOutbound-blackhole", BlackHoleCluster, &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(15001)}),
			tcpChain(t, "virtualOutbound-catchall-tcp", PassthroughCluster, nil),
		},
	}
}

func viewOf(t testing.TB, ls ...*listenerv3.Listener) *View {
	v := newView(Pod{Name: "client", Namespace: "shop", IP: "10.99.0.1"})
	v.Listeners[virtualOutbound(t).GetName()] = virtualOutbound(t)
	for _, l := range ls {
		v.Listeners[l.GetName()] = l
	}
	return v
}

func cidr(s string) *corev3.CidrRange {
	p := netip.MustParsePrefix(s)
	return &corev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}
}

func wantDial(t *testing.T, v *View, ip string, port uint32, listener, cluster string) {
	t.Helper()
	d, err := v.Dial(ip, port)
	if err != nil {
		t.Fatalf("Dial %s:%d: %v", ip, port, err)
	}
	if d.Listener != listener || d.Cluster != cluster {
		t.Errorf("Dial %s:%d = %s, want listener %s cluster %s", ip, port, d, listener, cluster)
	}
}

// The hand-off: the listener on exactly ip:port wins over 0.0.0.0:port, which wins over the
// virtual listener; a port nobody listens on stays on the virtual listener (passthrough), and a
// connection to 15001 itself is black-holed by the destination_port chain.
func TestSidecarDialListenerChoice(t *testing.T) {
	v := viewOf(t,
		outboundListener("0.0.0.0", 20880, tcpChain(t, "", "outbound|20880||wild", nil)),
		outboundListener("240.100.0.1", 20880, tcpChain(t, "", "outbound|20880||order", nil)),
		outboundListener("240.100.0.2", 20880, tcpChain(t, "", "outbound|20880||user", nil)),
	)
	wantDial(t, v, "240.100.0.1", 20880, "240.100.0.1_20880", "outbound|20880||order")
	wantDial(t, v, "240.100.0.2", 20880, "240.100.0.2_20880", "outbound|20880||user")
	wantDial(t, v, "10.20.1.1", 20880, "0.0.0.0_20880", "outbound|20880||wild")
	wantDial(t, v, "240.100.0.1", 20881, "virtualOutbound", PassthroughCluster)
	wantDial(t, v, "10.0.0.1", 15001, "virtualOutbound", BlackHoleCluster)
	if d, _ := v.Dial("10.0.0.1", 443); !d.Passthrough() || d.BlackHole() {
		t.Errorf("Dial 10.0.0.1:443 = %s, want passthrough", d)
	}

	// An IPv6 wildcard is not IPv4's; additional_addresses count like the address.
	six := outboundListener("::", 9000, tcpChain(t, "", "six", nil))
	multi := outboundListener("240.100.0.9", 7000, tcpChain(t, "", "multi", nil))
	multi.AdditionalAddresses = []*listenerv3.AdditionalAddress{{Address: address("240.100.0.10", 7000)}}
	v = viewOf(t, six, multi)
	wantDial(t, v, "10.0.0.1", 9000, "virtualOutbound", PassthroughCluster)
	wantDial(t, v, "fd00::1", 9000, "::_9000", "six")
	wantDial(t, v, "240.100.0.10", 7000, "240.100.0.9_7000", "multi")
	six.GetAddress().GetSocketAddress().Ipv4Compat = true
	wantDial(t, v, "10.0.0.1", 9000, "::_9000", "six")
}

// Destination IP: the longest prefix wins whatever the chain order; no prefix is /0.
func TestSidecarDialLongestPrefix(t *testing.T) {
	l := outboundListener("0.0.0.0", 3306,
		tcpChain(t, "any", "any", nil),
		tcpChain(t, "ten", "ten", &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{cidr("10.0.0.0/8")}}),
		tcpChain(t, "ten-one", "ten-one", &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{cidr("192.168.0.0/16"), cidr("10.1.0.0/16")}}),
		tcpChain(t, "host", "host", &listenerv3.FilterChainMatch{PrefixRanges: []*corev3.CidrRange{cidr("10.1.2.3/32")}}),
	)
	v := viewOf(t, l)
	for ip, want := range map[string]string{
		"10.1.2.3": "host", "10.1.2.4": "ten-one", "10.2.0.1": "ten", "192.168.9.9": "ten-one", "172.16.0.1": "any",
	} {
		wantDial(t, v, ip, 3306, "0.0.0.0_3306", want)
	}
	// Reversed order, same answers.
	slices.Reverse(l.FilterChains)
	wantDial(t, v, "10.1.2.4", 3306, "0.0.0.0_3306", "ten-one")
}

// Envoy never goes back to a less specific chain: the chains naming the destination port are
// the only candidates for that port, even when none of them then matches the IP; the default
// chain takes the connection, or it is closed.
func TestSidecarDialNoBacktracking(t *testing.T) {
	l := outboundListener("0.0.0.0", 80,
		tcpChain(t, "port-80-ten", "ten", &listenerv3.FilterChainMatch{DestinationPort: wrapperspb.UInt32(80), PrefixRanges: []*corev3.CidrRange{cidr("10.0.0.0/8")}}),
		tcpChain(t, "any", "any", nil),
	)
	v := viewOf(t, l)
	wantDial(t, v, "10.0.0.1", 80, "0.0.0.0_80", "ten")
	d, err := v.Dial("192.168.0.1", 80)
	if err != nil || !d.Closed || d.Cluster != "" {
		t.Errorf("Dial 192.168.0.1:80 = %s, %v; want closed (no chain, no default), not chain \"any\"", d, err)
	}
	l.DefaultFilterChain = tcpChain(t, "PassthroughFilterChain", PassthroughCluster, nil)
	wantDial(t, v, "192.168.0.1", 80, "0.0.0.0_80", PassthroughCluster)
}

// istiod 1.29's HTTP listener: an http_inspector, one chain for plain-text HTTP (raw_buffer,
// ALPN http/1.1 or h2c) and a passthrough default chain for other bytes.
func httpListener(t testing.TB, inspector bool) *listenerv3.Listener {
	l := outboundListener("0.0.0.0", 8080, httpChain(t, "", "8080", &listenerv3.FilterChainMatch{
		TransportProtocol: "raw_buffer", ApplicationProtocols: []string{"http/1.1", "h2c"},
	}))
	l.DefaultFilterChain = tcpChain(t, "PassthroughFilterChain", PassthroughCluster, &listenerv3.FilterChainMatch{})
	if inspector {
		l.ListenerFilters = []*listenerv3.ListenerFilter{{Name: nameHTTPInspector}}
	}
	return l
}

func routeConfig(name string, vhs ...*routev3.VirtualHost) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: vhs}
}

func vhost(name, cluster string, domains ...string) *routev3.VirtualHost {
	return &routev3.VirtualHost{Name: name, Domains: domains, Routes: []*routev3.Route{{
		Name:   "default",
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
	}}}
}

// Only a connection the http_inspector recognises as HTTP reaches the HTTP chain; raw TCP bytes
// on the same port take the default chain.
func TestSidecarHTTPNeedsInspector(t *testing.T) {
	v := viewOf(t, httpListener(t, true))
	v.Routes["8080"] = routeConfig("8080", vhost("web", "outbound|8080||web.shop.internal", "web.shop.internal"))
	d, err := v.HTTP("192.0.2.1", 8080, "web.shop.internal")
	if err != nil || !d.HTTP || d.RouteConfig != "8080" || d.Cluster != "outbound|8080||web.shop.internal" {
		t.Errorf("HTTP = %s, %v; want route config 8080 -> outbound|8080||web.shop.internal", d, err)
	}
	wantDial(t, v, "192.0.2.1", 8080, "0.0.0.0_8080", PassthroughCluster)

	v = viewOf(t, httpListener(t, false))
	v.Routes["8080"] = routeConfig("8080", vhost("web", "outbound|8080||web.shop.internal", "web.shop.internal"))
	if d, err := v.HTTP("192.0.2.1", 8080, "web.shop.internal"); err != nil || d.HTTP || !d.Passthrough() {
		t.Errorf("HTTP without http_inspector = %s, %v; want the passthrough default chain", d, err)
	}
}

func TestSidecarFilterChainServerNamesAndProtocols(t *testing.T) {
	l := outboundListener("0.0.0.0", 443,
		tcpChain(t, "exact", "exact", &listenerv3.FilterChainMatch{ServerNames: []string{"a.b.example.com"}}),
		tcpChain(t, "long", "long", &listenerv3.FilterChainMatch{ServerNames: []string{"*.b.example.com"}}),
		tcpChain(t, "short", "short", &listenerv3.FilterChainMatch{ServerNames: []string{"*.example.com"}}),
		tcpChain(t, "tls", "tls", &listenerv3.FilterChainMatch{TransportProtocol: "tls"}),
		tcpChain(t, "tls-h2", "tls-h2", &listenerv3.FilterChainMatch{TransportProtocol: "tls", ApplicationProtocols: []string{"h2"}}),
		tcpChain(t, "none", "none", nil),
	)
	for _, tc := range []struct {
		c    connection
		want string
	}{
		{connection{sni: "a.b.example.com", transport: "tls"}, "exact"},
		{connection{sni: "x.b.example.com", transport: "tls"}, "long"},
		{connection{sni: "x.y.example.com", transport: "tls"}, "short"},
		{connection{sni: "other.org", transport: "tls", alpn: []string{"http/1.1", "h2"}}, "tls-h2"},
		{connection{sni: "other.org", transport: "tls", alpn: []string{"http/1.1"}}, "tls"},
		{connection{transport: "raw_buffer"}, "none"},
	} {
		tc.c.ip, tc.c.port = netip.MustParseAddr("10.0.0.1"), 443
		fc, err := selectFilterChain(l, tc.c)
		if err != nil || fc.GetName() != tc.want {
			t.Errorf("%+v: chain %q, %v; want %q", tc.c, fc.GetName(), err, tc.want)
		}
	}
}

// What this package does not model fails loudly instead of guessing.
func TestSidecarUnsupportedShapesFail(t *testing.T) {
	dup := outboundListener("0.0.0.0", 5000, tcpChain(t, "a", "a", nil), tcpChain(t, "b", "b", &listenerv3.FilterChainMatch{}))
	if _, err := viewOf(t, dup).Dial("10.0.0.1", 5000); err == nil || !strings.Contains(err.Error(), "same match") {
		t.Errorf("two chains with the same match: err %v", err)
	}
	unified := outboundListener("0.0.0.0", 5001, tcpChain(t, "a", "a", nil))
	// An empty xds.type.matcher.v3.Matcher, set by reflection (its module is not required here).
	fd := unified.ProtoReflect().Descriptor().Fields().ByName("filter_chain_matcher")
	unified.ProtoReflect().Set(fd, unified.ProtoReflect().NewField(fd))
	if _, err := viewOf(t, unified).Dial("10.0.0.1", 5001); err == nil || !strings.Contains(err.Error(), "unsupported listener shape") {
		t.Errorf("filter_chain_matcher: err %v", err)
	}
	src := outboundListener("0.0.0.0", 5002, tcpChain(t, "a", "a", &listenerv3.FilterChainMatch{SourcePorts: []uint32{1234}}))
	if _, err := viewOf(t, src).Dial("10.0.0.1", 5002); err == nil || !strings.Contains(err.Error(), "unsupported listener shape") {
		t.Errorf("source match: err %v", err)
	}
	// Dial does not choose between two use_original_dst listeners.
	v := viewOf(t)
	second := virtualOutbound(t)
	second.Name = "another"
	v.Listeners["another"] = second
	if _, err := v.Dial("10.0.0.1", 80); err == nil {
		t.Errorf("two virtual listeners: no error")
	}
}

// Virtual hosts: exact domains first, then the longest "*suffix", then the longest "prefix*",
// then "*"; the port is part of the host unless the route config or HCM strips it.
func TestSidecarVirtualHostOrder(t *testing.T) {
	rc := routeConfig("8080",
		vhost("star", "star", "*"),
		vhost("short-suffix", "short-suffix", "*.example.com"),
		vhost("long-suffix", "long-suffix", "*.bar.example.com"),
		vhost("prefix", "prefix", "foo.*"),
		vhost("exact", "exact", "foo.example.com", "foo.example.com:8080"),
	)
	h := &hcmv3.HttpConnectionManager{}
	for host, want := range map[string]string{
		"foo.example.com":      "exact",
		"FOO.example.com:8080": "exact",
		"x.bar.example.com":    "long-suffix",
		"x.example.com":        "short-suffix",
		"foo.other":            "prefix",
		"foo.":                 "star", // a wildcard stands for at least one character
		"elsewhere":            "star",
		"x.example.com:8080":   "star", // the port is part of the host
	} {
		vh, err := virtualHostFor(rc, h, host, 8080)
		if err != nil || vh.GetName() != want {
			t.Errorf("host %q: virtual host %q, %v; want %q", host, vh.GetName(), err, want)
		}
	}
	rc.IgnorePortInHostMatching = true
	if vh, _ := virtualHostFor(rc, h, "x.example.com:8080", 8080); vh.GetName() != "short-suffix" {
		t.Errorf("ignore_port_in_host_matching: virtual host %q, want short-suffix", vh.GetName())
	}
	rc.IgnorePortInHostMatching = false
	h.StripMatchingHostPort = true
	if vh, _ := virtualHostFor(rc, h, "x.example.com:9090", 8080); vh.GetName() != "star" {
		t.Errorf("strip_matching_host_port, other port: virtual host %q, want star", vh.GetName())
	}
	if vh, _ := virtualHostFor(rc, h, "x.example.com:8080", 8080); vh.GetName() != "short-suffix" {
		t.Errorf("strip_matching_host_port: virtual host %q, want short-suffix", vh.GetName())
	}
	if vh, _ := virtualHostFor(routeConfig("none", vhost("a", "a", "a")), h, "b", 80); vh != nil {
		t.Errorf("no match: virtual host %q, want none", vh.GetName())
	}
}

func TestSidecarHTTPRoute(t *testing.T) {
	v := viewOf(t, httpListener(t, true))
	vh := vhost("web", "unused", "web.shop.internal")
	vh.Routes = []*routev3.Route{
		{Name: "health", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/health"}},
			Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 200}}},
		{Name: "split", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{
				WeightedClusters: &routev3.WeightedCluster{Clusters: []*routev3.WeightedCluster_ClusterWeight{
					{Name: "v1", Weight: wrapperspb.UInt32(90)}, {Name: "v2", Weight: wrapperspb.UInt32(10)},
				}},
			}}}},
	}
	v.Routes["8080"] = routeConfig("8080", vh)
	d, err := v.HTTP("192.0.2.1", 8080, "web.shop.internal")
	if err != nil || d.Route != "split" || !slices.Equal(d.WeightedClusters, []WeightedCluster{{"v1", 90}, {"v2", 10}}) {
		t.Errorf("HTTP = %s, %v; want route split to v1 90, v2 10", d, err)
	}
	if d, err := v.HTTP("192.0.2.1", 8080, "other"); err != nil || !d.NoRoute {
		t.Errorf("unknown host: %s, %v; want no route", d, err)
	}
	delete(v.Routes, "8080")
	if _, err := v.HTTP("192.0.2.1", 8080, "web.shop.internal"); err == nil {
		t.Errorf("route config not fetched: no error")
	}
}

func TestSidecarEndpoints(t *testing.T) {
	v := viewOf(t)
	lbe := func(ip string, port uint32) *endpointv3.LbEndpoint {
		return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: address(ip, port)}}}
	}
	cla := func(name string, eps ...*endpointv3.LbEndpoint) *endpointv3.ClusterLoadAssignment {
		return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}}}
	}
	v.Clusters["eds"] = &clusterv3.Cluster{Name: "eds", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: "eds-svc"}}
	v.LoadAssignments["eds-svc"] = cla("eds-svc", lbe("10.0.0.2", 80), lbe("10.0.0.1", 80))
	v.Clusters["static"] = &clusterv3.Cluster{Name: "static", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		LoadAssignment: cla("static", lbe("127.0.0.1", 15000))}
	v.Clusters[PassthroughCluster] = &clusterv3.Cluster{Name: PassthroughCluster, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST}}
	if eps, err := v.Endpoints("eds"); err != nil || !slices.Equal(eps, []string{"10.0.0.1:80", "10.0.0.2:80"}) {
		t.Errorf("eds: %v, %v", eps, err)
	}
	if eps, err := v.Endpoints("static"); err != nil || !slices.Equal(eps, []string{"127.0.0.1:15000"}) {
		t.Errorf("static: %v, %v", eps, err)
	}
	for _, c := range []string{PassthroughCluster, "missing"} {
		if eps, err := v.Endpoints(c); err == nil {
			t.Errorf("%s: %v, want an error", c, eps)
		}
	}
}

func TestSidecarResolve(t *testing.T) {
	v := viewOf(t)
	v.NameTable = &dnsproto.NameTable{Table: map[string]*dnsproto.NameTable_NameInfo{
		"order.dubbo.internal":            {Ips: []string{"240.100.0.1"}},
		"reviews.shop.svc.cluster.local":  {Ips: []string{"10.96.0.5"}, Registry: "Kubernetes", Shortname: "reviews", Namespace: "shop"},
		"ratings.other.svc.cluster.local": {Ips: []string{"10.96.0.6"}, Registry: "Kubernetes", Shortname: "ratings", Namespace: "other"},
	}}
	for host, want := range map[string][]string{
		"order.dubbo.internal":            {"240.100.0.1"},
		"Order.Dubbo.Internal.":           {"240.100.0.1"},
		"order":                           nil, // not Kubernetes: the name only
		"reviews":                         {"10.96.0.5"},
		"reviews.shop.svc":                {"10.96.0.5"},
		"ratings.other":                   {"10.96.0.6"},
		"ratings":                         nil, // another namespace
		"ratings.other.svc.cluster.local": {"10.96.0.6"},
		"unknown.example.com":             nil,
	} {
		if got := v.Resolve(host); !slices.Equal(got, want) {
			t.Errorf("Resolve(%q) = %v, want %v", host, got, want)
		}
	}
}
