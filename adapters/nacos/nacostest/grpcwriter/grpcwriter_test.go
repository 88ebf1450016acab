package grpcwriter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

func TestDialWantsHostPort(t *testing.T) {
	if _, err := Dial(context.Background(), Config{Address: "127.0.0.1"}); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Fatalf("Dial without a port: %v, want an error asking for host:port", err)
	}
}

// A registration is listed as written, ephemeral; a deregistration removes it; an instance
// still registered when the writer closes is dropped by the server with the connection.
func TestWriterAgainstPolaris(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+nacostest.Version)
	s := nacostest.Start(t, nacostest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := Dial(ctx, Config{Address: s.GRPCAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := s.Client()
	ref := nacostest.Ref{Group: "g", Service: "writer-svc"}
	a, b := nacostest.NewInstance("10.1.0.1", 8080), nacostest.NewInstance("10.1.0.2", 8080)
	a.Weight, a.Metadata = 3, map[string]string{"zone": "z1"}
	for _, in := range []nacostest.Instance{a, b} {
		if err := w.Register(ctx, ref, in); err != nil {
			t.Fatal(err)
		}
	}
	si, err := c.WaitInstances(ctx, ref, func(si *nacostest.ServiceInfo) bool { return len(si.Hosts) == 2 })
	if err != nil {
		t.Fatal(err)
	}
	if h := si.Find(a.IP, a.Port); h == nil || h.Weight != 3 || h.Metadata["zone"] != "z1" || !h.Healthy || !h.Enabled || !h.Ephemeral {
		t.Fatalf("%s:%d listed as %+v, want weight 3, zone z1, healthy, enabled, ephemeral", a.IP, a.Port, h)
	}
	if err := w.Deregister(ctx, ref, b); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitInstances(ctx, ref, func(si *nacostest.ServiceInfo) bool {
		return len(si.Hosts) == 1 && si.Find(a.IP, a.Port) != nil
	}); err != nil {
		t.Fatalf("after deregistering %s: %v", b.IP, err)
	}
	select {
	case <-w.Done():
		t.Fatalf("the connection ended: %v", w.Err())
	default:
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(w.Err(), wire.ErrClosed) {
		t.Errorf("Err after Close = %v, want ErrClosed", w.Err())
	}
	if err := w.Register(ctx, ref, b); err == nil {
		t.Error("Register after Close succeeded")
	}
	if _, err := c.WaitInstances(ctx, ref, func(si *nacostest.ServiceInfo) bool { return len(si.Hosts) == 0 }); err != nil {
		t.Fatalf("after the writer closed: %v", err)
	}
}
