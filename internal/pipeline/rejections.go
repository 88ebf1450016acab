package pipeline

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// What a registry controls here is bounded in total, whatever it sends:
// how many rejections are listed and remembered, how long a record name
// and an error text may be when logged or kept, and how many log lines
// each reason may write a minute.
const (
	// MaxListedRejections bounds the rejections the pipeline keeps with
	// their text, to list in /debug/status.
	MaxListedRejections = 1000
	// maxTrackedRejections bounds the rejections beyond those that are
	// remembered (by a 64-bit hash, 8 bytes and a map slot each) so that
	// the count stays exact when they are reported again or cleared;
	// beyond it the count only grows until a record is cleared.
	maxTrackedRejections = 200_000
	// MaxRecordLen and MaxErrorLen bound a record name and an error text
	// as logged and kept: a registry chooses its names, and long ones once
	// made hundreds of MB of log (docs/reliability.md).
	MaxRecordLen = registry.MaxRecordLen
	MaxErrorLen  = 1024
	// logBurst is how many "registry record skipped" lines one reason may
	// write per logWindow; the rest are counted and the count is logged
	// with the next line of that reason.
	logBurst  = 20
	logWindow = time.Minute
)

// Reasons of the rejections the core itself makes (not an adapter).
const (
	reasonServiceInvalid  = "service_invalid"
	reasonInstanceInvalid = "instance_invalid"
)

// Cut is registry.Cut: the core bounds what it logs and keeps of a
// registry's text as the SDK's Reconciler does.
func Cut(s string, n int) string { return registry.Cut(s, n) }

// rejections is the pipeline's record of malformed registry records: those
// the adapter reports (Sink.Rejected) and the services and instances the
// core cannot serve. Its log lines are written once per record and error
// (not again when the record is reported again unchanged, after an outage
// say) and at most logBurst a minute per reason.
type rejections struct {
	log     *slog.Logger
	metrics *metrics

	mu sync.Mutex
	// listed is the records malformed now with their error text, at most
	// MaxListedRejections; over is the hashes of those beyond, at most
	// maxTrackedRejections, and untracked how many more were reported.
	listed    map[string]rejected
	over      map[uint64]struct{}
	untracked int
	// reasons are the reason labels counted so far (at most maxReasons).
	reasons map[string]struct{}
	limits  map[string]*logLimit
}

type rejected struct {
	reason, text string
}

// logLimit is one reason's log budget in the current window.
type logLimit struct {
	windowStart time.Time
	logged      int
	suppressed  int
}

// Rejected implements registry.Sink.
func (p *Pipeline) Rejected(record string, err error) {
	reason := ""
	if err != nil {
		reason = registry.ReasonOf(err, reasonOther)
	}
	p.rejections.set(Cut(record, MaxRecordLen), reason, err)
}

// set records that record is malformed (err != nil) for reason, or fine
// again (err == nil).
func (r *rejections) set(record, reason string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	h := xxhash.Sum64String(record)
	if err == nil {
		_, listed := r.listed[record]
		_, over := r.over[h]
		switch {
		case listed:
			delete(r.listed, record)
		case over:
			delete(r.over, h)
		default:
			return
		}
		r.metrics.recordsRejectedNow.Set(float64(r.count()))
		r.logLimitedAt(slog.LevelInfo, "record_fixed", "registry record fixed", "record", record)
		return
	}
	text := Cut(err.Error(), MaxErrorLen)
	label := r.reasonLabel(reason)
	if old, ok := r.listed[record]; ok {
		if old.text == text {
			return // told already: a relisting after an outage reports it again
		}
	} else if _, ok := r.over[h]; ok {
		return // beyond the listing: its text is not kept, so a change of it is not told
	}
	r.metrics.recordsRejected.WithLabelValues(label).Inc()
	r.logLimitedAt(slog.LevelWarn, label, "registry record skipped", "record", record, "reason", label, "error", text)
	switch _, listed := r.listed[record]; {
	case listed || len(r.listed) < MaxListedRejections:
		r.listed[record] = rejected{reason: label, text: text}
	case len(r.over) < maxTrackedRejections:
		r.over[h] = struct{}{}
	default:
		r.untracked++
	}
	r.metrics.recordsRejectedNow.Set(float64(r.count()))
}

// count is how many records are malformed now; r.mu is held.
func (r *rejections) count() int { return len(r.listed) + len(r.over) + r.untracked }

