// Package file is a service registry kept as YAML files in one directory.
//
// It is Galleon's reference adapter and a real feature for fleets of VMs
// that have no registry: an operator (or a configuration-management tool,
// or a Kubernetes ConfigMap) writes the files, and the adapter reports the
// services in them.
//
// # Files
//
// Every regular file directly in the directory whose name ends in ".yaml"
// or ".yml" is read; sub-directories are not. Names starting with "." are
// ignored (dotfiles, Emacs ".#x" lock files, Vim ".x.swp" swap files,
// Kubernetes' "..data" links), and so is every name that does not end in
// .yaml/.yml (backups "x.yaml~", "x.yaml.swp", "#x.yaml#", temp files).
// A file may hold several YAML documents separated by "---".
//
// # Format
//
//	services:
//	- name: reviews                  # required; a DNS-1123 subdomain
//	  namespace: bookinfo            # optional; Config.Namespace ("default")
//	  hosts: [reviews.bookinfo.vm]   # optional; "<name>.<namespace>.internal"
//	  addresses: [240.0.0.10]        # optional virtual IPs or CIDRs
//	  ports:                         # at least one
//	  - number: 9080                 # required, 1-65535, unique
//	    protocol: HTTP               # optional; HTTP HTTPS HTTP2 GRPC TCP TLS
//	                                 # MONGO MYSQL REDIS UDP; default TCP
//	    name: http                   # optional; default "<protocol>-<number>"
//	  labels: {app: reviews}         # optional resource labels
//	  annotations: {}                # optional resource annotations
//	  location: internal             # internal (default) | external
//	  resolution: auto               # auto (default) | static | dns | none
//	  exportTo: []                   # optional; empty means every namespace
//	  instances:
//	  - address: 10.0.0.11           # required: an IP or a host name
//	    id: reviews-v1-a             # optional; default "<address>", or
//	                                 # "<address>:<port>" when ports remaps
//	                                 # (the instance port of the lowest
//	                                 # remapped service port)
//	    ports: {9080: 9081}          # optional service port -> instance port
//	    labels: {version: v1}        # optional endpoint labels
//	    locality: us-east1/us-east1-b  # optional region/zone/subzone
//	    network: ""                  # optional network name
//	    weight: 1                    # optional; 0 means the default
//	    health: healthy              # healthy (default) | unhealthy | draining
//	    serviceAccount: reviews      # optional workload identity
//
// Keys are parsed strictly: a key that is not listed above is an error.
// Enumerated values (protocol, location, resolution, health) are
// case-insensitive.
//
// # Errors
//
// Every problem is reported to Sink.Rejected with the record
// "<path>:<line>" and leaves the served state as safe as possible:
//   - A malformed file (YAML syntax, not a mapping, a top-level key other
//     than "services", "services" not a list) is rejected as a whole and
//     the last good content of that file stays in force. A file that was
//     never good contributes nothing.
//   - A malformed service in an otherwise good file is rejected alone; the
//     rest of the file counts. If the entry's namespace/name can still be
//     read and this file served that service before, its previous version
//     stays in force (a typo never removes a service from the mesh).
//   - The same namespace/name twice in one file: the first one counts.
//     In two files: the file whose name sorts first wins.
//
// A rejection is reported once, when it appears, not on every rescan; a
// resynchronisation from scratch (Replace) reports every rejection that
// still applies again.
//
// # Watching
//
// The directory is watched with fsnotify and re-scanned, after a 20 ms
// quiet period, on any event in it: this covers editors that save by
// writing a temp file and renaming it, and Kubernetes ConfigMap volumes,
// which swap a "..data" symlink. A periodic re-scan (Config.Resync) is a
// safety net for missed events. Only files whose content changed are parsed
// again, and only services whose model value changed are reported. If the
// directory disappears, Unreachable is reported and the last state is kept;
// the directory is polled every 250 ms until it is back, then the state is
// resynchronised with Replace and Unreachable(nil).
package file

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/fsnotify/fsnotify"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

const (
	// DefaultNamespace is used for services that name none, unless
	// Config.Namespace says otherwise.
	DefaultNamespace = "default"
	// DefaultResync is the periodic re-scan interval unless
	// Config.Resync says otherwise.
	DefaultResync = 30 * time.Second
	// DefaultRemovalDelay is Config.RemovalDelay's default: longer than a
	// non-atomic write takes (shell '>', Ansible copy without atomic
	// rename, editors saving in place), short next to how long a removed
	// instance lingers in istiod anyway.
	DefaultRemovalDelay = 2 * time.Second
	// DefaultMaxFileSize bounds one registry file unless Config.MaxFileSize
	// says otherwise: five times the 10,001-service benchmark registry
	// (12 MB), far from what a link to /dev/zero would cost.
	DefaultMaxFileSize = 64 << 20

	// DefaultScanQuiet is Config.ScanQuiet's default: one editor save is a burst of events
	// (create, write, chmod, rename) a few milliseconds long, and should cost one scan.
	DefaultScanQuiet = 20 * time.Millisecond
	// MaxScanQuiet bounds Config.ScanQuiet: it is also the longest a stream of events may hold
	// a scan back, so that changes are still picked up while something keeps writing.
	MaxScanQuiet = 250 * time.Millisecond
	// retryInterval is how often a missing directory is looked for: one
	// stat, so often enough that a returning directory is served within a
	// fraction of a second.
	retryInterval = 250 * time.Millisecond
)

