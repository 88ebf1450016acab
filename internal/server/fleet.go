package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/internal/fleet"
	"github.com/galleon-mesh/galleon/internal/pipeline"
	"github.com/galleon-mesh/galleon/internal/server/rungroup"
	"github.com/galleon-mesh/galleon/internal/server/servertls"
)

// FleetSpec describes a binary that runs several registries from a
// registry list: galleon-fleet.
type FleetSpec struct {
	Name    string
	Summary string
	// Kinds are the adapters a list may name, by Spec.Registry.
	Kinds []Spec
}

// fleetOptions are the settings only a fleet has.
type fleetOptions struct {
	registries    string
	checkInterval time.Duration
	removalDelay  time.Duration
	syncWait      time.Duration
	checkOnly     bool
}

// Fleet defaults: a registry list edit is seen within two seconds; a removed registry's
// services stay a minute (long enough to undo a mistaken edit, short enough for a migration's
// last step); a registry not listed after a minute no longer holds the others back.
const (
	DefaultRegistriesCheck = 2 * time.Second
	DefaultRemovalDelay    = time.Minute
	DefaultSyncWait        = time.Minute
)

func (f *fleetOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.registries, "registries", "", "YAML file of the registry list: the registries to run (name, kind, and the adapter's own flags as settings) and the rules for hosts several of them have (docs/running-several-registries.md); re-read when it changes, a bad edit keeping the running list (required)")
	fs.DurationVar(&f.checkInterval, "registries-check-interval", DefaultRegistriesCheck, "how often the registry list file is checked for changes")
	fs.DurationVar(&f.removalDelay, "registry-removal-delay", DefaultRemovalDelay, "how long the services of a registry removed from the list stay served after its watch stopped (putting it back within the delay keeps them)")
	fs.BoolVar(&f.checkOnly, "check", false, "read and check the registry list (each registry's settings as its adapter checks them), say what it holds, and exit: 0 when good, 2 with what to fix (for CI, before a ConfigMap is applied)")
	fs.DurationVar(&f.syncWait, "sync-wait", DefaultSyncWait, "how long the first snapshot waits for every registry's first listing; after it, what is listed is served and the rest is added as it comes")
}

func (f *fleetOptions) check() error {
	var errs []error
	if f.registries == "" {
		errs = append(errs, errors.New("--registries: required: the YAML file of the registry list"))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"registries-check-interval", f.checkInterval}, {"sync-wait", f.syncWait}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s %v: want a positive duration, e.g. 2s", d.flag, d.v))
		}
	}
	if f.removalDelay < 0 {
		errs = append(errs, fmt.Errorf("--registry-removal-delay %v: want 0 (at once) or a positive duration, e.g. 1m", f.removalDelay))
	}
	return errors.Join(errs...)
}

// noFleetFilters refuses the import filter flags in a fleet: each registry has its own, under
// its entry's filters: in the list, and one set applying to every registry besides would be a
// second place to look.
func (o *options) noFleetFilters() error {
	names := o.filters.Names()
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("--%s: a fleet filters per registry: give the filters under the entry's filters: in the registry list (docs/running-several-registries.md#filters)", strings.Join(names, ", --"))
}

