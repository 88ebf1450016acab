package zookeeper

import (
	"slices"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// rejectedWith waits for a rejection of record whose text holds want, after event mark.
func rejectedWith(t *testing.T, rec *registrytest.Recorder, mark int, record, want string) {
	t.Helper()
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		return slices.ContainsFunc(events[mark:], func(e registrytest.Event) bool {
			return e.Op == registrytest.OpRejected && e.Record == record && e.Err != nil && strings.Contains(e.Err.Error(), want)
		})
	})
}

// TestInstanceRejectedNotService (finding 4 and the dubbo-go finding), against a real
// ZooKeeper, Curator layout: an instance naming a protocol Istio does not know is rejected by its
// path (before, its port made the whole service invalid in the core, which froze it at its
// previous version); the other instance is served with a valid port. A dubbo-go application
// instance under the same root is rejected with the --zk-layout to use, instead of served as an
// HTTP port with Dubbo's bookkeeping as labels.
func TestInstanceRejectedNotService(t *testing.T) {
	s := startServer(t)
	w := writer{c: client(t, s.Addr()), root: "/mapping"}
	w.ensureRoot(t)
	good := curatorJSON("mix", "m1", "10.0.0.1", 8080, 0, map[string]string{"protocol": "grpc"})
	bad := curatorJSON("mix", "m2", "10.0.0.2", 8080, 0, map[string]string{"protocol": "dubbo"})
	if err := w.set("mix", map[string][]byte{"m1": good, "m2": bad}); err != nil {
		t.Fatal(err)
	}
	app := dubbo3JSON("greet-server", "10.0.0.3", 20000, dubbo3Meta(`[{"port":20000,"protocol":"tri"}]`, nil))
	if err := w.set("greet-server", map[string][]byte{"10.0.0.3:20000": app}); err != nil {
		t.Fatal(err)
	}
	rec := run(t, Config{Servers: []string{s.Addr()}, Root: w.root})
	rec.WaitFor(t, waitTimeout, hasInstances("mix", "m1"))
	rejectedWith(t, rec, 0, w.root+"/mix/m2", `metadata "protocol" "dubbo" is not a protocol Istio serves`)
	rejectedWith(t, rec, 0, w.root+"/greet-server/10.0.0.3:20000", "--zk-layout=dubbo3")
	svc := rec.State()[key("mix")]
	if !slices.Equal(svc.Ports, []model.Port{{Number: 8080, Protocol: model.ProtocolGRPC}}) {
		t.Errorf("mix: ports %v, want 8080 GRPC", svc.Ports)
	}
	servable(t, svc)
	if _, ok := rec.State()[key("greet-server")]; ok {
		t.Errorf("the dubbo-go application is served under the Curator layout: %+v", rec.State()[key("greet-server")])
	}
	for _, e := range rec.Events() {
		if e.Op == registrytest.OpRejected && e.Err != nil && reasonOf(e.Err) == reasonOther {
			t.Errorf("rejection of %s has no reason: %v", e.Record, e.Err)
		}
	}

	// Fixed: served, the rejection cleared.
	mark := rec.Len()
	if err := w.set("mix", map[string][]byte{"m1": good, "m2": curatorJSON("mix", "m2", "10.0.0.2", 8080, 0, map[string]string{"protocol": "GRPC"})}); err != nil {
		t.Fatal(err)
	}
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		return slices.ContainsFunc(events[mark:], func(e registrytest.Event) bool {
			return e.Op == registrytest.OpRejected && e.Record == w.root+"/mix/m2" && e.Err == nil
		})
	})
	rec.WaitFor(t, waitTimeout, hasInstances("mix", "m1", "m2"))
}
