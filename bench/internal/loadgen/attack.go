package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/galleon-mesh/galleon/internal/loadtest"
)

// The attacks a hostile client made on a source (issue 9), replayed while
// the measured sinks take changes, so that what they cost the healthy sinks
// is a figure. Each attack repeats until its context is done; the server is
// expected to end each stream with a status once a bound is hit.
const (
	// attackTypeURLs is how many made-up type URLs one flooding stream asks
	// for: more than a source keeps per stream.
	attackTypeURLs = 200
	// attackNamesBytes is the size of one Delta subscribe request of
	// made-up names (under gRPC's 4 MiB request limit).
	attackNamesBytes = 3 << 20
	// attackNackBytes is the size of the error message in one NACK.
	attackNackBytes = 1 << 20
)

// AttackStats counts what the attackers did and how the source answered.
type AttackStats struct {
	// Streams is how many attacking streams were opened.
	Streams atomic.Int64
	// closed counts how attacking streams ended, by status code.
	closedMu sync.Mutex
	closed   map[string]int
}

func (a *AttackStats) closedWith(err error) {
	code := "EOF"
	switch {
	case err == nil:
		code = "by the attacker"
	case errors.Is(err, io.EOF):
	default:
		code = status.Code(err).String()
	}
	a.closedMu.Lock()
	if a.closed == nil {
		a.closed = map[string]int{}
	}
	a.closed[code]++
	a.closedMu.Unlock()
}

// Ended returns how many attacking streams ended, by how: a gRPC status
// code's name, "EOF", or "by the attacker".
func (a *AttackStats) Ended() map[string]int {
	a.closedMu.Lock()
	defer a.closedMu.Unlock()
	return maps.Clone(a.closed)
}

// String says how many streams were opened and how they were closed.
func (a *AttackStats) String() string {
	a.closedMu.Lock()
	defer a.closedMu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d attacking streams", a.Streams.Load())
	codes := slices.Sorted(maps.Keys(a.closed))
	sep := "; ended: "
	for _, code := range codes {
		fmt.Fprintf(&b, "%s%s x%d", sep, code, a.closed[code])
		sep = ", "
	}
	return b.String()
}

// Attack runs the three attacks of issue 9 against addr, one after the
// other, over and over, until ctx is done: a stream asking for 200 made-up
// type URLs (label cardinality), a Delta stream sending 3 MB subscribe
// requests of made-up names (per-stream state), and a SotW stream that
// answers every response for typeURL with a 1 MB NACK (log volume).
func Attack(ctx context.Context, addr, typeURL string, stats *AttackStats) error {
	conn, err := loadtest.Dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	for n := 0; ctx.Err() == nil; n++ {
		var err error
		switch n % 3 {
		case 0:
			err = floodTypeURLs(ctx, conn, n)
		case 1:
			err = floodDeltaNames(ctx, conn, typeURL, n)
		case 2:
			err = floodNacks(ctx, conn, typeURL)
		}
		stats.Streams.Add(1)
		if ctx.Err() != nil {
			return nil
		}
		stats.closedWith(err)
	}
	return nil
}

// RunAttackers runs n attackers (Attack) against addr until ctx is done and
// returns what they did.
func RunAttackers(ctx context.Context, addr, typeURL string, n int) (*AttackStats, error) {
	stats := &AttackStats{}
	errs := make(chan error, n)
	for range n {
		go func() { errs <- Attack(ctx, addr, typeURL, stats) }() // each ends with ctx
	}
	var failed error
	for range n {
		if err := <-errs; err != nil {
			failed = err
		}
	}
	return stats, failed
}

func openADS(ctx context.Context, conn *grpc.ClientConn, delta bool) (grpc.ClientStream, error) {
	method := loadtest.ADSService + "StreamAggregatedResources"
	if delta {
		method = loadtest.ADSService + "DeltaAggregatedResources"
	}
	desc := &grpc.StreamDesc{StreamName: path.Base(method), ServerStreams: true, ClientStreams: true}
	return conn.NewStream(ctx, desc, method)
}

// floodTypeURLs asks for made-up type URLs on one stream until the source
// ends it; it returns the error the stream ended with.
func floodTypeURLs(ctx context.Context, conn *grpc.ClientConn, round int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := openADS(ctx, conn, false)
	if err != nil {
		return err
	}
	ended := drain(st)
	for i := range attackTypeURLs {
		req := &discovery.DiscoveryRequest{TypeUrl: fmt.Sprintf("attack.example/t%d-%d", round, i)}
		if err := st.SendMsg(req); err != nil {
			break
		}
	}
	_ = st.CloseSend()
	return <-ended
}

// floodDeltaNames subscribes to 3 MB of made-up names per request until the
// source ends the stream.
func floodDeltaNames(ctx context.Context, conn *grpc.ClientConn, typeURL string, round int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := openADS(ctx, conn, true)
	if err != nil {
		return err
	}
	ended := drain(st)
	const nameLen = 60
	// 20 requests are a million names, five times the bound a source
	// should keep; a source that takes them all is reported as not
	// having closed the stream.
	for r := range 20 {
		names := make([]string, attackNamesBytes/nameLen)
		for i := range names {
			names[i] = fmt.Sprintf("%-*s", nameLen, fmt.Sprintf("attack-%d-%d-%d.example", round, r, i))
		}
		if err := st.SendMsg(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names}); err != nil {
			break
		}
	}
	_ = st.CloseSend()
	if err := <-ended; !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// floodNacks subscribes to typeURL and answers the first response with ten
// NACKs of a 1 MB error message each, as fast as they go, then ends the
// stream itself and returns nil: a NACK flood is bounded in log lines, not
// cut off.
func floodNacks(ctx context.Context, conn *grpc.ClientConn, typeURL string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := openADS(ctx, conn, false)
	if err != nil {
		return err
	}
	if err := st.SendMsg(&discovery.DiscoveryRequest{TypeUrl: typeURL}); err != nil {
		return err
	}
	nonce, err := loadtest.RecvXDSHeader(st)
	if err != nil {
		return err
	}
	ended := drain(st)
	msg := strings.Repeat("x", attackNackBytes)
	for range 10 {
		nack := &discovery.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: "", ResponseNonce: nonce,
			ErrorDetail: &rpcstatus.Status{Code: 3, Message: msg}}
		if err := st.SendMsg(nack); err != nil {
			return <-ended
		}
	}
	_ = st.CloseSend()
	if err := <-ended; !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// drain reads responses, headers only, until the stream ends, so the
// source is never held up writing to an attacker; the channel gets the
// error the stream ended with.
func drain(st grpc.ClientStream) <-chan error {
	ended := make(chan error, 1)
	go func() { // ends with the stream, which its caller's context ends
		for {
			if _, err := loadtest.RecvXDSHeader(st); err != nil {
				ended <- err
				return
			}
		}
	}()
	return ended
}
