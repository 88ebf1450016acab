package wire

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// DeltaResult is what ApplyDelta did.
type DeltaResult struct {
	// Hashcode is the new registry's apps__hashcode by Eureka's rule (Hashcode).
	Hashcode string
	// Reconciled says whether Hashcode equals the delta's apps__hashcode, the server's count of
	// its whole registry. When it does not, the local copy has drifted (a delta missed, the
	// server's delta window outlived, a skipped entry that could not be applied) and only a
	// full fetch repairs it: Netflix's DiscoveryClient.getAndUpdateDelta then calls
	// reconcileAndLogDifference.
	Reconciled bool
	// Changed names the applications whose servable instances differ between the old registry
	// and the new (as listed; sorted). A Eureka server lists every change of its delta window
	// (Netflix 3 min, Polaris 60 s) in every delta, so most entries of a delta replay what the
	// registry already holds: only content decides what changed.
	Changed []string
	// Added, Modified and Deleted count the delta's entries applied, by action.
	Added, Modified, Deleted int
	// Skipped are the delta's ADDED and MODIFIED entries that cannot be served: applied (the
	// instance is no longer served, and still counted), and worth a log line each.
	Skipped []Skipped
	// Unapplied are the delta's entries that could not be applied: an actionType that is none
	// of ADDED, MODIFIED, DELETED (reason action), or no application or id to apply it to.
	// Any of them means the registry is probably not reconciled.
	Unapplied []Skipped
}

// ApplyDelta applies a delta (a decoded /apps/delta listing) to a registry and returns the new
// registry; cur and delta are not changed, and unchanged applications are shared between cur
// and the result. This is Netflix's DiscoveryClient.updateDelta: entries ADDED and MODIFIED put
// the instance in place of the one with the same application and id (or add it), DELETED
// removes it, and an application left without instances goes. Two differences: an ADDED entry
// for an application the registry does not hold adds that instance, where Netflix's client adds
// the delta's whole application object, so that a DELETED entry listed before the ADDED one
// stays in it (a bug only the hashcode check then repairs); and an entry that cannot be served
// still replaces (or removes) the instance it names, so that a registry never keeps serving
// what the server no longer lists as it was.
//
// The new registry takes the delta's VersionsDelta and AppsHashcode; Reconciled compares that
// with the result's Hashcode.
func ApplyDelta(cur, delta *Applications) (*Applications, DeltaResult) {
	if cur == nil {
		cur = &Applications{VersionsDelta: -1}
	}
	if delta == nil {
		delta = &Applications{VersionsDelta: cur.VersionsDelta, AppsHashcode: cur.AppsHashcode}
	}
	d := newDeltaApply(cur)
	d.applyInstances(delta.Apps)
	d.applySkipped(delta.Skipped)
	next := d.result(delta)
	d.res.Hashcode = Hashcode(next)
	d.res.Reconciled = d.res.Hashcode == delta.AppsHashcode
	return next, d.res
}

// deltaApply is one ApplyDelta under way: the applications edited so far and the skipped
// instances the result will hold.
type deltaApply struct {
	cur      *Applications
	curIndex map[string]int // upper-case name -> index in cur.Apps
	edits    map[string]*appEdit
	order    []string // edited applications not in cur, in the delta's order
	skipped  map[instanceKey]Skipped
	unkeyed  []Skipped // skipped instances with no application or id: kept as they are
	res      DeltaResult
}

func newDeltaApply(cur *Applications) *deltaApply {
	d := &deltaApply{cur: cur, curIndex: make(map[string]int, len(cur.Apps)), edits: map[string]*appEdit{}, skipped: map[instanceKey]Skipped{}}
	for i, a := range cur.Apps {
		d.curIndex[strings.ToUpper(a.Name)] = i
	}
	for _, s := range cur.Skipped {
		if s.keyed() {
			d.skipped[keyOf(s.App, s.InstanceID)] = s
		} else {
			d.unkeyed = append(d.unkeyed, s)
		}
	}
	return d
}

// edit is the edit of application app, begun on first use from cur's copy.
func (d *deltaApply) edit(app string) *appEdit {
	k := strings.ToUpper(app)
	if e, ok := d.edits[k]; ok {
		return e
	}
	e := &appEdit{name: app, byID: map[string]int{}}
	if i, ok := d.curIndex[k]; ok {
		e.name, e.old = d.cur.Apps[i].Name, d.cur.Apps[i].Instances
		e.list = slices.Clone(e.old)
		for j, in := range e.list {
			e.byID[in.InstanceID] = j
		}
	} else {
		d.order = append(d.order, k)
	}
	d.edits[k] = e
	return e
}

// applyInstances applies the delta's servable entries.
func (d *deltaApply) applyInstances(apps []Application) {
	for _, app := range apps {
		for _, in := range app.Instances {
			k := keyOf(in.App, in.InstanceID)
			switch in.ActionType {
			case ActionAdded, ActionModified:
				d.edit(in.App).put(in)
				delete(d.skipped, k)
				d.res.count(in.ActionType)
			case ActionDeleted:
				d.edit(in.App).remove(in.InstanceID)
				delete(d.skipped, k)
				d.res.Deleted++
			default:
				d.res.Unapplied = append(d.res.Unapplied, unknownAction(in.App, in.InstanceID, in.Status, in.ActionType))
			}
		}
	}
}

