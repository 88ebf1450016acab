package e2e

// The emptiness rule (issue 27, docs/reliability.md) through real binaries: an answer that
// removes every service is held, said so, and applied only once it has stood for
// --removal-hold; an answer that is taken back within the window never reaches a sink.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
)

// TestEmptinessRuleConsul empties a real Consul at once (its one node deregistered, which
// takes every service on it) under two galleon-consul processes: one holding removals for an
// hour, one for 3 s. The first never serves less while the hold stands and serves the services
// again when they come back; the second removes them after its window and says so.
func TestEmptinessRuleConsul(t *testing.T) {
	bin := galleonBinary(t, "galleon-consul")
	agent := consultest.Start(t, consultest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const n = 12
	var instances []consultest.Instance
	var keys []string
	for i := range n {
		name := fmt.Sprintf("svc%02d", i)
		instances = append(instances, consultest.Instance{Node: "node-1", NodeAddress: "10.50.0.1",
			ID: name + "-1", Service: name, Port: 8080, Check: "passing"})
		keys = append(keys, "consul/"+name)
	}
	if err := consultest.Register(ctx, agent, instances); err != nil {
		t.Fatal(err)
	}
	holding := startGalleon(t, bin, "--consul-address", agent.HTTPAddr, "--removal-hold", "1h")
	confirming := startGalleon(t, bin, "--consul-address", agent.HTTPAddr, "--removal-hold", "3s")
	held := watchServed(t, holding.Addr, keys...)
	held.waitHolds(t, "initial state", keys...)
	applied := watchServed(t, confirming.Addr)
	applied.waitHolds(t, "initial state", keys...)

	if err := agent.Do(ctx, "PUT", "/v1/catalog/deregister", map[string]string{"Node": "node-1"}, nil); err != nil {
		t.Fatal(err)
	}
	readyz := func(g *galleon) string {
		resp, err := http.Get("http://" + g.HTTPAddr + "/readyz")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("the hold in /readyz", func() bool {
		// Of n: the agent's own "consul" service is not served (--consul-include-consul-service).
		return strings.Contains(readyz(holding), fmt.Sprintf("would remove %d of %d services", n, n))
	})
	if !waitLog(holding, "still serving them until the answer is confirmed", 10*time.Second) {
		t.Fatal("the hold is not logged at WARN")
	}
	// The other process applies the answer once it has stood 3 s.
	heldAt := time.Now()
	waitFor("the confirmed removal", func() bool {
		applied.mu.Lock()
		defer applied.mu.Unlock()
		return applied.latest != nil && !applied.latest[keys[0]]
	})
	if !waitLog(confirming, "registry answer confirmed: removing the held services", 10*time.Second) {
		t.Error("the confirmed removal is not logged")
	}
	if !confirming.LogContains("still serving them until the answer is confirmed") {
		t.Error("the 3 s process removed the services without holding them first")
	}
	t.Logf("the 3 s hold applied %v after the first process reported its hold", time.Since(heldAt).Round(time.Millisecond))

	// The services come back: the hour-long hold ends, and its sink never lost one.
	if err := consultest.Register(ctx, agent, instances); err != nil {
		t.Fatal(err)
	}
	if !waitLog(holding, "registry lists the held services again: removal hold ended", 60*time.Second) {
		t.Fatalf("the hold did not end when the services came back; /readyz: %s", readyz(holding))
	}
	waitFor("/readyz without the hold", func() bool { return readyz(holding) == "ready\n" })
	held.checkNothingLost(t, "a registry emptied and refilled under an hour-long hold")
	applied.waitHolds(t, "the services back at the 3 s process", keys...)
}

// TestEurekaEmptyStandby: a Eureka standby that answers 200 with no applications, as a server
// restarted empty or not yet synced with its peers does, is what issue 27 saw empty a mesh: the
// adapter failed over to it and served nothing. Two real Eureka API servers (Polaris): A lists
// orders and payments, B is fresh and empty. A is killed: galleon-eureka holds B's answer and
// asks again; B answering the same again, the core holds the removal (--removal-hold), so the
// sink never serves less; once B lists the applications the hold ends.
func TestEurekaEmptyStandby(t *testing.T) {
	bin := galleonBinary(t, "galleon-eureka")
	srvA := eurekatest.Start(t, eurekatest.Options{})
	srvB := eurekatest.Start(t, eurekatest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reps := &eurekaReplicas{live: []*eurekatest.Server{srvA, srvB}, registered: map[*eurekatest.Server][]eurekatest.Instance{}}
	reps.renew(t, 5*time.Second)
	orders := ordersInstance(1)
	payments := eurekatest.Instance{App: "payments", ID: "payments-1", IPAddr: "10.60.1.1", Port: ordersPort}
	reps.register(t, ctx, orders, srvA)
	reps.register(t, ctx, payments, srvA)
	if _, err := srvA.WaitApps(ctx, "/apps", func(a *eurekatest.Applications) bool {
		return len(upIDs(a, ordersApp)) == 1 && len(upIDs(a, "payments")) == 1
	}); err != nil {
		t.Fatal(err)
	}

	g := startGalleon(t, bin, "--eureka-urls", srvA.BaseURL()+","+srvB.BaseURL(), "--eureka-poll-interval", "500ms", "--debounce-quiet", "20ms")
	watchServed(t, g.Addr).waitHolds(t, "initial state", ordersKey, paymentsKey)
	w := watchServed(t, g.Addr, ordersKey, paymentsKey) // from here on every response must hold both

	reps.kill(t, srvA)
	if !waitLog(g, "full listing would remove most applications: holding it until another answer confirms it", 60*time.Second) {
		t.Fatal("galleon-eureka did not hold the empty standby's answer")
	}
	if !waitLog(g, "registry answer would remove most served services: still serving them until the answer is confirmed", 60*time.Second) {
		t.Fatal("the core did not hold the removal the standby confirmed")
	}
	time.Sleep(5 * time.Second) // ten polls of the empty standby
	w.checkNothingLost(t, "failover to an empty standby")

	// B learns the applications (its peers' replication, here registration): the hold ends.
	reps.register(t, ctx, orders, srvB)
	reps.register(t, ctx, payments, srvB)
	if !waitLog(g, "registry lists the held services again: removal hold ended", 60*time.Second) {
		t.Fatal("the hold did not end when the standby listed the applications")
	}
	w.checkNothingLost(t, "the standby filled")
	if g.LogContains("registry answer confirmed: removing the held services") {
		t.Error("the core removed the services")
	}
}
