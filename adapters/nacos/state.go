package nacos

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// services is what the watch holds of the registry: every Nacos service watched, what its last
// state maps to, and which service claims which model.ServiceKey. It tells the Reconciler what
// to serve; the watch's goroutine owns it.
//
// Two Nacos services can map to one ServiceKey (a host template that leaves out the group,
// names that sanitise alike). The first in (namespace, group, service) order is served; each
// other is rejected under its service record with reason "collision", never overwriting it;
// when the first goes (removed, emptied, refused), the next takes the key.
type services struct {
	rec     *registry.Reconciler
	mapper  *mapper
	log     *slog.Logger
	metrics *metrics
	// maxInstances bounds one service's instances (--nacos-max-instances).
	maxInstances int

	entries map[wire.Ref]*entry
	// owners are the refs claiming each key, sorted: owners[k][0] is served.
	owners map[model.ServiceKey][]wire.Ref
	// panicking counts entries in protect-threshold panic (the gauge).
	panicking int
	panicLog  rateLimit
	// seed keys the fingerprints of states (fingerprint); lostLog bounds the lines that tell
	// of a lost push.
	seed    maphash.Seed
	lostLog rateLimit
}

// entry is one watched Nacos service.
type entry struct {
	ref wire.Ref
	// lastRef is the lastRefTime of the state applied (0: none, or the server sends none): a
	// push older than it is stale.
	lastRef int64
	// answered: a state was applied since the session began (a reconnect resets it, so the
	// new server's first answer is taken whatever its time).
	answered bool
	// claim: its state maps to key, with svc to serve.
	claim bool
	key   model.ServiceKey
	svc   model.Service
	// instRej are its instance records rejected now.
	instRej []string
	// refused: its service record is rejected for its own fault (mapping, limit, an answer
	// that could not be read); collision: for another's claim on its key.
	refused, collision bool
	panic              bool
	// retry: watching it failed with an answer of the server; the next discovery tries again.
	retry bool
	// nextPoll is when the HTTP API's safety poll reads it again; nextRefresh when the gRPC
	// API's refresh does (watch.go, refresh).
	nextPoll, nextRefresh time.Time
	// fp is the fingerprint of the state applied last (0: none).
	fp uint64
	// unpushed is when a refresh found a state no push had brought (zero: none pending), and
	// unpushedFP that state's fingerprint: a push bringing it (or a newer one) within
	// pushGrace was only late; none by then is a lost push.
	unpushed   time.Time
	unpushedFP uint64
}

// pushGrace is how long after a refresh found a new state a push may still bring it before
// the push counts as lost: a server's push follows the change by about a second (Polaris's
// 1 s sync, Nacos's 500 ms push delay), and a refresh can read the change before the push
// arrives.
const pushGrace = 5 * time.Second

func newServices(rec *registry.Reconciler, m *mapper, log *slog.Logger, met *metrics, maxInstances int) *services {
	return &services{
		rec: rec, mapper: m, log: log, metrics: met, maxInstances: maxInstances,
		entries:  map[wire.Ref]*entry{},
		owners:   map[model.ServiceKey][]wire.Ref{},
		panicLog: rateLimit{every: time.Minute, burst: 10},
		seed:     maphash.MakeSeed(),
		lostLog:  rateLimit{every: 10 * time.Minute, burst: 5},
	}
}

// compareRefs orders refs by namespace, group and service.
func compareRefs(a, b wire.Ref) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Service, b.Service))
}

// add starts holding ref (not yet answered).
func (s *services) add(ref wire.Ref) *entry {
	if e := s.entries[ref]; e != nil {
		return e
	}
	e := &entry{ref: ref}
	s.entries[ref] = e
	return e
}

// apply maps a state of ref (a watch's answer or a push) and records what it serves. It says
// false when the state was not applied: ref is not held, the state is older than the one
// held, or it is the one held (no mapping then).
func (s *services) apply(ref wire.Ref, info *wire.ServiceInfo, pushed bool) bool {
	e := s.entries[ref]
	if e == nil || info == nil {
		if pushed {
			s.metrics.pushes.WithLabelValues(pushUnknown).Inc()
		}
		return false
	}
	return s.applyState(e, info, s.fingerprint(info), pushed)
}

