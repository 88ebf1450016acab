package server

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/internal/fleet"
	"github.com/galleon-mesh/galleon/internal/pipeline"
)

// fleetStatus is the body of a fleet's /debug/status.
type fleetStatus struct {
	Fleet          string `json:"fleet"`
	RegistriesFile string `json:"registriesFile"`
	// ListError is why the list file's content is not the running list
	// (a refused edit); empty when it is.
	ListError string `json:"listError,omitempty"`
	// Synced: the first merged snapshot is served.
	Synced      bool                       `json:"synced"`
	Services    int                        `json:"services"`
	Seq         uint64                     `json:"seq"`
	Collections map[string]collectionState `json:"collections"`
	Registries  []registryStatus           `json:"registries"`
	// Collisions are the hosts more than one registry service has (the
	// first statusRejections by host); CollisionCount how many there are.
	Collisions     []fleet.Collision `json:"collisions,omitempty"`
	CollisionCount int               `json:"collisionCount"`
	// Rejected are the merged services and instances the core could not
	// serve (each registry's own rejections are under registries).
	Rejected      []pipeline.Rejection                  `json:"rejected,omitempty"`
	RejectedCount int                                   `json:"rejectedCount,omitempty"`
	Subsets       map[string]map[string]collectionState `json:"subsets,omitempty"`
	Shards        []shardState                          `json:"shards,omitempty"`
}

// registryStatus is one registry of a fleet's /debug/status.
type registryStatus struct {
	Name        string            `json:"name"`
	Kind        string            `json:"kind"`
	Synced      bool              `json:"synced"`
	Stale       bool              `json:"stale"`
	Unreachable string            `json:"unreachable,omitempty"`
	Services    int               `json:"services"`
	LastFlush   *time.Time        `json:"lastFlush,omitempty"`
	Held        *pipeline.Hold    `json:"held,omitempty"`
	Degraded    map[string]string `json:"degraded,omitempty"`
	// Failed is the error the adapter stopped with; it runs again once
	// its entry changes.
	Failed        string               `json:"failed,omitempty"`
	RemoveAt      *time.Time           `json:"removeAt,omitempty"`
	Rejected      []pipeline.Rejection `json:"rejected,omitempty"`
	RejectedCount int                  `json:"rejectedCount,omitempty"`
	// Filtered is what the entry's import filters leave out now.
	Filtered *filteredReport `json:"filtered,omitempty"`
}

// statusOf reports one member.
func (m *member) status() registryStatus {
	st := m.intake.Status()
	m.mu.Lock()
	rs := registryStatus{Name: m.name, Kind: m.kind, Synced: st.Synced, Stale: st.Unreachable != nil, Services: st.Services, Held: st.Held}
	if m.failed != nil {
		rs.Failed = pipeline.Cut(m.failed.Error(), pipeline.MaxErrorLen)
	}
	if !m.removeAt.IsZero() {
		at := m.removeAt
		rs.RemoveAt = &at
	}
	m.mu.Unlock()
	if st.Unreachable != nil {
		rs.Unreachable = pipeline.Cut(st.Unreachable.Error(), pipeline.MaxErrorLen)
	}
	if !st.LastFlush.IsZero() {
		rs.LastFlush = &st.LastFlush
	}
	rs.Degraded = m.intake.DegradedParts()
	rs.Rejected, rs.RejectedCount = m.intake.Rejections(statusRejections)
	rs.Filtered = filteredOf(m.intake, st)
	return rs
}

// registryStatuses reports the registries in the order of the list, then those being removed.
func (r *fleetRunner) registryStatuses() []registryStatus {
	r.mu.Lock()
	list := r.list
	members := maps.Clone(r.members)
	r.mu.Unlock()
	var out []registryStatus
	for _, name := range list.Names() {
		if m := members[name]; m != nil {
			out = append(out, m.status())
			delete(members, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		out = append(out, members[name].status())
	}
	return out
}

func (r *fleetRunner) httpHandler(g prometheus.Gatherer, served servedViews) http.Handler {
	readyz := func(w http.ResponseWriter, _ *http.Request) {
		if !r.merger.Started() {
			http.Error(w, "not ready: waiting for the first listing of "+strings.Join(r.merger.Unsynced(), ", ")+" (at most --sync-wait)", http.StatusServiceUnavailable)
			return
		}
		if !r.apply.Status().Synced {
			http.Error(w, "not ready: the registries' services are being merged and converted", http.StatusServiceUnavailable)
			return
		}
		// Ready whatever a registry's state: what is served is the last
		// good state of each, which beats an empty mesh.
		var notes []string
		for _, rs := range r.registryStatuses() {
			switch {
			case rs.Failed != "":
				notes = append(notes, rs.Name+" stopped on an error")
			case !rs.Synced:
				notes = append(notes, rs.Name+" not listed yet")
			case rs.Stale:
				notes = append(notes, rs.Name+" unreachable (stale)")
			case rs.Held != nil:
				notes = append(notes, rs.Name+" holding a removal")
			case len(rs.Degraded) > 0:
				notes = append(notes, fmt.Sprintf("%s degraded (%d parts)", rs.Name, len(rs.Degraded)))
			}
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, "ready (%s)\n", strings.Join(notes, "; "))
			return
		}
		fmt.Fprintln(w, "ready")
	}
	status := func(w http.ResponseWriter, _ *http.Request) {
		st := r.apply.Status()
		snap := r.core.store.Current()
		r.mu.Lock()
		listErr := r.listErr
		r.mu.Unlock()
		rep := fleetStatus{Fleet: r.spec.Name, RegistriesFile: r.fo.registries, ListError: pipeline.Cut(listErr, 4*pipeline.MaxErrorLen),
			Synced: st.Synced, Services: st.Services, Seq: snap.Seq, Collections: collectionStates(snap),
			Registries: r.registryStatuses(), Subsets: subsetStates(served.subsets), Shards: served.shardStates()}
		rep.Collisions, rep.CollisionCount = r.merger.Collisions(statusRejections)
		rep.Rejected, rep.RejectedCount = r.apply.Rejections(statusRejections)
		writeJSON(w, rep)
	}
	return serveMux(r.spec.Name, g, r.o.debugPprof, "ready once every registry was listed, or --sync-wait passed", readyz, status)
}
