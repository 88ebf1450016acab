package consultest

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// CatalogDriver is the conformance kit's registrytest.Driver for Consul
// (also a Corrupter and a Breaker). It registers services directly in the
// catalog, the way an external registration tool (consul-k8s catalog sync,
// ESM) does, one node holding every instance. Health maps onto one check
// per instance: Healthy passing, Unhealthy critical, Draining Consul's
// maintenance check. Instance labels become "key=value" tags.
type CatalogDriver struct {
	t    testing.TB
	a    *Agent
	node string
}

var (
	_ registrytest.Driver    = (*CatalogDriver)(nil)
	_ registrytest.Corrupter = (*CatalogDriver)(nil)
	_ registrytest.Breaker   = (*CatalogDriver)(nil)
)

// NewCatalogDriver returns a driver that registers on node of agent a.
// Break stops the agent and Restore restarts it, reporting to t.
func NewCatalogDriver(t testing.TB, a *Agent, node string) *CatalogDriver {
	return &CatalogDriver{t: t, a: a, node: node}
}

// Normalize turns what the kit puts into what the adapter reports with its
// default configuration: hosts and instance IDs derived from Consul names,
// the port named by default, labels on instances only (a Consul service
// has none of its own), plus the protocol meta as a label. It is the kit's
// registrytest.WithNormalize.
func (d *CatalogDriver) Normalize(svc model.Service) model.Service {
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
func (d *CatalogDriver) existing(ctx context.Context, name string) ([]string, error) {
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
func (d *CatalogDriver) replace(ctx context.Context, name string, register []map[string]any, checks []map[string]any) error {
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

func (d *CatalogDriver) check(id, name, status string) map[string]any {
	return map[string]any{"Node": d.node, "CheckID": id, "Name": id, "Status": status, "ServiceID": strings.TrimPrefix(strings.TrimPrefix(id, "service:"), "_service_maintenance:"), "ServiceName": name}
}

// Put registers svc's instances, replacing the service's.
func (d *CatalogDriver) Put(ctx context.Context, svc model.Service) error {
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
		checks = append(checks, d.healthChecks(inst, svc.Name)...)
	}
	return d.replace(ctx, svc.Name, services, checks)
}

// healthChecks are the checks that give inst its health.
func (d *CatalogDriver) healthChecks(inst model.Instance, service string) []map[string]any {
	switch inst.Health {
	case model.Healthy:
		return []map[string]any{d.check("service:"+inst.ID, service, "passing")}
	case model.Unhealthy:
		return []map[string]any{d.check("service:"+inst.ID, service, "critical")}
	case model.Draining:
		return []map[string]any{d.check("service:"+inst.ID, service, "passing"),
			d.check("_service_maintenance:"+inst.ID, service, "critical")}
	}
	return nil
}

// Remove deregisters every instance of the service.
func (d *CatalogDriver) Remove(ctx context.Context, key model.ServiceKey) error {
	return d.replace(ctx, key.Name, nil, nil)
}

// Corrupt registers an instance whose address is neither an IP address
// nor a host name: Consul takes it, the adapter must reject it.
func (d *CatalogDriver) Corrupt(ctx context.Context, key model.ServiceKey) (string, error) {
	id := key.Name + "-bad"
	err := d.replace(ctx, key.Name, []map[string]any{{
		"ID": id, "Service": key.Name, "Address": "not an address!", "Port": 8080,
	}}, nil)
	return fmt.Sprintf("consul service %s/%s instance %s on node %s", d.a.Datacenter, key.Name, id, d.node), err
}

// Break stops the agent.
func (d *CatalogDriver) Break(context.Context) error {
	d.a.Stop(d.t)
	return nil
}

// Restore restarts the agent, with its catalog.
func (d *CatalogDriver) Restore(context.Context) error {
	d.a.Restart(d.t)
	return nil
}
