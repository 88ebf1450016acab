package mcp

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// changeAcked returns the sample count of galleon_change_acked_seconds{protocol="mcp"}
// and the value of galleon_mcp_subscribed_streams for collection.
func changeAcked(t *testing.T, reg *prometheus.Registry, collection string) (observed uint64, subscribed float64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "galleon_change_acked_seconds":
				observed = m.GetHistogram().GetSampleCount()
			case "galleon_mcp_subscribed_streams":
				if m.GetLabel()[0].GetValue() == collection {
					subscribed = m.GetGauge().GetValue()
				}
			}
		}
	}
	return observed, subscribed
}

// TestChangeAckedLatencyLegacySinks: a legacy MCP sink is waited for like
// an xDS one: the change is observed once both sinks ACKed it, a NACK
// counting as an answer; the subscriptions are counted per collection.
func TestChangeAckedLatencyLegacySinks(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	reg := prometheus.NewRegistry()
	acks := serve.NewChangeAcks(reg, []string{Protocol})
	_, client := startServer(t, snapshot.Everyone(store), Options{Registerer: reg, ChangeAcks: acks})
	one, two := openSink(t, client, "one"), openSink(t, client, "two")
	one.subscribe(ServiceEntries, false)
	one.subscribe(meshConfig, false)
	two.subscribe(ServiceEntries, true)
	for _, s := range []*sink{one, one, two} {
		s.ack(s.recv(), s == two)
	}
	if _, n := changeAcked(t, reg, ServiceEntries); n != 2 {
		t.Errorf("galleon_mcp_subscribed_streams{%s} = %v, want 2", ServiceEntries, n)
	}
	if _, n := changeAcked(t, reg, "other"); n != 1 {
		t.Errorf("galleon_mcp_subscribed_streams{other} = %v, want 1", n)
	}

	put(t, store, true, "ns/a", "a2")
	acks.Changed(store.Current().Seq, time.Now())
	one.ack(one.recv(), false)
	r := two.recv()
	time.Sleep(100 * time.Millisecond)
	if n, _ := changeAcked(t, reg, ServiceEntries); n != 0 {
		t.Fatalf("%d changes observed while sink two has not answered", n)
	}
	two.nack(r, true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n, _ := changeAcked(t, reg, ServiceEntries); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the change was not observed after both sinks answered")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
