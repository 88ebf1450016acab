package consul_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/internal/testing/testpki"
	"github.com/galleon-mesh/galleon/model"
)

// TestServiceWatches follows every kind of change to an instance with every
// service watched by a query of its own (--consul-service-watches), over HTTP/2 on
// the agent's HTTPS listener, and no sweep for an hour: each change must
// come from the service's own watch, with a few requests whatever the
// number of services, no sweep and no listing of every check.
func TestServiceWatches(t *testing.T) {
	pki, err := testpki.Write(t.TempDir(), "galleon")
	if err != nil {
		t.Fatal(err)
	}
	a := consultest.Start(t, consultest.Options{HTTPSCert: pki.ServerCert, HTTPSKey: pki.ServerKey})
	const n = 300
	all := make([]consultest.Instance, n)
	for i := range all {
		all[i] = consultest.Instance{Node: fmt.Sprintf("node-%d", i%10), NodeAddress: fmt.Sprintf("10.0.%d.1", i%10),
			ID: fmt.Sprintf("svc-%d-1", i), Service: fmt.Sprintf("svc-%d", i), Port: 8080, Check: "passing"}
	}
	register(t, a, all...)

	t.Run("every service watched", func(t *testing.T) {
		// n: the agent's own service "consul" is left out (IncludeConsulService).
		r := run(t, watchConfig(a, pki.CA, n))
		r.rec.WaitFor(t, waitFor, func(state map[model.ServiceKey]model.Service) bool { return len(state) >= n })
		r.waitValue(t, "galleon_consul_service_watches", n)

		// change writes one instance (or its node) and waits for what it
		// must bring; it returns the requests it cost.
		change := func(what string, write func(), name string, cond func(model.Service) bool) float64 {
			t.Helper()
			r.settle(t)
			before := r.caused(t)
			write()
			r.waitService(t, name, what, cond)
			r.settle(t)
			cost := r.caused(t) - before
			t.Logf("%s with %d services, each watched: %v HTTP requests", what, n, cost)
			return cost
		}
		// Per change: the watch's answer and its next query, the catalog
		// signal's (and the two failing-check signals') answers and next
		// queries.
		const most = 8

		meta := all[42]
		meta.Meta = map[string]string{"owner": "team-b"}
		if c := change("a meta edit", func() { register(t, a, meta) }, "svc-42",
			func(s model.Service) bool { return s.Instances[0].Labels["owner"] == "team-b" }); c > most {
			t.Errorf("a meta edit cost %v requests; want at most %d", c, most)
		}
		port := all[43]
		port.Port = 9090
		if c := change("a port edit", func() { register(t, a, port) }, "svc-43",
			func(s model.Service) bool { return hasPort(s, 9090) }); c > most {
			t.Errorf("a port edit cost %v requests; want at most %d", c, most)
		}
		addr := all[44]
		addr.Address = "10.9.9.9"
		if c := change("an address edit", func() { register(t, a, addr) }, "svc-44",
			func(s model.Service) bool { return s.Instances[0].Address == "10.9.9.9" }); c > most {
			t.Errorf("an address edit cost %v requests; want at most %d", c, most)
		}
		flip := all[123]
		flip.Check = "critical"
		if c := change("a health flip", func() { register(t, a, flip) }, "svc-123",
			func(s model.Service) bool { return s.Instances[0].Health == model.Unhealthy }); c > most {
			t.Errorf("a health flip cost %v requests; want at most %d", c, most)
		}
		added := all[7]
		added.ID = "svc-7-2"
		if c := change("a checked instance registered", func() { register(t, a, added) }, "svc-7",
			func(s model.Service) bool { return len(s.Instances) == 2 }); c > most {
			t.Errorf("a registration cost %v requests; want at most %d", c, most)
		}
		if c := change("a checked instance deregistered", func() { deregister(t, a, added.Node, added.ID) }, "svc-7",
			func(s model.Service) bool { return len(s.Instances) == 1 }); c > most {
			t.Errorf("a deregistration cost %v requests; want at most %d", c, most)
		}
		// A node's address is no service's write, and moves no signal:
		// without watches only the periodic sweep (--consul-relist-interval) finds it.
		// Its cost is one answer and query per service on the node.
		change("a node address change", func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := a.Do(ctx, "PUT", "/v1/catalog/register", map[string]any{"Node": "node-5", "Address": "10.5.5.5"}, nil); err != nil {
				t.Fatal(err)
			}
		}, "svc-25", func(s model.Service) bool { return s.Instances[0].Address == "10.5.5.5" })

		if sweeps := r.counter(t, "galleon_consul_sweeps_total"); sweeps != 0 {
			t.Errorf("%v sweeps; want none, every service being watched", sweeps)
		}
		if listings := r.counter(t, "galleon_consul_check_listings_total"); listings != 0 {
			t.Errorf("%v listings of every check; want none, every service being watched", listings)
		}
	})

	t.Run("more services than watches", func(t *testing.T) {
		cfg := watchConfig(a, pki.CA, 100)
		cfg.SweepInterval = 200 * time.Millisecond
		r := run(t, cfg)
		r.rec.WaitFor(t, waitFor, func(state map[model.ServiceKey]model.Service) bool { return len(state) >= n })
		r.waitValue(t, "galleon_consul_service_watches", 100)
		// Watched or not, an edit is served: by its watch, or by a
		// sweep of the services without one.
		edited := make([]consultest.Instance, n)
		for i, in := range all {
			in.Meta = map[string]string{"edit": "limit"}
			edited[i] = in
		}
		register(t, a, edited...)
		r.rec.WaitFor(t, waitFor, func(state map[model.ServiceKey]model.Service) bool {
			for _, in := range edited {
				s, ok := state[model.ServiceKey{Namespace: "consul", Name: in.Service}]
				if !ok || s.Instances[0].Labels["edit"] != "limit" {
					return false
				}
			}
			return true
		})
		if t.Failed() {
			t.FailNow()
		}
		if sweeps := r.counter(t, "galleon_consul_sweeps_total"); sweeps < 1 {
			t.Errorf("%v sweeps; want one at least for the services without a watch", sweeps)
		}
		if got := r.counter(t, "galleon_consul_service_watches"); got != 100 {
			t.Errorf("%v services watched; want --consul-service-watches, 100", got)
		}
	})
}

// waitValue waits until a counter or gauge reads want.
func (r *running) waitValue(t *testing.T, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for r.counter(t, name) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v after %v; want %v", name, r.counter(t, name), waitFor, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hasPort(s model.Service, number uint32) bool {
	for _, p := range s.Ports {
		if p.Number == number {
			return true
		}
	}
	return false
}