// RunFleet is the fleet's Main with explicit arguments and output: 0 after a clean stop, 1 on a
// runtime failure, 2 on bad settings or a bad registry list at start.
func RunFleet(ctx context.Context, spec FleetSpec, args []string, stderr io.Writer) int {
	fs := pflag.NewFlagSet(spec.Name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s: %s\n\nUsage: %s --registries FILE [flags]\n\nEvery flag can also be set as GALLEON_<FLAG> in the environment or as a key in the\n--config file. Each registry's own settings are in the registry list.\n\nFlags:\n%s",
			spec.Name, spec.Summary, spec.Name, fs.FlagUsages())
	}
	o := options{name: spec.Name}
	var fo fleetOptions
	o.register(fs)
	fo.register(fs)
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", spec.Name, err)
		return 2
	}
	if code, ok := parseSettings(fs, spec.Name, args, &o, stderr, func() error { return errors.Join(o.check(), fo.check(), o.noFleetFilters()) }); !ok {
		return code
	}
	log := newLogger(stderr, o.logFormat, o.logLevel)
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	listenerTLS, err := o.listenerTLS(log, metrics)
	if err != nil {
		return fail(err)
	}
	r := newFleetRunner(spec, &o, &fo, log, metrics)
	list, builds, raw, err := r.readList()
	if err != nil {
		return fail(fmt.Errorf("--registries %s: %w", fo.registries, err))
	}
	if fo.checkOnly {
		fmt.Fprintf(stderr, "%s: registry list %s is good: registries %v, %d host rules\n", spec.Name, fo.registries, list.Names(), len(list.Rules))
		return 0
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := r.run(ctx, list, builds, raw, listenerTLS); err != nil {
		log.Error("stopped", "error", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

// fleetRunner runs the registries of the list and keeps them as the list says.
type fleetRunner struct {
	spec    FleetSpec
	kinds   map[string]Spec
	o       *options
	fo      *fleetOptions
	log     *slog.Logger
	metrics *prometheus.Registry
	reloads *prometheus.CounterVec
	refused prometheus.Gauge
	states  *prometheus.GaugeVec

	core   *core
	apply  *pipeline.Pipeline
	merger *fleet.Merger

	mu      sync.Mutex // guards what follows, for /debug/status and /metrics
	list    fleet.List
	members map[string]*member
	// running is the registry order last handed to the Merger.
	running []string
	// listErr is why the file's content is not the running list, "" when
	// it is.
	listErr  string
	listHash [32]byte
}

func newFleetRunner(spec FleetSpec, o *options, fo *fleetOptions, log *slog.Logger, metrics *prometheus.Registry) *fleetRunner {
	r := &fleetRunner{spec: spec, kinds: map[string]Spec{}, o: o, fo: fo, log: log, metrics: metrics, members: map[string]*member{}}
	for _, k := range spec.Kinds {
		r.kinds[k.Registry] = k
	}
	r.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "galleon_fleet_list_reloads_total",
		Help: "Edits of the registry list file seen, by result: applied, or refused (the running list is kept; the log and /debug/status say why).",
	}, []string{"result"})
	r.refused = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "galleon_fleet_list_refused",
		Help: "1 while the registry list file holds an edit that was refused (the running list is served); 0 when the file is the running list.",
	})
	r.reloads.WithLabelValues("applied")
	r.reloads.WithLabelValues("refused")
	r.states = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "galleon_fleet_registries",
		Help: "Registries the fleet runs, by state: running (listed, its watch running), failed (its adapter stopped on an error it cannot recover from; it runs again once its entry changes; /debug/status says why), removing (no longer listed, its services served until --registry-removal-delay has passed). Updated every --registries-check-interval.",
	}, []string{"state"})
	for _, st := range []string{"running", "failed", "removing"} {
		r.states.WithLabelValues(st)
	}
	metrics.MustRegister(r.reloads, r.refused, r.states)
	return r
}

func (r *fleetRunner) kindNames() []string {
	var names []string
	for name := range r.kinds {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// readList reads, parses and builds the list file.
func (r *fleetRunner) readList() (fleet.List, []built, []byte, error) {
	raw, err := readListFile(r.fo.registries)
	if err != nil {
		return fleet.List{}, nil, raw, err
	}
	list, err := fleet.ParseList(raw, r.kindNames())
	if err != nil {
		return fleet.List{}, nil, raw, err
	}
	builds, err := buildList(list, r.kinds, r.log)
	return list, builds, raw, err
}

// applyQuiet is the coalescing of the fleet's serving pipeline: each registry's intake has
// coalesced its reports already (--debounce-quiet), so this only gathers what one intake flush
// makes the Merger report.
const applyQuiet = 2 * time.Millisecond

// maxListBytes bounds the registry list file: 64 registries with their settings, filters and
// host rules take a few tens of KiB; a file larger than this is a mistake, refused rather than
// read into memory.
const maxListBytes = 1 << 20

// readListFile reads the registry list file, refusing one over maxListBytes.
func readListFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxListBytes+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxListBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes: a registry list is a few KiB (64 registries at most); is it the right file?", path, maxListBytes)
	}
	return raw, nil
}

// run serves the list's registries until ctx is cancelled.
func (r *fleetRunner) run(ctx context.Context, list fleet.List, builds []built, raw []byte, listenerTLS *servertls.Server) error {
	c, err := newCore(r.o, r.metrics)
	if err != nil {
		return err
	}
	r.core = c
	cfg := r.o.pipelineConfig(c, r.log, prometheus.WrapRegistererWith(prometheus.Labels{"registry": fleet.Reserved}, r.metrics))
	cfg.LabelledRegisterer = true
	cfg.RemovalHold = 0 // each registry's intake holds its own removals
	cfg.Quiet = applyQuiet
	r.apply = pipeline.New(c.store, cfg)
	r.merger = fleet.NewMerger(r.apply, fleet.MergerConfig{Registries: list.Names(), Rules: list.Rules, Logger: r.log, Registerer: r.metrics})
	r.list, r.listHash, r.running = list, sha256.Sum256(raw), list.Names()
	g := gatherers{main: r.metrics, members: r.memberGatherers}
	r.log.Info("registry list", "file", r.fo.registries, "registries", list.Names(), "host_rules", len(list.Rules))
	return c.serve(ctx, r.o, listenerTLS, r.log, r.metrics, func(served servedViews) http.Handler {
		return r.httpHandler(g, served)
	}, func(parts *rungroup.Group, ctx context.Context) {
		parts.Go("pipeline", func() error { return r.apply.Run(ctx) })
		parts.Go("registries", func() error { return r.keep(ctx, builds) })
	})
}