// Config configures a file registry.
type Config struct {
	// Dir is the directory holding the registry's *.yaml / *.yml files.
	Dir string
	// Namespace is the namespace of services that give none; default
	// "default".
	Namespace string
	// Resync is the interval of the periodic re-scan that backs up the
	// file-system watch; default 30s.
	Resync time.Duration
	// MaxFileSize bounds the size of one registry file; a larger one is
	// rejected like a malformed one (its last good content stays served).
	// Default DefaultMaxFileSize.
	MaxFileSize int64
	// RemovalDelay is how long the directory must stay unchanged before a
	// scan that removes a service or an instance is reported: a file being
	// written in place (truncated, then filled; renamed away, then back)
	// reads short for a moment, and that must not remove anything from the
	// mesh. Additions and changes are reported at once. Default
	// DefaultRemovalDelay.
	RemovalDelay time.Duration
	// ScanQuiet is how long the directory must stay quiet after a file-system event before it
	// is scanned: the events of one save then cost one scan. A scan that finds a file half
	// written is safe (a removal waits for RemovalDelay, a malformed file keeps its last good
	// content) but noisy, so lower it only where files change in one step, like a Kubernetes
	// ConfigMap volume (its ..data link is swapped). Default DefaultScanQuiet, at most
	// MaxScanQuiet.
	ScanQuiet time.Duration
	// StateDir, if set, keeps each file's last good content on disk, so
	// that a file that is malformed when the adapter restarts still
	// contributes what it did before (otherwise that lives in memory
	// only). It must be a directory of its own; its files are managed here.
	StateDir string
	// Logger receives the adapter's logs; default slog.Default(). The
	// adapter logs at Warn only what the Sink does not hear about (trouble
	// with the file-system watch); the rejections and outages it reports
	// to the Sink are the Sink owner's to log, so they are at Debug here.
	Logger *slog.Logger
}

// Registry is a registry.Registry that reads services from YAML files.
// It holds only configuration: each Run keeps its own state, so a Registry
// may be Run again after a previous Run returned.
type Registry struct {
	cfg Config
	log *slog.Logger
}

var _ registry.Registry = (*Registry)(nil)

