package zookeeper

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// tickers are the loop's periodic events; a nil channel is one that is off.
type tickers struct {
	live, authPoll, relist <-chan time.Time
	stop                   []func()
}

func (t *tickers) stopAll() {
	for _, s := range t.stop {
		s()
	}
}

// every starts a ticker of period d, stopped by stopAll.
func (t *tickers) every(d time.Duration) <-chan time.Time {
	tk := time.NewTicker(d)
	t.stop = append(t.stop, tk.Stop)
	return tk.C
}

// run is one Run: it connects, then runs the loop until ctx is done, and returns once the
// client's goroutines and the probes have ended.
func (w *watcher) run(ctx context.Context) error {
	cfg := &w.r.cfg
	w.startTimers()
	defer w.stopTimers()
	var tk tickers
	defer tk.stopAll()
	// Liveness: how often the adapter checks that the server answers (and sends a probe when
	// the connection is idle), so that a server that stops answering is reported about
	// UnreachableAfter after it stopped, not after the client's read timeout (two thirds of
	// the session timeout) on top of it.
	tk.live = tk.every(max(cfg.UnreachableAfter/8, 10*time.Millisecond))

	events, err := w.connect(ctx)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, w.closeAll)
	defer func() {
		stop()
		w.closeAll()
		// The client closes its event channel once its goroutines are done: wait for that, so
		// that none outlives Run.
		for range events {
		}
		w.live.probes.Wait() // its request failed with the connection's close
	}()
	w.r.log.Info("watching ZooKeeper", "session_timeout", cfg.SessionTimeout, "namespace", cfg.Namespace, "tls", cfg.tlsEnabled())
	if digest, err := cfg.digest(); err != nil {
		return err // checked by New: the file went in between
	} else if digest != "" {
		w.auth.pending, w.auth.seen = digest, digest
	}
	if cfg.AuthFile != "" {
		tk.authPoll = tk.every(authPollInterval)
	}
	if cfg.RelistInterval > 0 {
		tk.relist = tk.every(cfg.RelistInterval)
	}
	return w.loop(ctx, &tk)
}

// startTimers creates the loop's timers: the grace timer running (there is no session yet), the
// others stopped.
func (w *watcher) startTimers() {
	w.sess.grace = time.NewTimer(w.r.cfg.UnreachableAfter)
	stopped := func() *time.Timer {
		t := time.NewTimer(0)
		<-t.C
		return t
	}
	w.lostConn.retry = stopped()
	w.later.t = stopped()
	w.retiring.t = stopped()
}

func (w *watcher) stopTimers() {
	w.sess.grace.Stop()
	w.lostConn.retry.Stop()
	w.later.t.Stop()
	w.retiring.t.Stop()
}

// loop is Run's loop: the next step the state allows, else a wait for the next event.
func (w *watcher) loop(ctx context.Context, tk *tickers) error {
	for {
		w.drain()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if w.step(ctx) {
			continue
		}
		if err := w.await(ctx, tk); err != nil {
			return err
		}
	}
}

// step does the first thing the state allows: present credentials, read the dirty paths
// (marking the periodic relisting's next chunk first when nothing else is to read), or build
// and Flush what changed. It reports whether the loop is to look again at once; false, it
// waits for an event.
func (w *watcher) step(ctx context.Context) bool {
	if !w.sess.has {
		return false // the session event, or the grace timer
	}
	if !w.lostConn.waiting {
		if w.auth.pending != "" {
			w.presentAuth(ctx)
			return true
		}
		if !w.anyDirty() && len(w.relist.names) > 0 && w.queued() == 0 {
			w.relistNext()
		}
		if w.anyDirty() {
			w.readRound(ctx)
			return true
		}
	}
	if w.rootsOK() && !w.anyDirty() && w.queued() == 0 && w.changed {
		w.flush()
	}
	return false
}

// await waits for one event or timer and handles it. It returns ctx's error once ctx is done.
func (w *watcher) await(ctx context.Context, tk *tickers) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.wake: // drain, at the top of the loop
	case <-tk.live:
		w.checkLive()
	case <-w.later.t.C:
		w.laterDue()
	case <-w.retiring.t.C:
		w.retireNow()
	case <-w.sess.grace.C:
		w.graceOver()
	case <-tk.relist:
		w.relistTick()
	case <-tk.authPoll:
		w.authPoll()
	case <-w.lostConn.retry.C:
		w.lostConn.waiting = false
	}
	return nil
}

