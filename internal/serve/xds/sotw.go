package xds

import (
	"strconv"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

const protocolSotW = "sotw"

// DiscoveryResponse field numbers, for the pre-encoded response header.
const (
	fieldVersionInfo = 1
	fieldTypeURL     = 4
	fieldNonce       = 5
)

// sotwWatch is one type URL's state on one SotW stream.
type sotwWatch struct {
	typeURL string
	kind    snapshot.Kind
	known   bool // a kind this server serves; other types get one empty response

	sent      bool   // a response of this type went out on this stream
	sentSeq   uint64 // collection Seq of the last response
	sentVer   string // version_info of the last response
	nonce     string // nonce of the last response
	sentAt    time.Time
	pending   bool   // the last response is not acknowledged yet
	resend    bool   // the client asked again (empty nonce): send current state
	nackedVer string // a version the client rejected: not sent again
	progress  watchProgress
}

// StreamAggregatedResources serves one SotW ADS stream.
func (s *Server) StreamAggregatedResources(stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	// SotW requests name no resources this server keeps (it serves every
	// stream everything of its source): the stream is all it holds.
	lease, err := s.budget.Open(stream.Context(), protocolSotW)
	if err != nil {
		return err
	}
	defer lease.Close()
	watches := map[string]*sotwWatch{}
	var order []*sotwWatch // in the order first asked: responses follow it
	budget := s.logBudget.ForStream()
	sender := serve.NewSender(stream.SendMsg, s.sendTimeout)
	defer sender.Close()
	defer s.disconnectIfStuck(stream.Context(), sender)
	types := streamTypes{m: s.metrics, protocol: protocolSotW}
	defer types.release()
	return serveStream(s, stream.Context(), protocolSotW, stream.Recv,
		func(req *discovery.DiscoveryRequest) error {
			w, err := s.sotwRequest(watches, budget, req)
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
				if err := s.sotwPush(sender.Send, w, snap); err != nil {
					return 0, err
				}
				w.progress.pushed(snap, wasPending, w.pending)
				upTo = min(upTo, w.progress.upTo)
			}
			return upTo, nil
		})
}

// sotwRequest applies one request to the stream's watches. It returns the
// watch it created, if any, and an error that closes the stream for a
// request no client should send.
func (s *Server) sotwRequest(watches map[string]*sotwWatch, budget *serve.LogLimiter, req *discovery.DiscoveryRequest) (*sotwWatch, error) {
	w, exists := watches[req.GetTypeUrl()]
	if err := s.admitType(protocolSotW, req.GetTypeUrl(), exists, len(watches)); err != nil {
		return nil, err
	}
	if !exists {
		w = &sotwWatch{typeURL: req.TypeUrl}
		w.kind, w.known = KindOf(req.TypeUrl)
		watches[req.TypeUrl] = w
		s.log.Debug("xds subscribe", "protocol", protocolSotW, "type", req.TypeUrl, "node", req.GetNode().GetId())
		// istiod's first requests carry a made-up response_nonce: nothing
		// was sent yet, so whatever the nonce, this is a subscription.
		return w, nil
	}
	switch {
	case !w.sent:
		// Still a subscription: nothing to acknowledge yet.
	case req.ResponseNonce == "":
		// The client asks for the state again (a new subscription on the
		// same stream): answer with what is current.
		w.pending, w.resend = false, true
	case req.ResponseNonce != w.nonce:
		// An answer to an older response: the newer one is on its way, and
		// the client will answer that.
		s.metrics.badRequests.WithLabelValues(protocolSotW, "stale_nonce").Inc()
	case req.ErrorDetail != nil:
		w.pending = false
		w.progress.answered()
		// A NACK's version_info is the last version the client accepted;
		// the one it rejected is the one we sent.
		w.nackedVer = w.sentVer
		s.metrics.acks.WithLabelValues(protocolSotW, typeLabel(w.typeURL), "nack").Inc()
		s.metrics.ackLatency.WithLabelValues(protocolSotW).Observe(time.Since(w.sentAt).Seconds())
		s.logRejected(budget, protocolSotW, w.typeURL, req.GetNode().GetId(), w.nonce, req.ErrorDetail.GetMessage())
	default:
		w.pending = false
		w.progress.answered()
		s.metrics.acks.WithLabelValues(protocolSotW, typeLabel(w.typeURL), "ack").Inc()
		s.metrics.ackLatency.WithLabelValues(protocolSotW).Observe(time.Since(w.sentAt).Seconds())
	}
	return nil, nil
}

