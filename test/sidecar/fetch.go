package sidecar

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	dnsproto "istio.io/istio/pkg/dns/proto"
)

// The xDS types a sidecar subscribes to.
const (
	TypeCluster   = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	TypeEndpoint  = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	TypeListener  = "type.googleapis.com/envoy.config.listener.v3.Listener"
	TypeRoute     = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	TypeNameTable = "type.googleapis.com/istio.networking.nds.v1.NameTable"
)

// allTypes are the types Fetch waits for, in the order it reports missing ones.
func allTypes() []string {
	return []string{TypeCluster, TypeEndpoint, TypeListener, TypeRoute, TypeNameTable}
}

// DefaultIstioVersion is the ISTIO_VERSION a Pod without one announces.
const DefaultIstioVersion = "1.29.2"

// Pod is the workload whose sidecar is simulated.
type Pod struct {
	Name      string
	Namespace string
	IP        string
	Labels    map[string]string
	// IstioVersion is the proxy version sent as ISTIO_VERSION (default DefaultIstioVersion).
	IstioVersion string
}

// NodeID is the proxy id istio-proxy sends for this pod.
func (p Pod) NodeID() string {
	return fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", p.IP, p.Name, p.Namespace, p.Namespace)
}

// node is the xDS node of the pod's sidecar, with the metadata istio-proxy's bootstrap sends
// (istio pkg/model/proxy.go NodeMetadata: booleans are strings there, "true").
// dial makes pod's node and a plain-text connection to istiod's xDS address addr.
func (p Pod) dial(addr string) (*corev3.Node, *grpc.ClientConn, error) {
	node, err := p.node()
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("sidecar: dial %s: %w", addr, err)
	}
	return node, conn, nil
}

