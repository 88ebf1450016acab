package pipeline

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/vip"
	"github.com/galleon-mesh/galleon/model"
)

func allocator(t *testing.T, ranges ...string) *vip.Allocator {
	t.Helper()
	r, err := vip.ParsePrefixes(ranges)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := vip.ParsePrefixes(vip.DefaultExclude)
	a, err := vip.New(r, x)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func serviceEntry(t *testing.T, snap *snapshot.Snapshot, name string) *networking.ServiceEntry {
	t.Helper()
	r := snap.Collection(snapshot.ServiceEntry).Get(name)
	if r == nil {
		t.Fatalf("%s not served", name)
	}
	var res mcp.Resource
	var se networking.ServiceEntry
	if err := proto.Unmarshal(r.MCP(), &res); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(res.Body.Value, &se); err != nil {
		t.Fatal(err)
	}
	return &se
}

// TestAllocatedAddresses: a service without addresses gets one from the
// range; the registry's addresses win; resolution NONE, istiod's opt-out
// label and a wildcard host get none; services sharing a host share it;
// an endpoint change leaves it alone, so it stays an endpoint-only change.
func TestAllocatedAddresses(t *testing.T) {
	p, store := run(t, Config{VIPs: allocator(t, "241.0.0.0/8")})
	given := service("given", "10.0.0.2")
	given.Addresses = []string{"10.96.0.7"}
	none := service("none")
	none.Resolution = model.ResolutionNone
	optOut := service("optout", "10.0.0.3")
	optOut.Labels = map[string]string{"networking.istio.io/enable-autoallocate-ip": "False"}
	wild := service("wild", "10.0.0.4")
	wild.Hosts = []string{"*.wild.test"}
	twin := service("twin", "10.0.0.5")
	twin.Namespace = "other"
	twin.Hosts = []string{"a.ns.test"} // the host of ns/a
	p.Replace([]model.Service{service("a", "10.0.0.1"), given, none, optOut, wild, twin})
	snap := waitSeq(t, store, 0)

	a := serviceEntry(t, snap, "ns/a").Addresses
	if len(a) != 1 || !netip.MustParsePrefix("241.0.0.0/8").Contains(netip.MustParseAddr(a[0])) {
		t.Fatalf("ns/a addresses %v, want one from 241.0.0.0/8", a)
	}
	if got := serviceEntry(t, snap, "other/twin").Addresses; !slices.Equal(got, a) {
		t.Errorf("other/twin (host a.ns.test too) addresses %v, want ns/a's %v", got, a)
	}
	for name, want := range map[string][]string{"ns/given": {"10.96.0.7"}, "ns/none": nil, "ns/optout": nil, "ns/wild": nil} {
		if got := serviceEntry(t, snap, name).Addresses; !slices.Equal(got, want) {
			t.Errorf("%s addresses %v, want %v", name, got, want)
		}
	}

	p.Update(service("a", "10.0.0.1", "10.0.0.9"))
	snap = waitSeq(t, store, snap.Seq)
	if d := snap.Collection(snapshot.ServiceEntry).LastDiff(); !slices.Equal(d.EndpointOnly, []string{"ns/a"}) {
		t.Errorf("an instance added to an addressed service: diff %+v, want endpoint-only", d)
	}
	if got := serviceEntry(t, snap, "ns/a").Addresses; !slices.Equal(got, a) {
		t.Errorf("ns/a addresses %v after an endpoint change, want %v", got, a)
	}

	// The registry now gives ns/a an address: it wins, and the twin keeps
	// the allocated one.
	withAddr := service("a", "10.0.0.1", "10.0.0.9")
	withAddr.Addresses = []string{"10.96.0.8"}
	p.Update(withAddr)
	snap = waitSeq(t, store, snap.Seq)
	if got := serviceEntry(t, snap, "ns/a").Addresses; !slices.Equal(got, []string{"10.96.0.8"}) {
		t.Errorf("ns/a addresses %v, want the registry's", got)
	}
	if got := serviceEntry(t, snap, "other/twin").Addresses; !slices.Equal(got, a) {
		t.Errorf("other/twin addresses %v, want %v kept", got, a)
	}
}

// TestAllocatedAddressesIdenticalAcrossReplicas: two pipelines that reach
// the same services by different histories (a replica that saw every change,
// one started afterwards) serve byte-identical ServiceEntries.
func TestAllocatedAddressesIdenticalAcrossReplicas(t *testing.T) {
	const n = 300
	// A small range makes collisions, and so moves, certain.
	ranges := []string{"241.0.0.0/23", "fd00:9::/64"}
	long, longStore := run(t, Config{VIPs: allocator(t, ranges...)})
	var all []model.Service
	for i := range n {
		all = append(all, service(fmt.Sprintf("s%03d", i), fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)))
	}
	long.Replace(all[:n/2])
	snap := waitSeq(t, longStore, 0)
	for i := n / 2; i < n; i++ {
		long.Update(all[i])
	}
	for i := 0; i < n/2; i += 3 {
		long.Delete(all[i].Key())
	}
	for i := 0; i < n/2; i += 6 {
		long.Update(all[i])
	}
	var final []model.Service
	for i := range n {
		if i >= n/2 || i%3 != 0 || i%6 == 0 {
			final = append(final, all[i])
		}
	}
	for snap.Collection(snapshot.ServiceEntry).Len() != len(final) {
		snap = waitSeq(t, longStore, snap.Seq)
	}

	fresh, freshStore := run(t, Config{VIPs: allocator(t, ranges...)})
	slices.Reverse(final)
	fresh.Replace(final)
	freshSnap := waitSeq(t, freshStore, 0)

	diff := 0
	for _, s := range final {
		name := s.Key().String()
		a, b := snap.Collection(snapshot.ServiceEntry).Get(name), freshSnap.Collection(snapshot.ServiceEntry).Get(name)
		if a == nil || b == nil || !bytes.Equal(a.MCP(), b.MCP()) {
			diff++
			if diff <= 3 {
				t.Errorf("%s differs between the replicas: %v vs %v", name, serviceEntry(t, snap, name).Addresses, serviceEntry(t, freshSnap, name).Addresses)
			}
		}
	}
	if diff > 0 {
		t.Errorf("%d of %d ServiceEntries differ", diff, len(final))
	}
	addrs := map[string]string{}
	for _, s := range final {
		for _, a := range serviceEntry(t, snap, s.Key().String()).Addresses {
			if other, dup := addrs[a]; dup {
				t.Errorf("%s and %s share %s", s.Key(), other, a)
			}
			addrs[a] = s.Key().String()
		}
	}
	if len(addrs) != 2*len(final) {
		t.Errorf("%d addresses for %d dual-stack services", len(addrs), len(final))
	}
}