// New checks cfg and returns a Registry for it.
func New(cfg Config) (*Registry, error) {
	if cfg.Dir == "" {
		return nil, errors.New("file registry: Dir is empty: set it to the directory that holds the registry's *.yaml files")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("file registry: Dir %q: %w", cfg.Dir, err)
	}
	cfg.Dir = dir
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("file registry: directory %s does not exist: create it or point Dir at an existing directory", dir)
	case err != nil:
		return nil, fmt.Errorf("file registry: cannot read directory %s: %w", dir, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("file registry: %s is a file, not a directory: set Dir to the directory that holds the *.yaml files", dir)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if err := validLabel(cfg.Namespace); err != nil {
		return nil, fmt.Errorf("file registry: Namespace %q %v", cfg.Namespace, err)
	}
	if cfg.Resync < 0 {
		return nil, fmt.Errorf("file registry: Resync %v is negative: use 0 for the default (%v)", cfg.Resync, DefaultResync)
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.RemovalDelay < 0 {
		return nil, fmt.Errorf("file registry: RemovalDelay %v is negative: use 0 for the default (%v)", cfg.RemovalDelay, DefaultRemovalDelay)
	}
	if cfg.RemovalDelay == 0 {
		cfg.RemovalDelay = DefaultRemovalDelay
	}
	if cfg.ScanQuiet < 0 || cfg.ScanQuiet > MaxScanQuiet {
		return nil, fmt.Errorf("file registry: ScanQuiet %v is not in 0 to %v: use 0 for the default (%v)", cfg.ScanQuiet, MaxScanQuiet, DefaultScanQuiet)
	}
	if cfg.ScanQuiet == 0 {
		cfg.ScanQuiet = DefaultScanQuiet
	}
	if cfg.StateDir != "" {
		stateDir, err := filepath.Abs(cfg.StateDir)
		if err != nil {
			return nil, fmt.Errorf("file registry: StateDir %q: %w", cfg.StateDir, err)
		}
		if stateDir == dir {
			return nil, fmt.Errorf("file registry: StateDir %s is the registry directory: give the state a directory of its own", stateDir)
		}
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return nil, fmt.Errorf("file registry: cannot create StateDir: %w", err)
		}
		cfg.StateDir = stateDir
	}
	if cfg.MaxFileSize < 0 {
		return nil, fmt.Errorf("file registry: MaxFileSize %d is negative: use 0 for the default (%d bytes)", cfg.MaxFileSize, DefaultMaxFileSize)
	}
	if cfg.MaxFileSize == 0 {
		cfg.MaxFileSize = DefaultMaxFileSize
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// No "registry" attribute: the daemon's logger carries registry=file
	// already, and a second one would print it twice.
	return &Registry{cfg: cfg, log: log.With("dir", dir)}, nil
}

// Run watches the directory and reports to sink until ctx is cancelled,
// then returns ctx.Err(). It fails early only if no file-system watch can
// be created at all (inotify instance limit).
func (r *Registry) Run(ctx context.Context, sink registry.Sink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file registry: cannot create a file-system watch (raise fs.inotify.max_user_instances?): %w", err)
	}
	// Close stops fsnotify's reader goroutine and waits for it, so Run
	// leaves nothing running behind.
	defer w.Close()

	s := &runState{
		cfg:     r.cfg,
		log:     r.log,
		report:  registry.NewReconciler(sink),
		watcher: w,
		files:   map[string]*fileState{},
		served:  map[model.ServiceKey]served{},

		statRacy: racyStat,
	}
	s.loadPersisted()
	s.sync()

	// removals fires once the directory was quiet for RemovalDelay while a
	// report that removes something is held back.
	removals := time.NewTimer(time.Hour)
	removals.Stop()
	defer removals.Stop()
	armRemovals := func() {
		if s.holdSince.IsZero() {
			removals.Stop()
		} else {
			removals.Reset(s.cfg.RemovalDelay)
		}
	}
	armRemovals()

	ticker := time.NewTicker(s.nextScan())
	defer ticker.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	var burstStart time.Time // zero when no scan is pending

	events, errs := w.Events, w.Errors
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()

		case ev, ok := <-events:
			if !ok {
				events = nil // only after Close; the resync ticker still works
				continue
			}
			if !s.relevant(ev) {
				continue
			}
			if filepath.Clean(ev.Name) == s.cfg.Dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The watched directory itself went away, and the kernel
				// dropped its watch. A directory recreated at the same path
				// may get the same inode number, which os.SameFile cannot
				// tell apart: forget the watch so the next scan adds it anew.
				s.watched = nil
			}
			s.log.Debug("file-system event", "event", ev.String())
			burstStart = schedule(debounce, burstStart, s.cfg.ScanQuiet)

		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// Typically an event-queue overflow: events were lost, so
			// re-scan to find out what changed.
			s.log.Warn("file-system watch error; re-scanning", "err", err)
			burstStart = schedule(debounce, burstStart, s.cfg.ScanQuiet)

		case <-debounce.C:
			burstStart = time.Time{}
			s.sync()
			ticker.Reset(s.nextScan())
			armRemovals()

		case <-ticker.C:
			s.sync()
			ticker.Reset(s.nextScan())
			armRemovals()

		case <-removals.C:
			s.forceRemovals = true
			s.sync()
			s.forceRemovals = false
			armRemovals()
		}
	}
}

// schedule (re)arms the debounce timer for a burst that started at
// burstStart (zero: this event starts it): quiet from now, but no later than
// MaxScanQuiet after the burst's start. It returns the burst start.
func schedule(t *time.Timer, burstStart time.Time, quiet time.Duration) time.Time {
	now := time.Now()
	if burstStart.IsZero() {
		burstStart = now
	}
	delay := quiet
	if limit := burstStart.Add(MaxScanQuiet).Sub(now); delay > limit {
		delay = max(limit, 0)
	}
	t.Reset(delay)
	return burstStart
}

// fingerprint identifies a file's content without keeping it: its size
// and xxhash. The modification time is deliberately not part of it: a
// file rewritten with the same content (a ConfigMap swap, a
// configuration-management run, touch) need not be parsed again, and a
// change within the same mtime tick is still caught by the hash.
type fingerprint struct {
	size int64
	hash uint64
}

func fingerprintOf(data []byte) fingerprint {
	return fingerprint{size: int64(len(data)), hash: xxhash.Sum64(data)}
}

// statKey is a file's stat as statKeyOf takes it. A file whose statKey is what it was when its
// content was last fingerprinted is not read again: hashing all 21 files of a 12 MB registry on
// every scan was most of the CPU a one-file change cost.
type statKey struct {
	ino          uint64
	size         int64
	mtime, ctime time.Time
}

// racyStat is how long after a file's last change its stat is trusted. File times tick with the
// kernel's coarse clock, so a second write of the same size inside one tick leaves the stat as it
// was; a file changed this recently when its stat was taken is fingerprinted again next scan (the
// rule git uses for its index's "racily clean" entries).
const racyStat = time.Second

// trusted says whether st, taken at statAt, may stand for the content fingerprinted then, when
// times within racy of statAt are not trusted.
func (st statKey) trusted(statAt time.Time, racy time.Duration) bool {
	return !st.mtime.IsZero() && st.mtime.Before(statAt.Add(-racy)) && st.ctime.Before(statAt.Add(-racy))
}

