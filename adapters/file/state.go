package file

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

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
	// whole registry (merging every service on every scan was most of
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
			err = fmt.Errorf("%w, though %d files came from it before the restart (--%s): nothing is served until a registry file appears; a file with \"services: []\" serves none on purpose", errEmptyDir, before, flagStateDir)
			s.log.Warn("registry directory is empty after a restart; serving nothing until a file appears", "err", err)
		}
		s.report.Unreachable(err)
		s.unreachable = err
	}
	return true
}

// holdRemovals holds back a report that removes a service or an instance
// until the directory has been quiet for Config.RemovalDelay (watchLoop's
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