// sotwPush sends w's current state if the client may receive it and does
// not have it.
func (s *Server) sotwPush(send func(any) error, w *sotwWatch, snap *snapshot.Snapshot) error {
	if w.pending {
		return nil
	}
	var msg *encodedMessage
	var seq uint64
	version := emptyVersion
	if w.known {
		if !snap.Ready {
			// An empty answer before the registry was listed would make
			// istiod delete everything it holds from us.
			return nil
		}
		col := snap.Collection(w.kind)
		if w.sent && col.Seq == w.sentSeq && !w.resend {
			return nil
		}
		if col.Version == w.nackedVer && !w.resend {
			return nil
		}
		seq, version = col.Seq, col.Version
		msg = sotwEncoded(col, w.typeURL)
	} else {
		if w.sent && !w.resend {
			return nil
		}
		msg = emptyEncoded(w.typeURL)
	}
	if err := send(msg); err != nil {
		return err
	}
	w.sent, w.sentSeq, w.sentVer, w.pending, w.resend = true, seq, version, true, false
	w.nonce = nonceOf(seq)
	w.sentAt = time.Now()
	s.metrics.responses.WithLabelValues(protocolSotW, typeLabel(w.typeURL)).Inc()
	s.metrics.responseBytes.WithLabelValues(protocolSotW, typeLabel(w.typeURL)).Add(float64(msg.Size))
	if w.known {
		s.metrics.pushLatency.WithLabelValues(protocolSotW).Observe(w.sentAt.Sub(snap.Time).Seconds())
	}
	return nil
}

// nonceOf names a response by the collection sequence it carries. The
// same version always has the same nonce, which is what lets every stream
// share one encoding; a stream never has two responses of one type with the
// same sequence outstanding, so the nonce still says which one an ACK is for.
func nonceOf(seq uint64) string { return strconv.FormatUint(seq, 10) }

type sotwKey struct{ typeURL string }

// sotwElement writes a resource as a DiscoveryResponse `resources` element:
// its pre-encoded entry, marshalled once when the resource was made.
type sotwElement struct{}

func (sotwElement) Size(r *snapshot.Resource) int { return len(r.ResponseEntry()) }

func (sotwElement) Append(dst []byte, r *snapshot.Resource) []byte {
	return append(dst, r.ResponseEntry()...)
}

// sotwEncoded returns the full-state response of a collection for a type
// URL, encoding it on first use: the header (version, type URL, nonce) and
// then every resource's entry. Every stream shares the result; the body is
// shared with the other type URLs of the kind and, chunk by chunk, with the
// next version (serve.FullStateOf).
func sotwEncoded(col *snapshot.Collection, typeURL string) *encodedMessage {
	// Outside Memo's build: Memo holds the collection's memo lock, which
	// FullStateOf takes too.
	body := serve.FullStateOf(col, sotwElement{})
	return col.Memo(sotwKey{typeURL}, func() any {
		return body.Message(encodeHeader(col.Version, typeURL, nonceOf(col.Seq)))
	}).(*encodedMessage)
}

// emptyVersion is the version of a type this server holds nothing of.
const emptyVersion = "0"

// emptyEncoded is the answer to a type this server holds nothing of.
// istiod waits for an answer to every type it asked for before it is Ready.
func emptyEncoded(typeURL string) *encodedMessage {
	header := encodeHeader(emptyVersion, typeURL, nonceOf(0))
	return &encodedMessage{Buffers: mem.BufferSlice{mem.SliceBuffer(header)}, Size: len(header)}
}

func encodeHeader(version, typeURL, nonce string) []byte {
	b := make([]byte, 0, len(version)+len(typeURL)+len(nonce)+12)
	b = protowire.AppendTag(b, fieldVersionInfo, protowire.BytesType)
	b = protowire.AppendString(b, version)
	b = protowire.AppendTag(b, fieldTypeURL, protowire.BytesType)
	b = protowire.AppendString(b, typeURL)
	b = protowire.AppendTag(b, fieldNonce, protowire.BytesType)
	return protowire.AppendString(b, nonce)
}
