package conformance

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	istiomodel "istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pkg/config/schema/collections"
	"istio.io/istio/pkg/config/schema/gvk"

	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/internal/serve/xds"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/model"
)

const registryName = "conformance"

// The type URLs istiod 1.29 asks for (adsc.ConfigInitialRequests: the GVK strings).
var (
	seTypeURL = gvk.ServiceEntry.String()
	weTypeURL = gvk.WorkloadEntry.String()
)

// Fixture services: several namespaces, hosts, ports (one remapped per instance), labels,
// annotations, localities, weights, an unhealthy instance, DNS resolution, an external service
// without instances, exportTo.
func cart() model.Service {
	return model.Service{
		Namespace: "shop", Name: "cart",
		Hosts:       []string{"cart.shop.internal"},
		Ports:       []model.Port{{Number: 8080, Protocol: model.ProtocolHTTP, Name: "http"}, {Number: 9090, Protocol: model.ProtocolGRPC}},
		Labels:      map[string]string{"app": "cart", "tier": "backend"},
		Annotations: map[string]string{"example.com/owner": "checkout-team"},
		Instances: []model.Instance{
			{ID: "cart-1", Address: "10.0.0.1", Labels: map[string]string{"version": "v1"}, Locality: "us-east1/us-east1-b", ServiceAccount: "cart"},
			{ID: "cart-2", Address: "10.0.0.2", Labels: map[string]string{"version": "v2"}, Weight: 3, Ports: map[uint32]uint32{8080: 18080}},
			{ID: "cart-3", Address: "10.0.0.3", Health: model.Unhealthy},
		},
	}
}

func catalog() model.Service {
	return model.Service{
		Namespace: "shop", Name: "catalog",
		Hosts:     []string{"catalog.shop.internal", "catalog.example.internal"},
		Addresses: []string{"240.0.0.10"},
		Ports:     []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}},
		Instances: []model.Instance{{ID: "catalog-1", Address: "10.0.1.1", Labels: map[string]string{"version": "v1"}}},
	}
}

func mysql() model.Service {
	return model.Service{
		Namespace: "legacy", Name: "mysql",
		Hosts:      []string{"mysql.legacy.internal"},
		Ports:      []model.Port{{Number: 3306, Protocol: model.ProtocolTCP, Name: "tcp-mysql"}},
		Resolution: model.ResolutionDNS,
		Instances: []model.Instance{
			{ID: "db-1", Address: "db-1.dc1.example.internal", Labels: map[string]string{"role": "primary"}},
			{ID: "db-2", Address: "db-2.dc1.example.internal", Labels: map[string]string{"role": "replica"}},
		},
	}
}

func payments() model.Service {
	return model.Service{
		Namespace: "legacy", Name: "payments",
		Hosts:      []string{"payments.example.com"},
		Ports:      []model.Port{{Number: 443, Protocol: model.ProtocolTLS, Name: "tls"}},
		Location:   model.MeshExternal,
		Resolution: model.ResolutionDNS,
		ExportTo:   []string{"shop", "istio-system"},
	}
}

func fixture() []model.Service { return []model.Service{cart(), catalog(), mysql(), payments()} }

// syncedCore starts Galleon's core with the fixture listed (the first Replace applied) and an
// istiod client that has synced with it and holds the fixture.
func syncedCore(t *testing.T, mode convert.Mode) (*galleonCore, *istiodSink) {
	t.Helper()
	core := startCore(t, mode)
	core.pipe.Replace(fixture())
	core.waitApplied(0)
	sink := connectIstiod(t, core.addr)
	sink.waitSynced()
	sink.waitAllAnswered()
	sink.waitHolds("initial state in istiod's store", core, core.want(fixture()...))
	return core, sink
}

// TestADSCInitialSync: istiod's client becomes synced (every type it asks for is answered,
// echoing the requested type URL, once), and its store holds every ServiceEntry with the
// namespace/name, resourceVersion (= Galleon's version), creationTimestamp (= Galleon's
// create_time), labels, annotations and spec Galleon serves, and nothing else.
func TestADSCInitialSync(t *testing.T) { forCompiledRelease(t, testADSCInitialSync) }

