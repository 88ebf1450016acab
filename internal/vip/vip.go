// Package vip gives each served host a virtual IP: the address a sidecar
// listens on for it and its DNS proxy answers with.
//
// istiod allocates addresses only for ServiceEntries stored in Kubernetes
// (into their status); a ServiceEntry received over MCP and without
// `addresses` has none. Its TCP ports then share the sidecar's
// 0.0.0.0:<port> listener with every other such service on the port, of
// which istiod keeps one, and DNS capture cannot answer its host
// (docs/vips.md). So the core gives one.
//
// # The contract
//
// An Allocator's assignment is a pure function of the set of hosts it holds:
// two replicas, or one process before and after a restart, that hold the same
// hosts give every host the same address, however the hosts arrived. No state
// is kept anywhere else, so nothing needs to be shared or persisted.
//
// Each host has a fixed probe sequence of addresses in the range (a hash of
// the host) and a fixed priority (another hash). Hosts are placed in priority
// order, each on the first address of its sequence that no host before it
// took. So a host moves only when a host of higher priority arrives whose
// sequence reaches the host's address before any free one, or when one
// leaves that had pushed it further along its own sequence: only after two
// hosts hash to one address, which a range much larger than the number of
// hosts makes rare (docs/vips.md measures how rare). A moved address costs
// one full push in istiod.
//
// When the range has fewer addresses than hosts, the hosts of lowest
// priority get none (Pool.Addr reports ok false) and are served without an
// address, as before allocation existed.
//
// An Allocator is not safe for concurrent use: the pipeline owns one and
// calls it from its own goroutine.
package vip

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// DefaultRanges is where addresses come from unless configured: the class E
// block, reserved and never routed on real networks. Kuma's VIPs come from
// the same block.
var DefaultRanges = []string{"240.0.0.0/4"}

// DefaultExclude are istiod's own auto-allocation prefixes for Kubernetes
// ServiceEntries (PILOT_IP_AUTOALLOCATE_IPV4_PREFIX and
// PILOT_IP_AUTOALLOCATE_IPV6_PREFIX, pilot/pkg/features/pilot.go), kept out
// of every range so that a Galleon host never shares an address with one
// istiod gives.
var DefaultExclude = []string{"240.240.0.0/16", "2001:2::/48"}

// Allocator gives each host one address from each of its pools: an IPv4
// one, and an IPv6 one when an IPv6 range is configured.
type Allocator struct {
	pools []*Pool
}

// New returns an Allocator over ranges (at most one IPv4 and one IPv6
// prefix), leaving out every address in exclude.
func New(ranges, exclude []netip.Prefix) (*Allocator, error) {
	a := &Allocator{}
	seen := map[bool]bool{}
	for _, r := range ranges {
		v4 := r.Addr().Is4()
		if seen[v4] {
			return nil, fmt.Errorf("%s: one IPv4 and one IPv6 range at most", r)
		}
		seen[v4] = true
		p, err := newPool(r, exclude)
		if err != nil {
			return nil, err
		}
		a.pools = append(a.pools, p)
	}
	if len(a.pools) == 0 {
		return nil, errors.New("no address range")
	}
	return a, nil
}

// ParsePrefixes reads CIDR blocks ("240.0.0.0/4"), naming the one that is
// not one.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR block such as 240.0.0.0/4", s)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%q has host bits set: did you mean %s?", s, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

// Pools returns the allocator's pools, IPv4 first when both exist.
func (a *Allocator) Pools() []*Pool { return a.pools }

// Update removes and adds hosts (removals first; a host in both stays) and
// returns the hosts it held before and still holds whose address changed in
// any pool. A host added twice, or removed when absent, is ignored.
func (a *Allocator) Update(add, remove []string) (moved []string) {
	return a.UpdateReserved(add, remove, nil, nil)
}

// UpdateReserved is Update that also reserves and releases addresses the
// registries gave (each reserved once: the caller counts its users). A
// reserved address inside a pool is never allocated: it counts as held by a
// host before every other, so a host that held it moves along. Addresses
// outside every pool, or excluded, need no reservation and are ignored.
func (a *Allocator) UpdateReserved(add, remove []string, reserve, release []netip.Addr) (moved []string) {
	for _, p := range a.pools {
		padd, premove := add, remove
		if r := p.reservations(reserve); len(r) > 0 {
			padd = append(slices.Clip(add), r...)
		}
		if r := p.reservations(release); len(r) > 0 {
			premove = append(slices.Clip(remove), r...)
		}
		for _, h := range p.update(padd, premove) {
			if _, isReservation := p.fixed[h]; !isReservation {
				moved = append(moved, h)
			}
		}
		for _, name := range premove {
			if _, held := p.hosts[name]; !held {
				delete(p.fixed, name) // released
			}
		}
	}
	if len(a.pools) > 1 {
		slices.Sort(moved)
		moved = slices.Compact(moved)
	}
	return moved
}