// applySkipped applies the delta's entries that cannot be served: each still replaces or
// removes the instance it names.
func (d *deltaApply) applySkipped(skipped []Skipped) {
	for _, s := range skipped {
		switch {
		case !s.keyed():
			d.res.Unapplied = append(d.res.Unapplied, s)
		case s.ActionType == ActionAdded || s.ActionType == ActionModified:
			d.edit(s.App).remove(s.InstanceID)
			d.skipped[keyOf(s.App, s.InstanceID)] = s
			d.res.Skipped = append(d.res.Skipped, s)
			d.res.count(s.ActionType)
		case s.ActionType == ActionDeleted:
			d.edit(s.App).remove(s.InstanceID)
			delete(d.skipped, keyOf(s.App, s.InstanceID))
			d.res.Deleted++
		default:
			d.res.Unapplied = append(d.res.Unapplied, unknownAction(s.App, s.InstanceID, s.Status, s.ActionType))
		}
	}
}

// result builds the new registry (cur's applications in their order, then the new ones in the
// delta's, skipped instances sorted) and names the changed applications.
func (d *deltaApply) result(delta *Applications) *Applications {
	next := &Applications{VersionsDelta: delta.VersionsDelta, AppsHashcode: delta.AppsHashcode}
	next.Apps = make([]Application, 0, len(d.cur.Apps)+len(d.order))
	for _, a := range d.cur.Apps {
		e, ok := d.edits[strings.ToUpper(a.Name)]
		if !ok {
			next.Apps = append(next.Apps, a)
			continue
		}
		if len(e.list) > 0 {
			next.Apps = append(next.Apps, Application{Name: e.name, Instances: e.list})
		}
	}
	for _, k := range d.order {
		if e := d.edits[k]; len(e.list) > 0 {
			next.Apps = append(next.Apps, Application{Name: e.name, Instances: e.list})
		}
	}
	for _, e := range d.edits {
		if !sameInstances(e.old, e.list) {
			d.res.Changed = append(d.res.Changed, e.name)
		}
	}
	slices.Sort(d.res.Changed)

	next.Skipped = d.unkeyed
	keys := make([]instanceKey, 0, len(d.skipped))
	for k := range d.skipped {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b instanceKey) int { return cmp.Or(cmp.Compare(a.app, b.app), cmp.Compare(a.id, b.id)) })
	for _, k := range keys {
		next.Skipped = append(next.Skipped, d.skipped[k])
	}
	return next
}

func (r *DeltaResult) count(action string) {
	if action == ActionAdded {
		r.Added++
	} else {
		r.Modified++
	}
}

func unknownAction(app, id, status, action string) Skipped {
	return Skipped{App: app, InstanceID: id, Status: status, ActionType: action, Reason: ReasonAction,
		Err: bad(ReasonAction, fmt.Errorf("actionType %q is none of ADDED, MODIFIED, DELETED", action))}
}

// appEdit is one application being changed by a delta: a copy of its instances (old is the
// registry's, never written) and where each id is in the copy.
type appEdit struct {
	name string
	old  []Instance
	list []Instance
	byID map[string]int
}

func (e *appEdit) put(in Instance) {
	if i, ok := e.byID[in.InstanceID]; ok {
		e.list[i] = in
		return
	}
	e.byID[in.InstanceID] = len(e.list)
	e.list = append(e.list, in)
	if e.name == "" {
		e.name = in.App
	}
}

func (e *appEdit) remove(id string) {
	i, ok := e.byID[id]
	if !ok {
		return
	}
	e.list = slices.Delete(e.list, i, i+1)
	delete(e.byID, id)
	for j := i; j < len(e.list); j++ {
		e.byID[e.list[j].InstanceID] = j
	}
}

// sameInstances says whether two lists hold the same registrations (Instance.equal), in any
// order.
func sameInstances(a, b []Instance) bool {
	if len(a) != len(b) {
		return false
	}
	byID := make(map[string]*Instance, len(a))
	for i := range a {
		byID[a[i].InstanceID] = &a[i]
	}
	for i := range b {
		o, ok := byID[b[i].InstanceID]
		if !ok || !o.equal(&b[i]) {
			return false
		}
	}
	return true
}

// Diff names the applications whose servable instances differ between two registries (as
// listed, the newer's name when both list it; sorted): after a full fetch, what to report. An
// application neither lists, or that lists no servable instance, does not differ.
func Diff(old, new *Applications) []string {
	if old == nil {
		old = &Applications{}
	}
	if new == nil {
		new = &Applications{}
	}
	type pair struct {
		name     string
		old, new []Instance
	}
	byName := map[string]*pair{}
	for _, a := range old.Apps {
		byName[strings.ToUpper(a.Name)] = &pair{name: a.Name, old: a.Instances}
	}
	for _, a := range new.Apps {
		k := strings.ToUpper(a.Name)
		if p, ok := byName[k]; ok {
			p.name, p.new = a.Name, a.Instances
		} else {
			byName[k] = &pair{name: a.Name, new: a.Instances}
		}
	}
	var out []string
	for _, p := range byName {
		if !sameInstances(p.old, p.new) {
			out = append(out, p.name)
		}
	}
	slices.Sort(out)
	return out
}