func testADSCInitialSync(t *testing.T) {
	core, sink := syncedCore(t, convert.ModeServiceEntry)

	if !slices.Contains(sink.initialReq, seTypeURL) || !slices.Contains(sink.initialReq, weTypeURL) {
		t.Fatalf("adsc.ConfigInitialRequests() = %v: no %s or %s (has the schema changed?)", sink.initialReq, seTypeURL, weTypeURL)
	}
	for typ, n := range sink.responses.counts() {
		if !slices.Contains(sink.initialReq, typ) {
			t.Errorf("response of type %q, which istiod never asked for (type URLs must be echoed exactly)", typ)
		}
		if n != 1 {
			t.Errorf("%d responses of %s for one unchanged state, want 1", n, typ)
		}
	}
	for _, r := range sink.responses.all() {
		switch {
		case r.typeURL == gvk.MeshConfig.String() && len(r.names) > 0:
			// adsc decodes a non-empty MeshConfig response as a bare MeshConfig and never ACKs it.
			t.Errorf("MeshConfig answered with %d resources, want none", len(r.names))
		case r.nonce == "":
			t.Errorf("response of %s has an empty nonce", r.typeURL)
		}
		if r.typeURL == seTypeURL && len(r.names) != len(fixture()) {
			t.Errorf("ServiceEntry response holds %v, want all %d services", r.names, len(fixture()))
		}
	}

	// Nothing but ServiceEntries lands in istiod's store (no WorkloadEntries in this mode, no
	// stray resources of other kinds).
	for _, s := range collections.Pilot.All() {
		if k := s.GroupVersionKind(); k != gvk.ServiceEntry {
			if got := sink.store.List(k, ""); len(got) > 0 {
				t.Errorf("istiod's store holds %d %s, want none", len(got), k)
			}
		}
	}
	// The served content is what a ServiceEntry controller needs: spot-check one in full.
	se := sink.get(gvk.ServiceEntry, "shop/cart")
	spec := se.Spec.(*networking.ServiceEntry)
	if len(spec.Endpoints) != 2 || spec.Resolution != networking.ServiceEntry_STATIC || se.Annotations[convert.AnnotationRegistry] != registryName {
		t.Errorf("shop/cart: %d endpoints (want the 2 healthy ones), resolution %v, annotations %v", len(spec.Endpoints), spec.Resolution, se.Annotations)
	}
	if r := core.served(snapshot.ServiceEntry, "shop/cart"); r == nil || se.ResourceVersion != r.Version || se.ResourceVersion == "" {
		t.Errorf("shop/cart resourceVersion %q, Galleon version %v", se.ResourceVersion, r)
	}
}

// TestADSCUpdatesAndRemovals: a changed service replaces what istiod holds (nothing of the old
// version survives), an endpoint-only change keeps the creation time (so istiod can skip a full
// push), a removed service is deleted, an added one created, and services that did not change are
// never re-processed (their version does not move, so adsc raises no event for them).
func TestADSCUpdatesAndRemovals(t *testing.T) { forCompiledRelease(t, testADSCUpdatesAndRemovals) }

