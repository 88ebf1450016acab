package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

func goodNode(name, id, addr string) []byte { return curatorJSON(name, id, addr, 8080, 0, nil) }

// hasInstances waits until service name holds exactly ids.
func hasInstances(name string, ids ...string) func(map[model.ServiceKey]model.Service) bool {
	slices.Sort(ids)
	return func(state map[model.ServiceKey]model.Service) bool {
		svc, ok := state[key(name)]
		return ok && slices.Equal(instanceIDs(svc), ids)
	}
}

// TestSessionExpiry expires the adapter's session while it is cut off from the server, and
// changes two services meanwhile: on the new session it relists everything, re-arms every
// watch, and reports exactly the two services that changed, with Update, nothing else.
func TestSessionExpiry(t *testing.T) {
	s := startServer(t)
	proxy := registrytest.NewProxy(t, s.Addr())
	w := writer{c: client(t, s.Addr()), root: "/expiry"}
	w.ensureRoot(t)
	for _, name := range []string{"a", "b", "c"} {
		if err := w.set(name, map[string][]byte{name + "1": goodNode(name, name+"1", "10.0.0.1"), name + "2": goodNode(name, name+"2", "10.0.0.2")}); err != nil {
			t.Fatal(err)
		}
	}
	var sessions zktest.Sessions
	rec := run(t, Config{
		Servers: []string{proxy.Addr()}, Root: w.root, SessionTimeout: 10 * time.Second,
		// Longer than the cut: the expiry alone is under test, not the outage report.
		UnreachableAfter: 9 * time.Second,
		dial:             sessions.Dial,
	})
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
		return len(state) == 3 && hasInstances("a", "a1", "a2")(state) && hasInstances("c", "c1", "c2")(state)
	})
	id, passwd, ok := sessions.Last()
	if !ok {
		t.Fatal("no session recorded")
	}
	mark := rec.Len()

	if err := proxy.Break(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.ExpireSession(id, passwd); err != nil {
		t.Fatal(err)
	}
	// A provider joins a, another leaves b, while the adapter has no session (and no watches).
	if err := w.set("a", map[string][]byte{"a1": goodNode("a", "a1", "10.0.0.1"), "a2": goodNode("a", "a2", "10.0.0.2"), "a3": goodNode("a", "a3", "10.0.0.3")}); err != nil {
		t.Fatal(err)
	}
	if err := w.set("b", map[string][]byte{"b1": goodNode("b", "b1", "10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
		return hasInstances("a", "a1", "a2", "a3")(state) && hasInstances("b", "b1")(state)
	})
	// The watches are armed again on the new session: a change after it is seen. It is also
	// the barrier after which every report the relisting caused has come.
	if err := w.set("c", map[string][]byte{"c1": goodNode("c", "c1", "10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, hasInstances("c", "c1"))
	if got, _, _ := sessions.Last(); got == id {
		t.Errorf("the adapter still has session 0x%x: it did not expire", id)
	}
	var got []string
	for _, e := range rec.Events()[mark:] {
		got = append(got, e.String())
	}
	want := []string{"Update(default/a)", "Update(default/b)", "Update(default/c)"}
	if !slices.Equal(got, want) {
		t.Errorf("after the expiry: %q, want exactly %q (only what changed, no Replace, no outage)\n%s", got, want, rec.Dump())
	}
}

// TestServerRestart restarts the server (same data, same port): the session survives it, and
// changes made after it are seen.
func TestServerRestart(t *testing.T) {
	s := startServer(t)
	w := writer{c: client(t, s.Addr()), root: "/restart"}
	w.ensureRoot(t)
	if err := w.set("a", map[string][]byte{"a1": goodNode("a", "a1", "10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Root: w.root, SessionTimeout: 20 * time.Second})
	rec.WaitFor(t, waitTimeout, hasInstances("a", "a1"))
	s.Restart(t)
	// The test's own client reconnects in the background; its writes wait for it (clientOf),
	// and one whose connection broke is made again (writer). CI saw a stock client give up
	// here with "could not connect to a server", on a loaded machine.
	if err := w.set("a", map[string][]byte{"a1": goodNode("a", "a1", "10.0.0.1"), "a2": goodNode("a", "a2", "10.0.0.2")}); err != nil {
		t.Fatal(err)
	}
	if err := w.set("b", map[string][]byte{"b1": goodNode("b", "b1", "10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
		return hasInstances("a", "a1", "a2")(state) && hasInstances("b", "b1")(state)
	})
	// An outage reported during the restart is over.
	rec.WaitForEvents(t, waitTimeout, func([]registrytest.Event) bool { return true })
	if err := rec.UnreachableError(); err != nil {
		// The report of its end may still be on its way: wait for it.
		rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
			last := -1
			for i, e := range events {
				if e.Op == registrytest.OpUnreachable {
					last = i
				}
			}
			return last >= 0 && events[last].Err == nil
		})
	}
}

// TestMalformedNodes rejects each kind of malformed node under its path, keeps the good
// instance next to it served, and clears the rejection once the node is fixed or removed.
func TestMalformedNodes(t *testing.T) {
	s := startServer(t)
	w := writer{c: client(t, s.Addr()), root: "/malformed"}
	w.ensureRoot(t)
	good := goodNode("a", "a1", "10.0.0.1")
	if err := w.set("a", map[string][]byte{"a1": good}); err != nil {
		t.Fatal(err)
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Root: w.root})
	rec.WaitFor(t, waitTimeout, hasInstances("a", "a1"))
	path := w.root + "/a/bad"
	for _, tc := range []struct {
		name, data, want string
	}{
		{"not JSON", `{"address": `, "not a Curator ServiceInstance"},
		{"no address", `{"name": "a", "id": "bad", "port": 8080}`, `no "address"`},
		{"port out of range", `{"name": "a", "id": "bad", "address": "10.0.0.9", "port": 70000}`, `"port" 70000`},
		{"no port", `{"name": "a", "id": "bad", "address": "10.0.0.9"}`, `no "port"`},
		{"over 1 MiB", `{"name": "a", "address": "10.0.0.9", "port": 8080, "x": "` + strings.Repeat("x", 1<<20) + `"}`, "more than the 1048576"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := rec.Len()
			if err := w.set("a", map[string][]byte{"a1": good, "bad": []byte(tc.data)}); err != nil {
				t.Fatal(err)
			}
			rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
				return slices.ContainsFunc(events[mark:], func(e registrytest.Event) bool {
					return e.Op == registrytest.OpRejected && e.Record == path && e.Err != nil && strings.Contains(e.Err.Error(), tc.want)
				})
			})
			if svc := rec.State()[key("a")]; !slices.Equal(instanceIDs(svc), []string{"a1"}) {
				t.Errorf("with a malformed node next to it, a holds %v, want [a1]", instanceIDs(svc))
			}
			// Fixed: the rejection is cleared and the instance served.
			mark = rec.Len()
			if err := w.set("a", map[string][]byte{"a1": good, "bad": goodNode("a", "bad", "10.0.0.9")}); err != nil {
				t.Fatal(err)
			}
			rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
				return slices.ContainsFunc(events[mark:], func(e registrytest.Event) bool {
					return e.Op == registrytest.OpRejected && e.Record == path && e.Err == nil
				})
			})
			rec.WaitFor(t, waitTimeout, hasInstances("a", "a1", "bad"))
			if err := w.set("a", map[string][]byte{"a1": good}); err != nil {
				t.Fatal(err)
			}
			rec.WaitFor(t, waitTimeout, hasInstances("a", "a1"))
		})
	}
	// Malformed, then removed: the rejection is cleared too.
	mark := rec.Len()
	if err := w.set("a", map[string][]byte{"a1": good, "bad": []byte("nope")}); err != nil {
		t.Fatal(err)
	}
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		return slices.ContainsFunc(events[mark:], func(e registrytest.Event) bool { return e.Op == registrytest.OpRejected && e.Err != nil })
	})
	mark = rec.Len()
	if err := w.set("a", map[string][]byte{"a1": good}); err != nil {
		t.Fatal(err)
	}
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		return slices.ContainsFunc(events[mark:], func(e registrytest.Event) bool {
			return e.Op == registrytest.OpRejected && e.Record == path && e.Err == nil
		})
	})
}

