package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	dnsproto "istio.io/istio/pkg/dns/proto"
)

// fakeADS is a state-of-the-world ADS server for one test: it answers a type's first request and
// every change of its names with the named resources (all for a wildcard), and records the
// requests. Types in silent are never answered.
type fakeADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	resources map[string][]proto.Message
	names     func(proto.Message) string
	silent    string
	// edsPush, when set, is sent alone in a second EDS response right after each EDS answer, as
	// istiod pushes the clusters of one updated service (pilot/pkg/xds/eds.go).
	edsPush proto.Message

	mu       sync.Mutex
	requests []*discoveryv3.DiscoveryRequest
	acks     map[string]int // type -> requests that ACK the last response
}

func (f *fakeADS) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	lastNames := map[string][]string{}
	lastNonce := map[string]string{}
	for n := 0; ; n++ {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		typ := req.GetTypeUrl()
		f.mu.Lock()
		f.requests = append(f.requests, req)
		if req.GetResponseNonce() != "" && req.GetResponseNonce() == lastNonce[typ] && req.GetErrorDetail() == nil {
			f.acks[typ]++
		}
		f.mu.Unlock()
		if _, ok := lastNames[typ]; ok && slices.Equal(lastNames[typ], req.GetResourceNames()) {
			continue // an ACK
		}
		lastNames[typ] = req.GetResourceNames()
		if typ == f.silent {
			continue
		}
		resp := &discoveryv3.DiscoveryResponse{TypeUrl: typ, VersionInfo: "v1", Nonce: fmt.Sprint(n)}
		for _, m := range f.resources[typ] {
			if len(req.GetResourceNames()) > 0 && !slices.Contains(req.GetResourceNames(), f.names(m)) {
				continue
			}
			a, err := anypb.New(m)
			if err != nil {
				return err
			}
			resp.Resources = append(resp.Resources, a)
		}
		lastNonce[typ] = resp.GetNonce()
		if err := s.Send(resp); err != nil {
			return nil
		}
		if typ == TypeEndpoint && f.edsPush != nil {
			a, err := anypb.New(f.edsPush)
			if err != nil {
				return err
			}
			push := &discoveryv3.DiscoveryResponse{TypeUrl: typ, VersionInfo: "v2", Nonce: fmt.Sprint(n) + "-push", Resources: []*anypb.Any{a}}
			lastNonce[typ] = push.GetNonce()
			if err := s.Send(push); err != nil {
				return nil
			}
		}
	}
}

func serve(t *testing.T, f *fakeADS) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, f)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, io.EOF) {
			t.Errorf("fake ADS server: %v", err)
		}
	})
	return lis.Addr().String()
}

func fakeIstiod(t *testing.T) *fakeADS {
	eds := func(name string) *clusterv3.Cluster {
		return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{}}
	}
	return &fakeADS{
		resources: map[string][]proto.Message{
			TypeCluster: {eds("outbound|8080||web"), eds("outbound|20880||order"),
				&clusterv3.Cluster{Name: PassthroughCluster, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST}}},
			TypeEndpoint: {&endpointv3.ClusterLoadAssignment{ClusterName: "outbound|8080||web"},
				&endpointv3.ClusterLoadAssignment{ClusterName: "outbound|20880||order"},
				&endpointv3.ClusterLoadAssignment{ClusterName: "outbound|1||not-asked-for"}},
			TypeListener: {virtualOutbound(t), httpListener(t, true),
				outboundListener("240.100.0.1", 20880, tcpChain(t, "", "outbound|20880||order", nil))},
			TypeRoute: {routeConfig("8080", vhost("web", "outbound|8080||web", "web")), routeConfig("9090")},
			TypeNameTable: {&dnsproto.NameTable{Table: map[string]*dnsproto.NameTable_NameInfo{
				"order.dubbo.internal": {Ips: []string{"240.100.0.1"}},
			}}},
		},
		names: func(m proto.Message) string {
			switch m := m.(type) {
			case *clusterv3.Cluster:
				return m.GetName()
			case *endpointv3.ClusterLoadAssignment:
				return m.GetClusterName()
			case *listenerv3.Listener:
				return m.GetName()
			case *routev3.RouteConfiguration:
				return m.GetName()
			}
			return ""
		},
		acks: map[string]int{},
	}
}