func testADSCUpdatesAndRemovals(t *testing.T) {
	core, sink := syncedCore(t, convert.ModeServiceEntry)
	versions := func() map[string]string {
		out := map[string]string{}
		for _, r := range core.store.Current().Collection(snapshot.ServiceEntry).Resources() {
			out[r.Name] = r.Version
		}
		return out
	}
	before := versions()
	createdAt := sink.get(gvk.ServiceEntry, "shop/cart").CreationTimestamp

	// 1. A changed service: a port added, a host added, a label removed, an annotation changed.
	cart2 := cart()
	cart2.Ports = append(cart2.Ports, model.Port{Number: 8443, Protocol: model.ProtocolHTTPS, Name: "https"})
	cart2.Hosts = append(cart2.Hosts, "cart.example.internal")
	delete(cart2.Labels, "tier")
	cart2.Annotations = map[string]string{"example.com/owner": "platform-team"}
	core.pipe.Update(cart2)
	sink.waitHolds("changed shop/cart replaces the old one", core, core.want(cart2, catalog(), mysql(), payments()))
	got := sink.get(gvk.ServiceEntry, "shop/cart")
	if _, ok := got.Labels["tier"]; ok {
		t.Errorf("shop/cart still has the removed label: %v", got.Labels)
	}
	after := versions()
	if after["shop/cart"] == before["shop/cart"] {
		t.Errorf("shop/cart version did not change (%s)", after["shop/cart"])
	}
	for name, v := range before {
		if name != "shop/cart" && after[name] != v {
			t.Errorf("%s was not changed but its version moved %s -> %s", name, v, after[name])
		}
	}
	if !got.CreationTimestamp.Equal(createdAt) {
		t.Errorf("shop/cart creationTimestamp moved on update: %v -> %v", createdAt, got.CreationTimestamp)
	}

	// 2. An endpoint-only change: an instance moves.
	cart3 := cart2
	cart3.Instances = slices.Clone(cart2.Instances)
	cart3.Instances[0].Address = "10.0.0.11"
	versionBefore := got.ResourceVersion
	core.pipe.Update(cart3)
	sink.waitHolds("endpoint-only change of shop/cart", core, core.want(cart3, catalog(), mysql(), payments()))
	got = sink.get(gvk.ServiceEntry, "shop/cart")
	if got.ResourceVersion == versionBefore {
		t.Errorf("endpoint-only change: resourceVersion stayed %q", versionBefore)
	}
	if !got.CreationTimestamp.Equal(createdAt) {
		t.Errorf("endpoint-only change moved shop/cart's creationTimestamp %v -> %v: istiod would do a full push", createdAt, got.CreationTimestamp)
	}

	// 3. A removed service.
	core.pipe.Delete(model.ServiceKey{Namespace: "legacy", Name: "mysql"})
	sink.waitHolds("legacy/mysql removed", core, core.want(cart3, catalog(), payments()))

	// 4. An added service.
	orders := model.Service{
		Namespace: "shop", Name: "orders", Hosts: []string{"orders.shop.internal"},
		Ports:     []model.Port{{Number: 7070, Protocol: model.ProtocolHTTP2}},
		Instances: []model.Instance{{ID: "orders-1", Address: "10.0.2.1"}},
	}
	core.pipe.Update(orders)
	sink.waitHolds("shop/orders added", core, core.want(cart3, catalog(), payments(), orders))

	// The store events istiod's ServiceEntry controller saw. Events are delivered in order, and
	// adsc applies a response's creates and updates before its deletions, so once the last
	// step's event is in, every event of every step is.
	eventually(t, "store event for shop/orders", func() string {
		for _, e := range sink.events.since(0) {
			if e.key == "ServiceEntry/shop/orders" {
				return ""
			}
		}
		return "events so far: " + strings.Join(summary(sink.events.since(0)), ", ")
	})
	byKey := map[string][]string{}
	for _, e := range sink.events.since(0) {
		byKey[e.key] = append(byKey[e.key], e.event.String())
		if e.event == istiomodel.EventUpdate && !e.oldCreate.Equal(e.newCreate) {
			t.Errorf("%s: update event moves creationTimestamp %v -> %v", e.key, e.oldCreate, e.newCreate)
		}
	}
	want := map[string][]string{
		"ServiceEntry/shop/cart":       {"add", "update", "update"},
		"ServiceEntry/shop/catalog":    {"add"},
		"ServiceEntry/legacy/mysql":    {"add", "delete"},
		"ServiceEntry/legacy/payments": {"add"},
		"ServiceEntry/shop/orders":     {"add"},
	}
	if !maps.EqualFunc(byKey, want, slices.Equal) {
		t.Errorf("istiod store events per resource:\n got %v\nwant %v", byKey, want)
	}
}

// TestADSCWorkloadEntryMode: with convert.ModeWorkloadEntry istiod gets ServiceEntries with a
// workloadSelector and one WorkloadEntry per served instance; an instance change updates only its
// WorkloadEntry, a removed instance deletes it.
func TestADSCWorkloadEntryMode(t *testing.T) { forCompiledRelease(t, testADSCWorkloadEntryMode) }

