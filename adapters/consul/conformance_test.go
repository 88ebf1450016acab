package consul_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/consul"
	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/internal/testing/testpki"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// testConfig is the adapter's configuration in tests: the defaults, with
// retries and sweeps quick enough for a test to watch them.
func testConfig(a *consultest.Agent) consul.Config {
	return consul.Config{
		Address:       a.HTTPAddr,
		Token:         a.Token,
		Wait:          10 * time.Second,
		RetryMin:      50 * time.Millisecond,
		RetryMax:      500 * time.Millisecond,
		SweepInterval: 200 * time.Millisecond,
		Logger:        testLogger(),
	}
}

// TestConformance runs the adapter SDK's conformance kit against a real
// Consul agent: the driver registers the kit's services in the catalog,
// registers malformed instances, and stops and restarts the agent.
func TestConformance(t *testing.T) {
	conformance(t, consultest.Options{}, testConfig)
}

// TestConformanceServiceWatches runs the kit with every service followed
// by a watch of its own, over HTTP/2 on the agent's HTTPS listener.
func TestConformanceServiceWatches(t *testing.T) {
	pki, err := testpki.Write(t.TempDir(), "galleon")
	if err != nil {
		t.Fatal(err)
	}
	conformance(t, consultest.Options{HTTPSCert: pki.ServerCert, HTTPSKey: pki.ServerKey}, func(a *consultest.Agent) consul.Config {
		return watchConfig(a, pki.CA, 1000)
	})
}

// watchConfig is testConfig over the agent's HTTPS listener (HTTP/2) with
// up to n services each followed by a watch of its own, and no sweep
// before an hour has passed: a change a watch misses is not found.
func watchConfig(a *consultest.Agent, ca string, n int) consul.Config {
	cfg := testConfig(a)
	cfg.Address = "https://" + a.HTTPSAddr
	cfg.CAFile, cfg.TLSServerName = ca, "localhost"
	cfg.ServiceWatches = n
	cfg.SweepInterval, cfg.Resync = time.Hour, time.Hour
	return cfg
}

func conformance(t *testing.T, opts consultest.Options, config func(*consultest.Agent) consul.Config) {
	a := consultest.Start(t, opts)
	d := &catalogDriver{t: t, a: a, node: "galleon-rt"}
	registrytest.TestRegistry(t,
		func(t *testing.T) registry.Registry {
			reg, err := consul.New(config(a))
			if err != nil {
				t.Fatal(err)
			}
			return reg
		},
		d,
		registrytest.WithNamespace(consul.DefaultNamespace),
		registrytest.WithNormalize(d.normalize),
		registrytest.WithTimeout(20*time.Second),
	)
}

// catalogDriver registers services directly in the catalog, the way an
// external registration tool (consul-k8s catalog sync, ESM) does, one
// node holding every instance. Health maps onto one check per instance:
// Healthy passing, Unhealthy critical, Draining Consul's maintenance
// check. Instance labels become "key=value" tags.
type catalogDriver struct {
	t    testing.TB
	a    *consultest.Agent
	node string
}

var (
	_ registrytest.Driver    = (*catalogDriver)(nil)
	_ registrytest.Corrupter = (*catalogDriver)(nil)
	_ registrytest.Breaker   = (*catalogDriver)(nil)
)

// normalize turns what the kit puts into what the adapter reports: hosts
// and instance IDs derived from Consul names, the port named by default,
// labels on instances only (a Consul service has none of its own), plus
// the protocol meta as a label.
func (d *catalogDriver) normalize(svc model.Service) model.Service {
	svc.Hosts = []string{svc.Name + ".service.consul"}
	svc.Labels = nil
	for i := range svc.Ports {
		svc.Ports[i].Name = ""
	}
	for i := range svc.Instances {
		inst := &svc.Instances[i]
		inst.ID = d.a.Datacenter + "/" + d.node + "/" + inst.ID
		inst.Locality = d.a.Datacenter
		labels := map[string]string{"protocol": "http"}
		for k, v := range inst.Labels {
			labels[k] = v
		}
		inst.Labels = labels
	}
	return svc
}

