package sidecar

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
)

// Watch subscribes with the pod's node on its first request, delivers the decoded EDS response
// with its size, ACKs it, and ends with ctx's error when ctx ends.
func TestSidecarWatch(t *testing.T) {
	f := fakeIstiod(t)
	f.resources[TypeEndpoint][0] = &endpointv3.ClusterLoadAssignment{ClusterName: "outbound|8080||web",
		Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint("10.30.1.2"), lbEndpoint("10.30.1.1")}}}}
	addr := serve(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pod := Pod{Name: "client-0", Namespace: "shop", IP: "10.99.0.1"}
	w, err := Watch(ctx, addr, pod, TypeEndpoint, []string{"outbound|8080||web"})
	if err != nil {
		t.Fatal(err)
	}
	r, ok := <-w.Responses
	if !ok {
		t.Fatalf("stream ended: %v", w.Err())
	}
	if eps, ok := r.Endpoints("outbound|8080||web"); !ok || !slices.Equal(eps, []string{"10.30.1.1:8080", "10.30.1.2:8080"}) {
		t.Errorf("endpoints %v (%v), want [10.30.1.1:8080 10.30.1.2:8080]", eps, ok)
	}
	if r.TypeURL != TypeEndpoint || r.Version != "v1" || r.Size == 0 || r.Received.IsZero() || len(r.LoadAssignments) != 1 {
		t.Errorf("response %+v", r)
	}
	// The ACK is sent before the response is delivered, but the fake records it concurrently.
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		acks, reqs := f.acks[TypeEndpoint], slices.Clone(f.requests)
		f.mu.Unlock()
		if acks == 1 {
			if reqs[0].GetNode().GetId() != pod.NodeID() || reqs[1].GetNode() != nil {
				t.Errorf("node on the requests: %v, then %v; want the pod's on the first only", reqs[0].GetNode(), reqs[1].GetNode())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ACK of the EDS response (requests %v)", reqs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	for range w.Responses {
	}
	if !errors.Is(w.Err(), context.Canceled) {
		t.Errorf("Err after ctx ended: %v, want context.Canceled", w.Err())
	}
}

func lbEndpoint(ip string) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}}}}}
}
