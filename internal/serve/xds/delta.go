package xds

import (
	"slices"
	"strconv"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

const protocolDelta = "delta"

// deltaWatch is one type URL's state on one Delta stream.
type deltaWatch struct {
	typeURL string
	kind    snapshot.Kind
	known   bool

	wildcard bool
	names    map[string]struct{} // explicit subscriptions
	// held is what the client holds: what it sent in
	// initial_resource_versions plus what we sent since.
	held snapshot.Holdings
	// recheck holds newly subscribed names to look at on the next push.
	recheck map[string]struct{}
	// resumed is how many names the client gave in
	// initial_resource_versions, for the per-stream bound on names, and
	// resumedBytes their bytes (names and versions), which the stream
	// holds in the process's budget until it ends.
	resumed      int
	resumedBytes int64

	sent     bool
	nonce    string
	pending  bool
	sentAt   time.Time
	progress watchProgress
}

// DeltaAggregatedResources serves one incremental ADS stream.
func (s *Server) DeltaAggregatedResources(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	lease, err := s.budget.Open(stream.Context(), protocolDelta)
	if err != nil {
		return err
	}
	defer lease.Close()
	watches := map[string]*deltaWatch{}
	var order []*deltaWatch
	var nonces uint64
	budget := s.logBudget.ForStream()
	sender := serve.NewSender(stream.SendMsg, s.sendTimeout)
	defer sender.Close()
	defer s.disconnectIfStuck(stream.Context(), sender)
	types := streamTypes{m: s.metrics, protocol: protocolDelta}
	defer types.release()
	return serveStream(s, stream.Context(), protocolDelta, stream.Recv,
		func(req *discovery.DeltaDiscoveryRequest) error {
			w, err := s.deltaRequest(watches, budget, lease, req)
			if w != nil {
				order = append(order, w)
				types.add(w.typeURL)
			}
			return err
		},
		func(snap *snapshot.Snapshot) (uint64, error) {
			upTo := snap.Seq
			for _, w := range order {
				wasPending := w.pending
				if err := s.deltaPush(sender.Send, w, snap, &nonces); err != nil {
					return 0, err
				}
				w.progress.pushed(snap, wasPending, w.pending)
				upTo = min(upTo, w.progress.upTo)
			}
			return upTo, nil
		})
}

// deltaRequest applies one request to the stream's watches. It returns the
// watch it created, if any, and an error that closes the stream for a
// request no client should send or one over a limit. The names the stream
// holds (subscriptions and resume versions) are charged to lease.
func (s *Server) deltaRequest(watches map[string]*deltaWatch, budget *serve.LogLimiter, lease *serve.Lease, req *discovery.DeltaDiscoveryRequest) (*deltaWatch, error) {
	w, exists := watches[req.GetTypeUrl()]
	if err := s.admitType(protocolDelta, req.GetTypeUrl(), exists, len(watches)); err != nil {
		return nil, err
	}
	// Resume versions count only on a type's first request; later ones are
	// ignored, as below.
	resume := req.InitialResourceVersions
	if exists {
		resume = nil
	}
	var subscribed map[string]struct{}
	if exists {
		subscribed = w.names
	}
	charged, chargedBytes, err := s.admitNames(lease, protocolDelta, clientNames(watches), subscribed, req.ResourceNamesSubscribe, resume)
	if err != nil {
		return nil, err
	}
	// What the request did not add after all (names repeated, "*") and
	// what it unsubscribed go back to the budget.
	var added, removed int
	var addedBytes, removedBytes int64
	defer func() {
		lease.Remove(charged-added, chargedBytes-addedBytes)
		lease.Remove(removed, removedBytes)
	}()
	var created *deltaWatch
	if !exists {
		w = &deltaWatch{
			typeURL: req.TypeUrl,
			names:   map[string]struct{}{},
			recheck: map[string]struct{}{},
		}
		w.kind, w.known = KindOf(req.TypeUrl)
		// The first request of a type with no names is a wildcard
		// subscription; "*" asks for it explicitly alongside names.
		w.wildcard = len(req.ResourceNamesSubscribe) == 0
		for name, version := range req.InitialResourceVersions {
			w.held.Hold(name, version)
		}
		w.resumed = len(req.InitialResourceVersions)
		for name, version := range req.InitialResourceVersions {
			w.resumedBytes += int64(len(name) + len(version))
		}
		added, addedBytes = w.resumed, w.resumedBytes
		watches[req.TypeUrl] = w
		created = w
		s.log.Debug("xds subscribe", "protocol", protocolDelta, "type", req.TypeUrl, "node", req.GetNode().GetId(),
			"names", len(req.ResourceNamesSubscribe), "resume", len(req.InitialResourceVersions))
	}
	// Subscription changes count whatever the nonce says.
	for _, name := range req.ResourceNamesSubscribe {
		if name == "*" {
			w.wildcard = true
			w.held.Seq = 0 // compare everything on the next push
			continue
		}
		if _, already := w.names[name]; !already {
			added++
			addedBytes += int64(len(name))
		}
		w.names[name] = struct{}{}
		w.recheck[name] = struct{}{}
	}
	for _, name := range req.ResourceNamesUnsubscribe {
		if name == "*" {
			w.wildcard = false
			w.held.Retain(func(name string) bool {
				_, named := w.names[name]
				return named
			})
			continue
		}
		if _, named := w.names[name]; named {
			removed++
			removedBytes += int64(len(name))
		}
		delete(w.names, name)
		if !w.wildcard {
			w.held.Drop(name)
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
	w.progress.answered()
	result := "ack"
	if req.ErrorDetail != nil {
		// The client keeps what it had for the rejected resources. We keep
		// believing it has what we sent, so they are not sent again until
		// they change: a resend of the same bytes would be rejected again.
		result = "nack"
		s.logRejected(budget, protocolDelta, w.typeURL, req.GetNode().GetId(), w.nonce, req.ErrorDetail.GetMessage())
	}
	s.metrics.acks.WithLabelValues(protocolDelta, typeLabel(w.typeURL), result).Inc()
	s.metrics.ackLatency.WithLabelValues(protocolDelta).Observe(time.Since(w.sentAt).Seconds())
	return nil, nil
}

func (s *Server) deltaPush(send func(any) error, w *deltaWatch, snap *snapshot.Snapshot, nonces *uint64) error {
	if w.pending {
		return nil
	}
	version := emptyVersion
	var changed []*snapshot.Resource
	var removed []string
	var everything *serve.FullState
	if w.known {
		if !snap.Ready {
			return nil
		}
		col := snap.Collection(w.kind)
		if w.sent && col.Seq == w.held.Seq && len(w.recheck) == 0 {
			return nil
		}
		version = col.Version
		var later []string
		changed, removed, later = deltaChanges(w, col)
		clear(w.recheck)
		for _, name := range later {
			w.recheck[name] = struct{}{}
		}
		if w.sent && len(changed) == 0 && len(removed) == 0 {
			return nil
		}
		if len(removed) == 0 && len(changed) > 0 && len(changed) == col.Len() {
			// Everything, as on a wildcard stream's first push: every
			// stream shares one body, only the header is its own.
			everything = serve.FullStateOf(col, deltaElement{})
		}
	} else if w.sent {
		return nil
	}
	*nonces++
	nonce := strconv.FormatUint(*nonces, 10)
	var msg *encodedMessage
	if everything != nil {
		msg = everything.Message(deltaHeader(version, w.typeURL, nonce, nil))
	} else {
		msg = deltaEncoded(version, w.typeURL, nonce, changed, removed)
	}
	if err := send(msg); err != nil {
		return err
	}
	w.sent, w.pending, w.nonce, w.sentAt = true, true, nonce, time.Now()
	s.metrics.responses.WithLabelValues(protocolDelta, typeLabel(w.typeURL)).Inc()
	s.metrics.responseBytes.WithLabelValues(protocolDelta, typeLabel(w.typeURL)).Add(float64(msg.Size))
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
	header := deltaHeader(version, typeURL, nonce, removed)
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

func deltaHeader(version, typeURL, nonce string, removed []string) []byte {
	n := len(version) + len(typeURL) + len(nonce) + 16
	for _, name := range removed {
		n += len(name) + 4
	}
	header := make([]byte, 0, n)
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
	return header
}

// deltaElement writes a resource as a DeltaDiscoveryResponse `resources`
// element: its pre-encoded prefix (name, version) and Any.
type deltaElement struct{}

func (deltaElement) Size(r *snapshot.Resource) int {
	prefix, body := r.DeltaEntry()
	return len(prefix) + len(body)
}

func (deltaElement) Append(dst []byte, r *snapshot.Resource) []byte {
	prefix, body := r.DeltaEntry()
	return append(append(dst, prefix...), body...)
}

// maxAbsentPerResponse bounds the names one response says are absent:
// the client chooses them, and gRPC keeps a response a client does not
// read for as long as the stream's place on its connection, after the
// stream has ended and given its names back to the budget.
const maxAbsentPerResponse = 1000

// deltaChanges returns what the client lacks and records it as sent. A
// client that named a resource we do not have (and is not a wildcard
// subscriber) is told so with a removal, so it need not wait for it: at
// most maxAbsentPerResponse at once, the rest (later) in the next
// responses.
func deltaChanges(w *deltaWatch, col *snapshot.Collection) (changed []*snapshot.Resource, removed, later []string) {
	var absent []string
	if !w.wildcard {
		for name := range w.recheck {
			_, named := w.names[name]
			if _, held := w.held.Version(name); named && !held && col.Get(name) == nil {
				absent = append(absent, name)
			}
		}
		slices.Sort(absent)
		if len(absent) > maxAbsentPerResponse {
			absent, later = absent[:maxAbsentPerResponse], absent[maxAbsentPerResponse:]
		}
	}
	changed, removed = w.held.CatchUp(col, snapshot.Scope{All: w.wildcard, Names: w.names}, keys(w.recheck))
	return changed, append(removed, absent...), later
}

// clientNames counts the names the client of a stream has made it keep:
// subscriptions and resume versions, every type together.
func clientNames(watches map[string]*deltaWatch) int {
	n := 0
	for _, w := range watches {
		n += len(w.names) + w.resumed
	}
	return n
}

func keys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