// existing lists the service IDs of a service on the driver's node.
func (d *catalogDriver) existing(ctx context.Context, name string) ([]string, error) {
	var entries []struct{ ServiceID, Node string }
	if err := d.a.Do(ctx, "GET", "/v1/catalog/service/"+url.PathEscape(name), nil, &entries); err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.Node == d.node {
			ids = append(ids, e.ServiceID)
		}
	}
	return ids, nil
}

// replace deletes every instance of the service and registers these, in
// one transaction, so the adapter never sees a half-written service.
func (d *catalogDriver) replace(ctx context.Context, name string, register []map[string]any, checks []map[string]any) error {
	ids, err := d.existing(ctx, name)
	if err != nil {
		return err
	}
	ops := []any{map[string]any{"Node": map[string]any{"Verb": "set", "Node": map[string]any{"Node": d.node, "Address": "127.0.0.1"}}}}
	for _, id := range ids {
		ops = append(ops, map[string]any{"Service": map[string]any{"Verb": "delete", "Node": d.node, "Service": map[string]any{"ID": id, "Service": name}}})
	}
	for _, s := range register {
		ops = append(ops, map[string]any{"Service": map[string]any{"Verb": "set", "Node": d.node, "Service": s}})
	}
	for _, c := range checks {
		ops = append(ops, map[string]any{"Check": map[string]any{"Verb": "set", "Check": c}})
	}
	return d.a.Do(ctx, "PUT", "/v1/txn", ops, nil)
}

func (d *catalogDriver) check(id, name, status string) map[string]any {
	return map[string]any{"Node": d.node, "CheckID": id, "Name": id, "Status": status, "ServiceID": strings.TrimPrefix(strings.TrimPrefix(id, "service:"), "_service_maintenance:"), "ServiceName": name}
}

func (d *catalogDriver) Put(ctx context.Context, svc model.Service) error {
	var services, checks []map[string]any
	for _, inst := range svc.Instances {
		var tags []string
		for k, v := range inst.Labels {
			tags = append(tags, k+"="+v)
		}
		sort.Strings(tags)
		services = append(services, map[string]any{
			"ID": inst.ID, "Service": svc.Name, "Address": inst.Address, "Port": 8080,
			"Tags": tags, "Meta": map[string]string{"protocol": "http"},
		})
		switch inst.Health {
		case model.Healthy:
			checks = append(checks, d.check("service:"+inst.ID, svc.Name, "passing"))
		case model.Unhealthy:
			checks = append(checks, d.check("service:"+inst.ID, svc.Name, "critical"))
		case model.Draining:
			checks = append(checks, d.check("service:"+inst.ID, svc.Name, "passing"),
				d.check("_service_maintenance:"+inst.ID, svc.Name, "critical"))
		}
	}
	return d.replace(ctx, svc.Name, services, checks)
}

func (d *catalogDriver) Remove(ctx context.Context, key model.ServiceKey) error {
	return d.replace(ctx, key.Name, nil, nil)
}

// Corrupt registers an instance whose address is neither an IP address
// nor a host name: Consul takes it, the adapter must reject it.
func (d *catalogDriver) Corrupt(ctx context.Context, key model.ServiceKey) (string, error) {
	id := key.Name + "-bad"
	err := d.replace(ctx, key.Name, []map[string]any{{
		"ID": id, "Service": key.Name, "Address": "not an address!", "Port": 8080,
	}}, nil)
	return fmt.Sprintf("consul service %s/%s instance %s on node %s", d.a.Datacenter, key.Name, id, d.node), err
}

func (d *catalogDriver) Break(context.Context) error {
	d.a.Stop(d.t)
	return nil
}

func (d *catalogDriver) Restore(context.Context) error {
	d.a.Restart(d.t)
	return nil
}

// testLogger discards the adapter's logs unless GALLEON_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("GALLEON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