func testADSCWorkloadEntryMode(t *testing.T) {
	core, sink := syncedCore(t, convert.ModeWorkloadEntry)

	want := core.want(fixture()...)
	wantWE := 0
	for _, w := range want {
		if w.kind == snapshot.WorkloadEntry {
			wantWE++
		}
	}
	// cart: 2 healthy instances; catalog: 1; mysql: 2; payments: none.
	if wantWE != 5 {
		t.Fatalf("fixture converts to %d WorkloadEntries, want 5", wantWE)
	}
	if got := len(sink.store.List(gvk.WorkloadEntry, "")); got != wantWE {
		t.Errorf("istiod holds %d WorkloadEntries, want %d", got, wantWE)
	}
	cartSE := sink.get(gvk.ServiceEntry, "shop/cart").Spec.(*networking.ServiceEntry)
	if cartSE.WorkloadSelector.GetLabels()[convert.LabelService] != "cart" || len(cartSE.Endpoints) != 0 {
		t.Errorf("shop/cart in WorkloadEntry mode: selector %v, %d inline endpoints", cartSE.WorkloadSelector, len(cartSE.Endpoints))
	}
	for _, we := range sink.store.List(gvk.WorkloadEntry, "shop") {
		if we.Labels[convert.LabelService] == "" {
			t.Errorf("WorkloadEntry %s/%s has no %s label: no ServiceEntry selects it", we.Namespace, we.Name, convert.LabelService)
		}
	}

	seVersion := sink.get(gvk.ServiceEntry, "shop/cart").ResourceVersion
	weBefore := map[string]string{}
	for _, we := range sink.store.List(gvk.WorkloadEntry, "shop") {
		weBefore[we.Namespace+"/"+we.Name] = we.ResourceVersion
	}

	// An instance moves, another goes away.
	c := cart()
	c.Instances = []model.Instance{c.Instances[0], c.Instances[2]}
	c.Instances[0].Address = "10.0.0.11"
	core.pipe.Update(c)
	sink.waitHolds("cart instances changed (WorkloadEntry mode)", core, core.want(c, catalog(), mysql(), payments()))
	if v := sink.get(gvk.ServiceEntry, "shop/cart").ResourceVersion; v != seVersion {
		t.Errorf("an instance change moved shop/cart's ServiceEntry version %s -> %s; only WorkloadEntries should change", seVersion, v)
	}
	weAfter := map[string]string{}
	for _, we := range sink.store.List(gvk.WorkloadEntry, "shop") {
		weAfter[we.Namespace+"/"+we.Name] = we.ResourceVersion
	}
	changed, removed := 0, 0
	for name, v := range weBefore {
		switch nv, ok := weAfter[name]; {
		case !ok:
			removed++
		case nv != v:
			changed++
		}
	}
	if changed != 1 || removed != 1 || len(weAfter) != len(weBefore)-1 {
		t.Errorf("WorkloadEntries in shop: %v -> %v; want one changed and one removed", weBefore, weAfter)
	}
}

// TestADSCHoldsBackUntilReplace: before the registry's first full listing (Replace) the server
// answers every type except the ones it serves, so istiod stays unsynced (and keeps waiting)
// rather than taking an empty or partial state as the truth; once the listing is in, istiod gets
// exactly the listing, never the partial state reported before it.
func TestADSCHoldsBackUntilReplace(t *testing.T) {
	forCompiledRelease(t, testADSCHoldsBackUntilReplace)
}