// presentAuth presents the pending digest credentials. It comes before any read:
// go-zookeeper presents credentials again on every reconnection, but only those it has seen
// accepted, so this is retried until it is.
func (w *watcher) presentAuth(ctx context.Context) {
	if err := w.conn.AddAuth("digest", []byte(w.auth.pending)); err != nil {
		if ctx.Err() == nil {
			w.r.log.Debug("presenting digest credentials failed; retrying", "error", err)
			w.wait()
		}
		return
	}
	user, _, _ := strings.Cut(w.auth.pending, ":")
	w.r.log.Info("presented digest credentials to ZooKeeper", "user", user)
	w.auth.pending = ""
	if w.auth.retry {
		// Reads that the old credentials could not make: again, with the new ones.
		w.auth.retry = false
		w.markAll()
	}
}

// readRound reads the dirty paths once, and accounts for a round that lost the connection.
func (w *watcher) readRound(ctx context.Context) {
	if err := w.round(ctx); err != nil && ctx.Err() == nil {
		w.lost(err)
	} else if err == nil {
		w.roundDone()
	}
}

// flush tells the Reconciler the state of what changed, and ends an outage reported.
func (w *watcher) flush() {
	w.build()
	w.rec.Flush()
	w.changed = false
	w.down = false
}

// graceOver reports the registry unreachable when the session has been gone for
// UnreachableAfter.
func (w *watcher) graceOver() {
	if w.sess.has {
		return
	}
	cfg := &w.r.cfg
	w.mu.Lock()
	why := ""
	if w.dialErr != nil {
		why = "; last connection attempt: " + w.dialErr.Error()
	}
	w.mu.Unlock()
	w.rec.Unreachable(fmt.Errorf("zookeeper %s: no session for %v (client state %v%s); serving what was read last",
		strings.Join(cfg.Servers, ","), cfg.UnreachableAfter, w.sess.state, why))
	w.down = true
}

// relistTick starts a periodic relisting, unless one is under way.
func (w *watcher) relistTick() {
	if len(w.relist.names) == 0 {
		w.relist.names = slices.Sorted(maps.Keys(w.services))
		w.relist.at = time.Now()
		w.r.metrics.relists.WithLabelValues("periodic").Inc()
	}
}

// authPoll reads the credentials file again; new credentials are presented before the next
// read.
func (w *watcher) authPoll() {
	digest, err := w.r.cfg.digest()
	switch {
	case err != nil:
		if err.Error() != w.auth.err {
			w.r.log.Warn("reading the credentials file failed; keeping the credentials presented", "error", err)
		}
		w.auth.err = err.Error()
	case digest != w.auth.seen:
		w.r.log.Info("the credentials file changed: presenting the new credentials", "file", w.r.cfg.AuthFile)
		w.auth.pending, w.auth.seen, w.auth.err, w.auth.retry = digest, digest, "", true
	}
}

// drain applies the queued events: session changes, and the paths whose watch fired.
func (w *watcher) drain() {
	w.mu.Lock()
	events := w.queue
	w.queue = nil
	w.mu.Unlock()
	for _, e := range events {
		if e.Type == zk.EventSession {
			w.sessionEvent(e)
			continue
		}
		if e.Type == zk.EventNotWatching {
			continue // the session expired: the new one relists everything
		}
		w.watchFired(e.Path, e.Type)
	}
}

// sessionEvent handles a change of the client's state: a session (new, or the same one
// again), or none.
func (w *watcher) sessionEvent(e zk.Event) {
	w.sess.state = e.State
	switch e.State {
	case zk.StateHasSession:
		w.sessionUp(e)
	case zk.StateDisconnected, zk.StateExpired:
		w.sessionDown(e)
	}
}

