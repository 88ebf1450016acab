package serve

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultSendTimeout bounds how long a client may leave one response
// unread before its stream is closed: far longer than istiod takes to
// apply 10,000 ServiceEntries, far shorter than a stuck client should pin
// an old snapshot in memory.
const DefaultSendTimeout = time.Minute

// Sender writes one stream's messages from a goroutine of its own, so that
// a client that stops reading costs a bounded time. gRPC's SendMsg blocks
// while the client's flow-control window is full, and nothing but the end
// of the handler unblocks it; with a Sender the stream's loop waits at most
// the timeout for each write, then returns an error that ends the handler,
// which ends the blocked write too, and the goroutine with it.
type Sender struct {
	send    func(any) error
	timeout time.Duration
	msgs    chan any
	results chan error
	timer   *time.Timer
	// timedOut is set by Send on a timeout; read by the stream's goroutine.
	timedOut bool
}

// NewSender starts the sending goroutine for a stream whose messages send
// writes. The caller owns it: Close it when the stream's loop returns.
func NewSender(send func(any) error, timeout time.Duration) *Sender {
	if timeout <= 0 {
		timeout = DefaultSendTimeout
	}
	s := &Sender{send: send, timeout: timeout, msgs: make(chan any), results: make(chan error, 1),
		timer: time.NewTimer(timeout)}
	s.timer.Stop()
	go func() {
		for m := range s.msgs {
			s.results <- s.send(m)
		}
	}()
	return s
}

// Send writes msg, waiting at most the timeout for the client to take it.
// After a timeout the Sender must not be used again: return the error from
// the stream's handler.
func (s *Sender) Send(msg any) error {
	s.msgs <- msg // the goroutine is idle: every earlier Send waited for its result
	s.timer.Reset(s.timeout)
	defer s.timer.Stop()
	select {
	case err := <-s.results:
		return err
	case <-s.timer.C:
		s.timedOut = true
		return status.Errorf(codes.ResourceExhausted, "the client has not read a response for %v: closing the stream", s.timeout)
	}
}

// TimedOut says whether a Send timed out. The stream then ends, but gRPC
// still holds what was not written, and the stream's place on its
// connection, until the client reads or the connection closes: a server
// stream's handler should end the connection too (Budget.Disconnect).
func (s *Sender) TimedOut() bool { return s.timedOut }

// Close ends the sending goroutine once its current write, if any, returns
// (a write blocked on a client that stopped reading returns when the
// stream's handler has returned).
func (s *Sender) Close() { close(s.msgs) }