// fileState is what one file last contributed. It keeps no file content
// and no parse tree between scans: only the models, their lines, and the
// rejections.
type fileState struct {
	// parsed is set once fp is the fingerprint of the content last parsed.
	parsed bool
	fp     fingerprint
	// stat, taken at statAt before the content was fingerprinted, lets a
	// scan skip the fingerprint while the file's stat is unchanged; only
	// when statOK and stat.trusted(statAt).
	stat   statKey
	statAt time.Time
	statOK bool
	// good are the services of the last good content (with previous
	// versions kept for malformed entries); nil if the file was never good.
	// Neither the slice nor its elements are modified once set: the
	// reported state points into it.
	good []parsedService
	// index finds a service of good by its key (set with good, by setGood).
	index map[model.ServiceKey]int
	// rejected are the malformed services of the last good content.
	rejected []rejection
	// fileErr is set while the current content is malformed or unreadable.
	fileErr *rejection
}

// runState is the state of one Run. It is used by Run's goroutine only.
type runState struct {
	cfg     Config
	log     *slog.Logger
	report  *registry.Reconciler // reports to the Sink what the files hold
	watcher *fsnotify.Watcher

	// watched is the directory the watch is on (to notice the directory
	// being replaced by another one at the same path); nil when none.
	watched       os.FileInfo
	watchErrShown bool

	files map[string]*fileState // by base name
	// served is the merged state last handed to report: its entries point
	// into the files' states, so an entry of a file not parsed again is
	// the same pointer, and known unchanged without comparing it.
	served map[model.ServiceKey]served
	// definers lists, for every key some file's good defines, those
	// files' names in order (the first wins); dups holds the keys with
	// more than one; dirty the keys whose winner may differ from served.
	// setGood keeps them, so that a report costs what changed, not the
	// whole registry (merging 10,001 services on every scan was most of
	// the CPU a one-file change cost once files were no longer re-hashed).
	definers map[model.ServiceKey][]string
	dups     map[model.ServiceKey]struct{}
	dirty    map[model.ServiceKey]struct{}
	synced   bool // the files were reported once
	// changed is set when a scan changed what the files contribute (a
	// file parsed, added, removed or unreadable) and cleared by report: a
	// scan that changed nothing has nothing to report.
	changed bool
	// buf is the read buffer for fingerprinting files.
	buf []byte
	// statRacy is racyStat, which tests may shorten; opened counts the
	// files opened for a fingerprint or a read, for tests.
	statRacy time.Duration
	opened   int
	// unreachable is the error reported with Unreachable, nil if none.
	unreachable error

	// holdSince is when a report that removes something was first held
	// back (zero: nothing held); forceRemovals makes the next report
	// apply it (the directory was quiet for Config.RemovalDelay).
	holdSince     time.Time
	forceRemovals bool
	// persisted are the files whose last good content is in
	// Config.StateDir, by base name.
	persisted map[string]bool
}

// errEmptyDir is the outage reported for a registry directory that holds no
// registry file after services were served from it.
var errEmptyDir = errors.New("the registry directory holds no *.yaml or *.yml file")

// maxHoldFactor bounds how long removals are held while files keep
// changing: Config.RemovalDelay times this, then they are applied anyway.
const maxHoldFactor = 5

// nextScan is the delay until the next periodic scan: short while the
// directory is missing, Config.Resync otherwise.
func (s *runState) nextScan() time.Duration {
	if s.unreachable != nil {
		return min(retryInterval, s.cfg.Resync)
	}
	return s.cfg.Resync
}

// relevant says whether ev may change what the directory holds. Editor
// swap and backup files are skipped so that typing in Vim does not cause a
// re-scan every few seconds; Kubernetes' "..data" swaps are kept.
func (s *runState) relevant(ev fsnotify.Event) bool {
	if filepath.Clean(ev.Name) == s.cfg.Dir {
		return true
	}
	base := filepath.Base(ev.Name)
	return strings.HasPrefix(base, "..") || isRegistryFile(base)
}

// isRegistryFile says whether a directory entry name is a registry file.
func isRegistryFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// sync re-scans the directory and reports what changed.
func (s *runState) sync() {
	if err := s.scan(); err != nil {
		if s.unreachable == nil {
			s.log.Debug("registry directory unreachable; keeping the last state", "err", err)
			s.report.Unreachable(err)
		}
		s.unreachable = err
		return
	}
	// reportFiles would find no difference: skip building the merged state.
	if s.changed || !s.synced || s.unreachable != nil || s.forceRemovals {
		s.reportFiles()
	}
}

