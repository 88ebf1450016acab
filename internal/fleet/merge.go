// Package fleet is the core's stage for a process that serves several
// registries: the merge of what they report into one set of services in
// which no host is served twice, and the registry list that says which
// registries run.
//
// Each registry of a fleet reports to an intake (a pipeline in forward
// mode: its own coalescing, emptiness rule, status and metrics) which hands
// its changes to the Merger. The Merger groups every registry's services by
// host, decides per host what is served (HostRule, or the default for an
// unplanned collision), and reports the outcome to the pipeline that
// converts and serves it, as one registry's Sink would.
package fleet

import (
	"cmp"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// Output is what the Merger reports to: the serving pipeline's Sink
// methods for services.
type Output interface {
	Replace(services []model.Service)
	Update(service model.Service)
	Delete(key model.ServiceKey)
}

// MergerConfig sets up a Merger.
type MergerConfig struct {
	// Registries are the names of the registries, in the order of the
	// registry list: the order that decides an unplanned collision.
	Registries []string
	Rules      []HostRule
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Collision is a host that more than one registry service has, and what is
// served for it.
type Collision struct {
	Host string `json:"host"`
	// Services are the colliding services, "<registry>:<namespace>/<name>",
	// in the order of the registry list (the first maxCollisionServices);
	// Count is how many there are.
	Services []string `json:"services"`
	Count    int      `json:"count"`
	// Rule is the action of the rule that applies, "" when none does.
	Rule    Action `json:"rule,omitempty"`
	Outcome string `json:"outcome"`
	// Served are the registries whose instances are served.
	Served []string `json:"served"`
	// Detail says why, for conflicts.
	Detail string `json:"detail,omitempty"`
}

// maxCollisionServices bounds the services a Collision names: a registry
// can give every service one host.
const maxCollisionServices = 10

// Merger merges the services of several registries by host. Its methods
// are safe for concurrent use.
type Merger struct {
	out     Output
	log     *slog.Logger
	metrics *mergeMetrics

	mu    sync.Mutex
	rules []HostRule
	// order is each registry's place in the list.
	order map[string]int
	lanes map[string]*lane
	// groups are the registry services by host (sanitised, lower case).
	groups map[string][]member
	// claims are, by the key of its first member, the hosts whose
	// output would be served under that key: the first of them by the
	// list's order keeps it, the others are served as "<name>-<registry>".
	claims map[model.ServiceKey]map[string]bool
	// served is what was reported to out, by host.
	served  map[string]servedHost
	started bool
	// collisions are the hosts with more than one member now.
	collisions map[string]*Collision
	// extras are the further hosts (after the first) of what each host
	// would serve, sanitised; extraClaims the hosts whose output lists
	// each further host; extraCollisions the further hosts that more than
	// one service lists, or that are another group's first host
	// (further.go).
	extras          map[string][]string
	extraClaims     map[string]map[string]bool
	extraCollisions map[string]*Collision
	// annotations are the shared annotation maps of stamp, one per
	// registry (a merged host's is its own).
	annotations map[string]map[string]string
	logs        logLimit
}

// lane is what one registry has reported.
type lane struct {
	services map[model.ServiceKey]*model.Service
	synced   bool
}

// member is one registry service of a host's group.
type member struct {
	registry string
	key      model.ServiceKey
	svc      *model.Service
}

type servedHost struct {
	key model.ServiceKey
	svc *model.Service
}

// NewMerger returns a Merger that reports to out. Nothing is reported
// before every registry of cfg.Registries has been listed once (or Start
// is called); then the whole merged state is reported with Replace, and
// every change after that with Update and Delete.
func NewMerger(out Output, cfg MergerConfig) *Merger {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Merger{
		out: out, log: log, metrics: newMergeMetrics(cfg.Registerer),
		rules: slices.Clone(cfg.Rules), order: map[string]int{}, lanes: map[string]*lane{},
		groups: map[string][]member{}, claims: map[model.ServiceKey]map[string]bool{},
		served: map[string]servedHost{}, collisions: map[string]*Collision{},
		extras: map[string][]string{}, extraClaims: map[string]map[string]bool{}, extraCollisions: map[string]*Collision{},
		annotations: map[string]map[string]string{},
		logs:        logLimit{burst: collisionLogBurst, window: time.Minute},
	}
	for i, name := range cfg.Registries {
		m.order[name] = i
		m.lanes[name] = &lane{services: map[model.ServiceKey]*model.Service{}}
	}
	return m
}

// Forward returns the function an intake pipeline of registry calls with
// its changes (pipeline.Config.Forward).
func (m *Merger) Forward(registry string) func(changes map[model.ServiceKey]*model.Service, synced bool, reported time.Time) {
	return func(changes map[model.ServiceKey]*model.Service, synced bool, reported time.Time) {
		m.ApplyReported(registry, changes, synced, reported)
	}
}

// Apply records registry's changes (nil: removed) and reports what they
// change in the merged state. synced says the registry has been listed
// once. A registry the Merger does not know (removed from the list) is
// ignored.
func (m *Merger) Apply(registry string, changes map[model.ServiceKey]*model.Service, synced bool) {
	m.ApplyReported(registry, changes, synced, time.Time{})
}

// backdater is an Output that measures from when a change was first
// reported (pipeline.Pipeline.Backdate).
type backdater interface{ Backdate(t time.Time) }

// ApplyReported is Apply for changes the registry first reported at
// reported: an Output that measures change -> every sink ACKed measures
// what it is told from then (a backdater).
func (m *Merger) ApplyReported(registry string, changes map[model.ServiceKey]*model.Service, synced bool, reported time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.out.(backdater); ok && m.started {
		defer b.Backdate(reported)
	}
	l := m.lanes[registry]
	if l == nil {
		return
	}
	dirty := map[string]bool{}
	for key, svc := range changes {
		if old := l.services[key]; old != nil {
			m.leave(member{registry, key, old}, dirty)
		}
		if svc == nil {
			delete(l.services, key)
			continue
		}
		l.services[key] = svc
		m.join(member{registry, key, svc}, dirty)
	}
	l.synced = l.synced || synced
	m.report(dirty)
}

// Start reports the merged state although some registries have not been
// listed yet (the fleet waited long enough for them); what they hold is
// reported as it comes.
func (m *Merger) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		m.start()
	}
}

