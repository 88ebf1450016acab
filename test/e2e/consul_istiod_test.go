package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/test/istiod"
	"github.com/galleon-mesh/galleon/test/sidecar"
)

// TestConsulToIstiod runs a real Consul agent, galleon-consul watching it
// and a real istiod reading galleon-consul over MCP. Registry changes made
// in Consul must reach istiod; a health flip must be an EDS-only update.
// Throughout, a sidecar's view of istiod (test/sidecar) must resolve each
// host to an address of its own (allocated, docs/vips.md) that reaches the
// service's own cluster and instances: HTTP and gRPC by Host, and two TCP
// services on port 5432 told apart by their addresses.
func TestConsulToIstiod(t *testing.T) { istiod.ForEachRelease(t, testConsulToIstiod) }

func testConsulToIstiod(t *testing.T, rel istiod.Release) {
	bin := galleonBinary(t, "galleon-consul")
	agent := consultest.Start(t, consultest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	web := func(i int, check string) consultest.Instance {
		return consultest.Instance{Node: fmt.Sprintf("node-%d", i), NodeAddress: fmt.Sprintf("10.20.0.%d", i),
			ID: fmt.Sprintf("web-%d", i), Service: "web", Port: 8080,
			Tags: []string{"version=v1"}, Meta: map[string]string{"protocol": "http"}, Check: check}
	}
	api := consultest.Instance{Node: "node-9", NodeAddress: "10.20.0.9", ID: "api-1", Service: "api",
		Address: "10.30.0.1", Port: 9090, Meta: map[string]string{"protocol": "grpc"}, Check: "passing"}
	// ledger is TCP on 5432, the port of db (registered later).
	ledger := consultest.Instance{Node: "node-8", NodeAddress: "10.40.0.2", ID: "ledger-1", Service: "ledger", Port: 5432, Check: "passing"}
	if err := consultest.Register(ctx, agent, []consultest.Instance{web(1, "passing"), web(2, "passing"), api, ledger}); err != nil {
		t.Fatal(err)
	}

	g := startGalleon(t, bin, "--consul-address", agent.HTTPAddr, "--debounce-quiet", "20ms")
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: []string{g.Addr}})

	endpointsOf := func(name string, want ...string) func(map[string]serviceEntry) string {
		return func(ses map[string]serviceEntry) string {
			se, ok := ses["consul/"+name]
			if !ok {
				return "no consul/" + name
			}
			if got := se.endpoints(); !slices.Equal(got, want) {
				return fmt.Sprintf("consul/%s endpoints %v, want %v", name, got, want)
			}
			return ""
		}
	}
	ses := waitForServiceEntries(t, ctx, ist, "initial state", func(ses map[string]serviceEntry) string {
		if m := endpointsOf("web", "10.20.0.1", "10.20.0.2")(ses); m != "" {
			return m
		}
		if m := endpointsOf("ledger", "10.40.0.2")(ses); m != "" {
			return m
		}
		return endpointsOf("api", "10.30.0.1")(ses)
	})
	if se := ses["consul/web"]; !slices.Equal(se.Spec.Hosts, []string{"web.service.consul"}) ||
		len(se.Spec.Ports) != 1 || se.Spec.Ports[0].Number != 8080 || se.Spec.Ports[0].Protocol != "HTTP" {
		t.Errorf("consul/web: hosts %v ports %+v", se.Spec.Hosts, se.Spec.Ports)
	}
	pushes := trackPushes(t, ctx, ist)

	// What a sidecar must see of each service (its host, port, protocol and instances).
	webRoute := func(ips ...string) meshRoute {
		return meshRoute{host: "web.service.consul", port: 8080, http: true, endpoints: portEndpoints(8080, ips...)}
	}
	apiRoute := meshRoute{host: "api.service.consul", port: 9090, http: true, endpoints: portEndpoints(9090, "10.30.0.1")}
	ledgerRoute := meshRoute{host: "ledger.service.consul", port: 5432, endpoints: portEndpoints(5432, "10.40.0.2")}
	dbRoute := meshRoute{host: "db.service.consul", port: 5432, endpoints: portEndpoints(5432, "10.40.0.1")}
	_, addrs := expectRoutes(t, ctx, ist, "initial state", []meshRoute{webRoute("10.20.0.1", "10.20.0.2"), apiRoute, ledgerRoute})
	// checkRoutes: the hosts seen so far keep their addresses.
	checkRoutes := func(what string, routes ...meshRoute) *sidecar.View {
		t.Helper()
		v, got := expectRoutes(t, ctx, ist, what, withAddresses(routes, addrs))
		maps.Copy(addrs, got)
		return v
	}

	step := pushes.change

	// A check turning critical takes the instance out: endpoints only, no full push.
	if full := step("web-2 critical", func() error {
		return consultest.Register(ctx, agent, []consultest.Instance{web(2, "critical")})
	}, endpointsOf("web", "10.20.0.1")); full != 0 {
		t.Errorf("a health flip caused %v full pushes in istiod, want 0 (EDS only)", full)
	}
	checkRoutes("web-2 critical", webRoute("10.20.0.1"), apiRoute, ledgerRoute)
	// And back.
	if full := step("web-2 passing again", func() error {
		return consultest.Register(ctx, agent, []consultest.Instance{web(2, "passing")})
	}, endpointsOf("web", "10.20.0.1", "10.20.0.2")); full != 0 {
		t.Errorf("a health flip caused %v full pushes in istiod, want 0 (EDS only)", full)
	}
	// A new service arrives.
	step("register db", func() error {
		return consultest.Register(ctx, agent, []consultest.Instance{{Node: "node-9", ID: "db-1", Service: "db",
			Address: "10.40.0.1", Port: 5432, Check: "passing"}})
	}, endpointsOf("db", "10.40.0.1"))
	checkRoutes("register db", webRoute("10.20.0.1", "10.20.0.2"), apiRoute, ledgerRoute, dbRoute)
	// A deregistered service goes away.
	step("deregister api", func() error {
		return agent.Do(ctx, "PUT", "/v1/catalog/deregister", map[string]string{"Node": "node-9", "ServiceID": "api-1"}, nil)
	}, func(ses map[string]serviceEntry) string {
		if _, ok := ses["consul/api"]; ok {
			return "consul/api still served"
		}
		return ""
	})
	if v := checkRoutes("deregister api", webRoute("10.20.0.1", "10.20.0.2"), ledgerRoute, dbRoute); v.Resolve(apiRoute.host) != nil {
		t.Errorf("after api was deregistered NDS still resolves %s to %v", apiRoute.host, v.Resolve(apiRoute.host))
	}
}
