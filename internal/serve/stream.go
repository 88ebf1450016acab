package serve

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// ServeStream is the loop every config stream runs, xDS or legacy MCP. One
// goroutine (the caller's) owns the stream's state: it applies requests with
// onRequest and, after each request or change of source, lets push send
// what the client lacks. A second goroutine only receives; it is owned by
// this loop and ends with the stream, whose context gRPC cancels when the
// handler returns. A client that goes away ends the loop without an error.
func ServeStream[Req any](ctx context.Context, source snapshot.Source, recv func() (Req, error),
	onRequest func(Req) error, push func(*snapshot.Snapshot) error) error {
	return serveStream(ctx, nil, source, recv, onRequest, push)
}

// ServeClientStream is ServeStream for a stream this process opened as a
// gRPC client (the legacy MCP callout): ctx is the stream's context and
// cancel cancels it. When the loop ends it cancels the stream, which ends a
// pending recv, and returns only once the receiving goroutine has ended, so
// nothing it started outlives it.
func ServeClientStream[Req any](ctx context.Context, cancel context.CancelFunc, source snapshot.Source,
	recv func() (Req, error), onRequest func(Req) error, push func(*snapshot.Snapshot) error) error {
	return serveStream(ctx, cancel, source, recv, onRequest, push)
}

func serveStream[Req any](ctx context.Context, cancelStream context.CancelFunc, source snapshot.Source,
	recv func() (Req, error), onRequest func(Req) error, push func(*snapshot.Snapshot) error) error {
	// One request waits while the loop works (pushing, perhaps waiting on
	// a slow client): each may be a 4 MiB message decoded, and the
	// client's next ones wait in gRPC's flow control, not in memory here.
	reqs := make(chan Req, 1)
	recvErrs := make(chan error, 1)
	recvDone := make(chan struct{})
	if cancelStream != nil {
		defer func() {
			cancelStream()
			<-recvDone
		}()
	}
	go func() {
		defer close(recvDone)
		for {
			req, err := recv()
			if err != nil {
				recvErrs <- err // buffered: never blocks
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	changed, cancel := source.Subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), errDraining) {
				return status.Error(codes.Unavailable, errDraining.Error()+": reconnect")
			}
			return nil
		case err := <-recvErrs:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-changed:
		case req := <-reqs:
			if err := onRequest(req); err != nil {
				return err
			}
		}
		if err := push(source.Current()); err != nil {
			return err
		}
	}
}

// Peek receives a stream's first request, so that the source a stream is
// served from can be chosen by what the client says of itself (its node),
// and returns a recv that yields that request, or its error, before the
// rest. Hand the returned recv to ServeStream, which deals with the error.
func Peek[Req any](recv func() (Req, error)) (first Req, again func() (Req, error)) {
	first, err := recv()
	replayed := false
	return first, func() (Req, error) {
		if !replayed {
			replayed = true
			return first, err
		}
		return recv()
	}
}

// LocalPort is the port of this process a gRPC stream arrived on, 0 when
// gRPC does not say (a stream this process dialed): routers tell shard
// listeners apart by it.
func LocalPort(ctx context.Context) int {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return 0
	}
	if tcp, ok := p.LocalAddr.(*net.TCPAddr); ok {
		return tcp.Port
	}
	return 0
}

// errDraining is the cause a Drainer cancels stream contexts with.
var errDraining = errors.New("the config source is shutting down")

// Drainer ends a server's config streams when the server stops. They never
// end by themselves, so a graceful stop would otherwise wait out its whole
// grace and clients would see the transport close; ended with Unavailable,
// they reconnect at once (istiod with its backoff), to another replica or
// to this one restarted.
type Drainer struct {
	once sync.Once
	ch   chan struct{}
}

// NewDrainer returns a Drainer that has not drained.
func NewDrainer() *Drainer { return &Drainer{ch: make(chan struct{})} }

// Drain ends every stream served with a context from Context, now and
// later. It may be called more than once.
func (d *Drainer) Drain() { d.once.Do(func() { close(d.ch) }) }

// Context returns a stream context that also ends when d drains; the loop of
// ServeStream then returns an Unavailable status. Call cancel when the
// stream ends.
func (d *Drainer) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-d.ch:
			cancel(errDraining)
		case <-ctx.Done():
		case <-done:
		}
	}()
	return ctx, func() { close(done); cancel(context.Canceled) }
}