// Unsynced returns the registries not listed yet, in the list's order.
func (m *Merger) Unsynced() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for name, l := range m.lanes {
		if !l.synced {
			out = append(out, name)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Compare(m.order[a], m.order[b]) })
	return out
}

// Started reports whether the merged state has been reported.
func (m *Merger) Started() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.started
}

// SetRegistries changes the registry list: a registry new to it waits for
// its first listing (the others keep being served), one no longer in it
// has its services taken out at once (the caller waits the removal delay
// before), and the order of the list is the order of unplanned collisions
// from then on.
func (m *Merger) SetRegistries(names []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dirty := map[string]bool{}
	keep := map[string]bool{}
	for _, name := range names {
		keep[name] = true
	}
	for name, l := range m.lanes {
		if keep[name] {
			continue
		}
		for key, svc := range l.services {
			m.leave(member{name, key, svc}, dirty)
		}
		delete(m.lanes, name)
	}
	// A new order can change the first member of any group: judge every
	// host again (a list edit is rare; a host's outcome only changes when
	// its members' order does).
	reordered := false
	for i, name := range names {
		if at, known := m.order[name]; known && at != i {
			reordered = true
		}
		m.order[name] = i
		if m.lanes[name] == nil {
			m.lanes[name] = &lane{services: map[model.ServiceKey]*model.Service{}}
		}
	}
	for name := range m.order {
		if !keep[name] {
			delete(m.order, name)
			delete(m.annotations, name)
		}
	}
	if reordered {
		for host, members := range m.groups {
			m.groups[host] = m.sorted(members)
			dirty[host] = true
		}
		m.reclaim()
	}
	m.report(dirty)
}

// SetRules replaces the host rules; every host that collides is judged
// again.
func (m *Merger) SetRules(rules []HostRule) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rules = slices.Clone(rules)
	dirty := map[string]bool{}
	for host, members := range m.groups {
		if len(members) > 1 {
			dirty[host] = true
		}
	}
	m.report(dirty)
}

// Collisions returns the first n collisions by host, and how many there
// are.
func (m *Merger) Collisions(n int) ([]Collision, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := make([]*Collision, 0, len(m.collisions)+len(m.extraCollisions))
	for _, c := range m.collisions {
		all = append(all, c)
	}
	for _, c := range m.extraCollisions {
		all = append(all, c)
	}
	slices.SortFunc(all, func(a, b *Collision) int {
		return cmp.Or(strings.Compare(a.Host, b.Host), strings.Compare(a.Detail, b.Detail))
	})
	out := make([]Collision, 0, min(n, len(all)))
	for _, c := range all[:min(n, len(all))] {
		out = append(out, *c)
	}
	return out, len(all)
}