// reservationPrefix names a reservation among the hosts: a space is never
// in a host as served.
const reservationPrefix = "reserved "

// reservations returns the names of the reservations of addrs that lie in
// the pool, registering their slots.
func (p *Pool) reservations(addrs []netip.Addr) []string {
	var names []string
	for _, addr := range addrs {
		slot, ok := p.slotOf(addr)
		if !ok {
			continue
		}
		name := reservationPrefix + addr.String()
		p.fixed[name] = slot
		names = append(names, name)
	}
	return names
}

// slotOf is the slot of addr, when addr is one the pool gives.
func (p *Pool) slotOf(addr netip.Addr) (uint64, bool) {
	addr = addr.Unmap()
	if !p.prefix.Contains(addr) {
		return 0, false
	}
	off := offset(p.base, addr)
	slot := off
	for _, h := range p.holes {
		if off < h.start {
			break
		}
		if off < h.start+h.len {
			return 0, false
		}
		slot -= h.len
	}
	if slot >= p.size {
		return 0, false
	}
	return slot, true
}

// Addrs returns host's addresses, one per pool that could give one, in pool
// order, as strings for a ServiceEntry.
func (a *Allocator) Addrs(host string) []string {
	var out []string
	for _, p := range a.pools {
		if addr, ok := p.Addr(host); ok {
			out = append(out, addr.String())
		}
	}
	return out
}

// Pool is one family's range and who holds which address in it.
type Pool struct {
	prefix netip.Prefix
	base   netip.Addr // the range's first address
	size   uint64     // usable addresses
	// holes are the excluded blocks inside the range, as offsets from base,
	// sorted and merged; the reserved first and last IPv4 addresses are two.
	holes []hole

	hosts map[string]*placement
	taken map[uint64]string // slot -> host
	// pushed counts the hosts not on the first slot of their sequence, or on
	// none: while it is 0 a removal frees a slot nobody else wants.
	pushed int
	// passed indexes, by slot, the hosts whose sequence passed over it
	// (a host before them held it): when the slot is freed, only they can
	// want it, so a removal recomputes placements only when one did.
	// passedLen counts its entries; past maxPassed (a crowded range, or a
	// host with no slot at all) the index is dropped (overflow) and every
	// removal recomputes while any host is pushed, until the next
	// recomputation rebuilds it.
	passed    map[uint64][]string
	passedLen int
	overflow  bool
	// fixed are the reservations held (reservationPrefix + address), by
	// slot: hosts of the highest priority whose sequence is their one slot.
	fixed map[string]uint64
}

type hole struct{ start, len uint64 }

type placement struct {
	prio  uint64
	probe int    // index in the probe sequence; -1: no slot (range full)
	slot  uint64 // valid when probe >= 0
}

// Size is how many addresses the pool can give.
func (p *Pool) Size() uint64 { return p.size }

// Prefix is the pool's range.
func (p *Pool) Prefix() netip.Prefix { return p.prefix }

// Len is how many hosts the pool holds, with or without an address;
// reservations are not hosts.
func (p *Pool) Len() int { return len(p.hosts) - len(p.fixed) }

// Unplaced is how many hosts hold no address: the range is full.
func (p *Pool) Unplaced() int { return len(p.hosts) - len(p.taken) }

// Addr returns host's address; ok is false when the pool does not hold it
// or its range is full.
func (p *Pool) Addr(host string) (netip.Addr, bool) {
	pl := p.hosts[host]
	if pl == nil || pl.probe < 0 {
		return netip.Addr{}, false
	}
	return p.addrOf(pl.slot), true
}

// maxPoolBits bounds a pool's size at 2^62 addresses, so that offsets and
// sums of them fit in a uint64: a larger IPv6 range gives its first 2^62.
const maxPoolBits = 62

