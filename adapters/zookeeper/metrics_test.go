package zookeeper

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/model"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// addressOf is the address in a Curator instance node.
func addressOf(t *testing.T, data []byte) string {
	t.Helper()
	var ci curatorInstance
	if err := json.Unmarshal(data, &ci); err != nil {
		t.Fatal(err)
	}
	return ci.Address
}

// counterSum is the sum of every series of the counter name in reg.
func counterSum(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestRequestsPerChange counts the reads one change costs, against a real ZooKeeper holding
// many services: a Dubbo provider joining or leaving is one read (its interface's providers);
// a Curator instance's data changing is one read (its node), an instance joining two (its
// service's children, its node), leaving one (the children: a deleted node is not read). None
// depends on how many services there are.
func TestRequestsPerChange(t *testing.T) {
	const services, changes = 200, 10
	t.Run("dubbo", func(t *testing.T) {
		s := startServer(t)
		w := dubboWriter{c: client(t, s.Addr()), root: "/dubbo"}
		iface := func(i int) string { return "org.apache.demo.Service" + strconv.Itoa(i) }
		for i := range services {
			if err := w.set(iface(i), fmt.Sprintf("dubbo://10.1.%d.%d:20880/%s", i/250, i%250, iface(i))); err != nil {
				t.Fatal(err)
			}
		}
		reg := prometheus.NewRegistry()
		rec := run(t, Config{Servers: []string{s.Addr()}, Layout: LayoutDubbo, Registerer: reg})
		rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool { return len(st) == services })
		// Listing: the root, and per interface its providers and its configurators (missing:
		// then the interface znode's children, for them to appear).
		if got, want := counterSum(t, reg, "galleon_zookeeper_requests_total", nil), float64(1+3*services); got != want {
			t.Errorf("listing %d interfaces took %v reads, want %v", services, got, want)
		}
		target := iface(services / 2)
		name := dubboreg.ServiceName(target, "", "")
		for c := range changes {
			before := counterSum(t, reg, "galleon_zookeeper_requests_total", nil)
			addr := fmt.Sprintf("10.9.0.%d", c+1)
			if err := w.set(target, "dubbo://"+addr+":20880/"+target); err != nil {
				t.Fatal(err)
			}
			rec.WaitFor(t, waitTimeout, hasInstances(name, addr+":20880"))
			if got := counterSum(t, reg, "galleon_zookeeper_requests_total", nil) - before; got != 1 {
				t.Fatalf("change %d (one provider left, one joined, in one transaction) took %v reads, want 1", c, got)
			}
		}
		// A malformed provider is rejected with its reason, which the core counts it under
		// (galleon_registry_records_rejected_total).
		bad := url.QueryEscape("dubbo://10.9.9.9:99999/" + target)
		if err := w.ensure(w.root + "/" + target + "/providers/" + bad); err != nil {
			t.Fatal(err)
		}
		record := w.root + "/" + target + "/providers/" + bad
		rejections := func(events []registrytest.Event) []registrytest.Event {
			var out []registrytest.Event
			for _, e := range events {
				if e.Op == registrytest.OpRejected && e.Record == record && e.Err != nil {
					out = append(out, e)
				}
			}
			return out
		}
		rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool { return len(rejections(events)) > 0 })
		if got := rejections(rec.Events()); len(got) != 1 || reasonOf(got[0].Err) != reasonPort {
			t.Errorf("rejections of the malformed provider: %v, want 1, reason %s", got, reasonPort)
		}
	})
	t.Run("curator", func(t *testing.T) {
		s := startServer(t)
		w := writer{c: client(t, s.Addr()), root: "/services"}
		w.ensureRoot(t)
		for i := range services {
			name := fmt.Sprintf("svc-%03d", i)
			if err := w.set(name, map[string][]byte{"a": goodNode(name, "a", fmt.Sprintf("10.1.%d.%d", i/250, i%250))}); err != nil {
				t.Fatal(err)
			}
		}
		reg := prometheus.NewRegistry()
		rec := run(t, Config{Servers: []string{s.Addr()}, Registerer: reg})
		rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool { return len(st) == services })
		const name = "svc-100"
		// step applies ops (one transaction) and counts the reads until the adapter serves
		// want (instance ID -> address).
		p := w.root + "/" + name
		served := map[string]string{"a": "10.1.0.100"}
		step := func(what string, reads float64, ops ...any) {
			t.Helper()
			before := counterSum(t, reg, "galleon_zookeeper_requests_total", nil)
			for _, op := range ops {
				switch op := op.(type) {
				case *zk.CreateRequest:
					op.Acl = zk.WorldACL(zk.PermAll)
					served[op.Path[len(p)+1:]] = addressOf(t, op.Data)
				case *zk.SetDataRequest:
					served[op.Path[len(p)+1:]] = addressOf(t, op.Data)
				case *zk.DeleteRequest:
					delete(served, op.Path[len(p)+1:])
				}
			}
			if _, err := w.c.Multi(ops...); err != nil {
				t.Fatal(err)
			}
			rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool {
				svc, ok := st[key(name)]
				if !ok || len(svc.Instances) != len(served) {
					return false
				}
				for _, inst := range svc.Instances {
					if served[inst.ID] != inst.Address {
						return false
					}
				}
				return true
			})
			if got := counterSum(t, reg, "galleon_zookeeper_requests_total", nil) - before; got != reads {
				t.Fatalf("%s took %v reads, want %v", what, got, reads)
			}
		}
		for c := range changes {
			step("an instance's address changing", 1, &zk.SetDataRequest{Path: p + "/a", Data: goodNode(name, "a", fmt.Sprintf("10.9.0.%d", c+1)), Version: -1})
		}
		step("an instance joining", 2, &zk.CreateRequest{Path: p + "/b", Data: goodNode(name, "b", "10.9.1.1")})
		for c := range changes {
			prev, next := "b", fmt.Sprintf("c%d", c)
			if c > 0 {
				prev = fmt.Sprintf("c%d", c-1)
			}
			step("an instance leaving and another joining", 2,
				&zk.DeleteRequest{Path: p + "/" + prev, Version: -1},
				&zk.CreateRequest{Path: p + "/" + next, Data: goodNode(name, next, fmt.Sprintf("10.9.2.%d", c+1))})
		}
		step("an instance leaving", 1, &zk.DeleteRequest{Path: p + fmt.Sprintf("/c%d", changes-1), Version: -1})
	})
}

