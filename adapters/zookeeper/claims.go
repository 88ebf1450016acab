package zookeeper

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/galleon-mesh/galleon/model"
)

// Two services of one name. Every service the adapter serves is named by its layout's rules:
// a Curator service by its znode, a Dubbo 2 (interface, group, version) and a Dubbo 3 application
// by registry/dubbo's ServiceName. Within one layout names are unique (Dubbo's up to 40 bits of
// SHA-256), but two layouts may map a service to the same name: Curator's /services/orders,
// Dubbo 2's interface "orders" under /dubbo, Dubbo 3's application "orders" (in a root it shares
// with Curator, even under the same znode). One name is one ServiceEntry, so one of them is
// served and the others are rejected, by a rule that does not depend on the order things were
// read in: the service of the layout listed first in --zk-layout, then of the smallest service
// znode path. The others are each rejected as "<instances path> (<layout> service <name>)",
// reason duplicate, naming the one served, and the next in line is served when it goes.

// claimant is a service znode (sp) that maps to a name, by layout kind, with its rank.
type claimant struct {
	rank int
	sp   string
	kind layoutKind
}

func compareClaimants(a, b claimant) int {
	return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.sp, b.sp), cmp.Compare(a.kind, b.kind))
}

// claimantOf is the claimant of service znode sp read as kind.
func (w *watcher) claimantOf(sp string, kind layoutKind) claimant {
	return claimant{rank: w.r.rank[kind], sp: sp, kind: kind}
}

// claim serves svc (named sn) for c, unless a claimant ranked before c has the name.
func (w *watcher) claim(sn string, c claimant, svc model.Service) {
	list := w.claims[sn]
	i, found := slices.BinarySearchFunc(list, c, compareClaimants)
	if !found {
		list = slices.Insert(list, i, c)
		w.claims[sn] = list
	}
	if i == 0 {
		w.rec.Set(svc)
	}
	if len(list) > 1 {
		w.reportClaims(sn, list)
	}
}

// unclaim withdraws c's claim to sn: the name is removed when no other claims it, and the next
// in line is built again (and served) when c was served.
func (w *watcher) unclaim(sn string, c claimant) {
	list := w.claims[sn]
	i, found := slices.BinarySearchFunc(list, c, compareClaimants)
	if found {
		list = slices.Delete(list, i, i+1)
		if len(list) > 0 {
			w.accept(w.claimRecord(sn, c))
		}
	}
	switch {
	case len(list) == 0:
		delete(w.claims, sn)
		w.rec.Remove(model.ServiceKey{Namespace: w.r.cfg.Namespace, Name: sn})
	case found && i == 0:
		w.claims[sn] = list
		w.accept(w.claimRecord(sn, list[0]))
		w.touch(list[0].sp) // its build serves it
	default:
		w.claims[sn] = list
	}
}

// reportClaims rejects the claimants of sn not served, naming the one served.
func (w *watcher) reportClaims(sn string, list []claimant) {
	first := list[0]
	ft, fname := w.split(first.sp)
	w.accept(w.claimRecord(sn, first))
	for _, c := range list[1:] {
		w.reject(w.claimRecord(sn, c), bad(reasonDuplicate, fmt.Errorf(
			"service %s/%s is also mapped from %s (layout %s), which is served: of the services one name maps to, the one of the layout listed first in --%s is served, then the one of the smallest znode path; rename one of them",
			w.r.cfg.Namespace, sn, ft.ins(fname), first.kind, flagLayout)))
	}
	w.changed = true
}

// claimRecord is the record under which claimant c of sn is rejected while another is served.
func (w *watcher) claimRecord(sn string, c claimant) string {
	t, name := w.split(c.sp)
	return fmt.Sprintf("%s (%s service %s)", t.ins(name), c.kind, sn)
}