// scan makes sure the directory is watched and reads every registry file
// whose content changed. It returns an error only if the directory itself
// cannot be read.
func (s *runState) scan() error {
	dir := s.cfg.Dir
	if err := s.ensureWatch(); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cannot read registry directory %s: %w", dir, err)
	}

	seen := map[string]bool{}
	// Files are parsed as they are read, and kept in listing order once all are parsed.
	pool := parsePool{namespace: s.cfg.Namespace}
	defer pool.wait() // the panics of a bug aside, parseAndKeep has waited already
	var toParse []*fileParse
	toParseBytes := 0
	for _, e := range entries {
		name := e.Name()
		if !isRegistryFile(name) {
			continue
		}
		path := filepath.Join(dir, name)
		// Stat, not e.Type(): ConfigMap volumes hold symlinks to files.
		fi, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed since the listing, or a dangling link
		}
		if err == nil && fi.IsDir() {
			continue
		}
		fs := s.files[name]
		if fs == nil {
			fs = &fileState{}
			s.files[name] = fs
			s.changed = true
		}
		seen[name] = true
		// A file parsed before is not read while its stat is what it was
		// when its content was fingerprinted; otherwise it is hashed, through
		// a small buffer, and read whole only if its content changed.
		var data []byte
		var st statKey
		statOK, statAt := false, time.Now()
		if err == nil {
			st, statOK = statKeyOf(fi)
		}
		if err == nil && fs.parsed {
			if statOK && fs.statOK && st == fs.stat && fs.stat.trusted(fs.statAt, s.statRacy) {
				continue
			}
			var fp fingerprint
			if fp, err = s.fingerprintFile(path); err == nil && fp == fs.fp {
				fs.stat, fs.statAt, fs.statOK = st, statAt, statOK
				continue
			}
		}
		if err == nil {
			data, err = s.readFile(path)
		}
		if errors.Is(err, os.ErrNotExist) {
			delete(seen, name)
			continue
		}
		s.changed = true
		if err != nil {
			// Unreadable (permissions): like a malformed file, keep what it
			// said last, and read it again next time.
			fs.parsed = false
			fs.fileErr = &rejection{path: path, err: fmt.Errorf("cannot read file: %w", err)}
			s.keepLastGood(name, fs)
			continue
		}
		fs.parsed, fs.fp = true, fingerprintOf(data)
		fs.stat, fs.statAt, fs.statOK = st, statAt, statOK
		f := &fileParse{name: name, path: path, data: data, fs: fs}
		pool.add(f)
		toParse = append(toParse, f)
		if toParseBytes += len(data); toParseBytes >= parseBatchBytes {
			s.parseAndKeep(&pool, toParse)
			toParse, toParseBytes = toParse[:0], 0
		}
	}
	s.parseAndKeep(&pool, toParse)
	for name, fs := range s.files {
		if !seen[name] {
			s.setGood(name, fs, nil)
			delete(s.files, name)
			s.changed = true
		}
	}
	return nil
}

// fileParse is one changed file of a scan: its content in, the parse out.
type fileParse struct {
	name, path string
	data       []byte
	fs         *fileState
	parsed     *parsedFile
	rej        *rejection
}

// parseBatchBytes bounds the file content a scan holds at once while its
// files are parsed in parallel.
const parseBatchBytes = 32 << 20

// parseAndKeep waits for the files added to pool to be parsed, then keeps each one's
// services, or its last good ones if it is malformed, in listing order.
func (s *runState) parseAndKeep(pool *parsePool, files []*fileParse) {
	pool.wait()
	for _, f := range files {
		if f.rej != nil {
			f.fs.fileErr = f.rej
			s.keepLastGood(f.name, f.fs)
		} else {
			f.fs.fileErr = nil
			var good []parsedService
			good, f.fs.rejected = carryForward(f.fs.good, f.parsed)
			s.setGood(f.name, f.fs, good)
			s.persist(f.name, f.data)
		}
		*f = fileParse{} // the content and parse are kept in fs now, or dropped
	}
}

// parsePool parses files on up to GOMAXPROCS goroutines while the scan reads the next ones:
// reading the load tool's 12 MB registry took 60 ms of a start's single goroutine, with a
// core free meanwhile. The files are independent; parsing is most of a start's adapter work.
// Its goroutines start with the first file added (a scan that finds nothing changed starts
// none) and are gone when wait returns. A pool belongs to one goroutine.
type parsePool struct {
	namespace string
	files     chan *fileParse // nil: no goroutine running
	wg        sync.WaitGroup
}

func (p *parsePool) add(f *fileParse) {
	if p.files == nil {
		p.files = make(chan *fileParse, parsePoolQueue)
		for range runtime.GOMAXPROCS(0) {
			p.wg.Go(func() {
				var arena nodeArena // one per goroutine, for every file it parses
				for f := range p.files {
					f.parsed, f.rej = parseFileIn(&arena, f.path, f.data, p.namespace)
				}
			})
		}
	}
	p.files <- f
}

// wait returns once every file added is parsed and the goroutines have stopped.
func (p *parsePool) wait() {
	if p.files != nil {
		close(p.files)
		p.wg.Wait()
		p.files = nil
	}
}

// parsePoolQueue is how many files read may wait for a parsing goroutine: the scan reads
// ahead that far (parseBatchBytes bounds their bytes).
const parsePoolQueue = 64

