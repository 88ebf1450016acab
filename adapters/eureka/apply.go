package eureka

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/internal/wire"
	"github.com/galleon-mesh/galleon/model"
)

// What an answer changes: a full listing or a delta made the local copy, the applications it
// changed mapped again, and the records not served told to the Reconciler.

// applyFull makes a full listing the local copy.
func (p *poller) applyFull(f *fetched, why string) {
	now := time.Now()
	old := p.apps
	p.apps = f.apps
	p.lastFull, p.fullDue = now, time.Time{}
	if why == fullMismatch {
		p.mismatchBackoff = min(max(2*p.mismatchBackoff, p.r.cfg.PollInterval), maxMismatchBackoff)
		p.lastMismatchFull = now
	}
	p.r.metrics.fullFetches.WithLabelValues(why).Inc()
	var changed []string
	if old == nil || p.r.cfg.MaxLeaseAge > 0 {
		// Every application: with MaxLeaseAge an unchanged listing can age out of it.
		changed = appNames(old, f.apps)
	} else {
		changed = wire.Diff(old, f.apps)
	}
	clear(p.transient)
	p.remap(changed, now)
	p.reject()
	p.r.log.Info("fetched the full listing", "reason", why, "applications", len(f.apps.Apps), "changed", len(changed),
		"skipped", len(f.apps.Skipped), "bytes", f.wire, "took", f.took.Round(time.Millisecond))
	p.rec.Flush()
}

// applyDelta applies a delta; wasOutage says every server failed until this answer. It
// refuses (and applies nothing of) a delta that takes the local copy over --eureka-max-apps
// or --eureka-max-instances.
func (p *poller) applyDelta(f *fetched, wasOutage bool) error {
	now := time.Now()
	next, res := wire.ApplyDelta(p.apps, f.apps)
	if err := p.checkLimits(next); err != nil {
		return err
	}
	p.apps = next
	for _, s := range res.Unapplied {
		p.transient[recordName(s.App, s.InstanceID)] = bad(s.Reason, s.Err)
	}
	p.remap(res.Changed, now)
	p.reject()
	if len(res.Changed) > 0 {
		p.r.log.Debug("applied a delta", "changed", len(res.Changed), "added", res.Added, "modified", res.Modified, "deleted", res.Deleted)
	}
	if !res.Reconciled {
		p.r.metrics.mismatches.Inc()
		p.scheduleFull(fullMismatch, now)
		// Once an episode: a server whose hashcode never agrees would log every poll.
		level := slog.LevelDebug
		if !p.mismatchTold {
			level, p.mismatchTold = slog.LevelInfo, true
		}
		p.r.log.Log(context.Background(), level, "apps__hashcode differs from the server's after a delta: a full fetch is scheduled",
			"local", res.Hashcode, "server", cut(f.apps.AppsHashcode), "at", p.fullDue.Format(time.RFC3339Nano))
		if wasOutage {
			// Changes may have been missed in the outage: serve nothing new until the full
			// listing (the Reconciler's rule: relist before ending an outage).
			return nil
		}
	} else {
		p.mismatchBackoff, p.mismatchTold = 0, false
		if wasOutage {
			p.rec.Resumed()
		}
	}
	p.rec.Flush()
	return nil
}

// checkLimits refuses a local copy over --eureka-max-apps or --eureka-max-instances (a delta
// can grow it past what a listing may hold).
func (p *poller) checkLimits(a *wire.Applications) error {
	cfg := &p.r.cfg
	if len(a.Apps) > cfg.MaxApps {
		return fmt.Errorf("%w (raise %s if the registry really is this large)",
			&wire.LimitError{What: wire.LimitApplications, Limit: int64(cfg.MaxApps)}, limitFlag(wire.LimitApplications))
	}
	if len(a.Skipped)+a.Servable() > cfg.MaxInstances {
		return fmt.Errorf("%w (raise %s if the registry really is this large)",
			&wire.LimitError{What: wire.LimitInstances, Limit: int64(cfg.MaxInstances)}, limitFlag(wire.LimitInstances))
	}
	return nil
}