// applyState is apply for e, with info's fingerprint fp.
func (s *services) applyState(e *entry, info *wire.ServiceInfo, fp uint64, pushed bool) bool {
	ref := e.ref
	if e.answered && info.LastRefTime > 0 && e.lastRef > 0 && info.LastRefTime < e.lastRef {
		if pushed {
			s.metrics.pushes.WithLabelValues(pushStale).Inc()
			if fp == e.unpushedFP {
				// The push of the state a refresh found, delivered after it: late, not lost.
				e.unpushed = time.Time{}
			}
		}
		return false
	}
	if pushed {
		s.metrics.pushes.WithLabelValues(pushApplied).Inc()
		// The push of the state a refresh found, or of a newer one (a server may fold a
		// push into the next): the pushes work.
		e.unpushed = time.Time{}
	}
	if e.answered && !e.retry && fp == e.fp {
		// The state held already (an HTTP poll's answer, a refresh, a repeated push): mapping
		// it again would give what is served. Only its time moves on.
		e.lastRef = max(e.lastRef, info.LastRefTime)
		return false
	}
	e.answered, e.lastRef, e.retry, e.fp = true, info.LastRefTime, false, fp
	if n := len(info.Hosts); n > s.maxInstances {
		// Keep the last state served rather than serve part of the instances.
		s.refuse(e, registry.Reason("limit", fmt.Errorf("%d instances, over --%s %d: the last state stays served", n, flagMaxInstances, s.maxInstances)))
		return true
	}
	m := s.mapper.mapService(ref, info)
	s.setInstanceRejections(e, m.rejected)
	s.setPanic(e, m.panic && m.err == nil)
	switch {
	case m.err != nil:
		s.refuse(e, m.err)
		s.release(e)
	case m.skip:
		// Nothing to serve: a service Dubbo keeps for its consumers.
		s.unrefuse(e)
		s.release(e)
	case len(m.service.Instances) == 0 && e.claim && len(e.svc.Ports) > 0:
		// No instance left (or every one rejected) in a service still listed: it keeps its
		// ServiceEntry, as served last (key, hosts, ports), with no endpoints, as
		// galleon-zookeeper keeps an empty service (the core labels it
		// galleon.io/endpoints=none for istiod 1.29 and older). A service whose one instance
		// restarts then costs istiod no Delete and Add (two full pushes) and its host stays
		// resolvable; it goes when the service leaves its listing (remove). Key and hosts
		// stay those served: with no instance, the mapping would fall back to the defaults
		// an instance's metadata may have overridden.
		s.unrefuse(e)
		s.claim(e, emptied(e.svc))
	case len(m.service.Instances) == 0 || len(m.service.Ports) == 0 && !(e.claim && len(e.svc.Ports) > 0):
		// No instance, and none served before: no port is known, and a ServiceEntry needs
		// one. Served once an instance comes.
		s.unrefuse(e)
		s.release(e)
	default:
		svc := m.service
		if len(svc.Ports) == 0 {
			// Instances, but none gave a port the mapping serves: the instances are what
			// changed, so the ports stay those reported last (a Service is the Sink's once
			// passed: copied, not shared).
			svc.Ports = slices.Clone(e.svc.Ports)
		}
		s.unrefuse(e)
		s.claim(e, svc)
	}
	return true
}

// emptied is svc with no instance, copied (a Service is the Sink's once passed).
func emptied(svc model.Service) model.Service {
	svc.Hosts = slices.Clone(svc.Hosts)
	svc.Addresses = slices.Clone(svc.Addresses)
	svc.Ports = slices.Clone(svc.Ports)
	svc.ExportTo = slices.Clone(svc.ExportTo)
	svc.Labels = maps.Clone(svc.Labels)
	svc.Annotations = maps.Clone(svc.Annotations)
	svc.Instances = nil
	return svc
}