// TestLastInstanceLeaves: a service whose last instance leaves keeps its ports and has no
// instances (no stale endpoints); once its znode goes, it is deleted.
func TestLastInstanceLeaves(t *testing.T) {
	s := startServer(t)
	w := writer{c: client(t, s.Addr()), root: "/last"}
	w.ensureRoot(t)
	if err := w.set("a", map[string][]byte{"a1": curatorJSON("a", "a1", "10.0.0.1", 8080, 8443, nil)}); err != nil {
		t.Fatal(err)
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Root: w.root})
	rec.WaitFor(t, waitTimeout, hasInstances("a", "a1"))
	if err := w.set("a", nil); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, hasInstances("a"))
	svc := rec.State()[key("a")]
	want := []model.Port{{Number: 8080, Protocol: model.ProtocolHTTP}, {Number: 8443, Protocol: model.ProtocolHTTPS}}
	if !slices.Equal(svc.Ports, want) {
		t.Errorf("ports of a with no instance: %v, want %v (kept)", svc.Ports, want)
	}
	if err := w.remove("a"); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
		_, ok := state[key("a")]
		return !ok
	})
	if e := rec.Events()[rec.Len()-1]; e.Op != registrytest.OpDelete {
		t.Errorf("last call %s, want Delete(default/a)", e)
	}
}

