package xds

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/xdsclient"
)

// startConn serves routes on a loopback port and returns a connection to it.
func startConn(t *testing.T, routes snapshot.Router, opts Options) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(GRPCServerOptions()...)
	NewServer(routes, opts).Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// sample is what reg holds of one series of name with labels: a counter's
// or gauge's value, or a histogram's sample count and sum.
func sample(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (value float64, count uint64, found bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.Histogram != nil:
				return m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), 0, true
			default:
				return m.GetGauge().GetValue(), 0, true
			}
		}
	}
	return 0, 0, false
}

// eventually fails the test unless cond holds within 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestChangeAckedLatencyWaitsForEverySink: over real gRPC streams, a change
// is observed in galleon_change_acked_seconds only once every stream
// connected when it was published has ACKed it, per protocol, measured from
// its report; a stream that goes away is no longer waited for.
func TestChangeAckedLatencyWaitsForEverySink(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "1")
	reg := prometheus.NewRegistry()
	acks := serve.NewChangeAcks(reg, Protocols())
	conn := startConn(t, snapshot.Everyone(store), Options{Registerer: reg, ChangeAcks: acks})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slowCtx, closeSlow := context.WithCancel(ctx)
	defer closeSlow()

	fast, err := xdsclient.OpenSotW(ctx, conn, xdsclient.NewNode("fast"), []string{seV1})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := xdsclient.OpenSotW(slowCtx, conn, xdsclient.NewNode("slow"), []string{seV1})
	if err != nil {
		t.Fatal(err)
	}
	delta, err := xdsclient.OpenDelta(ctx, conn, xdsclient.NewNode("delta"), []string{seV1})
	if err != nil {
		t.Fatal(err)
	}
	recvSotW := func(s *xdsclient.SotWStream, ack bool) *xdsclient.Response {
		t.Helper()
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ack {
			if err := s.ACK(r); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	recvDelta := func() {
		t.Helper()
		r, err := delta.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if err := delta.ACK(r); err != nil {
			t.Fatal(err)
		}
	}
	recvSotW(fast, true)
	recvSotW(slow, true)
	recvDelta()
	acked := func(n float64) func() bool {
		return func() bool {
			a, _, _ := sample(t, reg, "galleon_xds_acks_total", map[string]string{"protocol": "sotw"})
			d, _, _ := sample(t, reg, "galleon_xds_acks_total", map[string]string{"protocol": "delta"})
			return a+d == n
		}
	}
	eventually(t, "the initial state's 3 ACKs", acked(3))

	if v, _, _ := sample(t, reg, "galleon_xds_subscribed_streams", map[string]string{"protocol": "sotw", "type": seV1}); v != 2 {
		t.Errorf("galleon_xds_subscribed_streams{sotw,%s} = %v, want 2", seV1, v)
	}

	// A change: fast and delta ACK it, slow reads it and does not.
	reported := time.Now()
	put(t, store, true, "ns/a", "2")
	acks.Changed(store.Current().Seq, reported)
	recvSotW(fast, true)
	recvDelta()
	unacked := recvSotW(slow, false)
	eventually(t, "delta's observation", func() bool {
		_, n, _ := sample(t, reg, "galleon_change_acked_seconds", map[string]string{"protocol": "delta"})
		return n == 1
	})
	eventually(t, "fast's ACK", acked(5))
	time.Sleep(100 * time.Millisecond) // time for a wrong observation to show
	if _, n, _ := sample(t, reg, "galleon_change_acked_seconds", map[string]string{"protocol": "sotw"}); n != 0 {
		t.Fatalf("sotw observed %d changes while the slow stream has not ACKed", n)
	}
	if w := acks.Waiting(); w != 1 {
		t.Fatalf("%d changes waiting, want 1", w)
	}
	time.Sleep(50 * time.Millisecond)
	if err := slow.ACK(unacked); err != nil {
		t.Fatal(err)
	}
	eventually(t, "sotw's observation after the slow ACK", func() bool {
		_, n, _ := sample(t, reg, "galleon_change_acked_seconds", map[string]string{"protocol": "sotw"})
		return n == 1
	})
	sum, _, _ := sample(t, reg, "galleon_change_acked_seconds", map[string]string{"protocol": "sotw"})
	if took := time.Since(reported).Seconds(); sum < 0.15 || sum > took {
		t.Errorf("observed %.3f s; want from the report (at least the 150 ms slept) to the slow ACK (at most %.3f s)", sum, took)
	}

	// Another change; slow goes away without ACKing it.
	put(t, store, true, "ns/a", "3")
	acks.Changed(store.Current().Seq, time.Now())
	recvSotW(fast, true)
	recvDelta()
	recvSotW(slow, false)
	closeSlow()
	eventually(t, "sotw's second observation, slow gone", func() bool {
		_, n, _ := sample(t, reg, "galleon_change_acked_seconds", map[string]string{"protocol": "sotw"})
		return n == 2
	})
	eventually(t, "slow off galleon_xds_subscribed_streams", func() bool {
		v, _, _ := sample(t, reg, "galleon_xds_subscribed_streams", map[string]string{"protocol": "sotw", "type": seV1})
		return v == 1
	})
	if w := acks.Waiting(); w != 0 {
		t.Fatalf("%d changes waiting, want none", w)
	}
}

// TestSubscribedStreamsByType: streams count once per served type URL, and
// every type a client makes up together as "other", however many it names.
func TestSubscribedStreamsByType(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "1")
	reg := prometheus.NewRegistry()
	conn := startConn(t, snapshot.Everyone(store), Options{Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	types := []string{seV1, "networking.istio.io/v1alpha3/WorkloadEntry", "made.up/v1/One", "made.up/v1/Two"}
	if _, err := xdsclient.OpenDelta(ctx, conn, xdsclient.NewNode("d"), types); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{seV1: 1, "networking.istio.io/v1alpha3/WorkloadEntry": 1, "other": 1}
	eventually(t, "the subscriptions counted", func() bool {
		for typ, n := range want {
			if v, _, _ := sample(t, reg, "galleon_xds_subscribed_streams", map[string]string{"protocol": "delta", "type": typ}); v != n {
				return false
			}
		}
		return true
	})
	if _, _, found := sample(t, reg, "galleon_xds_subscribed_streams", map[string]string{"type": "made.up/v1/One"}); found {
		t.Error("a made-up type URL is a label value")
	}
	if v, _, found := sample(t, reg, "galleon_xds_streams", map[string]string{"protocol": "sotw"}); !found || v != 0 {
		t.Errorf("galleon_xds_streams{protocol=sotw} = %v (found %v), want 0 before any stream", v, found)
	}
	cancel()
	eventually(t, "the stream off the gauge", func() bool {
		v, _, _ := sample(t, reg, "galleon_xds_subscribed_streams", map[string]string{"protocol": "delta", "type": "other"})
		return v == 0
	})
}
