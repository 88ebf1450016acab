package vip

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func mustAllocator(t testing.TB, ranges ...string) *Allocator {
	t.Helper()
	r, err := ParsePrefixes(ranges)
	if err != nil {
		t.Fatal(err)
	}
	x, err := ParsePrefixes(DefaultExclude)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(r, x)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// state is every host's addresses, joined.
func state(a *Allocator, hosts []string) map[string]string {
	out := make(map[string]string, len(hosts))
	for _, h := range hosts {
		out[h] = fmt.Sprint(a.Addrs(h))
	}
	return out
}

// checkInvariants: no address is held twice, the counts agree, and every
// address lies in its range outside the excluded blocks.
func checkInvariants(t *testing.T, a *Allocator) {
	t.Helper()
	for _, p := range a.pools {
		seen := map[netip.Addr]string{}
		pushed := 0
		for h, pl := range p.hosts {
			if pl.probe != 0 {
				pushed++
			}
			if pl.probe < 0 {
				continue
			}
			if p.taken[pl.slot] != h {
				t.Fatalf("%s: slot %d is %q's, taken says %q", p.prefix, pl.slot, h, p.taken[pl.slot])
			}
			addr := p.addrOf(pl.slot)
			if other, dup := seen[addr]; dup {
				t.Fatalf("%s: %s held by %q and %q", p.prefix, addr, h, other)
			}
			seen[addr] = h
			if !p.prefix.Contains(addr) {
				t.Fatalf("%s: %s outside the range", p.prefix, addr)
			}
			for _, x := range DefaultExclude {
				if netip.MustParsePrefix(x).Contains(addr) {
					t.Fatalf("%s: %s inside excluded %s", p.prefix, addr, x)
				}
			}
		}
		if !p.overflow {
			want, n := map[uint64][]string{}, 0
			for h, pl := range p.hosts {
				for i := range max(pl.probe, 0) {
					want[p.slotAt(h, i)] = append(want[p.slotAt(h, i)], h)
					n++
				}
			}
			if n != p.passedLen || len(want) != len(p.passed) {
				t.Fatalf("%s: passed index has %d entries in %d slots, want %d in %d", p.prefix, p.passedLen, len(p.passed), n, len(want))
			}
			for slot, hs := range want {
				got := slices.Clone(p.passed[slot])
				slices.Sort(got)
				slices.Sort(hs)
				if !slices.Equal(got, hs) {
					t.Fatalf("%s: slot %d passed by %v, index says %v", p.prefix, slot, hs, got)
				}
			}
		}
		if len(p.taken) != len(seen) {
			t.Fatalf("%s: %d slots taken, %d hosts placed", p.prefix, len(p.taken), len(seen))
		}
		if pushed != p.pushed {
			t.Fatalf("%s: pushed counter %d, counted %d", p.prefix, p.pushed, pushed)
		}
		if p.Unplaced() > 0 && uint64(len(p.taken)) != p.size {
			t.Fatalf("%s: %d hosts without an address while %d of %d addresses are free", p.prefix, p.Unplaced(), p.size-uint64(len(p.taken)), p.size)
		}
	}
}

// TestPureFunctionOfTheSet: after any history of batches, every host has the
// address a new allocator gives it when handed the same set (and the same
// reserved registry addresses) at once, in any order (two replicas, a
// restart); Update reports exactly the hosts that stayed and moved; no host
// gets a reserved address. Small ranges force collisions, pushes and a full
// range.
func TestPureFunctionOfTheSet(t *testing.T) {
	for _, tc := range []struct {
		ranges []string
		hosts  int
	}{
		{[]string{"240.0.0.0/27"}, 40},                   // 30 addresses: collisions and a full range
		{[]string{"240.0.0.0/24", "fd00:1::/120"}, 300},  // dual stack, full IPv4 range
		{[]string{"241.0.0.0/20", "fd00:1::/64"}, 2_000}, // some collisions
		{DefaultRanges, 2_000},
	} {
		t.Run(fmt.Sprint(tc.ranges), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.hosts)))
			universe := make([]string, tc.hosts)
			for i := range universe {
				universe[i] = fmt.Sprintf("svc-%d.ns.example", i)
			}
			a := mustAllocator(t, tc.ranges...)
			held := map[string]bool{}
			// Registry addresses: some in the IPv4 range, one outside every range.
			base := netip.MustParsePrefix(tc.ranges[0]).Addr()
			registryAddrs := []netip.Addr{netip.MustParseAddr("10.0.0.1")}
			for i := range 8 {
				addr := base
				for range 1 + i*3 {
					addr = addr.Next()
				}
				registryAddrs = append(registryAddrs, addr)
			}
			reserved := map[netip.Addr]bool{}
			totalMoved := 0
			for round := range 60 {
				var add, remove []string
				for range rng.IntN(tc.hosts/4 + 1) {
					h := universe[rng.IntN(len(universe))]
					if rng.IntN(2) == 0 {
						add = append(add, h)
					} else {
						remove = append(remove, h)
					}
				}
				var reserve, release []netip.Addr
				if addr := registryAddrs[rng.IntN(len(registryAddrs))]; reserved[addr] {
					release = append(release, addr)
					delete(reserved, addr)
				} else {
					reserve = append(reserve, addr)
					reserved[addr] = true
				}
				before := state(a, universe)
				heldBefore := maps.Clone(held)
				moved := a.UpdateReserved(add, remove, reserve, release)
				for _, h := range remove {
					delete(held, h)
				}
				for _, h := range add {
					held[h] = true
				}
				checkInvariants(t, a)
				for addr := range reserved {
					for _, h := range universe {
						if slices.Contains(a.Addrs(h), addr.String()) {
							t.Fatalf("round %d: %s got the reserved address %s", round, h, addr)
						}
					}
				}
				if got := a.pools[0].Len(); got != len(held) {
					t.Fatalf("round %d: Len %d, %d hosts held", round, got, len(held))
				}
				after := state(a, universe)
				// What Update must report: the hosts held before and after
				// whose addresses differ.
				var want []string
				for h := range held {
					if heldBefore[h] && before[h] != after[h] {
						want = append(want, h)
					}
				}
				slices.Sort(want)
				if !slices.Equal(moved, want) {
					t.Fatalf("round %d: Update reported moved %v, addresses changed for %v", round, moved, want)
				}
				totalMoved += len(moved)

				// A fresh allocator given the same set in one shuffled batch.
				set := make([]string, 0, len(held))
				for h := range held {
					set = append(set, h)
				}
				rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
				fresh := mustAllocator(t, tc.ranges...)
				var res []netip.Addr
				for addr := range reserved {
					res = append(res, addr)
				}
				if m := fresh.UpdateReserved(set, nil, res, nil); len(m) != 0 {
					t.Fatalf("a first batch reported moves: %v", m)
				}
				if got := state(fresh, universe); !mapsEqual(got, after) {
					t.Fatalf("round %d: a fresh allocator with the same %d hosts differs: %s", round, len(held), firstDiff(got, after))
				}
			}
			t.Logf("%d hosts, %v: %d moves reported over 60 rounds", tc.hosts, tc.ranges, totalMoved)
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func firstDiff(a, b map[string]string) string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if a[k] != b[k] {
			return fmt.Sprintf("%s: %s vs %s", k, a[k], b[k])
		}
	}
	return "sizes differ"
}

