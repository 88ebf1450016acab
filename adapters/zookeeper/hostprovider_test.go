package zookeeper

import (
	"slices"
	"testing"
)

// TestHostProviderPauses: no pause before the first attempt after a connection, a pause once
// every server was tried without one, and every server tried in turn.
func TestHostProviderPauses(t *testing.T) {
	for _, servers := range [][]string{{"127.0.0.1:2181"}, {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}} {
		var p hostProvider
		if err := p.Init(servers); err != nil {
			t.Fatal(err)
		}
		n := len(servers)
		var pauses []bool
		seen := map[string]bool{}
		for range 2*n + 1 { // never connected: two rounds and one more
			s, pause := p.Next()
			seen[s] = true
			pauses = append(pauses, pause)
		}
		want := make([]bool, 2*n+1)
		want[n], want[2*n] = true, true // a pause starts each round after the first
		if !slices.Equal(pauses, want) {
			t.Errorf("%d servers: pauses %v, want %v", n, pauses, want)
		}
		if len(seen) != n {
			t.Errorf("%d servers: tried %v", n, seen)
		}
		p.Connected()
		if _, pause := p.Next(); pause {
			t.Errorf("%d servers: a pause before the first attempt after a connection", n)
		}
	}
	var p hostProvider
	if err := p.Init([]string{"no-port"}); err == nil {
		t.Error("Init accepted a server without a port")
	}
}