// TestPeriodicRelist: the safety relisting reads every service again, a chunk at a time, and
// reports nothing when nothing changed; a change made meanwhile is served.
func TestPeriodicRelist(t *testing.T) {
	const services = 300 // two chunks
	s := startServer(t)
	w := writer{c: client(t, s.Addr()), root: "/services"}
	w.ensureRoot(t)
	for i := range services {
		name := fmt.Sprintf("svc-%03d", i)
		if err := w.set(name, map[string][]byte{"a": goodNode(name, "a", fmt.Sprintf("10.1.%d.%d", i/250, i%250))}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	r, err := New(Config{Servers: []string{s.Addr()}, Registerer: reg, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	r.cfg.RelistInterval = 300 * time.Millisecond // below what New accepts, to keep the test short
	rec := runRegistry(t, r)
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool { return len(st) == services })
	listed := rec.Len()
	deadline := time.Now().Add(waitTimeout)
	for counterSum(t, reg, "galleon_zookeeper_relists_total", map[string]string{"reason": "periodic"}) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no two periodic relistings")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The listing reads the root, and every service's children and its one node; a relisting
	// reads the services again (2 reads each). The second relisting has started, so the first
	// is done.
	if got, want := counterSum(t, reg, "galleon_zookeeper_requests_total", nil), float64(1+2*services+2*services); got < want {
		t.Errorf("%v reads once a relisting is done, want at least %v", got, want)
	}
	if extra := rec.Events()[listed:]; len(extra) != 0 {
		t.Errorf("relistings of an unchanged registry reported %v, want nothing", extra)
	}
	if err := w.set("svc-123", map[string][]byte{"a": goodNode("svc-123", "a", "10.9.9.9")}); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool {
		svc := st[key("svc-123")]
		return len(svc.Instances) == 1 && svc.Instances[0].Address == "10.9.9.9"
	})
}