// refreshed applies a state of ref read by the refresh (watch.go), the safety net under the
// pushes: a state that differs from the one held is one no push brought (yet); it is applied
// at once, and counted as a lost push unless a push brings it (or a newer one) within
// pushGrace (lost), or at once when a later refresh finds yet another state before any push
// came. A state like the one held costs no mapping (applyState).
func (s *services) refreshed(ref wire.Ref, info *wire.ServiceInfo, now time.Time) {
	e := s.entries[ref]
	if e == nil || info == nil {
		return
	}
	fp := s.fingerprint(info)
	if !s.applyState(e, info, fp, false) {
		return
	}
	if !e.unpushed.IsZero() {
		// The state the last refresh found has been replaced, and no push told of it (a push
		// would have cleared it): lost, whatever the time.
		s.countLost(e, now)
	}
	e.unpushed, e.unpushedFP = now, fp
}

// lost counts, and logs at a bounded rate, the states refreshes found that no push brought
// within pushGrace.
func (s *services) lost(now time.Time) {
	for _, e := range s.entries {
		if !e.unpushed.IsZero() && now.Sub(e.unpushed) >= pushGrace {
			s.countLost(e, now)
		}
	}
}

// countLost counts the state a refresh found for e as a lost push, and logs it at a bounded
// rate.
func (s *services) countLost(e *entry, now time.Time) {
	e.unpushed = time.Time{}
	s.metrics.refreshChanges.Inc()
	if ok, dropped := s.lostLog.allow(now); ok {
		s.log.Warn("the refresh found a change of a Nacos service that the server did not push (a lost push; polaris-server sends none outside "+DefaultGroup+"): changes of it reach the mesh only at --"+flagRefreshInterval,
			"service", serviceRecord(e.ref), "suppressed_since_last", dropped)
	}
}

// fingerprint sums up a state: two states alike (whatever the order of their instances and
// metadata) have the same, two that differ almost surely not. lastRefTime, checksum and
// cacheMillis are left out: Polaris sets lastRefTime to the time of each answer.
func (s *services) fingerprint(info *wire.ServiceInfo) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	// The instances' hashes are added up, and so are their metadata's: order-free.
	sum := uint64(len(info.Hosts))
	for i := range info.Hosts {
		in := &info.Hosts[i]
		h.Reset()
		for _, v := range []string{in.InstanceID, in.IP, in.ClusterName, in.ServiceName} {
			h.WriteString(v)
			h.WriteByte(0)
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(int64(in.Port)))
		h.Write(b[:])
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(in.Weight))
		h.Write(b[:])
		flags := byte(0)
		for bit, on := range []bool{in.Healthy, in.Enabled, in.Ephemeral} {
			if on {
				flags |= 1 << bit
			}
		}
		h.WriteByte(flags)
		meta := uint64(len(in.Metadata))
		for k, v := range in.Metadata {
			meta += maphash.String(s.seed, k) ^ 0x9e3779b97f4a7c15*maphash.String(s.seed, v)
		}
		binary.LittleEndian.PutUint64(b[:], meta)
		h.Write(b[:])
		sum += h.Sum64()
	}
	if info.ReachProtectionThreshold {
		sum ^= 1 << 63
	}
	return sum | 1 // never 0, which is "none"
}

// refuse rejects e's service record for its own fault.
func (s *services) refuse(e *entry, err error) {
	s.rec.Reject(serviceRecord(e.ref), err)
	e.refused, e.collision = true, false
}

// unrefuse clears a refusal of e's service record.
func (s *services) unrefuse(e *entry) {
	if e.refused {
		s.rec.Accept(serviceRecord(e.ref))
		e.refused = false
	}
}

// failed records that watching e failed with an answer of the server (an error, an answer
// that could not be read): its record is rejected, the last state stays served, and the next
// discovery tries again.
func (s *services) failed(ref wire.Ref, err error) {
	e := s.entries[ref]
	if e == nil {
		return
	}
	e.retry = true
	s.refuse(e, registry.Reason(reasonOf(err), err))
	if e.claim {
		// The refusal must not hide that it is still served.
		s.settle(e.key)
	}
}

// reasonOf is the rejection reason of a failed watch.
func reasonOf(err error) string {
	if _, ok := errors.AsType[*wire.DecodeError](err); ok {
		return "malformed"
	}
	return "server_error"
}

