package sidecar

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// Response is one response istiod sent on a Watch stream.
type Response struct {
	TypeURL string
	Version string
	// Size is the encoded size of the DiscoveryResponse (gRPC framing excluded): what istiod
	// sent for it.
	Size int
	// Received is when the stream delivered it, taken before decoding.
	Received time.Time
	// LoadAssignments are an EDS response's ClusterLoadAssignments by cluster name (nil for
	// other types).
	LoadAssignments map[string]*endpointv3.ClusterLoadAssignment
}

// Endpoints are the sorted "ip:port" addresses of cluster's load assignment in an EDS response,
// and whether the response holds that load assignment.
func (r Response) Endpoints(cluster string) ([]string, bool) {
	cla, ok := r.LoadAssignments[cluster]
	if !ok {
		return nil, false
	}
	var out []string
	for _, lle := range cla.GetEndpoints() {
		for _, e := range lle.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))))
		}
	}
	sort.Strings(out)
	return out, true
}

// Watcher is a Watch stream. Read Responses until it is closed, then Err says why it ended.
type Watcher struct {
	// Responses delivers every response in arrival order, each already ACKed. It is closed when
	// the stream ends. Unread responses hold the stream back (istiod waits for the ACK), as a
	// slow Envoy would.
	Responses <-chan Response
	err       error // written before Responses is closed
}

// Err is why the stream ended (ctx's error when ctx ended it); call it once Responses is closed.
func (w *Watcher) Err() error { return w.err }

// Watch is a sidecar that stays connected, for measuring how long a change takes to reach it:
// unlike Fetch (one snapshot per connection), it opens one ADS (state of the world) stream to
// istiod's plain-text xDS address as pod's sidecar, subscribes to typ with names (nil: wildcard),
// and delivers every response istiod sends, ACKing each as Envoy does once it has applied it.
// EDS responses are decoded; a response that cannot be decoded ends the stream (no NACK). ctx
// ends the stream and closes the connection.
func Watch(ctx context.Context, addr string, pod Pod, typ string, names []string) (*Watcher, error) {
	node, conn, err := pod.dial(addr)
	if err != nil {
		return nil, err
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err == nil {
		err = stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: names})
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("sidecar: ADS stream to %s: %w", addr, err)
	}
	ch := make(chan Response, 16)
	w := &Watcher{Responses: ch}
	go func() {
		defer conn.Close()
		defer close(ch)
		w.err = watchLoop(ctx, stream, typ, names, ch)
	}()
	return w, nil
}

// watchLoop receives, ACKs and delivers responses until the stream or ctx ends.
func watchLoop(ctx context.Context, stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient,
	typ string, names []string, out chan<- Response) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("sidecar: ADS stream: %w", err)
		}
		received := time.Now()
		r := Response{TypeURL: resp.GetTypeUrl(), Version: resp.GetVersionInfo(), Size: proto.Size(resp), Received: received}
		if r.TypeURL == TypeEndpoint {
			r.LoadAssignments, err = decodeAll(resp, func(c *endpointv3.ClusterLoadAssignment) string { return c.GetClusterName() })
			if err != nil {
				return fmt.Errorf("sidecar: EDS response (version %q): %w", r.Version, err)
			}
		}
		ack := &discoveryv3.DiscoveryRequest{TypeUrl: typ, ResourceNames: names, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		if err := stream.Send(ack); err != nil {
			return fmt.Errorf("sidecar: ACK of %s: %w", shortType(typ), err)
		}
		select {
		case out <- r:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