// TestStayersKeepTheirAddresses is the 10,000-service case of issue 26: while
// 2,000 other hosts come and go in batches, the 10,000 that stay keep their
// addresses in the default range, and end where a restarted allocator puts
// them.
func TestStayersKeepTheirAddresses(t *testing.T) {
	const stayers, churn = 10_000, 2_000
	a := mustAllocator(t, DefaultRanges...)
	var stay []string
	for i := range stayers {
		stay = append(stay, fmt.Sprintf("orders-%05d.consul.example", i))
	}
	a.Update(stay, nil)
	first := state(a, stay)
	moves := 0
	for round := range 20 {
		var batch []string
		for i := range churn {
			batch = append(batch, fmt.Sprintf("batch-%02d-%04d.eureka.example", round, i))
		}
		moves += len(a.Update(batch, nil))
		moves += len(a.Update(nil, batch))
	}
	checkInvariants(t, a)
	if moves != 0 {
		t.Errorf("%d moves reported while %d hosts came and went", moves, 20*churn)
	}
	if got := state(a, stay); !mapsEqual(got, first) {
		t.Errorf("a host that stayed moved: %s", firstDiff(got, first))
	}
	restarted := mustAllocator(t, DefaultRanges...)
	restarted.Update(stay, nil)
	if got := state(restarted, stay); !mapsEqual(got, first) {
		t.Errorf("a restart moved a host: %s", firstDiff(got, first))
	}
}

