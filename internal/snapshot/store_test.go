package snapshot

import (
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	mcp "istio.io/api/mcp/v1alpha1"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { c.t = c.t.Add(time.Second); return c.t }

func newTestStore() (*Store, *fakeClock) {
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return NewStore(WithClock(clk.now)), clk
}

func se(name, body string, shape uint64) Change {
	return Change{Kind: ServiceEntry, Name: name, Object: &Object{Kind: ServiceEntry, Name: name, Body: []byte(body), Shape: shape}}
}

func del(name string) Change { return Change{Kind: ServiceEntry, Name: name} }

func mustApply(t *testing.T, s *Store, ready bool, changes ...Change) (*Snapshot, map[Kind]*Diff) {
	t.Helper()
	snap, diffs, err := s.Apply(changes, ready)
	if err != nil {
		t.Fatal(err)
	}
	return snap, diffs
}

func TestApplyDiffs(t *testing.T) {
	s, _ := newTestStore()
	snap, diffs := mustApply(t, s, true, se("ns/a", "a1", 1), se("ns/b", "b1", 2))
	d := diffs[ServiceEntry]
	if d == nil || !slices.Equal(d.Added, []string{"ns/a", "ns/b"}) || len(d.Updated)+len(d.Removed) != 0 {
		t.Fatalf("first diff = %+v", d)
	}
	if !snap.Ready || snap.Seq != 1 {
		t.Fatalf("snapshot ready=%v seq=%d", snap.Ready, snap.Seq)
	}

	// Same shape, other body: an endpoint-only update.
	_, diffs = mustApply(t, s, false, se("ns/a", "a2", 1))
	d = diffs[ServiceEntry]
	if !slices.Equal(d.Updated, []string{"ns/a"}) || !slices.Equal(d.EndpointOnly, []string{"ns/a"}) {
		t.Fatalf("endpoint-only diff = %+v", d)
	}
	// Other shape: a real update.
	_, diffs = mustApply(t, s, false, se("ns/a", "a3", 7))
	if d = diffs[ServiceEntry]; !slices.Equal(d.Updated, []string{"ns/a"}) || len(d.EndpointOnly) != 0 {
		t.Fatalf("shape change diff = %+v", d)
	}
	// Same shape but new labels: metadata is part of the shape.
	c := se("ns/a", "a4", 7)
	c.Object.Labels = map[string]string{"x": "y"}
	if _, diffs = mustApply(t, s, false, c); len(diffs[ServiceEntry].EndpointOnly) != 0 {
		t.Fatalf("label change counted as endpoint-only: %+v", diffs[ServiceEntry])
	}
	snap, diffs = mustApply(t, s, false, del("ns/b"), del("ns/missing"))
	if d = diffs[ServiceEntry]; !slices.Equal(d.Removed, []string{"ns/b"}) || len(d.Added)+len(d.Updated) != 0 {
		t.Fatalf("removal diff = %+v", d)
	}
	if got := snap.Collection(ServiceEntry).Len(); got != 1 {
		t.Fatalf("len = %d, want 1", got)
	}
}

func TestUnchangedContentMakesNoSnapshot(t *testing.T) {
	s, _ := newTestStore()
	first, _ := mustApply(t, s, true, se("ns/a", "a1", 1))
	ch, cancel := s.Subscribe()
	defer cancel()
	again, diffs := mustApply(t, s, true, se("ns/a", "a1", 1), del("ns/nothing"))
	if again != first || len(diffs) != 0 {
		t.Fatalf("re-applying the same content made snapshot %d with diffs %v", again.Seq, diffs)
	}
	select {
	case <-ch:
		t.Fatal("subscriber woken for no change")
	default:
	}
	// Upsert then delete in one batch of a new name is no change either.
	if _, diffs = mustApply(t, s, true, se("ns/tmp", "x", 1), del("ns/tmp")); len(diffs) != 0 {
		t.Fatalf("add+delete in one batch gave diffs %v", diffs)
	}
}

// TestCreateTimeIsFixed: every resource of every store has the same create_time, so two
// replicas (and one process before and after a restart) serve byte-identical resources, and it
// never moves.
func TestCreateTimeIsFixed(t *testing.T) {
	a, _ := newTestStore()
	b, clk := newTestStore()
	clk.now() // another clock reading: must not matter
	mustApply(t, a, true, se("ns/a", "a1", 1))
	for i := range 3 {
		snapA, _ := mustApply(t, a, true, se("ns/a", fmt.Sprintf("v%d", i), 1))
		if got := snapA.Collection(ServiceEntry).Get("ns/a").CreateTime; !got.Equal(FixedCreateTime()) {
			t.Fatalf("update %d: create time %v, want %v", i, got, FixedCreateTime())
		}
	}
	mustApply(t, a, true, del("ns/a"))
	snapA, _ := mustApply(t, a, true, se("ns/a", "again", 1))
	snapB, _ := mustApply(t, b, true, se("ns/a", "again", 1))
	ra, rb := snapA.Collection(ServiceEntry).Get("ns/a"), snapB.Collection(ServiceEntry).Get("ns/a")
	if !bytes.Equal(ra.MCP(), rb.MCP()) {
		t.Fatalf("two stores encode the same resource differently:\n%x\n%x", ra.MCP(), rb.MCP())
	}
}

func TestVersionIsContentNotHistory(t *testing.T) {
	a, _ := newTestStore()
	b, _ := newTestStore()
	mustApply(t, a, true, se("ns/x", "1", 1), se("ns/y", "2", 1))
	mustApply(t, b, true, se("ns/y", "2", 1))
	mustApply(t, b, true, se("ns/z", "3", 1))
	mustApply(t, b, true, se("ns/x", "1", 1), del("ns/z"))
	va, vb := a.Current().Collection(ServiceEntry).Version, b.Current().Collection(ServiceEntry).Version
	if va != vb {
		t.Fatalf("same content, versions %s and %s", va, vb)
	}
	mustApply(t, b, true, se("ns/x", "changed", 1))
	if vb2 := b.Current().Collection(ServiceEntry).Version; vb2 == vb {
		t.Fatal("version did not move on a change")
	}
	empty, _ := newTestStore()
	if v := empty.Current().Collection(ServiceEntry).Version; v == va || v == "" {
		t.Fatalf("empty collection version %q", v)
	}
}

func TestSortedOrderUnderRandomChanges(t *testing.T) {
	s, _ := newTestStore()
	rng := rand.New(rand.NewSource(1))
	want := map[string]bool{}
	for round := range 200 {
		var changes []Change
		for range rng.Intn(20) + 1 {
			name := fmt.Sprintf("ns/s%03d", rng.Intn(300))
			if rng.Intn(3) == 0 {
				changes = append(changes, del(name))
				delete(want, name)
			} else {
				changes = append(changes, se(name, fmt.Sprint(round), 1))
				want[name] = true
			}
		}
		snap, _ := mustApply(t, s, true, changes...)
		c := snap.Collection(ServiceEntry)
		var got []string
		for _, r := range c.Resources() {
			got = append(got, r.Name)
			if c.Get(r.Name) != r {
				t.Fatalf("index and order disagree on %s", r.Name)
			}
		}
		var names []string
		for n := range want {
			names = append(names, n)
		}
		sort.Strings(names)
		if !slices.Equal(got, names) {
			t.Fatalf("round %d: order %v, want %v", round, got, names)
		}
	}
}

func TestChangedSince(t *testing.T) {
	s, _ := newTestStore()
	s1, _ := mustApply(t, s, true, se("ns/a", "1", 1), se("ns/b", "1", 1))
	mustApply(t, s, true, se("ns/a", "2", 1))
	mustApply(t, s, true, del("ns/b"), se("ns/c", "1", 1))
	c := s.Current().Collection(ServiceEntry)

	names, ok := c.ChangedSince(s1.Seq)
	sort.Strings(names)
	if !ok || !slices.Equal(names, []string{"ns/a", "ns/b", "ns/c"}) {
		t.Fatalf("ChangedSince(%d) = %v, %v", s1.Seq, names, ok)
	}
	if names, ok = c.ChangedSince(c.Seq); !ok || len(names) != 0 {
		t.Fatalf("ChangedSince(current) = %v, %v", names, ok)
	}
	if names, ok = c.ChangedSince(c.Seq - 1); !ok || len(names) != 2 {
		t.Fatalf("ChangedSince(previous) = %v, %v", names, ok)
	}
	for i := range historyDepth + 5 {
		mustApply(t, s, true, se("ns/a", fmt.Sprint("x", i), 1))
	}
	if _, ok = s.Current().Collection(ServiceEntry).ChangedSince(s1.Seq); ok {
		t.Fatal("ChangedSince reached back beyond the kept history")
	}
}

func TestEncoding(t *testing.T) {
	s, clk := newTestStore()
	c := se("ns/a", "", 1)
	c.Object.Body = []byte{0x0a, 0x03, 'a', '.', 'b'} // ServiceEntry{hosts: ["a.b"]}
	c.Object.Labels = map[string]string{"app": "a"}
	snap, _ := mustApply(t, s, true, c)
	r := snap.Collection(ServiceEntry).Get("ns/a")

	var res mcp.Resource
	if err := proto.Unmarshal(r.MCP(), &res); err != nil {
		t.Fatal(err)
	}
	md := res.GetMetadata()
	if md.GetName() != "ns/a" || md.GetVersion() != r.Version || md.GetLabels()["app"] != "a" ||
		!md.GetCreateTime().AsTime().Equal(FixedCreateTime()) {
		t.Fatalf("metadata = %v (create time %v, clock %v)", md, md.GetCreateTime().AsTime(), clk.t)
	}
	if res.GetBody().GetTypeUrl() != ServiceEntry.BodyTypeURL() || string(res.GetBody().GetValue()) != string(c.Object.Body) {
		t.Fatalf("body = %v", res.GetBody())
	}

	var resp discovery.DiscoveryResponse
	if err := proto.Unmarshal(append(append([]byte{}, r.ResponseEntry()...), r.ResponseEntry()...), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Resources) != 2 || resp.Resources[0].TypeUrl != MCPResourceTypeURL || string(resp.Resources[1].Value) != string(r.MCP()) {
		t.Fatalf("entries do not decode as DiscoveryResponse resources: %v", &resp)
	}
}

func TestDeltaEntryDecodes(t *testing.T) {
	s, _ := newTestStore()
	snap, _ := mustApply(t, s, true, se("ns/a", "body-a", 1), se("ns/b", "body-b", 1))
	var wire []byte
	for _, r := range snap.Collection(ServiceEntry).Resources() {
		prefix, body := r.DeltaEntry()
		wire = append(append(wire, prefix...), body...)
	}
	var resp discovery.DeltaDiscoveryResponse
	if err := proto.Unmarshal(wire, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Resources) != 2 {
		t.Fatalf("decoded %d resources", len(resp.Resources))
	}
	for i, got := range resp.Resources {
		want := snap.Collection(ServiceEntry).Resources()[i]
		if got.Name != want.Name || got.Version != want.Version ||
			got.Resource.TypeUrl != MCPResourceTypeURL || string(got.Resource.Value) != string(want.MCP()) {
			t.Fatalf("resource %d decodes as %v, want %s@%s", i, got, want.Name, want.Version)
		}
	}
}

func TestApplyRejectsMismatchedChange(t *testing.T) {
	s, _ := newTestStore()
	c := se("ns/a", "1", 1)
	c.Name = "ns/b"
	if _, _, err := s.Apply([]Change{c}, true); err == nil {
		t.Fatal("a change whose object names another resource was accepted")
	}
	if s.Current().Seq != 0 {
		t.Fatal("a rejected batch changed the store")
	}
}

func TestSubscribeCoalescesAndReadyIsSticky(t *testing.T) {
	s, _ := newTestStore()
	ch, cancel := s.Subscribe()
	mustApply(t, s, false, se("ns/a", "1", 1))
	mustApply(t, s, false, se("ns/a", "2", 1))
	<-ch
	select {
	case <-ch:
		t.Fatal("two signals for a reader that had not read")
	default:
	}
	if s.Current().Ready {
		t.Fatal("ready before anyone said so")
	}
	if snap, _ := mustApply(t, s, true); !snap.Ready {
		t.Fatal("marking ready with no changes did not make a ready snapshot")
	}
	<-ch
	if snap, _ := mustApply(t, s, false, se("ns/a", "3", 1)); !snap.Ready {
		t.Fatal("readiness went back")
	}
	<-ch
	cancel()
	mustApply(t, s, false, se("ns/a", "4", 1))
	select {
	case <-ch:
		t.Fatal("signal after cancel")
	default:
	}
}

// A published snapshot never changes, whatever is applied after it: the
// name index is shared between versions shard by shard.
func TestOldSnapshotsAreImmutable(t *testing.T) {
	s, _ := newTestStore()
	var changes []Change
	for i := range 2000 {
		changes = append(changes, se(fmt.Sprintf("ns/s%04d", i), "v1", 1))
	}
	old, _ := mustApply(t, s, true, changes...)
	oldCol := old.Collection(ServiceEntry)
	want := map[string]string{}
	for _, r := range oldCol.Resources() {
		want[r.Name] = r.Version
	}
	for i := range 200 {
		mustApply(t, s, true, se(fmt.Sprintf("ns/s%04d", i*7), fmt.Sprint("v2-", i), 1), del(fmt.Sprintf("ns/s%04d", i*7+1)),
			se(fmt.Sprintf("ns/new%03d", i), "x", 1))
	}
	if oldCol.Len() != len(want) {
		t.Fatalf("old collection has %d resources, had %d", oldCol.Len(), len(want))
	}
	for name, version := range want {
		if r := oldCol.Get(name); r == nil || r.Version != version {
			t.Fatalf("old collection's %s changed to %v", name, r)
		}
	}
	if oldCol.Get("ns/new000") != nil {
		t.Fatal("a later addition is visible in an old collection")
	}
}