func (p Pod) node() (*corev3.Node, error) {
	version := p.IstioVersion
	if version == "" {
		version = DefaultIstioVersion
	}
	labels := make(map[string]any, len(p.Labels))
	for k, v := range p.Labels {
		labels[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{
		"ISTIO_VERSION":     version,
		"CLUSTER_ID":        "Kubernetes",
		"MESH_ID":           "cluster.local",
		"NAMESPACE":         p.Namespace,
		"NAME":              p.Name,
		"WORKLOAD_NAME":     p.Name,
		"SERVICE_ACCOUNT":   "default",
		"INSTANCE_IPS":      p.IP,
		"INTERCEPTION_MODE": "REDIRECT",
		"LABELS":            labels,
		"DNS_CAPTURE":       "true",
		"DNS_AUTO_ALLOCATE": "true",
	})
	if err != nil {
		return nil, fmt.Errorf("sidecar: node metadata: %w", err)
	}
	return &corev3.Node{
		Id:            p.NodeID(),
		Cluster:       p.Name + "." + p.Namespace,
		Metadata:      md,
		UserAgentName: "envoy",
	}, nil
}

// Fetch connects to istiod's plain-text xDS address (istiod.Istiod.GRPCAddr) as pod's sidecar
// over one new ADS (state of the world) stream, subscribes to CDS, EDS (the clusters CDS names),
// LDS, RDS (the route configs the listeners name) and NDS, ACKs every response, and returns what
// it holds once istiod has answered every type and every requested name. Each call is a new
// connection: call it again to see a change. ctx bounds the whole fetch.
func Fetch(ctx context.Context, addr string, pod Pod) (*View, error) {
	node, conn, err := pod.dial(addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, fmt.Errorf("sidecar: ADS stream to %s: %w", addr, err)
	}
	f := &fetcher{
		stream:    stream,
		node:      node,
		view:      newView(pod),
		requested: map[string][]string{},
		answered:  map[string]bool{},
		nonce:     map[string]string{},
	}
	// Envoy subscribes to CDS and LDS (wildcard) at start, istio-agent to NDS; EDS and RDS follow
	// from their answers.
	for _, typ := range []string{TypeCluster, TypeListener, TypeNameTable} {
		if err := f.send(typ, nil); err != nil {
			return nil, err
		}
	}
	for !f.complete() {
		resp, err := stream.Recv()
		if err != nil {
			return nil, fmt.Errorf("sidecar: ADS stream from %s: %w (still waiting for %s)", addr, err, f.missing())
		}
		if err := f.handle(resp); err != nil {
			return nil, err
		}
	}
	// Half-close and read until istiod ends the stream, so that the last ACKs are delivered
	// before the connection closes; what arrives meanwhile is not looked at.
	if err := stream.CloseSend(); err == nil {
		for {
			if _, err := stream.Recv(); err != nil {
				break
			}
		}
	}
	return f.view, nil
}

// fetcher is the state of one Fetch's stream; it is used by one goroutine.
type fetcher struct {
	stream    discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node      *corev3.Node // sent on the first request only, as Envoy does
	view      *View
	requested map[string][]string // type -> names subscribed (nil: wildcard)
	answered  map[string]bool     // type -> a response arrived after the last subscription change
	nonce     map[string]string
}

func (f *fetcher) send(typ string, names []string) error {
	req := &discoveryv3.DiscoveryRequest{
		Node:          f.node,
		TypeUrl:       typ,
		ResourceNames: names,
		VersionInfo:   f.view.Versions[typ],
		ResponseNonce: f.nonce[typ],
	}
	f.node = nil
	f.requested[typ] = names
	if err := f.stream.Send(req); err != nil {
		return fmt.Errorf("sidecar: sending %s request: %w", shortType(typ), err)
	}
	return nil
}

// subscribe changes the names of a type when they differ from what was requested.
func (f *fetcher) subscribe(typ string, names []string) error {
	if _, ok := f.requested[typ]; ok && slices.Equal(f.requested[typ], names) {
		return nil
	}
	f.view.forget(typ, names)
	if len(names) == 0 {
		// Envoy sends no request for an empty set; nothing is missing either.
		f.requested[typ] = []string{}
		f.answered[typ] = true
		return nil
	}
	f.answered[typ] = false
	return f.send(typ, names)
}

func (f *fetcher) handle(resp *discoveryv3.DiscoveryResponse) error {
	typ := resp.GetTypeUrl()
	if err := f.view.store(typ, resp); err != nil {
		return err // no NACK: a response this package cannot read fails the fetch
	}
	f.nonce[typ] = resp.GetNonce()
	f.answered[typ] = true
	if err := f.send(typ, f.requested[typ]); err != nil { // ACK
		return err
	}
	switch typ {
	case TypeCluster:
		return f.subscribe(TypeEndpoint, edsNames(f.view.Clusters))
	case TypeListener:
		names, err := routeNames(f.view.Listeners)
		if err != nil {
			return err
		}
		return f.subscribe(TypeRoute, names)
	}
	return nil
}

// complete is true once every type was answered and EDS and RDS hold every name requested.
func (f *fetcher) complete() bool { return f.missing() == "" }

func (f *fetcher) missing() string {
	var out []string
	for _, typ := range allTypes() {
		if !f.answered[typ] {
			out = append(out, shortType(typ))
			continue
		}
		var have func(string) bool
		switch typ {
		case TypeEndpoint:
			have = func(n string) bool { _, ok := f.view.LoadAssignments[n]; return ok }
		case TypeRoute:
			have = func(n string) bool { _, ok := f.view.Routes[n]; return ok }
		default:
			continue
		}
		for _, n := range f.requested[typ] {
			if !have(n) {
				out = append(out, shortType(typ)+" "+n)
			}
		}
	}
	return strings.Join(out, ", ")
}

func shortType(typ string) string { return typ[strings.LastIndexByte(typ, '.')+1:] }

// edsNames are the EDS service names of the EDS clusters, sorted.
func edsNames(clusters map[string]*clusterv3.Cluster) []string {
	var out []string
	for _, c := range clusters {
		if c.GetType() == clusterv3.Cluster_EDS {
			out = append(out, edsServiceName(c))
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func edsServiceName(c *clusterv3.Cluster) string {
	if n := c.GetEdsClusterConfig().GetServiceName(); n != "" {
		return n
	}
	return c.GetName()
}

// routeNames are the RDS route config names the listeners' HTTP connection managers use, sorted.
func routeNames(listeners map[string]*listenerv3.Listener) ([]string, error) {
	var out []string
	for _, l := range listeners {
		chains := l.GetFilterChains()
		if d := l.GetDefaultFilterChain(); d != nil {
			chains = append(slices.Clip(chains), d)
		}
		for _, fc := range chains {
			for _, f := range fc.GetFilters() {
				if f.GetTypedConfig().GetTypeUrl() != typeHCM {
					continue
				}
				h, err := hcmOf(f)
				if err != nil {
					return nil, fmt.Errorf("listener %s: %w", l.GetName(), err)
				}
				if n := h.GetRds().GetRouteConfigName(); n != "" {
					out = append(out, n)
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// store replaces what the view holds of a type by a response's resources (state of the world).
func (v *View) store(typ string, resp *discoveryv3.DiscoveryResponse) error {
	var err error
	switch typ {
	case TypeCluster:
		v.Clusters, err = decodeAll(resp, func(c *clusterv3.Cluster) string { return c.GetName() })
	case TypeEndpoint:
		// EDS and RDS are not wildcard types: a response holds the resources it updates, the rest
		// are kept (the xDS protocol's "grouping resources into responses"). istiod sends only
		// the clusters of the services a push updated (pilot/pkg/xds/eds.go, buildEndpoints:
		// "Cluster was not updated, skip recomputing"), so a push that lands while a fetch
		// waits must not drop the load assignments it does not name.
		var las map[string]*endpointv3.ClusterLoadAssignment
		las, err = decodeAll(resp, func(c *endpointv3.ClusterLoadAssignment) string { return c.GetClusterName() })
		maps.Copy(v.LoadAssignments, las)
	case TypeListener:
		v.Listeners, err = decodeAll(resp, func(l *listenerv3.Listener) string { return l.GetName() })
	case TypeRoute:
		var routes map[string]*routev3.RouteConfiguration
		routes, err = decodeAll(resp, func(r *routev3.RouteConfiguration) string { return r.GetName() })
		maps.Copy(v.Routes, routes)
	case TypeNameTable:
		var tables map[string]*dnsproto.NameTable
		tables, err = decodeAll(resp, func(*dnsproto.NameTable) string { return "" })
		v.NameTable = tables[""]
		if len(resp.GetResources()) > 1 {
			err = fmt.Errorf("%d name tables in one response, want at most 1", len(resp.GetResources()))
		}
	default:
		err = fmt.Errorf("not subscribed to this type")
	}
	if err != nil {
		return fmt.Errorf("sidecar: %s response (version %q): %w", typ, resp.GetVersionInfo(), err)
	}
	v.Versions[typ] = resp.GetVersionInfo()
	return nil
}

// forget drops the EDS or RDS resources held that names no longer subscribes to, as Envoy
// does when a cluster or route config leaves CDS or LDS.
func (v *View) forget(typ string, names []string) {
	subscribed := make(map[string]bool, len(names)) // a set: EDS names one per cluster, 10,000s
	for _, n := range names {
		subscribed[n] = true
	}
	keep := func(n string) bool { return subscribed[n] }
	switch typ {
	case TypeEndpoint:
		maps.DeleteFunc(v.LoadAssignments, func(n string, _ *endpointv3.ClusterLoadAssignment) bool { return !keep(n) })
	case TypeRoute:
		maps.DeleteFunc(v.Routes, func(n string, _ *routev3.RouteConfiguration) bool { return !keep(n) })
	}
}

// decodeAll unmarshals every resource of a response into a new M, keyed by name.
func decodeAll[M interface {
	*T
	proto.Message
}, T any](resp *discoveryv3.DiscoveryResponse, name func(M) string) (map[string]M, error) {
	out := make(map[string]M, len(resp.GetResources()))
	for _, a := range resp.GetResources() {
		m := M(new(T))
		if err := a.UnmarshalTo(m); err != nil {
			return nil, fmt.Errorf("resource of type %s: %w", a.GetTypeUrl(), err)
		}
		out[name(m)] = m
	}
	return out, nil
}

func newView(pod Pod) *View {
	return &View{
		Pod:             pod,
		Listeners:       map[string]*listenerv3.Listener{},
		Clusters:        map[string]*clusterv3.Cluster{},
		LoadAssignments: map[string]*endpointv3.ClusterLoadAssignment{},
		Routes:          map[string]*routev3.RouteConfiguration{},
		Versions:        map[string]string{},
	}
}

// Names returns the sorted keys of one of the View's maps (for messages).
func Names[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