func testADSCHoldsBackUntilReplace(t *testing.T) {
	core := startCore(t, convert.ModeServiceEntry)
	// A report before the listing: the snapshot holds it but is not ready.
	early := model.Service{
		Namespace: "shop", Name: "early", Hosts: []string{"early.shop.internal"},
		Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}},
	}
	core.pipe.Update(early)
	core.waitApplied(0)
	if snap := core.store.Current(); snap.Ready || snap.Collection(snapshot.ServiceEntry).Get("shop/early") == nil {
		t.Fatalf("after an Update before any Replace: snapshot ready=%v, holds shop/early=%v; want not ready, held",
			snap.Ready, snap.Collection(snapshot.ServiceEntry).Get("shop/early") != nil)
	}

	sink := connectIstiod(t, core.addr)
	var others []string // types Galleon does not serve: answered at once
	for _, typ := range sink.initialReq {
		if _, serves := xds.KindOf(typ); !serves {
			others = append(others, typ)
		}
	}
	// The server handles one stream's requests in order and, after each, considers every type
	// subscribed so far: once the last request's answer is in, it has decided on ServiceEntry
	// and WorkloadEntry with the not-ready snapshot.
	eventually(t, "every type Galleon does not serve answered", func() string {
		types := sink.responses.types()
		var missing []string
		for _, typ := range others {
			if !slices.Contains(types, typ) {
				missing = append(missing, typ)
			}
		}
		if len(missing) > 0 {
			return "no response yet for " + strings.Join(missing, ", ")
		}
		return ""
	})
	last := sink.initialReq[len(sink.initialReq)-1]
	if _, serves := xds.KindOf(last); serves {
		t.Fatalf("istiod's last initial request is %s, which Galleon serves: this test's ordering argument needs another barrier", last)
	}
	if sink.adsc.HasSynced() {
		t.Errorf("adsc synced before the registry was listed")
	}
	for _, typ := range []string{seTypeURL, weTypeURL} {
		if rs := sink.responses.of(typ); len(rs) > 0 {
			t.Errorf("%s answered before the registry was listed: %v", typ, rs[0].names)
		}
	}
	if n := len(sink.store.List(gvk.ServiceEntry, "")); n > 0 {
		t.Errorf("istiod's store holds %d ServiceEntries before the registry was listed", n)
	}

	// The listing (without the early service) arrives.
	core.pipe.Replace(fixture())
	sink.waitSynced()
	sink.waitHolds("state after the first Replace", core, core.want(fixture()...))
	ses := sink.responses.of(seTypeURL)
	if len(ses) == 0 {
		t.Fatal("synced without a ServiceEntry response")
	}
	first := slices.Sorted(slices.Values(ses[0].names))
	wantNames := []string{"legacy/mysql", "legacy/payments", "shop/cart", "shop/catalog"}
	if !slices.Equal(first, wantNames) {
		t.Errorf("first ServiceEntry response istiod got holds %v, want the listing %v", first, wantNames)
	}
	for _, e := range sink.events.since(0) {
		if strings.HasSuffix(e.key, "/shop/early") {
			t.Errorf("istiod saw %s, a service reported before the listing and not in it", e)
		}
	}
}

// TestADSCReconnect: when Galleon's server goes away, istiod's client keeps its store and
// reconnects by itself (adsc's backoff); a new server on the same address with the same store
// gets every type asked again and answers with the current state, changes made while
// disconnected included; unchanged resources are not re-processed and keep their creation time.
func TestADSCReconnect(t *testing.T) { forCompiledRelease(t, testADSCReconnect) }

func testADSCReconnect(t *testing.T) {
	core, sink := syncedCore(t, convert.ModeServiceEntry)
	countsBefore := sink.responses.counts()
	createdAt := sink.get(gvk.ServiceEntry, "shop/cart").CreationTimestamp
	eventsBefore := sink.events.len()
	addr := core.addr

	core.stopServing()
	// Changes while istiod is disconnected.
	seq := core.store.Current().Seq
	c := cart()
	c.Instances[0].Address = "10.0.0.21"
	core.pipe.Update(c)
	core.pipe.Delete(model.ServiceKey{Namespace: "legacy", Name: "mysql"})
	core.waitApplied(seq)
	if n := len(sink.store.List(gvk.ServiceEntry, "")); n != len(fixture()) {
		t.Errorf("while disconnected istiod's store holds %d ServiceEntries, want the %d it had", n, len(fixture()))
	}

	core.serve(addr)
	if core.addr != addr {
		t.Fatalf("new server on %s, want the old address %s", core.addr, addr)
	}
	sink.waitHolds("state after the reconnect", core, core.want(c, catalog(), payments()))
	eventually(t, "every type asked for and answered again", func() string {
		counts := sink.responses.counts()
		var missing []string
		for _, typ := range sink.initialReq {
			if counts[typ] <= countsBefore[typ] {
				missing = append(missing, typ)
			}
		}
		if len(missing) > 0 {
			return "no new response for " + strings.Join(missing, ", ")
		}
		return ""
	})
	if got := sink.get(gvk.ServiceEntry, "shop/cart").CreationTimestamp; !got.Equal(createdAt) {
		t.Errorf("shop/cart creationTimestamp moved across the reconnect: %v -> %v", createdAt, got)
	}
	eventually(t, "store events of the reconnect", func() string {
		if ev := summary(sink.events.since(eventsBefore)); !slices.Contains(ev, "delete ServiceEntry/legacy/mysql") {
			return fmt.Sprintf("events so far %v", ev)
		}
		return ""
	})
	got := summary(sink.events.since(eventsBefore))
	slices.Sort(got)
	if want := []string{"delete ServiceEntry/legacy/mysql", "update ServiceEntry/shop/cart"}; !slices.Equal(got, want) {
		t.Errorf("store events after the reconnect %v, want %v (unchanged services must not be re-processed)", got, want)
	}
}