// Fetch subscribes as a sidecar does (node on the first request, EDS for the EDS clusters, RDS
// for the route configs the listeners name), ACKs every response, and returns once all is there.
func TestSidecarFetch(t *testing.T) {
	f := fakeIstiod(t)
	addr := serve(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pod := Pod{Name: "client-0", Namespace: "shop", IP: "10.99.0.1", Labels: map[string]string{"app": "client"}}
	v, err := Fetch(ctx, addr, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := Names(v.LoadAssignments); !slices.Equal(got, []string{"outbound|20880||order", "outbound|8080||web"}) {
		t.Errorf("load assignments %v", got)
	}
	if got := Names(v.Routes); !slices.Equal(got, []string{"8080"}) {
		t.Errorf("route configs %v", got)
	}
	if d, err := v.Dial("240.100.0.1", 20880); err != nil || d.Cluster != "outbound|20880||order" {
		t.Errorf("Dial: %s, %v", d, err)
	}
	if d, err := v.HTTP("10.0.0.1", 8080, "web"); err != nil || d.Cluster != "outbound|8080||web" {
		t.Errorf("HTTP: %s, %v", d, err)
	}
	if ips := v.Resolve("order.dubbo.internal"); !slices.Equal(ips, []string{"240.100.0.1"}) {
		t.Errorf("Resolve: %v", ips)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	first := f.requests[0]
	md := first.GetNode().GetMetadata().GetFields()
	if first.GetNode().GetId() != "sidecar~10.99.0.1~client-0.shop~shop.svc.cluster.local" ||
		md["DNS_CAPTURE"].GetStringValue() != "true" || md["DNS_AUTO_ALLOCATE"].GetStringValue() != "true" ||
		md["INTERCEPTION_MODE"].GetStringValue() != "REDIRECT" || md["CLUSTER_ID"].GetStringValue() != "Kubernetes" ||
		md["NAMESPACE"].GetStringValue() != "shop" || md["ISTIO_VERSION"].GetStringValue() != DefaultIstioVersion ||
		md["LABELS"].GetStructValue().GetFields()["app"].GetStringValue() != "client" {
		t.Errorf("first request's node: %v", first.GetNode())
	}
	for _, r := range f.requests[1:] {
		if r.GetNode() != nil {
			t.Errorf("node sent again on a %s request", r.GetTypeUrl())
		}
	}
	for _, typ := range allTypes() {
		if f.acks[typ] == 0 {
			t.Errorf("no ACK for %s", typ)
		}
	}
	for _, r := range f.requests {
		switch r.GetTypeUrl() {
		case TypeEndpoint:
			if !slices.Equal(r.GetResourceNames(), []string{"outbound|20880||order", "outbound|8080||web"}) {
				t.Errorf("EDS request for %v", r.GetResourceNames())
			}
		case TypeRoute:
			if !slices.Equal(r.GetResourceNames(), []string{"8080"}) {
				t.Errorf("RDS request for %v", r.GetResourceNames())
			}
		}
	}
}

// A type istiod never answers fails the fetch when ctx ends, naming the type.
func TestSidecarFetchWaitsForEveryType(t *testing.T) {
	f := fakeIstiod(t)
	f.silent = TypeNameTable
	addr := serve(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := Fetch(ctx, addr, Pod{Name: "client-0", Namespace: "shop", IP: "10.99.0.1"})
	if err == nil || !strings.Contains(err.Error(), "still waiting for NameTable") {
		t.Fatalf("Fetch: %v, want an error naming NameTable", err)
	}
}

// An EDS response that names one cluster updates that cluster's load assignment and keeps the
// others, as Envoy does: istiod's incremental pushes name only the clusters they update, and one
// can land while a fetch is still waiting for RDS or NDS.
func TestSidecarFetchKeepsLoadAssignmentsAPushDoesNotName(t *testing.T) {
	f := fakeIstiod(t)
	moved := &endpointv3.ClusterLoadAssignment{ClusterName: "outbound|8080||web", Endpoints: []*endpointv3.LocalityLbEndpoints{{
		LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("10.1.0.9")},
	}}}
	f.edsPush = moved
	addr := serve(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := Fetch(ctx, addr, Pod{Name: "client-0", Namespace: "shop", IP: "10.99.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := Names(v.LoadAssignments); !slices.Equal(got, []string{"outbound|20880||order", "outbound|8080||web"}) {
		t.Errorf("load assignments %v, want both clusters' after a push naming one", got)
	}
	if eps, err := v.Endpoints("outbound|8080||web"); err != nil || !slices.Equal(eps, []string{"10.1.0.9:8080"}) {
		t.Errorf("web's endpoints %v, %v: want the pushed 10.1.0.9:8080", eps, err)
	}
}

// A cluster that leaves CDS leaves the EDS subscription and the view.
func TestSidecarViewForgetsUnsubscribed(t *testing.T) {
	v := newView(Pod{})
	v.LoadAssignments["a"] = &endpointv3.ClusterLoadAssignment{ClusterName: "a"}
	v.LoadAssignments["b"] = &endpointv3.ClusterLoadAssignment{ClusterName: "b"}
	v.Routes["80"] = &routev3.RouteConfiguration{Name: "80"}
	v.forget(TypeEndpoint, []string{"b", "c"})
	if got := Names(v.LoadAssignments); !slices.Equal(got, []string{"b"}) {
		t.Errorf("load assignments %v after subscribing to [b c], want [b]", got)
	}
	if got := Names(v.Routes); !slices.Equal(got, []string{"80"}) {
		t.Errorf("routes %v after an EDS change, want [80] kept", got)
	}
	v.forget(TypeRoute, nil)
	if len(v.Routes) != 0 {
		t.Errorf("routes %v after unsubscribing from all", Names(v.Routes))
	}
}
