package xds

import (
	"maps"
	"slices"
	"strconv"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/galleon-mesh/galleon/common/snapshot"
)

const protocolDelta = "delta"

// deltaWatch is one type URL's state on one Delta stream.
type deltaWatch struct {
	typeURL string
	kind    snapshot.Kind
	known   bool

	wildcard bool
	names    map[string]struct{} // explicit subscriptions
	// has maps each resource the client holds to its version: what it
	// sent in initial_resource_versions plus what we sent since.
	has map[string]string
	// syncedSeq is the collection Seq that has reflects; 0 means the client's
	// state is not yet compared with ours at all.
	syncedSeq uint64
	// recheck holds newly subscribed names to look at on the next push.
	recheck map[string]struct{}

	sent    bool
	nonce   string
	pending bool
	sentAt  time.Time
}

// DeltaAggregatedResources serves one incremental ADS stream.
func (s *Server) DeltaAggregatedResources(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	watches := map[string]*deltaWatch{}
	var order []*deltaWatch
	var nonces uint64
	return serveStream(s, stream.Context(), protocolDelta, stream.Recv,
		func(req *discovery.DeltaDiscoveryRequest) error {
			w, err := s.deltaRequest(watches, req)
			if w != nil {
				order = append(order, w)
			}
			return err
		},
		func(snap *snapshot.Snapshot) error {
			for _, w := range order {
				if err := s.deltaPush(stream, w, snap, &nonces); err != nil {
					return err
				}
			}
			return nil
		})
}

func (s *Server) deltaRequest(watches map[string]*deltaWatch, req *discovery.DeltaDiscoveryRequest) (*deltaWatch, error) {
	w, exists := watches[req.GetTypeUrl()]
	if err := s.admitType(protocolDelta, req.GetTypeUrl(), exists, len(watches)); err != nil {
		return nil, err
	}
	var created *deltaWatch
	if !exists {
		w = &deltaWatch{
			typeURL: req.TypeUrl,
			names:   map[string]struct{}{},
			has:     map[string]string{},
			recheck: map[string]struct{}{},
		}
		w.kind, w.known = KindOf(req.TypeUrl)
		// The first request of a type with no names is a wildcard
		// subscription; "*" asks for it explicitly alongside names.
		w.wildcard = len(req.ResourceNamesSubscribe) == 0
		for name, version := range req.InitialResourceVersions {
			w.has[name] = version
		}
		watches[req.TypeUrl] = w
		created = w
		s.log.Debug("xds subscribe", "protocol", protocolDelta, "type", req.TypeUrl, "node", req.GetNode().GetId(),
			"names", len(req.ResourceNamesSubscribe), "resume", len(req.InitialResourceVersions))
	}
	// Subscription changes count whatever the nonce says.
	for _, name := range req.ResourceNamesSubscribe {
		if name == "*" {
			w.wildcard = true
			w.syncedSeq = 0 // compare everything on the next push
			continue
		}
		w.names[name] = struct{}{}
		w.recheck[name] = struct{}{}
	}
	for _, name := range req.ResourceNamesUnsubscribe {
		if name == "*" {
			w.wildcard = false
			for held := range w.has {
				if _, named := w.names[held]; !named {
					delete(w.has, held)
				}
			}
			continue
		}
		delete(w.names, name)
		if !w.wildcard {
			delete(w.has, name)
		}
	}
	if req.ResponseNonce == "" || created != nil || !w.sent {
		return created, nil
	}
	if req.ResponseNonce != w.nonce {
		s.metrics.badRequests.WithLabelValues(protocolDelta, "stale_nonce").Inc()
		return nil, nil
	}
	w.pending = false
	result := "ack"
	if req.ErrorDetail != nil {
		// The client keeps what it had for the rejected resources. We keep
		// believing it has what we sent, so they are not sent again until
		// they change: a resend of the same bytes would be rejected again.
		result = "nack"
		s.log.Warn("xds response rejected", "protocol", protocolDelta, "type", w.typeURL,
			"node", req.GetNode().GetId(), "nonce", w.nonce, "error", req.ErrorDetail.GetMessage())
	}
	s.metrics.acks.WithLabelValues(protocolDelta, w.typeURL, result).Inc()
	s.metrics.ackLatency.WithLabelValues(protocolDelta).Observe(time.Since(w.sentAt).Seconds())
	return nil, nil
}

