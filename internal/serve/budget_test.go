package serve

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

func fromIP(ip string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1234}})
}

func TestBudgetStreams(t *testing.T) {
	b := NewBudget(BudgetLimits{Streams: 3, StreamsPerClient: 2}, prometheus.NewRegistry(), nil, []string{"delta"})
	a1, err := b.Open(fromIP("10.0.0.1"), "delta")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Open(fromIP("10.0.0.1"), "delta"); err != nil {
		t.Fatal(err)
	}
	_, err = b.Open(fromIP("10.0.0.1"), "delta")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams-per-client 2") {
		t.Fatalf("a client's 3rd stream: %v, want ResourceExhausted naming --max-streams-per-client", err)
	}
	if _, err := b.Open(fromIP("10.0.0.2"), "sotw"); err != nil {
		t.Fatalf("another client refused for the first one's streams: %v", err)
	}
	_, err = b.Open(fromIP("10.0.0.3"), "sotw")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams 3") {
		t.Fatalf("a 4th stream: %v, want ResourceExhausted naming --max-streams", err)
	}
	if streams, _, _, _ := b.Held(); streams != 3 {
		t.Fatalf("refusals changed the count: %d streams", streams)
	}
	a1.Close()
	a1.Close() // twice: once counted
	if streams, _, _, _ := b.Held(); streams != 2 {
		t.Fatalf("after a close: %d streams, want 2", streams)
	}
	if _, err := b.Open(fromIP("10.0.0.3"), "sotw"); err != nil {
		t.Fatalf("a stream after one closed: %v", err)
	}
}

func TestBudgetNames(t *testing.T) {
	b := NewBudget(BudgetLimits{Names: 10, NameBytes: 100}, nil, nil, nil)
	x, _ := b.Open(fromIP("10.0.0.1"), "delta")
	y, _ := b.Open(fromIP("10.0.0.2"), "delta")
	if err := x.Add(6, 60); err != nil {
		t.Fatal(err)
	}
	err := y.Add(5, 10)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-names 10") {
		t.Fatalf("6 + 5 names: %v, want ResourceExhausted naming --max-names", err)
	}
	err = y.Add(1, 41)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-name-bytes 100") {
		t.Fatalf("60 + 41 bytes: %v, want ResourceExhausted naming --max-name-bytes", err)
	}
	if err := y.Add(4, 40); err != nil {
		t.Fatalf("what is left: %v", err)
	}
	if _, n, bytes, _ := b.Held(); n != 10 || bytes != 100 {
		t.Fatalf("held %d names of %d bytes, want 10 of 100 (refusals take nothing)", n, bytes)
	}
	x.Remove(100, 1000) // at most what x holds
	if _, n, bytes, _ := b.Held(); n != 4 || bytes != 40 {
		t.Fatalf("after x gave back everything: %d names of %d bytes, want y's 4 of 40", n, bytes)
	}
	y.Close()
	if _, n, bytes, _ := b.Held(); n != 0 || bytes != 0 {
		t.Fatalf("after y closed: %d names of %d bytes", n, bytes)
	}
	var none *Lease // the callout's: no limits, no panics
	if err := none.Add(1<<30, 1<<40); err != nil {
		t.Fatal(err)
	}
	none.Remove(1, 1)
	none.Close()
}

func TestNamesCost(t *testing.T) {
	n, bytes := NamesCost(map[string]struct{}{"a": {}}, []string{"a", "bb", "bb"}, map[string]string{"ccc": "vv"})
	if n != 3 || bytes != 2+2+5 {
		t.Fatalf("got %d names of %d bytes, want 3 of 9", n, bytes)
	}
}

// The listener closes connections over the limits at once and goes on
// accepting; a closed connection gives its place back.
func TestBudgetListener(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := NewBudget(BudgetLimits{Connections: 3, ConnectionsPerClient: 2}, reg, nil, nil)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := b.Listener(raw)
	defer lis.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dialFrom := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
		c, err := d.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	closedByServer := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !isTimeout(err)
	}
	var server []net.Conn
	dialFrom("127.0.0.1")
	dialFrom("127.0.0.1")
	server = append(server, <-accepted, <-accepted)
	third := dialFrom("127.0.0.1") // over the per-address limit
	if !closedByServer(third) {
		t.Fatal("a 3rd connection from 127.0.0.1 was not closed")
	}
	dialFrom("127.0.0.2")
	server = append(server, <-accepted)
	over := dialFrom("127.0.0.3") // over the total
	if !closedByServer(over) {
		t.Fatal("a 4th connection was not closed")
	}
	if _, _, _, conns := b.Held(); conns != 3 {
		t.Fatalf("%d connections held, want 3", conns)
	}
	_ = server[0].Close()
	_ = server[0].Close() // twice: once counted
	dialFrom("127.0.0.3")
	select {
	case c := <-accepted:
		server = append(server, c)
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted after one closed")
	}
	if _, _, _, conns := b.Held(); conns != 3 {
		t.Fatalf("%d connections held, want 3", conns)
	}
	refusals := map[string]float64{}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "galleon_grpc_refusals_total" {
			for _, m := range mf.GetMetric() {
				refusals[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if refusals[LimitConnections] != 1 || refusals[LimitConnectionsPerClient] != 1 {
		t.Fatalf("refusals by limit: %v, want one each of connections and connections_per_client", refusals)
	}
	// Disconnect ends the connection a stream came on.
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: server[1].RemoteAddr()})
	if !b.Disconnect(ctx) {
		t.Fatal("Disconnect found no connection")
	}
	if _, _, _, conns := b.Held(); conns != 2 {
		t.Fatalf("%d connections held after Disconnect, want 2", conns)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