// keep runs the registries and follows the list file until ctx is cancelled, then stops every
// registry it started.
func (r *fleetRunner) keep(ctx context.Context, builds []built) error {
	for _, b := range builds {
		r.start(ctx, b)
	}
	r.countStates()
	defer r.stopAll()
	syncWait := time.NewTimer(r.fo.syncWait)
	defer syncWait.Stop()
	tick := time.NewTicker(r.fo.checkInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-syncWait.C:
			if !r.merger.Started() {
				r.log.Warn("serving the registries listed so far: the others are added once listed", "not_listed", r.merger.Unsynced(), "sync_wait", r.fo.syncWait)
				r.merger.Start()
			}
		case <-tick.C:
			r.reload(ctx)
			r.removeDue()
			r.countStates()
		}
	}
}

// start runs a registry new to the fleet: its intake, then its adapter.
func (r *fleetRunner) start(ctx context.Context, b built) {
	name := b.entry.Name
	m := &member{name: name, intakeMetrics: prometheus.NewRegistry(), intakeDone: make(chan struct{})}
	cfg := r.o.pipelineConfig(r.core, r.log.With("registry", name), prometheus.WrapRegistererWith(prometheus.Labels{"registry": name}, m.intakeMetrics))
	cfg.Registry, cfg.LabelledRegisterer = name, true
	cfg.VIPs, cfg.Applied = nil, nil // the serving pipeline allocates and measures
	cfg.Forward = r.merger.Forward(name)
	cfg.Filter = b.filter
	m.intake = pipeline.New(r.core.store, cfg)
	ictx, cancel := context.WithCancel(ctx)
	m.stopIntake = cancel
	go func() {
		defer close(m.intakeDone)
		_ = m.intake.Run(ictx) // returns ctx.Err()
	}()
	m.startAdapter(ctx, b, r.log)
	r.mu.Lock()
	r.members[name] = m
	r.mu.Unlock()
}

func (r *fleetRunner) stopAll() {
	r.mu.Lock()
	members := make([]*member, 0, len(r.members))
	for _, m := range r.members {
		members = append(members, m)
	}
	r.mu.Unlock()
	for _, m := range members {
		m.stop()
	}
}

// reload reads the list file and, when its content changed and is a good list, makes the
// running registries what it says; a bad edit keeps the running list.
func (r *fleetRunner) reload(ctx context.Context) {
	raw, err := readListFile(r.fo.registries)
	hash := sha256.Sum256(raw)
	r.mu.Lock()
	same := err == nil && hash == r.listHash
	r.mu.Unlock()
	if same {
		r.setListError("")
		return
	}
	var list fleet.List
	var builds []built
	if err == nil {
		list, err = fleet.ParseList(raw, r.kindNames())
	}
	if err == nil {
		builds, err = buildList(list, r.kinds, r.log)
	}
	if err != nil {
		r.setListError(err.Error())
		return
	}
	r.applyList(ctx, list, builds)
	r.mu.Lock()
	r.list, r.listHash = list, hash
	r.mu.Unlock()
	r.setListError("")
	r.reloads.WithLabelValues("applied").Inc()
}

// setListError records why the file is not the running list ("": it is), logging and
// counting each new reason once.
func (r *fleetRunner) setListError(text string) {
	r.mu.Lock()
	changed := r.listErr != text
	r.listErr = text
	r.mu.Unlock()
	if text == "" {
		r.refused.Set(0)
		return
	}
	r.refused.Set(1)
	if changed {
		r.reloads.WithLabelValues("refused").Inc()
		r.log.Error("registry list edit refused: the running list is kept; fix the file", "file", r.fo.registries, "error", pipeline.Cut(text, 4*pipeline.MaxErrorLen))
	}
}

