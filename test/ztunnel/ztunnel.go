// Package ztunnel is a ztunnel's view of istiod, for tests: it subscribes to istiod's workload
// API the way ztunnel does (a Delta ADS stream, wildcard subscriptions to istio.workload.Address
// and istio.security.Authorization, a node of type ztunnel) and keeps what istiod sends, so a
// test can ask what a pod in an ambient namespace would reach: a service by host name, its
// addresses and ports, and the workloads behind it.
//
// It talks to istiod's plain-text xDS port (istiod.Istiod.GRPCAddr), which istiod serves
// without authentication; istiod answers a ztunnel node only with PILOT_ENABLE_AMBIENT=true.
package ztunnel

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	"istio.io/istio/pkg/workloadapi"
	"istio.io/istio/pkg/workloadapi/security"
)

// The workload API's types.
const (
	TypeAddress       = "type.googleapis.com/istio.workload.Address"
	TypeAuthorization = "type.googleapis.com/istio.security.Authorization"
)

// maxResponse bounds one response from istiod.
const maxResponse = 1 << 30

// Watcher is a ztunnel connected to istiod. Its view changes as istiod pushes; read it with
// Snapshot, wait for a state with Wait.
type Watcher struct {
	mu        sync.Mutex
	changed   chan struct{} // closed and replaced at every response
	addresses map[string]*workloadapi.Address
	policies  map[string]*security.Authorization
	answered  map[string]bool
	last      time.Time // when the last response applied was received
	err       error
}

// Watch connects to istiod's plain-text xDS address addr as a ztunnel on node ip and keeps the
// stream until ctx ends.
func Watch(ctx context.Context, addr, ip string) (*Watcher, error) {
	md, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": "istio-system", "CLUSTER_ID": "Kubernetes", "SERVICE_ACCOUNT": "ztunnel",
		"NAME": "ztunnel-test", "INSTANCE_IPS": ip,
	})
	if err != nil {
		return nil, err
	}
	node := &corev3.Node{Id: "ztunnel~" + ip + "~ztunnel-test.istio-system~istio-system.svc.cluster.local", Metadata: md}
	// istiod sends the whole workload table in its first response (35 MB at 10,000 services x
	// 10 instances): ztunnel takes it, so this client does too.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxResponse)))
	if err != nil {
		return nil, fmt.Errorf("ztunnel: dial %s: %w", addr, err)
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err == nil {
		for _, typ := range []string{TypeAddress, TypeAuthorization} {
			if err = stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typ}); err != nil {
				break
			}
			node = nil
		}
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ztunnel: delta ADS stream to %s: %w", addr, err)
	}
	w := &Watcher{changed: make(chan struct{}), addresses: map[string]*workloadapi.Address{},
		policies: map[string]*security.Authorization{}, answered: map[string]bool{}}
	go func() {
		defer conn.Close()
		err := w.loop(stream)
		w.mu.Lock()
		w.err = err
		close(w.changed)
		w.mu.Unlock()
	}()
	return w, nil
}

func (w *Watcher) loop(stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("ztunnel: delta ADS stream: %w", err)
		}
		if err := w.apply(resp, time.Now()); err != nil {
			return err // no NACK: a response this package cannot read ends the watch
		}
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
			return fmt.Errorf("ztunnel: ACK: %w", err)
		}
	}
}

func (w *Watcher) apply(resp *discoveryv3.DeltaDiscoveryResponse, received time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	typ := resp.GetTypeUrl()
	for _, r := range resp.GetResources() {
		switch typ {
		case TypeAddress:
			a := &workloadapi.Address{}
			if err := r.GetResource().UnmarshalTo(a); err != nil {
				return fmt.Errorf("ztunnel: Address %s: %w", r.GetName(), err)
			}
			w.addresses[r.GetName()] = a
		case TypeAuthorization:
			p := &security.Authorization{}
			if err := r.GetResource().UnmarshalTo(p); err != nil {
				return fmt.Errorf("ztunnel: Authorization %s: %w", r.GetName(), err)
			}
			w.policies[r.GetName()] = p
		}
	}
	for _, n := range resp.GetRemovedResources() {
		delete(w.addresses, n)
		delete(w.policies, n)
	}
	w.answered[typ] = true
	w.last = received
	close(w.changed)
	w.changed = make(chan struct{})
	return nil
}

// Wait returns the first view, from now on, for which cond returns true (once istiod has answered
// both types), or an error when ctx or the stream ends first; the error includes what cond said
// of the last view.
func (w *Watcher) Wait(ctx context.Context, cond func(v *View) (bool, string)) (*View, error) {
	last := "istiod has not answered both types"
	for {
		w.mu.Lock()
		ch, streamErr := w.changed, w.err
		var v *View
		if w.answered[TypeAddress] && w.answered[TypeAuthorization] {
			v = w.viewLocked()
		}
		w.mu.Unlock()
		if v != nil {
			ok, why := cond(v)
			if ok {
				return v, nil
			}
			last = why
		}
		if streamErr != nil {
			return v, fmt.Errorf("%w (last view: %s)", streamErr, last)
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("%w (last view: %s)", ctx.Err(), last)
		case <-ch:
		}
	}
}

func (w *Watcher) viewLocked() *View {
	v := &View{Services: map[string]*workloadapi.Service{}, Workloads: map[string]*workloadapi.Workload{},
		Policies: len(w.policies), Received: w.last}
	for name, a := range w.addresses {
		switch t := a.GetType().(type) {
		case *workloadapi.Address_Service:
			v.Services[t.Service.GetNamespace()+"/"+t.Service.GetHostname()] = t.Service
		case *workloadapi.Address_Workload:
			v.Workloads[name] = t.Workload
		}
	}
	return v
}

// View is what a ztunnel holds at one moment.
type View struct {
	// Services by "namespace/hostname", as ztunnel keys them.
	Services map[string]*workloadapi.Service
	// Workloads by resource name (their UID).
	Workloads map[string]*workloadapi.Workload
	// Policies is how many Authorization resources it holds.
	Policies int
	// Received is when the last response in the view arrived (before it was decoded): what a
	// measurement of how long a change takes to reach ztunnel reads.
	Received time.Time
}

// Service returns the service of host name host ("namespace/hostname" keys: any namespace).
func (v *View) Service(host string) (*workloadapi.Service, bool) {
	for k, s := range v.Services {
		if strings.HasSuffix(k, "/"+host) {
			return s, true
		}
	}
	return nil, false
}

// VIPs are a service's addresses, sorted.
func VIPs(s *workloadapi.Service) []string {
	var out []string
	for _, a := range s.GetAddresses() {
		if ip, ok := netip.AddrFromSlice(a.GetAddress()); ok {
			out = append(out, ip.String())
		}
	}
	slices.Sort(out)
	return out
}

// Endpoints are the sorted addresses of the workloads behind service s: those whose services
// include it.
func (v *View) Endpoints(s *workloadapi.Service) []string {
	key := s.GetNamespace() + "/" + s.GetHostname()
	var out []string
	for _, w := range v.Workloads {
		if _, ok := w.GetServices()[key]; !ok {
			continue
		}
		for _, a := range w.GetAddresses() {
			if ip, ok := netip.AddrFromSlice(a); ok {
				out = append(out, ip.String())
			}
		}
	}
	slices.Sort(out)
	return out
}
