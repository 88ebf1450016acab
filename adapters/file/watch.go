package file

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// retryInterval is how often a missing directory is looked for: one stat,
// so often enough that a returning directory is served within a fraction
// of a second.
const retryInterval = 250 * time.Millisecond

// watchLoop is Run's loop after the first scan: it waits for one of five
// things and hands each to a small handler. Every scan is runState.sync;
// what decides when one happens is here:
//   - a file-system event or a watch error starts or extends a burst, and
//     debounce fires once the directory was quiet for Config.ScanQuiet
//     (at most MaxScanQuiet after the burst started): one scan per save;
//   - ticker fires the periodic re-scan (Config.Resync, or retryInterval
//     while the directory is missing);
//   - removals fires once the directory was quiet for Config.RemovalDelay
//     while a report that removes something is held back
//     (runState.holdSince set), and forces that report.
//
// It is used by Run's goroutine only.
type watchLoop struct {
	s *runState
	// events and errs are the watch's channels, nil once closed.
	events <-chan fsnotify.Event
	errs   <-chan error

	debounce   *time.Timer
	burstStart time.Time // zero when no scan is pending
	ticker     *time.Ticker
	removals   *time.Timer
}

// newWatchLoop arms the timers for the state the first scan left.
func newWatchLoop(s *runState) *watchLoop {
	l := &watchLoop{
		s:        s,
		events:   s.watcher.Events,
		errs:     s.watcher.Errors,
		debounce: time.NewTimer(time.Hour),
		removals: time.NewTimer(time.Hour),
	}
	l.debounce.Stop()
	l.removals.Stop()
	l.armRemovals()
	l.ticker = time.NewTicker(s.nextScan())
	return l
}

// stop releases the timers.
func (l *watchLoop) stop() {
	l.ticker.Stop()
	l.debounce.Stop()
	l.removals.Stop()
}

// run handles what comes until ctx is cancelled, then returns ctx.Err().
func (l *watchLoop) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-l.events:
			l.onEvent(ev, ok)
		case err, ok := <-l.errs:
			l.onWatchError(err, ok)
		case <-l.debounce.C:
			l.onQuiet()
		case <-l.ticker.C:
			l.onTick()
		case <-l.removals.C:
			l.onRemovalDelay()
		}
	}
}

// onEvent schedules a scan for an event that may change what the
// directory holds.
func (l *watchLoop) onEvent(ev fsnotify.Event, ok bool) {
	s := l.s
	if !ok {
		l.events = nil // only after Close; the resync ticker still works
		return
	}
	if !s.relevant(ev) {
		return
	}
	if filepath.Clean(ev.Name) == s.cfg.Dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
		// The watched directory itself went away, and the kernel
		// dropped its watch. A directory recreated at the same path
		// may get the same inode number, which os.SameFile cannot
		// tell apart: forget the watch so the next scan adds it anew.
		s.watched = nil
	}
	s.log.Debug("file-system event", "event", ev.String())
	l.burstStart = schedule(l.debounce, l.burstStart, s.cfg.ScanQuiet)
}

// onWatchError schedules a scan: typically the event queue overflowed, so
// events were lost.
func (l *watchLoop) onWatchError(err error, ok bool) {
	if !ok {
		l.errs = nil
		return
	}
	l.s.log.Warn("file-system watch error; re-scanning", "err", err)
	l.burstStart = schedule(l.debounce, l.burstStart, l.s.cfg.ScanQuiet)
}

// onQuiet scans once a burst of events is over.
func (l *watchLoop) onQuiet() {
	l.burstStart = time.Time{}
	l.s.sync()
	l.ticker.Reset(l.s.nextScan())
	l.armRemovals()
}

// onTick is the periodic re-scan.
func (l *watchLoop) onTick() {
	l.s.sync()
	l.ticker.Reset(l.s.nextScan())
	l.armRemovals()
}

// onRemovalDelay scans and reports the removals held back: the directory
// was quiet for Config.RemovalDelay.
func (l *watchLoop) onRemovalDelay() {
	l.s.forceRemovals = true
	l.s.sync()
	l.s.forceRemovals = false
	l.armRemovals()
}

// armRemovals runs the removals timer while a report is held back.
func (l *watchLoop) armRemovals() {
	if l.s.holdSince.IsZero() {
		l.removals.Stop()
	} else {
		l.removals.Reset(l.s.cfg.RemovalDelay)
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
