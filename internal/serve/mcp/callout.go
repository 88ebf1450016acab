package mcp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/galleon-mesh/galleon/internal/serve"
	mcpv1alpha1 "github.com/galleon-mesh/galleon/proto/mcp/v1alpha1"
)

// Callout backoff defaults.
const (
	DefaultCalloutInitialBackoff = 500 * time.Millisecond
	DefaultCalloutMaxBackoff     = 30 * time.Second
)

// calloutStable is how long a stream must have lived for the backoff to
// start over; a stream on which the sink acknowledged a response resets it
// too.
const calloutStable = 30 * time.Second

// Backoff bounds the wait before dialing again. Each wait is drawn
// uniformly from [0, d) ("full jitter"), d starting at Initial and doubling
// up to Max.
type Backoff struct {
	Initial time.Duration // 0 means DefaultCalloutInitialBackoff
	Max     time.Duration // 0 means DefaultCalloutMaxBackoff
}

// CalloutConfig configures RunCallout.
type CalloutConfig struct {
	// Address is the sink's ResourceSink server, host:port.
	Address string
	// TLS secures the connection; nil dials in plaintext. Certificates are
	// what the caller put in it (read once, not reloaded).
	TLS     *tls.Config
	Backoff Backoff
	// Logger defaults to the server's.
	Logger *slog.Logger
}

// RunCallout serves one sink in callout mode (istio.mcp.v1alpha1.ResourceSink,
// for sinks that cannot reach this process): it dials cfg.Address, opens the
// sink's stream and serves it exactly as EstablishResourceStream serves a
// stream the sink dialed: the sink subscribes with RequestResources, is
// answered with Resources, ACKs and NACKs by nonce. When the stream fails or
// ends it waits a jittered backoff and dials again, until ctx is done; then
// it returns ctx.Err(), having ended everything it started. It fails at
// once only on a configuration error.
func (s *Server) RunCallout(ctx context.Context, cfg CalloutConfig) error {
	if cfg.Address == "" {
		return errors.New("mcp callout: no sink address")
	}
	initial, maxWait := cfg.Backoff.Initial, cfg.Backoff.Max
	if initial <= 0 {
		initial = DefaultCalloutInitialBackoff
	}
	if maxWait <= 0 {
		maxWait = DefaultCalloutMaxBackoff
	}
	maxWait = max(maxWait, initial)
	log := cfg.Logger
	if log == nil {
		log = s.log
	}
	log = log.With("sink_address", cfg.Address)
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// Pre-encoded responses (serve.Message) are written as they are.
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(serve.Codec())),
		// Find a sink that vanished without closing the connection. Five
		// minutes is grpc-go's default server enforcement minimum: pinging
		// more often would earn a GOAWAY too_many_pings.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Minute, Timeout: 20 * time.Second}),
	}

	wait := initial
	for {
		lived, acked, err := s.callout(ctx, cfg.Address, dialOpts, log)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var cfgErr *calloutConfigError
		if errors.As(err, &cfgErr) {
			return err
		}
		if lived >= calloutStable || acked {
			wait = initial
		}
		d := rand.N(wait) // full jitter
		s.metrics.calloutReconnects.Inc()
		log.Warn("mcp callout: stream to the sink ended; dialing again", "error", err, "lived", lived.Round(time.Millisecond),
			"backoff", d.Round(time.Millisecond))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, maxWait)
	}
}

type calloutConfigError struct{ err error }

func (e *calloutConfigError) Error() string { return e.err.Error() }
func (e *calloutConfigError) Unwrap() error { return e.err }

// callout dials the sink once and serves the stream until it ends. It
// reports how long the stream lived and whether the sink acknowledged a
// response on it. The connection is new for each attempt, so the caller's
// backoff, not grpc's, decides when to dial again.
func (s *Server) callout(ctx context.Context, address string, dialOpts []grpc.DialOption, log *slog.Logger) (time.Duration, bool, error) {
	conn, err := grpc.NewClient(address, dialOpts...)
	if err != nil {
		return 0, false, &calloutConfigError{fmt.Errorf("mcp callout to %s: %w", address, err)}
	}
	defer conn.Close()
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := mcpv1alpha1.NewResourceSinkClient(conn).EstablishResourceStream(streamCtx)
	if err != nil {
		return 0, false, err
	}
	start := time.Now()
	log.Info("mcp callout: stream to the sink established")
	s.metrics.calloutConnected.Set(1)
	defer s.metrics.calloutConnected.Set(0)
	sender := serve.NewSender(stream.SendMsg, s.sendTimeout)
	defer sender.Close()
	// No lease: this process dialed the sink (--mcp-callout), which the
	// per-stream bounds still limit.
	st := newStreamState(sender.Send, s.logBudget, nil)
	err = s.serve(streamCtx, cancel, st, stream.Recv)
	if err == nil {
		err = errors.New("the sink closed the stream")
	}
	return time.Since(start), st.acks > 0, err
}