// TestMovedAddressReconverts: when a new host takes the address a served
// service held, that service is served again with its new address in the
// same flush, though the registry did not report it.
func TestMovedAddressReconverts(t *testing.T) {
	// A /30 has two usable addresses: the third host pushes one of the two
	// others out, or gets none itself.
	a := allocator(t, "241.0.0.0/30")
	p, store := run(t, Config{VIPs: a})
	p.Replace([]model.Service{service("x", "10.0.0.1"), service("y", "10.0.0.2")})
	snap := waitSeq(t, store, 0)
	before := map[string][]string{}
	for _, n := range []string{"ns/x", "ns/y"} {
		before[n] = serviceEntry(t, snap, n).Addresses
	}
	// Add hosts until one of x, y moves (or loses its address).
	for i := range 20 {
		p.Update(service(fmt.Sprint("z", i), "10.0.0.3"))
		snap = waitSeq(t, store, snap.Seq)
		for _, n := range []string{"ns/x", "ns/y"} {
			got := serviceEntry(t, snap, n).Addresses
			if slices.Equal(got, before[n]) {
				continue
			}
			host := n[len("ns/"):] + ".ns.test"
			if want := a.Addrs(host); !slices.Equal(got, want) {
				t.Fatalf("%s serves %v, the allocator gives %s %v", n, got, host, want)
			}
			d := snap.Collection(snapshot.ServiceEntry).LastDiff()
			if !slices.Contains(d.Updated, n) {
				t.Fatalf("%s moved without an update in the diff %+v", n, d)
			}
			if missing := gauge(t, p.metrics.unaddressedHosts); missing < 1 {
				t.Errorf("galleon_allocated_addresses_missing = %v with 2 addresses for %d hosts", missing, i+3)
			}
			return
		}
	}
	t.Fatal("20 new hosts in a range of 2 addresses moved neither x nor y")
}

// TestRegistryAddressesAreNeverAllocated: an address a registry gives a service, inside the
// allocation range, is reserved while any service gives it: the host that held it moves, and
// gets it back when the registry stops giving it.
func TestRegistryAddressesAreNeverAllocated(t *testing.T) {
	a := allocator(t, "241.0.0.0/24")
	p, store := run(t, Config{VIPs: a})
	p.Replace([]model.Service{service("x", "10.0.0.1")})
	snap := waitSeq(t, store, 0)
	vipX := serviceEntry(t, snap, "ns/x").Addresses
	if len(vipX) != 1 {
		t.Fatalf("ns/x addresses %v", vipX)
	}
	// Two services of the registry give x's address (one twice, one as a /32).
	y := service("y", "10.0.0.2")
	y.Addresses = []string{vipX[0], vipX[0]}
	z := service("z", "10.0.0.3")
	z.Addresses = []string{vipX[0] + "/32"}
	p.Update(y)
	p.Update(z)
	for snap.Collection(snapshot.ServiceEntry).Len() != 3 {
		snap = waitSeq(t, store, snap.Seq)
	}
	moved := serviceEntry(t, snap, "ns/x").Addresses
	if len(moved) != 1 || moved[0] == vipX[0] {
		t.Fatalf("ns/x addresses %v while the registry gives %s to ns/y and ns/z", moved, vipX[0])
	}
	if got := gauge(t, p.metrics.addressedHosts); got != 1 {
		t.Errorf("galleon_allocated_addresses = %v, want 1 (reservations are not hosts)", got)
	}
	// One of the two stops giving it: still reserved.
	p.Delete(y.Key())
	snap = waitSeq(t, store, snap.Seq)
	if got := serviceEntry(t, snap, "ns/x").Addresses; !slices.Equal(got, moved) {
		t.Errorf("ns/x addresses %v after one of two givers left, want %v", got, moved)
	}
	// The last one stops: x is placed where it was first.
	z.Addresses = nil
	p.Update(z)
	for slices.Equal(serviceEntry(t, snap, "ns/x").Addresses, moved) {
		snap = waitSeq(t, store, snap.Seq)
	}
	if got := serviceEntry(t, snap, "ns/x").Addresses; !slices.Equal(got, vipX) {
		t.Errorf("ns/x addresses %v after the registry stopped giving %s, want it back", got, vipX[0])
	}
}
