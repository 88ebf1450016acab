package serve

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestSenderTimesOutAStuckWrite(t *testing.T) {
	unblock := make(chan struct{})
	var sent []any
	send := func(m any) error {
		if m == "stuck" {
			<-unblock // a client that stopped reading: gRPC's SendMsg blocks
			return errors.New("stream closed")
		}
		sent = append(sent, m)
		return nil
	}
	s := NewSender(send, 50*time.Millisecond)
	if err := s.Send("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Send("b"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := s.Send("stuck")
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stuck write: %v, want ResourceExhausted", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a stuck write held Send for %v", took)
	}
	// The handler returns, gRPC unblocks the write; Close lets the goroutine end.
	close(unblock)
	s.Close()
	if len(sent) != 2 || sent[0] != "a" || sent[1] != "b" {
		t.Errorf("sent %v, want [a b] in order", sent)
	}
}

func TestSenderPassesErrorsOn(t *testing.T) {
	boom := errors.New("boom")
	s := NewSender(func(any) error { return boom }, time.Second)
	defer s.Close()
	if err := s.Send("x"); !errors.Is(err, boom) {
		t.Errorf("Send = %v, want the write's own error", err)
	}
}
