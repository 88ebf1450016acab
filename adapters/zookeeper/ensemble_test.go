package zookeeper

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// TestEnsembleMemberKilled runs the adapter against a real three-member ensemble and kills the
// member it is connected to: the client moves to another member within the session, so
// nothing is relisted (one session, no relist, no Replace after the first, no outage
// reported), and a change made after the kill is served.
func TestEnsembleMemberKilled(t *testing.T) {
	ens := zktest.StartEnsemble(t, 3, zktest.Options{TickTime: 500 * time.Millisecond})
	w := writer{c: client(t, ens.Addrs()[0]), root: "/services"}
	w.ensureRoot(t)
	if err := w.set("orders", map[string][]byte{"a": goodNode("orders", "a", "10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	var sessions zktest.Sessions
	reg := prometheus.NewRegistry()
	// UnreachableAfter well above a leader election on two loaded cores: the test is about the
	// session surviving, not about how fast a new leader is elected.
	rec := run(t, Config{Servers: ens.Addrs(), SessionTimeout: 8 * time.Second, UnreachableAfter: 6 * time.Second, Registerer: reg, dial: sessions.Dial})
	rec.WaitFor(t, waitTimeout, hasInstances("orders", "a"))
	id, _, ok := sessions.Last()
	if !ok {
		t.Fatal("no session recorded")
	}
	member, err := ens.ConnectedMember(id)
	if err != nil {
		t.Fatal(err)
	}
	events := rec.Len()
	ens.Kill(t, member)

	// A change after the kill, written through the members that are alive (retried while they
	// elect a new leader, when the killed member led).
	var aliveAddrs []string
	for i, a := range ens.Addrs() {
		if i != member {
			aliveAddrs = append(aliveAddrs, a)
		}
	}
	w2 := writer{c: clientOf(t, aliveAddrs), root: "/services"}
	deadline := time.Now().Add(waitTimeout)
	for {
		err := w2.set("orders", map[string][]byte{"a": goodNode("orders", "a", "10.0.0.1"), "b": goodNode("orders", "b", "10.0.0.2")})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writing to the ensemble after member %d was killed: %v", member, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rec.WaitFor(t, waitTimeout, hasInstances("orders", "a", "b"))
	now, err := ens.ConnectedMember(id)
	if err != nil || now == member {
		t.Fatalf("session 0x%x is on member %d (%v) after member %d was killed", id, now, err, member)
	}
	for _, e := range rec.Events()[events:] {
		if e.Op == registrytest.OpReplace || e.Op == registrytest.OpUnreachable {
			t.Errorf("after the member was killed: %s, want only the Update", e)
		}
	}
	if got := counterSum(t, reg, "galleon_zookeeper_relists_total", nil); got != 0 {
		t.Errorf("relists: %v, want 0 (the session survived)", got)
	}
	if got := counterSum(t, reg, "galleon_zookeeper_session_events_total", map[string]string{"event": "established"}); got != 1 {
		t.Errorf("sessions established: %v, want 1", got)
	}
	if got := counterSum(t, reg, "galleon_zookeeper_session_events_total", map[string]string{"event": "reconnected"}); got != 1 {
		t.Errorf("reconnections within the session: %v, want 1", got)
	}
	if svc := rec.State()[model.ServiceKey{Namespace: DefaultNamespace, Name: "orders"}]; len(svc.Instances) != 2 {
		t.Errorf("orders: %v", svc.Instances)
	}
}