// logLimitedAt writes a line at level unless cause has used its budget for
// this window; the first line of a new window says how many were left out.
// r.mu is held.
func (r *rejections) logLimitedAt(level slog.Level, cause, msg string, attrs ...any) {
	now := time.Now()
	l := r.limits[cause]
	if l == nil {
		if len(r.limits) >= maxReasons+8 {
			cause = reasonOther // causes are the core's and the reason labels: a handful
			if l = r.limits[cause]; l == nil {
				l = &logLimit{windowStart: now}
				r.limits[cause] = l
			}
		} else {
			l = &logLimit{windowStart: now}
			r.limits[cause] = l
		}
	}
	if now.Sub(l.windowStart) >= logWindow {
		if l.suppressed > 0 {
			attrs = append(attrs, "not_logged_before", l.suppressed)
		}
		l.windowStart, l.logged, l.suppressed = now, 0, 0
	}
	if l.logged >= logBurst {
		if l.suppressed == 0 {
			r.log.Warn("more lines like the last are not logged this minute: at most 20 a minute for each cause (/debug/status lists what is rejected now, galleon_registry_records_rejected_total counts it)",
				"cause", cause, "last", msg)
		}
		l.suppressed++
		return
	}
	l.logged++
	r.log.Log(context.Background(), level, msg, attrs...)
}

// maxReasons bounds the reason labels of galleon_registry_records_rejected_total.
// The adapters of this repository give a handful each (registry.Reason);
// anything beyond, or not a short snake_case word, counts as "other".
const maxReasons = 32

// reasonLabel is the reason label a rejection is counted under; r.mu is
// held.
func (r *rejections) reasonLabel(reason string) string {
	if _, ok := r.reasons[reason]; ok || reason == reasonOther {
		return reason
	}
	if !validReason(reason) || len(r.reasons) >= maxReasons {
		return reasonOther
	}
	r.reasons[reason] = struct{}{}
	return reason
}

// reasonOther is the reason of a rejection whose adapter gave none.
const reasonOther = "other"

func validReason(r string) bool {
	if r == "" || len(r) > 32 {
		return false
	}
	for _, c := range r {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// Rejection is a registry record that is malformed now.
type Rejection struct {
	Record string `json:"record"`
	Reason string `json:"reason"`
	Error  string `json:"error"`
}

// Rejections returns the records malformed now, by record name, at most
// limit of them, and how many there are in all (beyond MaxListedRejections
// only counted).
func (p *Pipeline) Rejections(limit int) (list []Rejection, total int) {
	r := &p.rejections
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, record := range slices.Sorted(maps.Keys(r.listed)) {
		if len(list) == limit {
			break
		}
		rej := r.listed[record]
		list = append(list, Rejection{Record: record, Reason: rej.reason, Error: rej.text})
	}
	return list, r.count()
}

// serviceRecord and instanceRecord name the core's own rejections.
func serviceRecord(key model.ServiceKey) string {
	return Cut("service "+key.String(), MaxRecordLen)
}

func instanceRecord(key model.ServiceKey, id string) string {
	return Cut("service "+key.String()+" instance "+id, MaxRecordLen)
}

// noteService records what the core could not serve of a service after a
// flush converted it (or removed it: svc nil): the service itself (err),
// or some of its instances (dropped). What it recorded before and is fine
// now is cleared. Only the Run goroutine calls it.
func (p *Pipeline) noteService(key model.ServiceKey, err error, dropped []string, droppedErrs []error) {
	if err != nil {
		p.rejections.set(serviceRecord(key), reasonServiceInvalid, err)
	} else if p.invalid[key] {
		p.rejections.set(serviceRecord(key), "", nil)
	}
	if err != nil {
		p.invalid[key] = true
	} else {
		delete(p.invalid, key)
	}
	if err != nil {
		return // what was dropped from the version served stays as it was
	}
	before := p.dropped[key]
	for i, record := range dropped {
		p.rejections.set(record, reasonInstanceInvalid, droppedErrs[i])
	}
	for _, record := range before {
		if !slices.Contains(dropped, record) {
			p.rejections.set(record, "", nil)
		}
	}
	if len(dropped) > 0 {
		p.dropped[key] = dropped
	} else {
		delete(p.dropped, key)
	}
}

// logRateLimited writes a line at level unless cause has used its budget
// for this window (logBurst lines a logWindow); the first line of a new
// window says how many were left out. Used for what a registry decides the
// number of, beyond rejections: hosts rewritten, say.
func (r *rejections) logRateLimited(level slog.Level, cause, msg string, attrs ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	r.logLimitedAt(level, cause, msg, attrs...)
}

// init makes the maps; r.mu is held.
func (r *rejections) init() {
	if r.listed == nil {
		r.listed, r.over, r.reasons, r.limits = map[string]rejected{}, map[uint64]struct{}{}, map[string]struct{}{}, map[string]*logLimit{}
	}
}