// remove stops holding ref: the service is gone from its listing.
func (s *services) remove(ref wire.Ref) {
	e := s.entries[ref]
	if e == nil {
		return
	}
	s.setInstanceRejections(e, nil)
	s.setPanic(e, false)
	s.release(e)
	if e.refused || e.collision {
		s.rec.Accept(serviceRecord(ref))
	}
	delete(s.entries, ref)
}

// setInstanceRejections makes rejected the instance records of e rejected now.
func (s *services) setInstanceRejections(e *entry, rejected map[string]error) {
	for _, record := range e.instRej {
		if _, still := rejected[record]; !still {
			s.rec.Accept(record)
		}
	}
	e.instRej = e.instRej[:0]
	for record, err := range rejected {
		s.rec.Reject(record, err)
		e.instRej = append(e.instRej, record)
	}
}

// setPanic records whether e is in protect-threshold panic: each episode counted and logged
// once (the log bounded over all services).
func (s *services) setPanic(e *entry, p bool) {
	if p == e.panic {
		return
	}
	e.panic = p
	if p {
		s.panicking++
		s.metrics.panics.Inc()
		if ok, dropped := s.panicLog.allow(time.Now()); ok {
			s.log.Warn("a Nacos service reached its protect threshold: too few instances are healthy, so every enabled instance is served, as Nacos clients do",
				"service", serviceRecord(e.ref), "suppressed_since_last", dropped)
		}
	} else {
		s.panicking--
	}
	s.metrics.panicking.Set(float64(s.panicking))
}

// claim makes e claim svc's key.
func (s *services) claim(e *entry, svc model.Service) {
	k := svc.Key()
	if e.claim && e.key != k {
		s.release(e)
	}
	e.svc = svc
	if !e.claim {
		e.claim, e.key = true, k
		refs := s.owners[k]
		i, _ := slices.BinarySearchFunc(refs, e.ref, compareRefs)
		s.owners[k] = slices.Insert(refs, i, e.ref)
	}
	s.settle(k)
}

// release drops e's claim, if any.
func (s *services) release(e *entry) {
	if !e.claim {
		return
	}
	k := e.key
	refs := s.owners[k]
	if i, found := slices.BinarySearchFunc(refs, e.ref, compareRefs); found {
		refs = slices.Delete(refs, i, i+1)
	}
	if len(refs) == 0 {
		delete(s.owners, k)
	} else {
		s.owners[k] = refs
	}
	e.claim, e.svc = false, model.Service{}
	if e.collision {
		s.rec.Accept(serviceRecord(e.ref))
		e.collision = false
	}
	s.settle(k)
}

// settle serves the first claimant of k and rejects the others, or removes k when none is
// left.
func (s *services) settle(k model.ServiceKey) {
	refs := s.owners[k]
	if len(refs) == 0 {
		s.rec.Remove(k)
		return
	}
	first := s.entries[refs[0]]
	s.rec.Set(first.svc)
	if first.collision {
		s.rec.Accept(serviceRecord(first.ref))
		first.collision = false
	}
	for _, ref := range refs[1:] {
		e := s.entries[ref]
		if e.refused {
			continue // its own fault is what its record says
		}
		s.rec.Reject(serviceRecord(ref), registry.Reason("collision",
			fmt.Errorf("maps to the service %s/%s, which %s holds: change --%s or rename one", k.Namespace, k.Name, serviceRecord(first.ref), "nacos-host-template")))
		e.collision = true
	}
}

// resetAnswers makes every entry take the next answer whatever its time: a new session's
// server may keep another clock.
func (s *services) resetAnswers() {
	for _, e := range s.entries {
		// unpushed stays: a push lost before the session ended is no less lost.
		e.answered = false
	}
}

// rateLimit allows burst events per every, and counts those it refuses.
type rateLimit struct {
	every   time.Duration
	burst   int
	start   time.Time
	n       int
	dropped int
}

// allow says whether an event at now is allowed, and how many were refused since the last
// one allowed.
func (l *rateLimit) allow(now time.Time) (bool, int) {
	if now.Sub(l.start) >= l.every {
		l.start, l.n = now, 0
	}
	if l.n >= l.burst {
		l.dropped++
		return false, 0
	}
	l.n++
	d := l.dropped
	l.dropped = 0
	return true, d
}
