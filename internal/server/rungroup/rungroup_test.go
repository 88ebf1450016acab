package rungroup

import (
	"context"
	"errors"
	"testing"
)

// The first failure stops the other parts and is returned with its part's name; a part that
// stops because it was asked to is no failure.
func TestFirstFailureStopsTheOthers(t *testing.T) {
	g, ctx := WithContext(context.Background())
	stopped := make(chan struct{})
	g.Go("waiter", func() error {
		<-ctx.Done()
		close(stopped)
		return ctx.Err() // context.Canceled: stopped as asked
	})
	boom := errors.New("boom")
	g.Go("failing", func() error { return boom })
	err := g.Wait()
	if !errors.Is(err, boom) || err.Error() != "failing: boom" {
		t.Fatalf("Wait = %v, want failing: boom", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Wait returned before the waiting part stopped")
	}
}

func TestNoFailure(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	g, ctx := WithContext(parent)
	g.Go("a", func() error { <-ctx.Done(); return ctx.Err() })
	g.Go("b", func() error { return nil })
	cancel()
	if err := g.Wait(); err != nil {
		t.Fatalf("Wait = %v, want nil", err)
	}
}