// TestAddressMapping: slots step over the reserved first and last addresses
// and istiod's block, and cover the rest.
func TestAddressMapping(t *testing.T) {
	a := mustAllocator(t, "240.0.0.0/4", "fd00:7::/64")
	v4, v6 := a.pools[0], a.pools[1]
	if want := uint64(1<<28 - 1<<16 - 2); v4.size != want {
		t.Errorf("IPv4 size %d, want %d", v4.size, want)
	}
	for slot, want := range map[uint64]string{
		0:                         "240.0.0.1",
		240<<16 - 2:               "240.239.255.255",
		240<<16 - 1:               "240.241.0.0",
		uint64(1<<28-1<<16-2) - 1: "255.255.255.254",
	} {
		if got := v4.addrOf(slot).String(); got != want {
			t.Errorf("IPv4 slot %d: %s, want %s", slot, got, want)
		}
	}
	if v6.size != 1<<62 {
		t.Errorf("IPv6 /64 size %d, want 2^62 (the cap)", v6.size)
	}
	if got := v6.addrOf(5).String(); got != "fd00:7::5" {
		t.Errorf("IPv6 slot 5: %s", got)
	}
	a.Update([]string{"x.example"}, nil)
	if got := a.Addrs("x.example"); len(got) != 2 || !netip.MustParseAddr(got[0]).Is4() || !netip.MustParseAddr(got[1]).Is6() {
		t.Errorf("dual stack addresses %v, want one IPv4 then one IPv6", got)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		ranges, exclude []string
		want            string
	}{
		{[]string{"240.240.1.0/24"}, DefaultExclude, "lies inside the excluded block 240.240.0.0/16"},
		{[]string{"240.0.0.0/31"}, nil, "too small a range"},
		{[]string{"240.0.0.0/8", "241.0.0.0/8"}, nil, "one IPv4 and one IPv6 range at most"},
		{nil, nil, "no address range"},
	} {
		r, _ := ParsePrefixes(tc.ranges)
		x, _ := ParsePrefixes(tc.exclude)
		if _, err := New(r, x); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%v, %v) = %v, want an error with %q", tc.ranges, tc.exclude, err, tc.want)
		}
	}
	if _, err := ParsePrefixes([]string{"240.0.0.1/4"}); err == nil || !strings.Contains(err.Error(), "did you mean 240.0.0.0/4") {
		t.Errorf("host bits: %v", err)
	}
	if _, err := ParsePrefixes([]string{"240.0.0.0"}); err == nil || !strings.Contains(err.Error(), "is not a CIDR block") {
		t.Errorf("no prefix length: %v", err)
	}
}

func BenchmarkUpdateOne(b *testing.B) {
	a := mustAllocator(b, DefaultRanges...)
	var hosts []string
	for i := range 10_000 {
		hosts = append(hosts, fmt.Sprintf("svc-%05d.example", i))
	}
	a.Update(hosts, nil)
	b.ResetTimer()
	for i := range b.N {
		h := fmt.Sprintf("new-%d.example", i)
		a.Update([]string{h}, nil)
		a.Update(nil, []string{h})
	}
}

func BenchmarkStart10k(b *testing.B) {
	var hosts []string
	for i := range 10_000 {
		hosts = append(hosts, fmt.Sprintf("svc-%05d.example", i))
	}
	for range b.N {
		a := mustAllocator(b, DefaultRanges...)
		a.Update(hosts, nil)
	}
}