func (s *Server) deltaPush(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer, w *deltaWatch, snap *snapshot.Snapshot, nonces *uint64) error {
	if w.pending {
		return nil
	}
	version := emptyVersion
	var changed []*snapshot.Resource
	var removed []string
	if w.known {
		if !snap.Ready {
			return nil
		}
		col := snap.Collection(w.kind)
		if w.sent && col.Seq == w.syncedSeq && len(w.recheck) == 0 {
			return nil
		}
		version = col.Version
		changed, removed = deltaChanges(w, col)
		w.syncedSeq = col.Seq
		clear(w.recheck)
		if w.sent && len(changed) == 0 && len(removed) == 0 {
			return nil
		}
	} else if w.sent {
		return nil
	}
	*nonces++
	nonce := strconv.FormatUint(*nonces, 10)
	msg := deltaEncoded(version, w.typeURL, nonce, changed, removed)
	if err := stream.SendMsg(msg); err != nil {
		return err
	}
	w.sent, w.pending, w.nonce, w.sentAt = true, true, nonce, time.Now()
	s.metrics.responses.WithLabelValues(protocolDelta, w.typeURL).Inc()
	s.metrics.responseBytes.WithLabelValues(protocolDelta, w.typeURL).Add(float64(msg.Size))
	if w.known {
		s.metrics.pushLatency.WithLabelValues(protocolDelta).Observe(w.sentAt.Sub(snap.Time).Seconds())
	}
	return nil
}

// DeltaDiscoveryResponse field numbers, for the encoding below.
const (
	fieldDeltaSystemVersion = 1
	fieldDeltaTypeURL       = 4
	fieldDeltaNonce         = 5
	fieldDeltaRemoved       = 6
)

// deltaEncoded builds a DeltaDiscoveryResponse from the resources' shared,
// pre-encoded bytes: only the small header is new per stream.
func deltaEncoded(version, typeURL, nonce string, changed []*snapshot.Resource, removed []string) *encodedMessage {
	header := make([]byte, 0, len(version)+len(typeURL)+len(nonce)+16)
	header = protowire.AppendTag(header, fieldDeltaSystemVersion, protowire.BytesType)
	header = protowire.AppendString(header, version)
	header = protowire.AppendTag(header, fieldDeltaTypeURL, protowire.BytesType)
	header = protowire.AppendString(header, typeURL)
	header = protowire.AppendTag(header, fieldDeltaNonce, protowire.BytesType)
	header = protowire.AppendString(header, nonce)
	for _, name := range removed {
		header = protowire.AppendTag(header, fieldDeltaRemoved, protowire.BytesType)
		header = protowire.AppendString(header, name)
	}
	buffers := make(mem.BufferSlice, 0, 1+2*len(changed))
	buffers = append(buffers, mem.SliceBuffer(header))
	size := len(header)
	for _, r := range changed {
		prefix, body := r.DeltaEntry()
		buffers = append(buffers, mem.SliceBuffer(prefix), mem.SliceBuffer(body))
		size += len(prefix) + len(body)
	}
	return &encodedMessage{Buffers: buffers, Size: size}
}

// deltaChanges returns what the client lacks: resources it does not hold at
// their current version, and removals of what it holds that is gone. When
// the stream is a few versions behind, only the names that changed since
// (and newly subscribed ones) are looked at; otherwise every resource is.
func deltaChanges(w *deltaWatch, col *snapshot.Collection) (changed []*snapshot.Resource, removed []string) {
	if w.syncedSeq != 0 {
		if names, ok := col.ChangedSince(w.syncedSeq); ok {
			candidates := append(names, keys(w.recheck)...)
			slices.Sort(candidates)
			for _, name := range slices.Compact(candidates) {
				changed, removed = w.compare(name, col.Get(name), changed, removed)
			}
			return changed, removed
		}
	}
	// Full comparison. The collection is already in name order; what the
	// client holds that is gone follows, sorted.
	if w.wildcard {
		for _, r := range col.Resources() {
			changed, removed = w.compare(r.Name, r, changed, removed)
		}
	} else {
		for _, name := range slices.Sorted(maps.Keys(w.names)) {
			changed, removed = w.compare(name, col.Get(name), changed, removed)
		}
	}
	var gone []string
	for name := range w.has {
		if col.Get(name) == nil {
			gone = append(gone, name)
		}
	}
	slices.Sort(gone)
	for _, name := range gone {
		changed, removed = w.compare(name, nil, changed, removed)
	}
	return changed, removed
}

// compare decides what the client needs for one name, r being the resource
// of that name (nil when there is none), and records it as sent.
func (w *deltaWatch) compare(name string, r *snapshot.Resource, changed []*snapshot.Resource, removed []string) ([]*snapshot.Resource, []string) {
	_, named := w.names[name]
	wanted := w.wildcard || named
	held, has := w.has[name]
	switch {
	case r != nil && wanted && held != r.Version:
		changed = append(changed, r)
		w.has[name] = r.Version
	case r == nil && has:
		removed = append(removed, name)
		delete(w.has, name)
	case r == nil && named && !w.wildcard:
		// Tell a client that asked for a name we do not have that it does
		// not exist, so it need not wait for it.
		if _, rechecked := w.recheck[name]; rechecked {
			removed = append(removed, name)
		}
	}
	return changed, removed
}

func keys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
