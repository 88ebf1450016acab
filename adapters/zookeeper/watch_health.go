package zookeeper

import (
	"fmt"
	"path"
	"time"
)

// rootGone handles a root znode that does not exist. That is not an empty registry: a typo in
// --zk-root, or a registry that lost its data. Nothing is removed (a fresh adapter reports no
// listing; a running one keeps serving what it read), the registry is reported unreachable
// with what to check, and the exists watch set by the read says when it appears.
func (w *watcher) rootGone(rs *rootState) {
	which := "" // one root: the message it always was
	if len(w.rootList) > 1 {
		which = " (the root of layout " + kindsString(rs.t.kinds) + ")"
	}
	err := fmt.Errorf("root znode %q does not exist: check --%s%s, or the registry lost its data", rs.t.root, flagRoot, which)
	if rs.missing == nil {
		w.r.log.Warn("the root znode does not exist; serving what was read last, watching for it to appear",
			"error", err, "services_known", len(w.services))
	}
	rs.missing = err
	rs.ok = false
	w.rec.Unreachable(fmt.Errorf("zookeeper: %w", err))
	w.down = true
}

// bigAnswer is frameConn's report of an answer over the client's limit (on the client's
// receive goroutine): round handles it once the reads in flight have failed.
func (w *watcher) bigAnswer(b bigAnswer) {
	w.mu.Lock()
	w.big = append(w.big, b)
	w.mu.Unlock()
}

// tooBig skips the read whose answer was over the client's limit: its path is rejected (the
// root: the registry unreachable), what was read of it before stays served, and it is read
// again with a backoff. It reports whether the read was found.
func (w *watcher) tooBig(b bigAnswer) bool {
	w.r.metrics.oversized.Inc()
	err := fmt.Errorf("%w: ZooKeeper's answer to reading %s is %d bytes, over the client's limit of %d bytes (--%s, which should match the servers' jute.maxbuffer); it broke the connection",
		errOversized, b.path, b.size, w.r.cfg.MaxBuffer, flagMaxBuffer)
	r, ok := w.readOf(b.path, b.op)
	if !ok {
		w.r.log.Warn("an answer over the client's limit broke the connection", "error", err)
		return false
	}
	switch {
	case r.id != "":
		delete(w.dirty.node, nodeKey{r.name, r.id})
		n := w.nodeOf(w.services[r.name], r.id)
		err = w.retryLater(r, b.path, err)
		n.err = bad(reasonSize, fmt.Errorf("cannot read the node: %w", err))
		w.report(b.path, n)
		w.touch(r.name)
	default:
		w.failed(r, b.path, err)
	}
	return true
}

// readOf is the read of p (by op) that the adapter makes, if it makes one.
func (w *watcher) readOf(p string, op int32) (laterRead, bool) {
	if _, ok := w.roots[p]; ok {
		return laterRead{root: p}, true
	}
	if name, ok := w.byOvrPath[p]; ok {
		return laterRead{name: name, ovr: true}, true
	}
	if name, ok := w.byPath[p]; ok && op != opGetData {
		return laterRead{name: name}, true
	}
	if name, ok := w.byPath[path.Dir(p)]; ok && op == opGetData {
		id := path.Base(p)
		if w.nodeOf(w.services[name], id) != nil {
			return laterRead{name: name, id: id}, true
		}
	}
	return laterRead{}, false
}

// checkLive reports a server that owes answers and has sent nothing for UnreachableAfter while
// the session stands (a paused process, a frozen machine: the client itself notices only after
// its read timeout, two thirds of the session timeout), and its return. On an idle connection
// it sends a probe (an exists of the root) every UnreachableAfter/4, so that there is always
// an answer owed to wait for.
func (w *watcher) checkLive() {
	if !w.sess.has {
		return
	}
	w.mu.Lock()
	fc := w.dialed
	w.mu.Unlock()
	if fc == nil {
		return
	}
	now := time.Now()
	ua := w.r.cfg.UnreachableAfter
	silent, owed := fc.silence(now)
	switch {
	case silent > ua && !w.live.silent:
		w.live.silent = true
		w.live.session = w.sess.id
		err := fmt.Errorf("zookeeper %s: the server has answered nothing for %v while owing %d answers (paused, overloaded or cut off); serving what was read last",
			fc.RemoteAddr(), silent.Round(time.Millisecond), owed)
		w.r.log.Warn("ZooKeeper server not answering", "error", err)
		w.r.metrics.silences.Inc()
		w.rec.Unreachable(err)
		w.down = true
	case w.live.silent && silent <= ua:
		w.live.silent = false
		w.r.log.Info("the ZooKeeper server answers again", "server", fc.RemoteAddr())
		if w.sess.id == w.live.session {
			w.rec.Resumed() // the same connection: no watch was lost
		}
		w.changed = true
	}
	if !w.live.probing.Load() && fc.idle(now) > ua/4 {
		w.live.probing.Store(true)
		conn, root := w.conn, w.r.trees[0].root
		w.live.probes.Go(func() {
			defer w.live.probing.Store(false)
			_, _, err := conn.Exists(root)
			w.r.metrics.request("probe", err)
		})
	}
}
