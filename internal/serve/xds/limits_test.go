package xds

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
)

// labelValues returns every value of label in the metric family name.
func labelValues(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] += value(m)
				}
			}
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// A client that makes up type URLs must not make up label values: 3,000
// streams x 128 of them once took /metrics to 202 MB.
func TestClientChosenTypeURLsShareOneLabel(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	reg := prometheus.NewRegistry()
	client := startServerWith(t, snapshot.Everyone(store), Options{Registerer: reg})
	for s := range 3 {
		c := openSotW(t, client)
		for i := range 40 {
			c.send(fmt.Sprintf("example.com/v1/Made%dUp%d", s, i), "", "", false)
			c.recv()
		}
		c.send(seV1, "", "", false)
		c.recv()
	}
	// The server counts a response after its Send returned, which can be after the client read
	// it: wait for the last count, then check that no other label value appeared.
	var got map[string]float64
	eventually(t, "3 ServiceEntry responses counted", func() bool {
		got = labelValues(t, reg, "galleon_xds_responses_total", "type")
		return got[seV1] >= 3 && got["other"] >= 120
	})
	if len(got) != 2 || got["other"] != 120 || got[seV1] != 3 {
		t.Errorf("responses by type label = %v, want only %s (3) and other (120)", got, seV1)
	}
}

func TestDeltaNamesAreBounded(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	client := startServer(t, store)

	t.Run("a name too long", func(t *testing.T) {
		c := openDelta(t, client)
		c.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{strings.Repeat("n", serve.MaxNameLen+1)}})
		if _, err := c.stream.Recv(); grpcstatus.Code(err) != codes.InvalidArgument {
			t.Fatalf("got %v, want InvalidArgument", err)
		}
	})
	t.Run("a resume version too long", func(t *testing.T) {
		c := openDelta(t, client)
		c.send(&discovery.DeltaDiscoveryRequest{InitialResourceVersions: map[string]string{"ns/a": strings.Repeat("v", serve.MaxNameLen+1)}})
		if _, err := c.stream.Recv(); grpcstatus.Code(err) != codes.InvalidArgument {
			t.Fatalf("got %v, want InvalidArgument", err)
		}
	})
	t.Run("too many names over several requests", func(t *testing.T) {
		c := openDelta(t, client)
		half := serve.MaxNamesPerStream/2 + 1
		batch := func(from int) []string {
			names := make([]string, half)
			for i := range names {
				names[i] = fmt.Sprintf("ns/n%d", from+i)
			}
			return names
		}
		c.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: batch(0)})
		c.recvAck() // within the bound: answered
		c.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: batch(half)})
		for {
			_, err := c.stream.Recv()
			if err == nil {
				continue // the answer to the first request's ACK, if any
			}
			if grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "wildcard") {
				t.Fatalf("got %v, want ResourceExhausted that suggests a wildcard", err)
			}
			break
		}
	})
	t.Run("re-subscribing the same names costs nothing more", func(t *testing.T) {
		c := openDelta(t, client)
		names := make([]string, serve.MaxNamesPerStream*2/3)
		for i := range names {
			names[i] = fmt.Sprintf("ns/r%d", i)
		}
		names[0] = "ns/a"
		c.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: names})
		c.recvAck()
		// Twice more: counted again, the stream would go over its bound.
		for range 2 {
			c.send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: names})
		}
		put(t, store, true, "ns/a", "a2")
		for {
			changed, _ := c.recvAck() // fails the test if the stream was closed
			if slices.Contains(changed, "ns/a=a2") {
				break
			}
		}
	})
}

// 50 NACKs of 1 MB each once wrote 49 MB of log in half a second.
func TestNackLogIsCutAndBounded(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "v0")
	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	client := startServerWith(t, snapshot.Everyone(store), Options{Registerer: reg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	c := openSotW(t, client)
	c.send(seV1, "", "", false)
	const nacks = 20
	huge := strings.Repeat("x", 100_000)
	for i := range nacks {
		r := c.recv()
		req := &discovery.DiscoveryRequest{TypeUrl: seV1, ResponseNonce: r.Nonce,
			ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: huge}}
		if err := c.stream.Send(req); err != nil {
			t.Fatal(err)
		}
		put(t, store, true, "ns/a", fmt.Sprintf("v%d", i+1))
	}
	c.recv() // the last NACK was handled before this response went out

	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(l, "xds response rejected") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 5 {
		t.Errorf("%d NACKs logged %d lines, want the stream's burst of 5", nacks, len(lines))
	}
	for _, l := range lines {
		if len(l) > serve.MaxLoggedText+512 {
			t.Errorf("a NACK line is %d bytes: the client's text is not cut", len(l))
		}
		if !strings.Contains(l, "more bytes") {
			t.Errorf("a cut NACK line does not say it was cut: %.200s", l)
		}
	}
	if got := labelValues(t, reg, "galleon_xds_log_lines_suppressed_total", "protocol")["sotw"]; got != nacks-5 {
		t.Errorf("galleon_xds_log_lines_suppressed_total{protocol=sotw} = %v, want %d", got, nacks-5)
	}
	if got := labelValues(t, reg, "galleon_xds_acks_total", "result")["nack"]; got != nacks {
		t.Errorf("NACKs counted %v, want %d (every one counts, logged or not)", got, nacks)
	}
}

// Responses wait for ACKs, so a sink that stops reading pins one response
// per type. One that ACKs without reading (nonces are easy to guess) made
// the server write until gRPC's flow control blocked the stream for ever.
// Now a write that waits longer than the send timeout closes the stream with
// a status, and what it pinned is released.
func TestSinkThatStopsReadingIsCutOff(t *testing.T) {
	store := snapshot.NewStore()
	big := strings.Repeat("x", 2<<20) // past every flow-control window
	put(t, store, true, "ns/a", big+"1")
	reg := prometheus.NewRegistry()
	client := startServerWith(t, snapshot.Everyone(store), Options{SendTimeout: 300 * time.Millisecond, Registerer: reg})
	stuck := openSotW(t, client)
	stuck.send(seV1, "", "", false)
	sent := func() float64 { return labelValues(t, reg, "galleon_xds_responses_total", "protocol")["sotw"] }
	// It ACKs each version the server has sent, blindly, and never reads,
	// until the server is stuck writing to it: its transport takes what the
	// flow-control windows allow (they grow to several MB on loopback), then
	// the server's write blocks.
	for i := range 20 {
		for deadline := time.Now().Add(2 * time.Second); sent() < float64(i+1) && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if sent() < float64(i+1) {
			break // the server is blocked writing to the stuck sink
		}
		seq := store.Current().Collection(snapshot.ServiceEntry).Seq
		if err := stuck.stream.Send(&discovery.DiscoveryRequest{TypeUrl: seV1, ResponseNonce: nonceOf(seq)}); err != nil {
			break // the server closed the stream already
		}
		put(t, store, true, "ns/a", fmt.Sprintf("%s%d", big, i+2))
	}
	// A healthy sink is served meanwhile.
	healthy := openSotW(t, client)
	healthy.send(seV1, "", "", false)
	if r := healthy.recv(); len(r.Resources) != 1 {
		t.Fatalf("healthy sink: %d resources", len(r.Resources))
	}
	// The stuck one ends with ResourceExhausted once it reads again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := stuck.stream.Recv()
		if err != nil {
			if grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "has not read") {
				t.Fatalf("the stuck sink's stream ended with %v, want ResourceExhausted", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stuck sink's stream was never closed")
		}
	}
}
