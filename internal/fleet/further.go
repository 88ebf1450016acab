package fleet

import (
	"cmp"
	"slices"
	"strings"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// Further hosts. Services are grouped by their first host; a service may list more (galleon-file's
// hosts, galleon-consul's per-datacenter hosts), and one of those may be another group's first
// host or a further host of another group too. No host may be served twice, so each further host
// is served by one group only: by the group whose first host it is, if any; else by the group
// that lists it and whose first member comes first in the list's order (then by first host). The
// others serve without it, and the collision is reported as unplanned.

// claimExtras records the further hosts of svc, what host would serve (nil: nothing), and marks
// dirty the other hosts that list one it takes or gives back.
func (m *Merger) claimExtras(host string, svc *model.Service, dirty map[string]bool) {
	var now []string
	if svc != nil {
		for _, h := range svc.Hosts[min(1, len(svc.Hosts)):] {
			if x := model.HostName(h); x != "" && x != host && !slices.Contains(now, x) {
				now = append(now, x)
			}
		}
	}
	was := m.extras[host]
	if slices.Equal(was, now) {
		return
	}
	for _, x := range was {
		if !slices.Contains(now, x) {
			claims := m.extraClaims[x]
			delete(claims, host)
			if len(claims) == 0 {
				delete(m.extraClaims, x)
				m.record(m.extraCollisions, x, nil)
			}
			markAll(claims, dirty)
		}
	}
	for _, x := range now {
		if !slices.Contains(was, x) {
			claims := m.extraClaims[x]
			if claims == nil {
				claims = map[string]bool{}
				m.extraClaims[x] = claims
			}
			claims[host] = true
			markAll(claims, dirty)
		}
	}
	if len(now) == 0 {
		delete(m.extras, host)
	} else {
		m.extras[host] = now
	}
}

func markAll(hosts map[string]bool, dirty map[string]bool) {
	for h := range hosts {
		dirty[h] = true
	}
}

// primaryChanged marks dirty the hosts that list host as a further host, when a group whose first
// host it is appears or goes.
func (m *Merger) primaryChanged(host string, dirty map[string]bool) {
	markAll(m.extraClaims[host], dirty)
}

// extraOwner is the host whose group serves further host x.
func (m *Merger) extraOwner(x string) string {
	if len(m.groups[x]) > 0 {
		return x
	}
	owner := ""
	for h := range m.extraClaims[x] {
		if owner == "" || m.before(h, owner) {
			owner = h
		}
	}
	return owner
}

// before orders two groups by their first member's place in the list, then by host.
func (m *Merger) before(a, b string) bool {
	ga, gb := m.groups[a], m.groups[b]
	if len(ga) == 0 || len(gb) == 0 {
		return len(ga) > 0
	}
	return cmp.Or(cmp.Compare(m.order[ga[0].registry], m.order[gb[0].registry]), strings.Compare(a, b)) < 0
}

// ownHosts returns svc, what host serves, without the further hosts another group serves, and
// records the collision of each further host more than one group lists.
func (m *Merger) ownHosts(host string, svc *model.Service) *model.Service {
	if len(svc.Hosts) < 2 {
		return svc
	}
	kept := svc.Hosts[:1:1]
	for _, h := range svc.Hosts[1:] {
		x := model.HostName(h)
		if x == "" || x == host {
			kept = append(kept, h)
			continue
		}
		owner := m.extraOwner(x)
		m.noteExtra(x, owner)
		if owner == host {
			kept = append(kept, h)
		}
	}
	if len(kept) == len(svc.Hosts) {
		return svc
	}
	out := *svc
	out.Hosts = kept
	return &out
}

// noteExtra records the collision on further host x, served by owner's group, if more than one
// group has it.
func (m *Merger) noteExtra(x, owner string) {
	claimants := slices.Sorted(func(yield func(string) bool) {
		for h := range m.extraClaims[x] {
			if h != owner && !yield(h) {
				return
			}
		}
	})
	if len(claimants) == 0 {
		m.record(m.extraCollisions, x, nil)
		return
	}
	c := &Collision{Host: x, Outcome: OutcomeUnplanned, Count: len(claimants) + 1,
		Detail: "a further host of a service whose first host is another: served by one ServiceEntry only, the rest serve without it"}
	for _, h := range append([]string{owner}, claimants...) {
		if g := m.groups[h]; len(g) > 0 && len(c.Services) < maxCollisionServices {
			c.Services = append(c.Services, registry.Cut(g[0].registry+":"+g[0].key.String(), registry.MaxRecordLen))
		}
	}
	if g := m.groups[owner]; len(g) > 0 {
		c.Served = []string{g[0].registry}
	}
	m.record(m.extraCollisions, x, c)
}