// appNames lists every application either registry holds.
func appNames(a, b *wire.Applications) []string {
	seen := map[string]string{}
	for _, r := range []*wire.Applications{a, b} {
		if r == nil {
			continue
		}
		for _, app := range r.Apps {
			seen[strings.ToUpper(app.Name)] = app.Name
		}
	}
	return slices.Sorted(maps.Values(seen))
}

// remap maps the named applications again from the local copy and tells the Reconciler about
// the services they affect.
func (p *poller) remap(names []string, now time.Time) {
	if len(names) == 0 {
		return
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[strings.ToUpper(n)] = true
	}
	found := make(map[string]*wire.Application, len(names))
	for i := range p.apps.Apps {
		a := &p.apps.Apps[i]
		if k := strings.ToUpper(a.Name); want[k] {
			found[k] = a
		}
	}
	affected := map[string]bool{}
	for key := range want {
		old, had := p.appSvc[key]
		newName := ""
		delete(p.mapRej, key)
		delete(p.nameRej, key)
		delete(p.built, key)
		if app, ok := found[key]; ok {
			m := p.r.mapApplication(app, now)
			if len(m.rejected) > 0 {
				p.mapRej[key] = m.rejected
			}
			switch {
			case !m.ok:
			case m.svc.Name == "":
				p.nameRej[key] = bad(reasonName, fmt.Errorf("application name %q has no letter or digit: it cannot name a ServiceEntry", app.Name))
			default:
				newName = m.svc.Name
				p.built[key] = m.svc
			}
		}
		if had && old != newName {
			delete(p.byName[old], key)
			affected[old] = true
		}
		if newName == "" {
			delete(p.appSvc, key)
			continue
		}
		p.appSvc[key] = newName
		if p.byName[newName] == nil {
			p.byName[newName] = map[string]bool{}
		}
		p.byName[newName][key] = true
		affected[newName] = true
	}
	for name := range affected {
		owners := p.byName[name]
		k := model.ServiceKey{Namespace: p.r.cfg.Namespace, Name: name}
		if len(owners) == 0 {
			delete(p.byName, name)
			p.rec.Remove(k)
			continue
		}
		keys := slices.Sorted(maps.Keys(owners))
		p.rec.Set(p.built[keys[0]])
		delete(p.nameRej, keys[0])
		for _, other := range keys[1:] {
			p.nameRej[other] = bad(reasonName, fmt.Errorf("maps to ServiceEntry %s, which application %s already has: rename one", name, keys[0]))
		}
	}
}

// reject tells the Reconciler every record not served now (the core counts them by reason), and
// logs those new since the last time (at most maxLoggedRejections lines).
func (p *poller) reject() {
	all := map[string]error{}
	for _, s := range p.apps.Skipped {
		all[recordName(s.App, s.InstanceID)] = bad(s.Reason, s.Err)
	}
	for _, m := range p.mapRej {
		maps.Copy(all, m)
	}
	for app, err := range p.nameRej {
		all[app] = err
	}
	maps.Copy(all, p.transient)
	p.rec.SetRejections(all)
	logged, more := 0, 0
	for _, record := range slices.Sorted(maps.Keys(all)) {
		err := all[record]
		if p.told[record] == err.Error() {
			continue
		}
		p.told[record] = err.Error()
		if logged < maxLoggedRejections {
			app, id, _ := strings.Cut(record, "/")
			p.r.log.Warn("skipped a Eureka instance", "app", app, "instance", id, "reason", reasonOf(err), "err", err)
			logged++
		} else {
			more++
		}
	}
	if more > 0 {
		p.r.log.Warn("skipped more Eureka instances (see /debug/status)", "count", more)
	}
	for record := range p.told {
		if _, ok := all[record]; !ok {
			delete(p.told, record)
		}
	}
}