// hostOf is the host a service is grouped by: its first host, sanitised
// as it will be served. A service without a valid host is a group of its
// own (the pipeline rejects it).
func hostOf(registry string, key model.ServiceKey, svc *model.Service) string {
	if len(svc.Hosts) > 0 {
		if h := model.HostName(svc.Hosts[0]); h != "" {
			return h
		}
	}
	return "\x00" + registry + "\x00" + key.String()
}

// join adds mb to its host's group.
func (m *Merger) join(mb member, dirty map[string]bool) {
	host := hostOf(mb.registry, mb.key, mb.svc)
	before := m.groups[host]
	m.groups[host] = m.sorted(append(slices.Clone(before), mb))
	dirty[host] = true
	m.claimChanged(host, before, dirty)
	if len(before) == 0 {
		m.primaryChanged(host, dirty)
	}
}

// leave takes mb out of its host's group.
func (m *Merger) leave(mb member, dirty map[string]bool) {
	host := hostOf(mb.registry, mb.key, mb.svc)
	before := m.groups[host]
	after := slices.DeleteFunc(slices.Clone(before), func(x member) bool { return x.registry == mb.registry && x.key == mb.key })
	if len(after) == 0 {
		delete(m.groups, host)
		m.primaryChanged(host, dirty)
	} else {
		m.groups[host] = after
	}
	dirty[host] = true
	m.claimChanged(host, before, dirty)
}

// sorted orders a group's members by the list, then by key.
func (m *Merger) sorted(members []member) []member {
	slices.SortFunc(members, func(a, b member) int {
		if c := cmp.Compare(m.order[a.registry], m.order[b.registry]); c != 0 {
			return c
		}
		return strings.Compare(a.key.String(), b.key.String())
	})
	return members
}

// claimChanged moves host's claim on an output key when its first member
// changed from before, marking the hosts that share either key dirty.
func (m *Merger) claimChanged(host string, before []member, dirty map[string]bool) {
	after := m.groups[host]
	var was, now *member
	if len(before) > 0 {
		was = &before[0]
	}
	if len(after) > 0 {
		now = &after[0]
	}
	if was != nil && now != nil && was.key == now.key && was.registry == now.registry {
		return
	}
	if was != nil {
		m.unclaim(was.key, host, dirty)
	}
	if now != nil {
		m.claim(now.key, host, dirty)
	}
}

func (m *Merger) claim(key model.ServiceKey, host string, dirty map[string]bool) {
	hosts := m.claims[key]
	if hosts == nil {
		hosts = map[string]bool{}
		m.claims[key] = hosts
	}
	hosts[host] = true
	for h := range hosts {
		dirty[h] = true
	}
}

func (m *Merger) unclaim(key model.ServiceKey, host string, dirty map[string]bool) {
	hosts := m.claims[key]
	delete(hosts, host)
	if len(hosts) == 0 {
		delete(m.claims, key)
	}
	for h := range hosts {
		dirty[h] = true
	}
}

// reclaim rebuilds every claim after the groups were sorted in a new
// order.
func (m *Merger) reclaim() {
	clear(m.claims)
	for host, members := range m.groups {
		hosts := m.claims[members[0].key]
		if hosts == nil {
			hosts = map[string]bool{}
			m.claims[members[0].key] = hosts
		}
		hosts[host] = true
	}
}

// outputKey is the key host is served under: its first member's, unless
// a host first by the list's order claims that key too.
func (m *Merger) outputKey(host string) model.ServiceKey {
	first := m.groups[host][0]
	for other := range m.claims[first.key] {
		if other == host {
			continue
		}
		o := m.groups[other][0]
		if c := cmp.Compare(m.order[o.registry], m.order[first.registry]); c < 0 || c == 0 && other < host {
			return model.ServiceKey{Namespace: first.key.Namespace, Name: first.key.Name + "-" + first.registry}
		}
	}
	return first.key
}

// start reports the whole merged state once.
func (m *Merger) start() {
	m.started = true
	all := make([]model.Service, 0, len(m.groups))
	dirty := make(map[string]bool, len(m.groups))
	for host := range m.groups {
		dirty[host] = true
	}
	for host, out := range m.judge(dirty) {
		if out.svc == nil {
			continue
		}
		m.served[host] = out
		all = append(all, *out.svc)
	}
	m.metrics.hosts.Set(float64(len(m.served)))
	m.out.Replace(all)
	m.log.Info("every registry's services merged and handed on", "hosts", len(all), "collisions", len(m.collisions)+len(m.extraCollisions))
}