// openFile opens a registry file for reading if it is a regular file of at
// most Config.MaxFileSize bytes. A named pipe, a device or a socket is
// refused without blocking: O_NONBLOCK makes opening a FIFO return at once
// (a plain open waits for a writer, and the watcher with it), and the
// check is made on the open file, so a file swapped between the listing
// and the open is caught too.
func (s *runState) openFile(path string) (*os.File, error) {
	s.opened++
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("not a regular file (%v): only regular files, or links to them, are read", fi.Mode().Type())
	}
	if fi.Size() > s.cfg.MaxFileSize {
		f.Close()
		return nil, s.tooLarge(fi.Size())
	}
	return f, nil
}

func (s *runState) tooLarge(size int64) error {
	return fmt.Errorf("file is %d bytes or more, over the limit of %d (--max-file-size)", size, s.cfg.MaxFileSize)
}

// readFile reads a registry file whole, never more than
// Config.MaxFileSize bytes even if it grows while being read.
func (s *runState) readFile(path string) ([]byte, error) {
	f, err := s.openFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Sized from the file (openFile checked it is at most MaxFileSize): one
	// read instead of io.ReadAll's doubling from 512 bytes, which took a
	// start 115 ms for 12 MB. A file that grew meanwhile still reads whole.
	var buf bytes.Buffer
	if fi, err := f.Stat(); err == nil {
		buf.Grow(int(min(fi.Size(), s.cfg.MaxFileSize)) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(io.LimitReader(f, s.cfg.MaxFileSize+1)); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	if int64(len(data)) > s.cfg.MaxFileSize {
		return nil, s.tooLarge(int64(len(data)))
	}
	return data, nil
}

// fingerprintFile returns the fingerprint of the file at path, reading it
// through s.buf so that an unchanged file costs no allocation.
func (s *runState) fingerprintFile(path string) (fingerprint, error) {
	f, err := s.openFile(path)
	if err != nil {
		return fingerprint{}, err
	}
	defer f.Close()
	if s.buf == nil {
		s.buf = make([]byte, 64<<10)
	}
	d := xxhash.New()
	var size int64
	for {
		n, err := f.Read(s.buf)
		size += int64(n)
		if size > s.cfg.MaxFileSize {
			return fingerprint{}, s.tooLarge(size)
		}
		_, _ = d.Write(s.buf[:n]) // never fails
		if errors.Is(err, io.EOF) {
			return fingerprint{size: size, hash: d.Sum64()}, nil
		}
		if err != nil {
			return fingerprint{}, err
		}
	}
}

// keepLastGood completes a bad file's rejection with what is served
// instead: the content it had in this run, or, after a restart, the last
// good content kept in Config.StateDir.
func (s *runState) keepLastGood(name string, fs *fileState) {
	if fs.good == nil && s.persisted[name] {
		path := filepath.Join(s.cfg.StateDir, name)
		if data, err := os.ReadFile(path); err == nil {
			if parsed, rej := parseFile(filepath.Join(s.cfg.Dir, name), data, s.cfg.Namespace); rej == nil {
				good, _ := carryForward(nil, parsed)
				s.setGood(name, fs, good)
				fs.fileErr.err = fmt.Errorf("%w (its last good content, kept in %s, is served)", fs.fileErr.err, s.cfg.StateDir)
				return
			}
		}
	}
	if fs.good != nil {
		fs.fileErr.err = fmt.Errorf("%w (the file's last good content is still served)", fs.fileErr.err)
	}
}

// loadPersisted lists the files whose last good content Config.StateDir
// holds.
func (s *runState) loadPersisted() {
	s.persisted = map[string]bool{}
	if s.cfg.StateDir == "" {
		return
	}
	entries, err := os.ReadDir(s.cfg.StateDir)
	if err != nil {
		s.log.Warn("cannot read the state directory; last good contents are kept in memory only", "state_dir", s.cfg.StateDir, "err", err)
		return
	}
	for _, e := range entries {
		if isRegistryFile(e.Name()) && e.Type().IsRegular() {
			s.persisted[e.Name()] = true
		}
	}
}

// persist keeps a file's good content in Config.StateDir, written to a
// temporary file and renamed, so a crash leaves the old copy or the new.
func (s *runState) persist(name string, data []byte) {
	if s.cfg.StateDir == "" {
		return
	}
	path := filepath.Join(s.cfg.StateDir, name)
	tmp := filepath.Join(s.cfg.StateDir, ".tmp-"+name)
	err := os.WriteFile(tmp, data, 0o600)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		s.log.Warn("cannot keep a file's last good content in the state directory", "file", name, "state_dir", s.cfg.StateDir, "err", err)
		return
	}
	s.persisted[name] = true
}

// forgetRemoved drops the persisted copies of files no longer in the
// directory, once their removal has been reported.
func (s *runState) forgetRemoved() {
	for name := range s.persisted {
		if _, ok := s.files[name]; !ok {
			if err := os.Remove(filepath.Join(s.cfg.StateDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.log.Warn("cannot remove a file's copy from the state directory", "file", name, "err", err)
				continue
			}
			delete(s.persisted, name)
		}
	}
}

// carryForward returns the services of a newly parsed file, keeping the
// previous version of each service whose new entry is malformed, and the
// file's rejections. It takes over parsed.services.
func carryForward(prev []parsedService, parsed *parsedFile) ([]parsedService, []rejection) {
	// parseFile sized services for every entry: the previous versions
	// carried forward fit without copying.
	good := parsed.services
	if len(parsed.rejected) == 0 {
		return good, nil // in line order already
	}
	present := make(map[model.ServiceKey]bool, len(good))
	for i := range good {
		present[good[i].svc.Key()] = true
	}
	old := make(map[model.ServiceKey]*model.Service, len(prev))
	for i := range prev {
		old[prev[i].svc.Key()] = &prev[i].svc
	}
	rejected := make([]rejection, 0, len(parsed.rejected))
	for _, bad := range parsed.rejected {
		rej := bad.rejection
		if svc, ok := old[bad.key]; ok && bad.known && !present[bad.key] {
			present[bad.key] = true
			good = append(good, parsedService{svc: *svc, line: bad.start})
			rej.err = fmt.Errorf("%w (its previous version is still served)", rej.err)
		}
		rejected = append(rejected, rej)
	}
	sort.SliceStable(good, func(i, j int) bool { return good[i].line < good[j].line })
	return good, rejected
}

// ensureWatch watches the directory, re-adding the watch when the
// directory was replaced. A missing directory is an error; a watch that
// cannot be added (inotify watch limit) is logged and left to the
// periodic re-scan.
func (s *runState) ensureWatch() error {
	dir := s.cfg.Dir
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("%s is not a directory", dir)
	}
	if err != nil {
		if s.watched != nil {
			// Usually gone already with the directory; Remove is for a
			// directory that was renamed away and is still watched.
			_ = s.watcher.Remove(dir)
			s.watched = nil
		}
		return fmt.Errorf("registry directory: %w", err)
	}
	if s.watched != nil && os.SameFile(s.watched, fi) {
		return nil
	}
	if s.watched != nil {
		_ = s.watcher.Remove(dir)
		s.watched = nil
	}
	if err := s.watcher.Add(dir); err != nil {
		if !s.watchErrShown {
			s.log.Warn("cannot watch the registry directory; changes are picked up by periodic re-scans only",
				"err", err, "resync", s.cfg.Resync)
			s.watchErrShown = true
		}
		return nil
	}
	s.watchErrShown = false
	s.watched = fi
	return nil
}

// served is a service in the merged state: the entry of the file that
// defines it, shared with that file's state rather than copied.
type served struct {
	*parsedService
	file string // base name
}

// reportFiles hands the reconciler the winners of the dirty keys (see
// setGood), which reports what changed (a Replace on the first report and
// after an outage). Services of files not parsed again are not looked at.
func (s *runState) reportFiles() {
	s.changed = false
	rejections := s.rejections()
	if s.holdEmpty(len(s.definers)) || s.holdRemovals() {
		return // the dirty keys wait for a later report
	}
	rejected := make(map[string]error, len(rejections))
	for _, rej := range rejections {
		rejected[rej.record()] = rej.err
	}
	s.report.SetRejections(rejected)
	for k := range s.dirty {
		cur, ok := s.winner(k)
		old, had := s.served[k]
		switch {
		case ok && (!had || old.parsedService != cur.parsedService):
			s.report.Set(cur.svc)
			s.served[k] = cur
		case !ok && had:
			s.report.Remove(k)
			delete(s.served, k)
		}
	}
	clear(s.dirty)
	if !s.synced || s.unreachable != nil {
		// Debug: the core logs "registry synced" once the listing is served.
		s.log.Debug("directory listed", "services", len(s.served), "files", len(s.files))
	}
	s.report.Flush()
	s.synced = true
	if s.unreachable != nil {
		s.log.Debug("registry directory reachable again")
		s.unreachable = nil
	}
	s.forgetRemoved()
}

// holdEmpty keeps the last state when the directory holds no registry file
// at all after services were served from it (or, after a restart, after
// Config.StateDir kept files from it): a directory deleted and recreated,
// or a volume mounted empty, is far likelier than an operator removing
// every service that way. It is reported as an outage until a file
// appears; a file with "services: []" removes everything on purpose.
func (s *runState) holdEmpty(desired int) bool {
	if desired > 0 || len(s.files) > 0 {
		return false
	}
	before := len(s.served)
	if !s.synced {
		before = len(s.persisted)
	}
	if before == 0 {
		return false
	}
	if !errors.Is(s.unreachable, errEmptyDir) {
		var err error
		if s.synced {
			err = fmt.Errorf("%w, after %d services came from it: they stay served; a file with \"services: []\" removes every service on purpose", errEmptyDir, before)
			s.log.Warn("registry directory is empty; serving the last state", "err", err)
		} else {
			// After a restart nothing is served yet: say so, rather than
			// promise a last state this process never served.
			err = fmt.Errorf("%w, though %d files came from it before the restart (--state-dir): nothing is served until a registry file appears; a file with \"services: []\" serves none on purpose", errEmptyDir, before)
			s.log.Warn("registry directory is empty after a restart; serving nothing until a file appears", "err", err)
		}
		s.report.Unreachable(err)
		s.unreachable = err
	}
	return true
}

// holdRemovals holds back a report that removes a service or an instance
// until the directory has been quiet for Config.RemovalDelay (Run's
// removals timer then forces it), so that a file read while being written
// removes nothing. While files keep changing, the hold lasts at most
// maxHoldFactor delays.
func (s *runState) holdRemovals() bool {
	now := time.Now()
	if !s.synced || !s.loses() {
		if !s.holdSince.IsZero() {
			s.log.Info("held removals are gone: the files were only being written")
		}
		s.holdSince = time.Time{}
		return false
	}
	if s.holdSince.IsZero() {
		s.holdSince = now
		s.log.Info("a scan removes services or instances; reporting it once the directory is quiet", "delay", s.cfg.RemovalDelay)
	}
	if !s.forceRemovals && now.Sub(s.holdSince) < maxHoldFactor*s.cfg.RemovalDelay {
		s.changed = true // report it on a later scan
		return true
	}
	s.log.Info("reporting removals", "held", now.Sub(s.holdSince).Round(time.Millisecond))
	s.holdSince = time.Time{}
	return false
}

// loses says whether reporting the dirty keys removes a service or one of a
// service's instances.
func (s *runState) loses() bool {
	for k := range s.dirty {
		o, had := s.served[k]
		if !had {
			continue
		}
		n, ok := s.winner(k)
		if !ok {
			return true
		}
		if o.parsedService == n.parsedService {
			continue
		}
		ids := make(map[string]bool, len(n.svc.Instances))
		for _, inst := range n.svc.Instances {
			ids[inst.ID] = true
		}
		for _, inst := range o.svc.Instances {
			if !ids[inst.ID] {
				return true
			}
		}
	}
	return false
}

// setGood makes good what file name contributes, keeping definers, dups
// and dirty: every key the file defined before or defines now may have
// another winner.
func (s *runState) setGood(name string, fs *fileState, good []parsedService) {
	if s.definers == nil {
		s.definers = map[model.ServiceKey][]string{}
		s.dups = map[model.ServiceKey]struct{}{}
		s.dirty = map[model.ServiceKey]struct{}{}
	}
	for i := range fs.good {
		k := fs.good[i].svc.Key()
		d := s.definers[k]
		if at, ok := slices.BinarySearch(d, name); ok {
			d = slices.Delete(d, at, at+1)
		}
		if len(d) == 0 {
			delete(s.definers, k)
		} else {
			s.definers[k] = d
		}
		if len(d) < 2 {
			delete(s.dups, k)
		}
		s.dirty[k] = struct{}{}
	}
	fs.good, fs.index = good, nil
	if len(good) > 0 {
		fs.index = make(map[model.ServiceKey]int, len(good))
	}
	for i := range good {
		k := good[i].svc.Key()
		fs.index[k] = i
		d := s.definers[k]
		if at, ok := slices.BinarySearch(d, name); !ok {
			d = slices.Insert(d, at, name)
		}
		s.definers[k] = d
		if len(d) > 1 {
			s.dups[k] = struct{}{}
		}
		s.dirty[k] = struct{}{}
	}
}

// winner is the service to serve for k: the definition in the file whose
// name sorts first. The merged state points into the files' states: it
// costs a map entry per service, not a copy.
func (s *runState) winner(k model.ServiceKey) (served, bool) {
	d := s.definers[k]
	if len(d) == 0 {
		return served{}, false
	}
	fs := s.files[d[0]]
	return served{parsedService: &fs.good[fs.index[k]], file: d[0]}, true
}

// rejections are the rejections that currently apply: the files' own, and
// every definition of a service that a file sorting earlier also defines.
func (s *runState) rejections() []rejection {
	var out []rejection
	for _, fs := range s.files {
		if fs.fileErr != nil {
			out = append(out, *fs.fileErr)
		}
		out = append(out, fs.rejected...)
	}
	for k := range s.dups {
		d := s.definers[k]
		first := s.files[d[0]]
		owner := rejection{path: filepath.Join(s.cfg.Dir, d[0]), line: first.good[first.index[k]].line}.record()
		for _, name := range d[1:] {
			fs := s.files[name]
			out = append(out, rejection{path: filepath.Join(s.cfg.Dir, name), line: fs.good[fs.index[k]].line, err: fmt.Errorf(
				"service %s is already defined in %s; the definition in the file whose name sorts first wins", k, owner)})
		}
	}
	return out
}
