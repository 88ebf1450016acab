package zookeeper

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/model"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// TestProviderPortsAgainstZooKeeper, against a real ZooKeeper, Dubbo 2 layout (needs the build
// hook: admitPorts, mapService, redacted records):
//   - finding 4: 257 providers of one interface on 257 ports: 256 served, the one left out
//     rejected by its node, once (before: the core refused the whole service);
//   - the dubbo-go finding: when the last host's provider URLs leave one at a time, the empty
//     service keeps both its ports, whichever left first (before: only the last one's);
//   - Dubbo errors quoted the whole URL: a malformed provider URL with a token is rejected with
//     neither the record nor the text holding the token.
func TestProviderPortsAgainstZooKeeper(t *testing.T) {
	s := startServer(t)
	w := dubboWriter{c: client(t, s.Addr()), root: "/dubbo-ports"}
	var many []string
	for i := range 257 {
		many = append(many, fmt.Sprintf("dubbo://10.0.%d.%d:%d/budget.Service?application=b", i/250, i%250+1, 10000+i))
	}
	if err := w.set("budget.Service", many...); err != nil {
		t.Fatal(err)
	}
	for _, iface := range []string{greeter, "greet.Other"} {
		if err := w.set(iface, twoProtocolURLs("10.0.0.1")...); err != nil {
			t.Fatal(err)
		}
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Root: w.root, Layout: LayoutDubbo})
	budget := key(dubboreg.ServiceName("budget.Service", "", ""))
	rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
		return len(state[budget].Instances) == 256 && len(state[key(dubboreg.ServiceName("greet.Other", "", ""))].Ports) == 2
	})
	svc := rec.State()[budget]
	if len(svc.Ports) != 256 {
		t.Fatalf("budget: %d ports, want 256", len(svc.Ports))
	}
	servable(t, svc)
	// The refusal is reported under the node's name, which a Dubbo 2 provider does not keep:
	// after its service's next listing (needName), so wait for it.
	var refused []registrytest.Event
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		refused = refused[:0]
		for _, e := range events {
			if e.Op == registrytest.OpRejected && e.Err != nil && strings.Contains(e.Err.Error(), "more than 256 ports") {
				refused = append(refused, e)
			}
		}
		return len(refused) > 0
	})
	if len(refused) != 1 || !strings.HasPrefix(refused[0].Record, w.root+"/budget.Service/providers/dubbo%3A%2F%2F10.0.") {
		t.Fatalf("rejections for the port limit: %+v, want one naming a provider node", refused)
	}

	// The last host's URLs leave one at a time, tri first in one interface, dubbo first in the
	// other.
	want := []model.Port{{Number: 20880, Protocol: model.ProtocolTCP, Name: "tcp-dubbo"}, {Number: 50051, Protocol: model.ProtocolGRPC}}
	for i, iface := range []string{greeter, "greet.Other"} {
		k := key(dubboreg.ServiceName(iface, "", ""))
		stay := twoProtocolURLs("10.0.0.1")[i]
		if err := w.set(iface, stay); err != nil {
			t.Fatal(err)
		}
		rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool { return len(state[k].Ports) == 1 })
		if err := w.set(iface); err != nil {
			t.Fatal(err)
		}
		rec.WaitFor(t, waitTimeout, func(state map[model.ServiceKey]model.Service) bool {
			svc, ok := state[k]
			return ok && len(svc.Instances) == 0
		})
		if got := rec.State()[k].Ports; !slices.Equal(got, want) {
			t.Errorf("%s: %s left last; the empty service keeps %v, want %v", iface, stay[:5], got, want)
		}
	}

	// A malformed provider URL with a token: neither record nor text holds it.
	mark := rec.Len()
	const token = "tok3nS3cr3t"
	if err := w.set("secret.Service", "dubbo://10.0.0.9:20880/secret.Service?token="+token+"&weight=heavy"); err != nil {
		t.Fatal(err)
	}
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		return slices.ContainsFunc(events[mark:], func(e registrytest.Event) bool {
			return e.Op == registrytest.OpRejected && e.Err != nil && strings.Contains(e.Record, "secret.Service")
		})
	})
	for _, e := range rec.Events()[mark:] {
		if e.Op == registrytest.OpRejected && (strings.Contains(e.Record, token) || e.Err != nil && strings.Contains(e.Err.Error(), token)) {
			t.Errorf("the token is in a rejection: %s: %v", e.Record, e.Err)
		}
		if e.Op == registrytest.OpRejected && e.Err != nil && !strings.Contains(e.Record, url.QueryEscape("token=")+redacted) {
			t.Errorf("record %s: want the token redacted", e.Record)
		}
	}
}