// applyList starts the registries new to the list, restarts those whose entry changed (or
// whose adapter stopped on an error), and stops the watch of those no longer listed, whose
// services stay until --registry-removal-delay has passed.
func (r *fleetRunner) applyList(ctx context.Context, list fleet.List, builds []built) {
	// The Merger knows a new registry before its watch starts: it ignores reports of
	// registries it does not know (one removed), so a first listing handed on earlier would be
	// lost.
	r.merger.SetRegistries(r.order(list))
	r.merger.SetRules(list.Rules)
	listed := map[string]bool{}
	for _, b := range builds {
		name := b.entry.Name
		listed[name] = true
		r.mu.Lock()
		m := r.members[name]
		r.mu.Unlock()
		switch {
		case m == nil:
			r.log.Info("registry added to the list: starting its watch", "registry", name, "kind", b.entry.Kind)
			r.start(ctx, b)
		case m.stopAdapter != nil && m.settings == b.settings && m.failure() == nil:
			// Unchanged.
		default:
			if m.stopAdapter == nil {
				r.log.Info("registry listed again within its removal delay: starting its watch; its services were kept", "registry", name, "kind", b.entry.Kind)
			} else {
				r.log.Info("registry entry changed: restarting its watch; its services stay served meanwhile", "registry", name, "kind", b.entry.Kind)
			}
			m.stopAdapterAndWait()
			// Before the adapter starts again: its first listing is
			// filtered by the entry's filters as they are now.
			m.intake.SetFilter(b.filter)
			m.mu.Lock()
			m.removeAt = time.Time{}
			m.mu.Unlock()
			m.startAdapter(ctx, b, r.log)
		}
	}
	r.mu.Lock()
	var leaving []*member
	for name, m := range r.members {
		if !listed[name] && m.stopAdapter != nil {
			leaving = append(leaving, m)
		}
	}
	r.mu.Unlock()
	for _, m := range leaving {
		m.stopAdapterAndWait()
		at := time.Now().Add(r.fo.removalDelay)
		m.mu.Lock()
		m.removeAt = at
		m.mu.Unlock()
		r.log.Info("registry removed from the list: its watch stopped; its services stay served until the removal delay has passed", "registry", m.name, "remove_at", at.UTC().Format(time.RFC3339))
	}
}

// order is the Merger's registry order, which decides unplanned collisions and whose service
// names a shared host: the list's, with each registry removed from it and still served kept
// where it was (after the listed registry it followed), so that the hosts it shares change
// only when it goes, after the removal delay.
func (r *fleetRunner) order(list fleet.List) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	listed := map[string]bool{}
	for _, name := range list.Names() {
		listed[name] = true
	}
	after := map[string][]string{} // listed name ("" for the front) -> leaving names after it
	anchor := ""
	placed := map[string]bool{}
	for _, name := range r.running {
		switch {
		case listed[name]:
			anchor = name
		case r.members[name] != nil:
			after[anchor] = append(after[anchor], name)
			placed[name] = true
		}
	}
	out := slices.Clone(after[""])
	for _, name := range list.Names() {
		out = append(out, name)
		out = append(out, after[name]...)
	}
	var unplaced []string
	for name := range r.members {
		if !listed[name] && !placed[name] {
			unplaced = append(unplaced, name)
		}
	}
	slices.Sort(unplaced)
	r.running = append(out, unplaced...)
	return slices.Clone(r.running)
}

// removeDue takes out the registries whose removal delay has passed.
func (r *fleetRunner) removeDue() {
	now := time.Now()
	var due []*member
	r.mu.Lock()
	for name, m := range r.members {
		m.mu.Lock()
		at := m.removeAt
		m.mu.Unlock()
		if !at.IsZero() && !now.Before(at) {
			due = append(due, m)
			delete(r.members, name)
		}
	}
	list := r.list
	r.mu.Unlock()
	if len(due) == 0 {
		return
	}
	r.merger.SetRegistries(r.order(list))
	for _, m := range due {
		m.stop()
		r.log.Info("removed registry's services taken out of what is served", "registry", m.name)
	}
}

// countStates sets galleon_fleet_registries.
func (r *fleetRunner) countStates() {
	counts := map[string]int{}
	r.mu.Lock()
	for _, m := range r.members {
		m.mu.Lock()
		switch {
		case !m.removeAt.IsZero():
			counts["removing"]++
		case m.failed != nil:
			counts["failed"]++
		default:
			counts["running"]++
		}
		m.mu.Unlock()
	}
	r.mu.Unlock()
	for _, st := range []string{"running", "failed", "removing"} {
		r.states.WithLabelValues(st).Set(float64(counts[st]))
	}
}

// memberGatherers are the metrics registries of the registries running now.
func (r *fleetRunner) memberGatherers() []prometheus.Gatherer {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []prometheus.Gatherer
	for _, m := range r.members {
		out = append(out, m.intakeMetrics)
		m.mu.Lock()
		if m.adapterMetrics != nil {
			out = append(out, m.adapterMetrics)
		}
		m.mu.Unlock()
	}
	return out
}
