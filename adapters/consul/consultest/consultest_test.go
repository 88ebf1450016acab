package consultest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

type catalogEntry struct {
	ServiceID   string
	ServiceName string
	ServicePort int
}

func TestStartLeader(t *testing.T) {
	start := time.Now()
	a := Start(t, Options{})
	t.Logf("agent %s up at %s in %v", a.Datacenter, a.URL(), time.Since(start).Round(time.Millisecond))
	ctx := ctxT(t, 30*time.Second)
	var leader string
	if err := a.Do(ctx, "GET", "/v1/status/leader", nil, &leader); err != nil || leader == "" {
		t.Fatalf("leader = %q, %v", leader, err)
	}
	var dcs []string
	if err := a.Do(ctx, "GET", "/v1/catalog/datacenters", nil, &dcs); err != nil || len(dcs) != 1 || dcs[0] != "dc1" {
		t.Fatalf("datacenters = %v, %v", dcs, err)
	}
	var self struct {
		Config struct {
			Version    string
			Datacenter string
		}
	}
	if err := a.Do(ctx, "GET", "/v1/agent/self", nil, &self); err != nil {
		t.Fatal(err)
	}
	if self.Config.Version != Version {
		t.Errorf("agent version %q, want %q", self.Config.Version, Version)
	}
	a.Stop(t)
	a.Stop(t) // idempotent
	if a.Running() {
		t.Fatal("agent still running after Stop")
	}
	if err := a.Do(ctx, "GET", "/v1/status/leader", nil, nil); err == nil {
		t.Fatal("stopped agent still answers")
	}
}

func TestRestartKeepsCatalog(t *testing.T) {
	a := Start(t, Options{})
	ctx := ctxT(t, 60*time.Second)
	reg := map[string]any{"Node": "n1", "Address": "10.0.0.1",
		"Service": map[string]any{"ID": "web-1", "Service": "web", "Port": 8080}}
	if err := a.Do(ctx, "PUT", "/v1/catalog/register", reg, nil); err != nil {
		t.Fatal(err)
	}
	var before []catalogEntry
	idxBefore, err := a.DoIndex(ctx, "GET", "/v1/catalog/service/web", nil, &before)
	if err != nil || len(before) != 1 {
		t.Fatalf("before restart: %v, %v", before, err)
	}
	addr := a.HTTPAddr
	start := time.Now()
	a.Restart(t)
	t.Logf("restart took %v", time.Since(start).Round(time.Millisecond))
	if a.HTTPAddr != addr {
		t.Fatalf("HTTPAddr changed from %s to %s", addr, a.HTTPAddr)
	}
	var after []catalogEntry
	idxAfter, err := a.DoIndex(ctx, "GET", "/v1/catalog/service/web", nil, &after)
	if err != nil || len(after) != 1 || after[0].ServiceID != "web-1" || after[0].ServicePort != 8080 {
		t.Fatalf("after restart: %+v, %v", after, err)
	}
	if idxAfter < idxBefore {
		t.Errorf("X-Consul-Index went back from %d to %d across a restart", idxBefore, idxAfter)
	}
	t.Logf("index for web: %d before restart, %d after", idxBefore, idxAfter)
}

