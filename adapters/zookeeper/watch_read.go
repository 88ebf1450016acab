package zookeeper

import (
	"context"
	"errors"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// job is one read: a root's children (name == ""), a service's instances (id == "") or
// overrides (ovr), or an instance node's data; name is the service znode's path, t its tree.
type job struct {
	t        *tree
	name, id string
	ovr      bool
	// results
	children []string
	data     []byte
	exists   bool
	err      error
}

func (j *job) isRoot() bool { return j.name == "" }
func (j *job) isSvc() bool  { return j.name != "" && j.id == "" && !j.ovr }

// errConnection are the errors of a read that failed because the session or connection went.
func errConnection(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrClosing) ||
		errors.Is(err, zk.ErrSessionMoved)
}

// round reads every dirty path, ListConcurrency at a time, and applies the answers. It returns
// the first connection error; what it could not read stays dirty.
func (w *watcher) round(ctx context.Context) error {
	var jobs []*job
	for _, rs := range w.rootList {
		if rs.dirty {
			jobs = append(jobs, &job{t: rs.t})
		}
	}
	for sp := range w.dirty.svc {
		jobs = append(jobs, &job{t: w.roots[path.Dir(sp)].t, name: sp})
	}
	for sp := range w.dirty.ovr {
		jobs = append(jobs, &job{t: w.roots[path.Dir(sp)].t, name: sp, ovr: true})
	}
	for k := range w.dirty.node {
		jobs = append(jobs, &job{t: w.roots[path.Dir(k.name)].t, name: k.name, id: k.id})
	}
	start := time.Now()
	var lost error
	// Answers are applied as they come, while the other reads are in flight: parsing 100,000
	// provider URLs overlaps with waiting for ZooKeeper instead of following it. The order
	// between paths does not matter: each answer is about its own path, and one about a
	// service the root's answer removed meanwhile is dropped by apply.
	w.runJobs(ctx, jobs, func(j *job) {
		if j.err != nil && errConnection(j.err) {
			lost = cmpErr(lost, j.err)
			return
		}
		w.apply(j)
	})
	// An answer over the client's limit broke the connection: skip its read (retried with a
	// backoff), not the others, which the session's return lets go on.
	w.mu.Lock()
	big := w.big
	w.big = nil
	w.mu.Unlock()
	for _, b := range big {
		if w.tooBig(b) {
			w.lostConn.rounds = 0 // explained: not a connection that keeps breaking
		}
	}
	if len(jobs) > 1 {
		w.r.log.Debug("read ZooKeeper", "reads", len(jobs), "took", time.Since(start), "services", len(w.services))
	}
	return lost
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// runJobs runs the reads on at most ListConcurrency goroutines, all ended when it returns, and
// calls done with each job, answered or failed, on the caller's goroutine. Once ctx is
// cancelled the jobs not yet started fail with zk.ErrClosing.
func (w *watcher) runJobs(ctx context.Context, jobs []*job, done func(*job)) {
	next := make(chan *job)
	answered := make(chan *job, len(jobs)) // workers never wait for the caller
	var wg sync.WaitGroup
	for range min(w.r.cfg.ListConcurrency, len(jobs)) {
		wg.Go(func() {
			for j := range next {
				w.read(j)
				answered <- j
			}
		})
	}
	fed, pending := 0, 0
	for fed < len(jobs) || pending > 0 {
		feed := next
		var j *job
		if fed < len(jobs) {
			j = jobs[fed]
		} else {
			feed = nil
		}
		select {
		case feed <- j:
			fed++
			pending++
		case a := <-answered:
			pending--
			done(a)
		case <-ctx.Done():
			for _, rest := range jobs[fed:] { // never handed to a worker
				rest.err = zk.ErrClosing
				done(rest)
			}
			fed = len(jobs)
			for ; pending > 0; pending-- { // the connection is closed: these end at once
				done(<-answered)
			}
		}
	}
	close(next)
	wg.Wait()
}

// read performs one job, setting the watch that tells when to read it again.
func (w *watcher) read(j *job) {
	root, name := j.t.root, path.Base(j.name)
	switch {
	case j.isRoot():
		for {
			j.children, _, _, j.err = w.conn.ChildrenW(root)
			w.r.metrics.request("children", j.err)
			if !errors.Is(j.err, zk.ErrNoNode) {
				j.exists = j.err == nil
				return
			}
			// No root yet: no service. Watch for its creation instead.
			var ok bool
			ok, _, _, j.err = w.conn.ExistsW(root)
			w.r.metrics.request("exists", j.err)
			if j.err != nil || !ok {
				j.children = nil
				return
			}
			// Created in between: read it (the exists watch fires too, at most once more).
		}
	case j.isSvc():
		w.readChildren(j, j.t.ins(name))
	case j.ovr:
		w.readChildren(j, j.t.ovr(name))
	default:
		j.data, _, _, j.err = w.conn.GetW(j.t.ins(name) + "/" + j.id)
		w.r.metrics.request("data", j.err)
		j.exists = j.err == nil
	}
	if errors.Is(j.err, zk.ErrNoNode) {
		j.err = nil
	}
}

// readChildren reads the children of p, a service znode or a child of it, with a watch. When p
// is a child (Dubbo's providers or configurators) and is missing, it watches the service znode's
// children instead, for p to appear: deleting the service znode fires, and so ends, that watch,
// so a removed service leaves none behind. j.exists is false when the service znode is missing.
func (w *watcher) readChildren(j *job, p string) {
	own := j.name
	for {
		j.children, _, _, j.err = w.conn.ChildrenW(p)
		w.r.metrics.request("children", j.err)
		j.exists = j.err == nil
		if p == own || !errors.Is(j.err, zk.ErrNoNode) {
			return
		}
		var siblings []string
		siblings, _, _, j.err = w.conn.ChildrenW(own)
		w.r.metrics.request("children", j.err)
		j.children = nil
		j.exists = j.err == nil
		if j.err != nil || !slices.Contains(siblings, path.Base(p)) {
			return
		}
		// Created in between: read it (the children watch fires too, at most once more).
	}
}