// TestRemovedServicesReleaseWatches adds and removes many services and checks that the
// server's watches and the process's goroutines come back to where they were: a removed
// service leaves no watch and no goroutine behind.
func TestRemovedServicesReleaseWatches(t *testing.T) {
	s := startServer(t)
	w := writer{c: client(t, s.Addr()), root: "/release"}
	w.ensureRoot(t)
	rec := run(t, Config{Servers: []string{s.Addr()}, Root: w.root})
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		return slices.ContainsFunc(events, func(e registrytest.Event) bool { return e.Op == registrytest.OpReplace })
	})
	baseWatches := waitWatches(t, s, func(int) bool { return true })
	baseGoroutines := runtime.NumGoroutine()

	const services, instances = 30, 3
	for i := range services {
		name := fmt.Sprintf("svc-%02d", i)
		nodes := map[string][]byte{}
		for j := range instances {
			id := fmt.Sprintf("%s-%d", name, j)
			nodes[id] = goodNode(name, id, fmt.Sprintf("10.0.%d.%d", i, j))
		}
		if err := w.set(name, nodes); err != nil {
			t.Fatal(err)
		}
	}
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool { return len(state) == services })
	// One children watch per service and a data watch per instance, on top of the root's.
	waitWatches(t, s, func(n int) bool { return n == baseWatches+services*(1+instances) })
	for i := range services {
		if err := w.remove(fmt.Sprintf("svc-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool { return len(state) == 0 })
	waitWatches(t, s, func(n int) bool { return n == baseWatches })
	// Goroutines: no more than before, give or take the runtime's own.
	if n := runtime.NumGoroutine(); n > baseGoroutines+2 {
		t.Errorf("%d goroutines after the services left, %d before they came", n, baseGoroutines)
	}
}

// waitWatches polls the server's watch count until ok holds, and returns it.
func waitWatches(t *testing.T, s *zktest.Server, ok func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		n, err := s.Watches()
		if err == nil && ok(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("server watches: %d (%v), not the expected count", n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCancelDuringHandshake: a server that accepts the connection and never answers the
// session handshake (ZooKeeper does that while it loads its database after a restart; CI saw
// Run outlive its cancellation by more than 10 s then). Run must still return promptly: the
// client's own Close does not interrupt the handshake, closing the socket does.
func TestCancelDuringHandshake(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	reg, err := New(Config{Servers: []string{lis.Addr().String()}, SessionTimeout: 20 * time.Second, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx, registrytest.NewRecorder()) }()
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not connect")
	}
	time.Sleep(200 * time.Millisecond) // well into the handshake's read
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("Run did not return within 5 s of its cancellation, stuck in the session handshake\n%s", buf[:n])
	}
}