func TestWANTwoDatacenters(t *testing.T) {
	dc1 := Start(t, Options{Datacenter: "dc1"})
	dc2 := Start(t, Options{Datacenter: "dc2", JoinWAN: dc1})
	ctx := ctxT(t, 60*time.Second)
	reg := map[string]any{"Node": "n2", "Address": "10.0.0.2",
		"Service": map[string]any{"ID": "db-1", "Service": "db", "Port": 5432}}
	if err := dc2.Do(ctx, "PUT", "/v1/catalog/register", reg, nil); err != nil {
		t.Fatal(err)
	}
	var got []catalogEntry
	if err := dc1.Do(ctx, "GET", "/v1/catalog/service/db?dc=dc2", nil, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ServiceID != "db-1" {
		t.Fatalf("dc1 ?dc=dc2 sees %+v", got)
	}
	var local []catalogEntry
	if err := dc1.Do(ctx, "GET", "/v1/catalog/service/db", nil, &local); err != nil || len(local) != 0 {
		t.Fatalf("dc1 local sees %+v, %v", local, err)
	}
}

func TestACL(t *testing.T) {
	a := Start(t, Options{ACL: true})
	if a.Token == "" {
		t.Fatal("no token")
	}
	ctx := ctxT(t, 30*time.Second)
	reg := map[string]any{"Node": "n1", "Address": "10.0.0.1",
		"Service": map[string]any{"ID": "secret-1", "Service": "secret", "Port": 1}}
	if err := a.Do(ctx, "PUT", "/v1/catalog/register", reg, nil); err != nil {
		t.Fatal(err)
	}
	var got []catalogEntry
	if err := a.Do(ctx, "GET", "/v1/catalog/service/secret", nil, &got); err != nil || len(got) != 1 {
		t.Fatalf("with token: %+v, %v", got, err)
	}
	anon := a.WithToken("")
	var anonGot []catalogEntry
	err := anon.Do(ctx, "GET", "/v1/catalog/service/secret", nil, &anonGot)
	var he *HTTPError
	switch {
	case errors.As(err, &he) && he.StatusCode == http.StatusForbidden:
		t.Logf("anonymous read: %v", err)
	case err == nil && len(anonGot) == 0:
		t.Logf("anonymous read: empty list")
	default:
		t.Fatalf("anonymous read: %+v, %v", anonGot, err)
	}
	if err := anon.Do(ctx, "PUT", "/v1/catalog/register", reg, nil); err == nil {
		t.Fatal("anonymous register accepted")
	}
}

func TestRegisterMany(t *testing.T) {
	a := Start(t, Options{})
	ctx := ctxT(t, 120*time.Second)
	const services, perService = 400, 5
	var ins []Instance
	for s := range services {
		for i := range perService {
			ins = append(ins, Instance{
				Node:    fmt.Sprintf("node-%d", (s*perService+i)%200), // 200 shared nodes
				ID:      fmt.Sprintf("svc-%d-%d", s, i),
				Service: fmt.Sprintf("svc-%d", s),
				Address: fmt.Sprintf("10.1.%d.%d", s%250, i+1),
				Port:    8000 + i,
				Tags:    []string{"v1"},
				Meta:    map[string]string{"version": "1"},
				Weights: &Weights{Passing: 10, Warning: 1},
				Check:   []string{"passing", "warning", "critical", "", "passing"}[i],
			})
		}
	}
	start := time.Now()
	if err := Register(ctx, a, ins); err != nil {
		t.Fatal(err)
	}
	t.Logf("registered %d instances in %v", len(ins), time.Since(start).Round(time.Millisecond))
	var svcs map[string][]string
	if err := a.Do(ctx, "GET", "/v1/catalog/services", nil, &svcs); err != nil {
		t.Fatal(err)
	}
	if len(svcs) != services+1 { // + "consul"
		t.Fatalf("catalog lists %d services, want %d", len(svcs), services+1)
	}
	var health []struct {
		Service struct {
			ID      string
			Port    int
			Weights Weights
		}
		Checks []struct {
			CheckID string
			Status  string
		}
	}
	if err := a.Do(ctx, "GET", "/v1/health/service/svc-7", nil, &health); err != nil {
		t.Fatal(err)
	}
	if len(health) != perService {
		t.Fatalf("svc-7 has %d instances, want %d", len(health), perService)
	}
	for _, h := range health {
		if h.Service.Weights != (Weights{10, 1}) {
			t.Errorf("%s weights %+v", h.Service.ID, h.Service.Weights)
		}
		// node-level serfHealth does not exist for catalog-only nodes: only the service check.
		if h.Service.ID == "svc-7-3" && len(h.Checks) != 0 || h.Service.ID == "svc-7-2" && (len(h.Checks) != 1 || h.Checks[0].Status != "critical") {
			t.Errorf("%s checks %+v", h.Service.ID, h.Checks)
		}
	}
	var states []struct{ CheckID string }
	if err := a.Do(ctx, "GET", "/v1/health/state/any", nil, &states); err != nil {
		t.Fatal(err)
	}
	if want := services*4 + 1; len(states) != want { // 4 checked instances per service + serfHealth
		t.Errorf("health/state/any has %d checks, want %d", len(states), want)
	}
}
