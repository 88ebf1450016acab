package zookeeper

import (
	"fmt"
	"net/url"
	"slices"
	"testing"
	"text/template"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/dubbo/dubbotest"
)

// TestDubboEquivalence maps registry/dubbo's equivalence cases through this adapter's Dubbo
// layouts (the provider URLs and Dubbo 3 instance nodes Dubbo writes, parsed, merged and mapped
// as the watch does) and checks the ServiceEntry name, host, ports and endpoints against the
// kit's. galleon-nacos checks the same cases through its own mapping: a Dubbo estate moving
// from ZooKeeper to Nacos keeps its ServiceEntries.
func TestDubboEquivalence(t *testing.T) {
	e, err := dubbotest.EquivalenceCases()
	if err != nil {
		t.Fatal(err)
	}
	host := template.Must(template.New("host").Parse(DefaultDubboHostTemplate))
	for _, c := range e.Interfaces {
		t.Run(c.Case, func(t *testing.T) {
			d := newDubbo(nil)
			var eps []*endpoint
			for _, p := range c.Providers {
				q := url.Values{"interface": {c.Interface}, "side": {"provider"}, "application": {"demo"}}
				if c.Group != "" {
					q.Set("group", c.Group)
				}
				if c.Version != "" {
					q.Set("version", c.Version)
				}
				u := fmt.Sprintf("%s://%s:%d/%s?%s", p.Protocol, p.IP, p.Port, c.Interface, q.Encode())
				ep, err := d.parseInstance(c.Interface, url.QueryEscape(u), nil)
				if err != nil {
					t.Fatalf("%s: %v", u, err)
				}
				eps = append(eps, &ep)
			}
			var ls labelSets
			eps = d.merge(eps, &ls)
			hd := eps[0].host()
			hd.Namespace = e.Namespace
			svc, _, ok, err := mapService(hd, host, eps, portMemory{})
			if !ok || err != nil {
				t.Fatalf("mapService: %v %v", ok, err)
			}
			checkEquivalent(t, svc, c.Want)
		})
	}
	for _, c := range e.Applications {
		t.Run(c.Case, func(t *testing.T) {
			d := newDubbo3(nil)
			var eps []*endpoint
			for _, in := range c.Instances {
				id := fmt.Sprintf("%s:%d", in.IP, in.Port)
				ep, err := d.parseInstance(c.Application, id, dubbo3JSON(c.Application, in.IP, in.Port, dubbo3Meta(in.Endpoints, nil)))
				if err != nil {
					t.Fatalf("%s: %v", id, err)
				}
				eps = append(eps, &ep)
			}
			hd := eps[0].host()
			hd.Namespace = e.Namespace
			svc, _, ok, err := mapService(hd, host, eps, portMemory{})
			if !ok || err != nil {
				t.Fatalf("mapService: %v %v", ok, err)
			}
			checkEquivalent(t, svc, c.Want)
		})
	}
}

// checkEquivalent compares a mapped service with the kit's expectation.
func checkEquivalent(t *testing.T, svc model.Service, want dubbotest.Want) {
	t.Helper()
	if svc.Name != want.Name || svc.Namespace != "default" || !slices.Equal(svc.Hosts, []string{want.Host}) {
		t.Errorf("service %s/%s hosts %v, want default/%s host %s", svc.Namespace, svc.Name, svc.Hosts, want.Name, want.Host)
	}
	var wantPorts []model.Port
	for _, p := range want.Ports {
		wantPorts = append(wantPorts, model.Port{Number: p.Number, Protocol: model.Protocol(p.Protocol), Name: p.Name})
	}
	if !slices.Equal(model.SortedPorts(svc.Ports), wantPorts) {
		t.Errorf("ports %v, want %v", svc.Ports, wantPorts)
	}
	var ids []string
	for _, in := range svc.Instances {
		ids = append(ids, in.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, want.IDs) {
		t.Errorf("endpoints %v, want %v", ids, want.IDs)
	}
}
