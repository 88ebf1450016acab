package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/internal/fleet"
	"github.com/galleon-mesh/galleon/internal/importfilter"
	"github.com/galleon-mesh/galleon/internal/pipeline"
	"github.com/galleon-mesh/galleon/registry"
)

// built is one registry of a list, built from its entry: the adapter,
// ready to run, and the metrics registry it registered into.
type built struct {
	entry fleet.Entry
	// settings is the entry's kind, settings and filters in one canonical
	// string: equal settings build the same adapter, and a changed filter
	// restarts it as a changed setting does, so that its first listing
	// is filtered anew (and judged by the emptiness rule).
	settings string
	reg      registry.Registry
	metrics  *prometheus.Registry
	// filter is the entry's import filters, nil when none.
	filter *importfilter.Filter
}

// buildList builds every registry of list as its binary would from the same settings; the
// first problem of each entry is reported, all of them at once.
func buildList(list fleet.List, kinds map[string]Spec, log *slog.Logger) ([]built, error) {
	var out []built
	var problems []string
	for _, e := range list.Registries {
		b, err := buildEntry(e, kinds[e.Kind], log)
		if err != nil {
			problems = append(problems, fmt.Sprintf("registry %s (%s): %v", e.Name, e.Kind, err))
			continue
		}
		out = append(out, b)
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "\n"))
	}
	return out, nil
}

// buildEntry sets the adapter's flags from the entry's settings, as its binary reads the keys of
// its --config file, and builds the adapter. Its metrics go to a registry of their own, labelled
// with the entry's name, so that a second build of the same name (a changed entry) can be made
// while the first still runs.
func buildEntry(e fleet.Entry, spec Spec, log *slog.Logger) (built, error) {
	fs := pflag.NewFlagSet(e.Name, pflag.ContinueOnError)
	newRegistry := spec.Flags(fs)
	if newRegistry == nil {
		return built{}, errors.New("the adapter has no constructor")
	}
	var problems []string
	for _, key := range sortedKeys(e.Settings) {
		f := fs.Lookup(key)
		if f == nil {
			problems = append(problems, fmt.Sprintf("settings: unknown key %q; the keys are the flags of %s: %s", key, spec.Name, strings.Join(flagNames(fs), ", ")))
			continue
		}
		value, err := flagString(e.Settings[key])
		if err == nil {
			err = fs.Set(key, value)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("settings: %s: %v (flag --%s: %s)", key, err, key, f.Usage))
		}
	}
	filter, err := importfilter.New(e.Filters, "filters: ")
	if err != nil {
		problems = append(problems, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if len(problems) > 0 {
		return built{}, errors.New(strings.Join(problems, "; "))
	}
	canonical, err := json.Marshal(struct {
		Kind     string                `json:"kind"`
		Settings map[string]any        `json:"settings"`
		Filters  importfilter.Settings `json:"filters"`
	}{e.Kind, e.Settings, e.Filters})
	if err != nil {
		return built{}, fmt.Errorf("settings: %w", err)
	}
	metrics := prometheus.NewRegistry()
	reg, err := newRegistry(Env{
		Logger:     log.With("registry", e.Name),
		Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"registry": e.Name}, metrics),
	})
	if err != nil {
		return built{}, err
	}
	return built{entry: e, settings: string(canonical), reg: reg, metrics: metrics, filter: filter}, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// member is one registry the fleet runs: its intake (a pipeline in forward mode, which lives as
// long as the name is in the list, so that its emptiness rule judges a restarted adapter's
// first listing against what was served) and its adapter (restarted when its entry changes).
type member struct {
	name string
	// settings, stopAdapter and adapterDone are the fleet's keep
	// goroutine's; the rest is read by /debug/status and /metrics too.
	settings      string
	intake        *pipeline.Pipeline
	intakeMetrics *prometheus.Registry
	stopIntake    context.CancelFunc
	intakeDone    chan struct{}

	stopAdapter context.CancelFunc
	adapterDone chan struct{}

	mu             sync.Mutex
	kind           string
	adapterMetrics *prometheus.Registry
	// failed is the error the adapter stopped with (a configuration it
	// cannot run with); it is not restarted until its entry changes.
	failed error
	// removeAt is when the registry, no longer listed, is taken out of
	// what is served; zero while it is listed.
	removeAt time.Time
}

// startAdapter runs b's adapter, reporting to the member's intake.
func (m *member) startAdapter(ctx context.Context, b built, log *slog.Logger) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	m.settings = b.settings
	m.stopAdapter, m.adapterDone = cancel, done
	m.mu.Lock()
	m.kind, m.adapterMetrics, m.failed = b.entry.Kind, b.metrics, nil
	m.mu.Unlock()
	go func() {
		defer close(done)
		err := b.reg.Run(ctx, m.intake)
		if err != nil && ctx.Err() == nil {
			log.Error("registry stopped: its adapter cannot run with these settings; fix its entry in the registry list", "registry", m.name, "error", pipeline.Cut(err.Error(), pipeline.MaxErrorLen))
			m.mu.Lock()
			m.failed = err
			m.mu.Unlock()
		}
	}()
}

// stopAdapterAndWait stops the adapter; what it reported stays served.
// The intake forgets what only the adapter could clear: its
// unreachability and unreachable parts.
func (m *member) stopAdapterAndWait() {
	if m.stopAdapter == nil {
		return
	}
	m.stopAdapter()
	<-m.adapterDone
	m.stopAdapter, m.adapterDone = nil, nil
	m.intake.Unreachable(nil)
	for part := range m.intake.DegradedParts() {
		m.intake.Degraded(part, nil)
	}
}

func (m *member) stop() {
	m.stopAdapterAndWait()
	m.stopIntake()
	<-m.intakeDone
}

func (m *member) failure() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed
}

// gatherers gathers the fleet's metrics: the process's and, for each
// registry, its intake's and its adapter's (each a registry of its own,
// so that a registry restarted or removed takes its metrics with it).
type gatherers struct {
	main    prometheus.Gatherer
	members func() []prometheus.Gatherer
}

func (g gatherers) Gather() ([]*dto.MetricFamily, error) {
	return append(prometheus.Gatherers{g.main}, g.members()...).Gather()
}