func newPool(prefix netip.Prefix, exclude []netip.Prefix) (*Pool, error) {
	prefix = prefix.Masked()
	hostBits := prefix.Addr().BitLen() - prefix.Bits()
	if hostBits < 2 {
		return nil, fmt.Errorf("%s: too small a range, want at most /%d", prefix, prefix.Addr().BitLen()-2)
	}
	span := uint64(1) << min(hostBits, maxPoolBits)
	p := &Pool{prefix: prefix, base: prefix.Addr(), hosts: map[string]*placement{}, taken: map[uint64]string{}, passed: map[uint64][]string{}, fixed: map[string]uint64{}}
	var holes []hole
	if prefix.Addr().Is4() {
		// The block's network and broadcast addresses: some stacks treat
		// them specially (240.0.0.0/4 ends in 255.255.255.255).
		holes = append(holes, hole{0, 1}, hole{span - 1, 1})
	}
	for _, x := range exclude {
		x = x.Masked()
		if x.Addr().Is4() != prefix.Addr().Is4() || !x.Overlaps(prefix) {
			continue
		}
		if x.Bits() <= prefix.Bits() {
			return nil, fmt.Errorf("%s lies inside the excluded block %s (istiod's own auto-allocation range by default): choose another range", prefix, x)
		}
		start := offset(prefix.Addr(), x.Addr())
		xBits := x.Addr().BitLen() - x.Bits()
		if start >= span {
			continue // beyond the 2^62 a large IPv6 pool uses
		}
		holes = append(holes, hole{start, min(uint64(1)<<min(xBits, maxPoolBits), span-start)})
	}
	slices.SortFunc(holes, func(a, b hole) int { return cmp.Compare(a.start, b.start) })
	for _, h := range holes { // merge overlaps
		if n := len(p.holes); n > 0 && h.start <= p.holes[n-1].start+p.holes[n-1].len {
			last := &p.holes[n-1]
			last.len = max(last.len, h.start+h.len-last.start)
			continue
		}
		p.holes = append(p.holes, h)
	}
	excluded := uint64(0)
	for _, h := range p.holes {
		excluded += h.len
	}
	if excluded >= span {
		return nil, fmt.Errorf("%s: every address is excluded", prefix)
	}
	p.size = span - excluded
	return p, nil
}

// offset is addr - base for two addresses of one family whose difference
// fits in 64 bits.
func offset(base, addr netip.Addr) uint64 {
	b, a := base.As16(), addr.As16()
	bh, bl := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	ah, al := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
	lo, borrow := bits.Sub64(al, bl, 0)
	if hi, _ := bits.Sub64(ah, bh, borrow); hi != 0 {
		return 1 << maxPoolBits // beyond any pool
	}
	return lo
}

// addrOf maps a slot (an index among the usable addresses) to its address,
// stepping over the holes.
func (p *Pool) addrOf(slot uint64) netip.Addr {
	off := slot
	for _, h := range p.holes {
		if off < h.start {
			break
		}
		off += h.len
	}
	b := p.base.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	lo, carry := bits.Add64(lo, off, 0)
	hi += carry
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	addr := netip.AddrFrom16(b)
	if p.base.Is4() {
		addr = addr.Unmap()
	}
	return addr
}

// randomProbes is how many hashed slots a host tries before it walks the
// range from the last one: hashing spreads hosts, the walk makes a free
// slot certain to be found while one exists.
const randomProbes = 16

// slotAt is the i-th slot of host's probe sequence.
func (p *Pool) slotAt(host string, i int) uint64 {
	if slot, ok := p.fixed[host]; ok {
		return slot // a reservation; it never walks, as nothing comes before it
	}
	if i < randomProbes {
		return p.hashSlot(host, uint64(i))
	}
	return (p.hashSlot(host, randomProbes-1) + uint64(i-randomProbes+1)) % p.size
}

func (p *Pool) hashSlot(host string, i uint64) uint64 {
	var d xxhash.Digest
	d.Reset()
	var seed [8]byte
	binary.LittleEndian.PutUint64(seed[:], i)
	_, _ = d.Write(seed[:])
	_, _ = d.WriteString(host)
	hi, _ := bits.Mul64(d.Sum64(), p.size) // the hash scaled to [0, size): uniform, no division
	return hi
}

// priority orders hosts: higher first. Ties (equal hashes) go to the
// smaller name, so the order is total.
func priority(host string) uint64 { return min(xxhash.Sum64String(host), math.MaxUint64-1) }

// priority is the package's priority, and for a reservation the highest,
// which no host has.
func (p *Pool) priority(host string) uint64 {
	if _, ok := p.fixed[host]; ok {
		return math.MaxUint64
	}
	return priority(host)
}

func before(a string, pa uint64, b string, pb uint64) bool {
	if pa != pb {
		return pa > pb
	}
	return a < b
}