// sessionUp handles a connection with a session: a new session (the first, or one after an
// expiry, which lost every watch: everything is read again) or the same one (nothing missed).
func (w *watcher) sessionUp(e zk.Event) {
	id := w.conn.SessionID()
	if id != w.sess.id {
		if w.sess.id != 0 {
			w.r.log.Warn("ZooKeeper session expired: relisting every service on the new session",
				"old_session", fmt.Sprintf("0x%x", w.sess.id), "new_session", fmt.Sprintf("0x%x", id))
			w.markAll()
			w.r.metrics.relists.WithLabelValues("session_expired").Inc()
		} else {
			w.r.log.Info("ZooKeeper session established", "session", fmt.Sprintf("0x%x", id), "server", e.Server)
		}
		w.sess.id = id
		w.r.metrics.sessions.WithLabelValues("established").Inc()
	} else if !w.sess.has {
		w.r.metrics.sessions.WithLabelValues("reconnected").Inc()
		w.r.log.Info("reconnected within the ZooKeeper session: watches kept", "server", e.Server)
		// Nothing was missed: the watches held. An outage reported
		// meanwhile ends at the next Flush without a Replace.
		w.rec.Resumed()
	}
	w.sess.has = true
	if w.lostConn.waitSession {
		w.lostConn.waiting = false
	}
	w.sess.grace.Stop()
	if w.down {
		w.changed = true // the Flush that reports the registry back
	}
}

// sessionDown handles a disconnection or an expiry: the grace timer starts.
func (w *watcher) sessionDown(e zk.Event) {
	if e.State == zk.StateExpired {
		w.r.metrics.sessions.WithLabelValues("expired").Inc()
		w.r.log.Info("ZooKeeper session expired; reconnecting", "session", fmt.Sprintf("0x%x", w.sess.id))
	}
	if w.sess.has {
		w.sess.has = false
		w.sess.grace.Reset(w.r.cfg.UnreachableAfter)
	}
	w.live.silent = false // the grace timer takes over
}

// watchFired marks the path a watch fired on to be read again.
func (w *watcher) watchFired(p string, et zk.EventType) {
	if rs, ok := w.roots[p]; ok {
		rs.dirty = true
		return
	}
	if sp, ok := w.byOvrPath[p]; ok {
		w.dirty.ovr[sp] = true
		return
	}
	if sp, ok := w.byPath[p]; ok {
		w.dirty.svc[sp] = true
		if t, name := w.split(sp); p == sp && t.ovr(name) != "" {
			// The service znode's children watch stands in for a missing instances or
			// overrides node: one of them may have appeared.
			w.dirty.ovr[sp] = true
		}
		return
	}
	if sp, ok := w.byPath[path.Dir(p)]; ok {
		if t, _ := w.split(sp); !t.layout.readsData() {
			return
		}
		id := path.Base(p)
		// A deleted instance node is not read: its service's children watch fired in the
		// same transaction (or already had), and that read removes it.
		if w.nodeOf(w.services[sp], id) != nil && et != zk.EventNodeDeleted {
			w.dirty.node[nodeKey{sp, id}] = true
		}
	}
}

// relistChunk is how many services the periodic relisting reads at a time: about 3 reads
// each, a fraction of a second of one connection at ZooKeeper's read rate (see
// docs/benchmarks.md, galleon-bench zookeeper), which is the longest it can hold back a
// change that arrives meanwhile.
const relistChunk = 256

// relistNext marks the next chunk of the periodic relisting to be read again.
func (w *watcher) relistNext() {
	n := min(relistChunk, len(w.relist.names))
	for _, name := range w.relist.names[:n] {
		s, ok := w.services[name]
		if !ok {
			continue
		}
		w.markService(name, s)
	}
	w.relist.names = w.relist.names[n:]
	if len(w.relist.names) == 0 {
		w.r.log.Info("periodic relisting done", "services", len(w.services), "took", time.Since(w.relist.at).Round(time.Millisecond))
	}
}

// markAll marks every path known to be read again: the watches went with the old session.
func (w *watcher) markAll() {
	for _, rs := range w.rootList {
		rs.dirty = true
	}
	for sp, s := range w.services {
		w.markService(sp, s)
	}
}

// markService marks the paths of service znode sp to be read again.
func (w *watcher) markService(sp string, s *service) {
	t, name := w.split(sp)
	w.dirty.svc[sp] = true
	if t.ovr(name) != "" {
		w.dirty.ovr[sp] = true
	}
	if !t.layout.readsData() {
		return // the nodes' names are their content: the children read covers them
	}
	for _, n := range s.nodes {
		w.dirty.node[nodeKey{sp, n.name}] = true // a layout that reads data keeps every name
	}
}