// judge decides what is served for the dirty hosts, and for the hosts whose further hosts the
// decisions take or give back (served: nil svc for none).
func (m *Merger) judge(dirty map[string]bool) map[string]servedHost {
	raw := make(map[string]servedHost, len(dirty))
	for pending := dirty; len(pending) > 0; {
		next := map[string]bool{}
		for host := range pending {
			if _, done := raw[host]; done {
				continue
			}
			key, svc := m.resolve(host)
			raw[host] = servedHost{key, svc}
			m.claimExtras(host, svc, next)
		}
		pending = next
	}
	out := make(map[string]servedHost, len(raw))
	for host, r := range raw {
		if r.svc != nil {
			r.svc = m.ownHosts(host, r.svc)
		}
		out[host] = r
	}
	return out
}

// report judges the dirty hosts again and reports what changed; before
// the start it only waits for every registry's first listing.
func (m *Merger) report(dirty map[string]bool) {
	if !m.started {
		for host := range dirty {
			m.note(host)
		}
		for _, l := range m.lanes {
			if !l.synced {
				return
			}
		}
		m.start()
		return
	}
	updates := map[model.ServiceKey]*model.Service{}
	var deletes []model.ServiceKey
	for host, now := range m.judge(dirty) {
		key, svc := now.key, now.svc
		old, had := m.served[host]
		if had && (svc == nil || old.key != key) {
			deletes = append(deletes, old.key)
		}
		switch {
		case svc == nil:
			delete(m.served, host)
		case had && old.key == key && reflect.DeepEqual(old.svc, svc):
		default:
			m.served[host] = servedHost{key, svc}
			updates[key] = svc
		}
	}
	// A key one host leaves may be the key another takes in the same
	// batch: the update wins.
	for _, key := range deletes {
		if updates[key] == nil {
			m.out.Delete(key)
		}
	}
	for _, svc := range updates {
		m.out.Update(*svc)
	}
	m.metrics.hosts.Set(float64(len(m.served)))
}

// note refreshes host's collision record without resolving what is
// served (before the start).
func (m *Merger) note(host string) {
	if len(m.groups[host]) > 1 {
		m.resolve(host)
	} else {
		m.setCollision(host, nil)
	}
}

// resolve decides what is served for host and records its collision, if
// any. nil: nothing is.
func (m *Merger) resolve(host string) (model.ServiceKey, *model.Service) {
	members := m.groups[host]
	if len(members) == 0 {
		m.setCollision(host, nil)
		return model.ServiceKey{}, nil
	}
	key := m.outputKey(host)
	if len(members) == 1 {
		m.setCollision(host, nil)
		return key, m.stamp(key, members[0].svc, members[0].svc.Instances, members[0].registry)
	}
	c := &Collision{Host: host, Count: len(members)}
	for _, mb := range members[:min(len(members), maxCollisionServices)] {
		c.Services = append(c.Services, registry.Cut(mb.registry+":"+mb.key.String(), registry.MaxRecordLen))
	}
	rule := ruleFor(m.rules, host)
	if rule != nil {
		c.Rule = rule.Action
	}
	var svc *model.Service
	switch {
	case rule != nil && rule.Action == Reject:
		c.Outcome = OutcomeRejected
	case rule != nil && rule.Action == Merge:
		svc = m.merge(key, members, c)
	case rule != nil && rule.Action == Prefer:
		winner := m.preferred(rule.Prefer, members)
		c.Outcome, c.Served = OutcomePreferred, []string{winner.registry}
		svc = m.stamp(key, winner.svc, winner.svc.Instances, winner.registry)
	default:
		c.Outcome, c.Served = OutcomeUnplanned, []string{members[0].registry}
		svc = m.stamp(key, members[0].svc, members[0].svc.Instances, members[0].registry)
	}
	m.setCollision(host, c)
	return key, svc
}

// merge serves the union of members' instances under key, or, when their
// ports disagree, what an unplanned collision serves.
func (m *Merger) merge(key model.ServiceKey, members []member, c *Collision) *model.Service {
	first := members[0]
	for _, mb := range members[1:] {
		if !samePorts(first.svc.Ports, mb.svc.Ports) {
			c.Outcome, c.Served = OutcomeConflict, []string{first.registry}
			c.Detail = "ports differ: " + first.registry + " has " + portList(first.svc.Ports) + ", " + mb.registry + " has " + portList(mb.svc.Ports) + "; served from " + first.registry + " alone"
			return m.stamp(key, first.svc, first.svc.Instances, first.registry)
		}
	}
	var instances []model.Instance
	ids := map[string]bool{}
	var registries []string
	for _, mb := range members {
		if !slices.Contains(registries, mb.registry) {
			registries = append(registries, mb.registry)
		}
		for _, inst := range mb.svc.Instances {
			if ids[inst.ID] {
				// Instance IDs are unique within one service; two
				// registries may use the same.
				inst.ID = mb.registry + "/" + inst.ID
			}
			ids[inst.ID] = true
			instances = append(instances, inst)
		}
	}
	c.Outcome, c.Served = OutcomeMerged, registries
	return m.stamp(key, first.svc, instances, strings.Join(registries, ","))
}