// update applies one batch and returns the hosts held before and after
// whose slot changed.
func (p *Pool) update(add, remove []string) []string {
	adding := make(map[string]bool, len(add))
	for _, h := range add {
		adding[h] = true
	}
	recompute := false
	for _, h := range remove {
		pl := p.hosts[h]
		if pl == nil || adding[h] {
			continue
		}
		delete(p.hosts, h)
		if pl.probe != 0 {
			p.pushed--
		}
		if pl.probe < 0 {
			continue // it held no slot: nothing is freed
		}
		p.unpass(h, 0, pl.probe)
		delete(p.taken, pl.slot)
		recompute = recompute || (p.pushed > 0 && (p.overflow || len(p.passed[pl.slot]) > 0))
	}
	if len(p.hosts) == 0 && len(add) > 64 { // a first listing: size the maps once
		p.hosts, p.taken = make(map[string]*placement, len(add)), make(map[uint64]string, len(add))
	}
	added := make([]string, 0, len(adding))
	for _, h := range add {
		if _, ok := p.hosts[h]; ok || !adding[h] {
			continue
		}
		adding[h] = false // once; false marks it new
		added = append(added, h)
	}
	old := map[string]placement{} // the hosts that may have moved, as they were
	if recompute {
		for h, pl := range p.hosts {
			old[h] = *pl
		}
		for _, h := range added {
			p.hosts[h] = &placement{prio: p.priority(h), probe: -1}
		}
		p.placeAll()
	} else {
		for _, h := range added {
			p.insert(h, old)
		}
	}
	var moved []string
	for h, was := range old {
		now := p.hosts[h]
		if v, inAdd := adding[h]; now == nil || (inAdd && !v) {
			continue // removed, or new in this batch
		}
		if now.probe != was.probe || (now.probe >= 0 && now.slot != was.slot) {
			moved = append(moved, h)
		}
	}
	slices.Sort(moved)
	return moved
}

// insert places a new host. Walking its sequence, it takes a free slot, or
// one held by a host of lower priority, which then walks on from its own
// next probe: the result is what placing every host in priority order
// would give (the package comment), without touching anyone else. Hosts it
// moves are recorded in old as they were, once.
func (p *Pool) insert(host string, old map[string]placement) {
	cur := &placement{prio: p.priority(host)}
	p.hosts[host] = cur
	name, from := host, 0
	for i := 0; ; i++ {
		if uint64(i) >= p.size+randomProbes {
			cur.probe = -1 // every slot is held by a host before it
			p.pushed++
			p.dropIndex()
			return
		}
		slot := p.slotAt(name, i)
		holder, held := p.taken[slot]
		if held {
			hp := p.hosts[holder]
			if before(holder, hp.prio, name, cur.prio) {
				continue
			}
			// name displaces holder, which walks on from its next probe.
			if _, ok := old[holder]; !ok {
				old[holder] = *hp
			}
		}
		cur.probe, cur.slot = i, slot
		p.taken[slot] = name
		p.pass(name, from, i)
		if i > 0 {
			p.pushed++
		}
		if !held {
			return
		}
		hp := p.hosts[holder]
		if hp.probe > 0 {
			p.pushed-- // counted again where it lands
		}
		name, cur, from, i = holder, hp, hp.probe, hp.probe
	}
}

// placeAll places every host from scratch, in priority order, and rebuilds
// the passed index.
func (p *Pool) placeAll() {
	order := make([]string, 0, len(p.hosts))
	for h := range p.hosts {
		order = append(order, h)
	}
	slices.SortFunc(order, func(a, b string) int {
		pa, pb := p.hosts[a].prio, p.hosts[b].prio
		switch {
		case before(a, pa, b, pb):
			return -1
		case before(b, pb, a, pa):
			return 1
		}
		return 0
	})
	clear(p.taken)
	p.pushed = 0
	p.passed, p.passedLen, p.overflow = map[uint64][]string{}, 0, false
	for _, h := range order {
		pl := p.hosts[h]
		pl.probe = -1
		if uint64(len(p.taken)) < p.size {
			for i := 0; uint64(i) < p.size+randomProbes; i++ {
				slot := p.slotAt(h, i)
				if _, held := p.taken[slot]; !held {
					pl.probe, pl.slot = i, slot
					p.taken[slot] = h
					p.pass(h, 0, i)
					break
				}
			}
		}
		if pl.probe != 0 {
			p.pushed++
		}
		if pl.probe < 0 {
			p.dropIndex()
		}
	}
}

// maxPassed bounds the passed index: a few entries per host in a range
// large enough for collisions to be rare.
func (p *Pool) maxPassed() int { return 4*len(p.hosts) + 4096 }

// pass records that host passed over the slots of probes [from, to).
func (p *Pool) pass(host string, from, to int) {
	if p.overflow {
		return
	}
	if p.passedLen+to-from > p.maxPassed() {
		p.dropIndex()
		return
	}
	for i := from; i < to; i++ {
		slot := p.slotAt(host, i)
		p.passed[slot] = append(p.passed[slot], host)
	}
	p.passedLen += max(to-from, 0)
}

// unpass undoes pass(host, from, to).
func (p *Pool) unpass(host string, from, to int) {
	if p.overflow {
		return
	}
	for i := from; i < to; i++ {
		slot := p.slotAt(host, i)
		list := p.passed[slot]
		if j := slices.Index(list, host); j >= 0 {
			list = slices.Delete(list, j, j+1)
			p.passedLen--
		}
		if len(list) == 0 {
			delete(p.passed, slot)
		} else {
			p.passed[slot] = list
		}
	}
}

func (p *Pool) dropIndex() {
	p.passed, p.passedLen, p.overflow = nil, 0, true
}
