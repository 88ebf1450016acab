package pipeline

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/model"
)

// autoallocateLabel is istiod's own opt-out from address allocation
// (label.NetworkingEnableAutoallocateIp): a service the registry labels
// "false" is served without an allocated address, as istiod would treat a
// Kubernetes ServiceEntry.
const autoallocateLabel = "networking.istio.io/enable-autoallocate-ip"

// addressHost is the host svc holds an allocated address for, or "" when it
// gets none: it is deleted (nil), the registry gave addresses (they win),
// its resolution is NONE (istiod forwards to the original destination and
// forbids addresses there, and its own allocator skips such entries too),
// it opted out with autoallocateLabel, or its first host is a wildcard,
// which no DNS answer or listener address can stand for.
//
// The address is keyed by the service's first host as served (sanitised,
// in sorted order): every service with that host shares it, and it stays
// while the host does, whatever else of the service changes.
func addressHost(svc *model.Service) string {
	if svc == nil || len(svc.Addresses) > 0 || svc.Resolution == model.ResolutionNone ||
		strings.EqualFold(svc.Labels[autoallocateLabel], "false") {
		return ""
	}
	first := ""
	for _, h := range svc.Hosts {
		if s := model.HostName(h); s != "" && (first == "" || s < first) {
			first = s
		}
	}
	if strings.HasPrefix(first, "*") {
		return ""
	}
	return first
}

// maxMovedLogged bounds the log lines one flush writes for moved addresses;
// the counter has them all.
const maxMovedLogged = 10

// allocate brings the allocator up to date with the services of a flush
// (nil: deleted) and adds to work the served services whose address moved
// because another host came or went, so that they are converted again. It
// runs on the Run goroutine.
func (p *Pipeline) allocate(work map[model.ServiceKey]*model.Service) {
	var add, remove []string
	var reserve, release []netip.Addr
	for key, svc := range work {
		reserve, release = p.reserveGiven(key, svc, reserve, release)
		was, now := p.addressed[key], addressHost(svc)
		if was == now {
			continue
		}
		if was != "" {
			delete(p.addressed, key)
			if p.users.drop(was) {
				remove = append(remove, was)
			}
		}
		if now != "" {
			p.addressed[key] = now
			if p.users.add(now) {
				add = append(add, now)
			}
		}
	}
	if len(add) == 0 && len(remove) == 0 && len(reserve) == 0 && len(release) == 0 {
		return
	}
	moved := p.cfg.VIPs.UpdateReserved(add, remove, reserve, release)
	p.metrics.addressesMoved.Add(float64(len(moved)))
	for i, host := range moved {
		if i < maxMovedLogged {
			p.log.Warn("allocated address moved: a new or removed host took or freed its place; istiod does a full push for it",
				"host", host, "addresses", strings.Join(p.cfg.VIPs.Addrs(host), ","))
		}
	}
	if len(moved) > 0 {
		// Rare (docs/vips.md): a scan of every service beats an index kept for it.
		isMoved := make(map[string]bool, len(moved))
		for _, h := range moved {
			isMoved[h] = true
		}
		for key, host := range p.addressed {
			if _, ok := work[key]; ok || !isMoved[host] {
				continue
			}
			if served := p.served[key]; served != nil {
				work[key] = served.model
			}
		}
	}
	if len(moved) > maxMovedLogged {
		p.log.Warn("more allocated addresses moved", "not_logged", len(moved)-maxMovedLogged)
	}
	pools := p.cfg.VIPs.Pools()
	unplaced := 0
	for _, pool := range pools {
		unplaced = max(unplaced, pool.Unplaced())
	}
	p.metrics.addressedHosts.Set(float64(pools[0].Len() - pools[0].Unplaced()))
	if unplaced != p.unaddressed {
		p.unaddressed = unplaced
		p.metrics.unaddressedHosts.Set(float64(unplaced))
		if unplaced > 0 {
			p.log.Warn("address range full: hosts served without an allocated address (widen --vip-ranges)", "hosts", unplaced)
		}
	}
}

// givenAddresses are the single addresses a registry gave svc (its
// Addresses that are IPs, or CIDRs of one address), sorted and without
// repeats, which no host may be allocated; nil for a deleted service.
func givenAddresses(svc *model.Service) []netip.Addr {
	if svc == nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range svc.Addresses {
		if addr, err := netip.ParseAddr(a); err == nil {
			out = append(out, addr.Unmap())
		} else if pfx, err := netip.ParsePrefix(a); err == nil && pfx.IsSingleIP() {
			out = append(out, pfx.Addr().Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// reserveGiven brings the reservations of key's registry addresses up to
// date with svc and appends to reserve and release the addresses whose
// first user came or last user went.
func (p *Pipeline) reserveGiven(key model.ServiceKey, svc *model.Service, reserve, release []netip.Addr) ([]netip.Addr, []netip.Addr) {
	was, now := p.given[key], givenAddresses(svc)
	if len(was) == 0 && len(now) == 0 {
		return reserve, release
	}
	for _, addr := range now {
		if !slices.Contains(was, addr) && p.givenUsers.add(addr) {
			reserve = append(reserve, addr)
		}
	}
	for _, addr := range was {
		if !slices.Contains(now, addr) && p.givenUsers.drop(addr) {
			release = append(release, addr)
		}
	}
	if len(now) == 0 {
		delete(p.given, key)
	} else {
		p.given[key] = now
	}
	return reserve, release
}

// addressMetrics are the allocator's metrics.
type addressMetrics struct {
	addressedHosts   prometheus.Gauge
	unaddressedHosts prometheus.Gauge
	addressesMoved   prometheus.Counter
}

// refCounts counts the users of each key: a key comes in with its first
// user and goes with its last (a host of the allocator, a reserved
// address).
type refCounts[K comparable] map[K]int

// add counts a user of k and reports whether it is the first.
func (r refCounts[K]) add(k K) (first bool) {
	r[k]++
	return r[k] == 1
}

// drop uncounts a user of k and reports whether it was the last.
func (r refCounts[K]) drop(k K) (last bool) {
	if r[k]--; r[k] > 0 {
		return false
	}
	delete(r, k)
	return true
}

func newAddressMetrics() addressMetrics {
	return addressMetrics{
		addressedHosts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_allocated_addresses",
			Help: "Hosts served with an address Galleon allocated (--vip-ranges), because the registry gave none.",
		}),
		unaddressedHosts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_allocated_addresses_missing",
			Help: "Hosts that need an allocated address and got none because --vip-ranges is full: their TCP ports share the sidecar's 0.0.0.0 listener and DNS capture cannot answer them.",
		}),
		addressesMoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "galleon_allocated_addresses_moved_total",
			Help: "Allocated addresses that changed while their host stayed (another host came or went on the same address; docs/vips.md): each costs istiod a full push.",
		}),
	}
}