// preferred returns the member of the first registry in prefer, then in
// the list's order, that has an instance; the first of that order when
// none has.
func (m *Merger) preferred(prefer []string, members []member) member {
	ordered := make([]member, 0, len(members))
	for _, name := range prefer {
		for _, mb := range members {
			if mb.registry == name {
				ordered = append(ordered, mb)
			}
		}
	}
	for _, mb := range members {
		if !slices.Contains(prefer, mb.registry) {
			ordered = append(ordered, mb)
		}
	}
	for _, mb := range ordered {
		if len(mb.svc.Instances) > 0 {
			return mb
		}
	}
	return ordered[0]
}

// stamp returns svc served under key with instances, its
// galleon.io/registry annotation naming registries. svc is not modified.
// A service of one registry without annotations of its own, most of them,
// shares one map per registry: what is handed on is never modified (the
// Sink contract).
func (m *Merger) stamp(key model.ServiceKey, svc *model.Service, instances []model.Instance, registries string) *model.Service {
	out := *svc
	out.Namespace, out.Name = key.Namespace, key.Name
	out.Instances = instances
	if len(svc.Annotations) == 0 && !strings.Contains(registries, ",") {
		shared := m.annotations[registries]
		if shared == nil {
			shared = map[string]string{convert.AnnotationRegistry: registries}
			m.annotations[registries] = shared
		}
		out.Annotations = shared
		return &out
	}
	out.Annotations = make(map[string]string, len(svc.Annotations)+1)
	maps.Copy(out.Annotations, svc.Annotations)
	out.Annotations[convert.AnnotationRegistry] = registries
	return &out
}

// samePorts reports whether a and b have the same port numbers with the
// same protocols (names may differ).
func samePorts(a, b []model.Port) bool {
	ca := model.Canonical(model.Service{Ports: a}).Ports
	cb := model.Canonical(model.Service{Ports: b}).Ports
	return slices.EqualFunc(ca, cb, func(x, y model.Port) bool { return x.Number == y.Number && x.Protocol == y.Protocol })
}

// portList writes ports as "[80/HTTP 9090/GRPC]".
func portList(ports []model.Port) string {
	var parts []string
	for _, p := range model.Canonical(model.Service{Ports: ports}).Ports {
		parts = append(parts, strconv.FormatUint(uint64(p.Number), 10)+"/"+string(p.Protocol))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// setCollision records host's collision (nil: none), logging and metering
// each change of its outcome.
func (m *Merger) setCollision(host string, c *Collision) {
	m.record(m.collisions, host, c)
}

// record sets host's collision in records (nil: none), logging and
// metering each change of its outcome.
func (m *Merger) record(records map[string]*Collision, host string, c *Collision) {
	old := records[host]
	if c == nil {
		if old != nil {
			delete(records, host)
			m.metrics.collisions.WithLabelValues(old.Outcome).Dec()
			m.logs.log(m.log, slog.LevelInfo, "host collision ended: one registry service has the host", "host", registry.Cut(host, registry.MaxRecordLen))
		}
		return
	}
	records[host] = c
	if old != nil && old.Outcome == c.Outcome && slices.Equal(old.Services, c.Services) && slices.Equal(old.Served, c.Served) {
		return
	}
	if old != nil {
		m.metrics.collisions.WithLabelValues(old.Outcome).Dec()
	}
	m.metrics.collisions.WithLabelValues(c.Outcome).Inc()
	level, msg := slog.LevelInfo, "host collision resolved by its rule"
	switch c.Outcome {
	case OutcomeUnplanned:
		level, msg = slog.LevelWarn, "host collision no rule names: serving the registry listed first (add a hosts rule: merge, prefer or reject)"
	case OutcomeConflict:
		level, msg = slog.LevelWarn, "host collision the merge rule cannot merge: serving the registry listed first"
	case OutcomeRejected:
		level, msg = slog.LevelWarn, "host collision rejected by its rule: the host is not served"
	}
	m.logs.log(m.log, level, msg, "host", registry.Cut(host, registry.MaxRecordLen), "outcome", c.Outcome,
		"services", c.Services, "count", c.Count, "served", c.Served, "detail", c.Detail)
}
