// Package zookeeper is Galleon's adapter for services registered in Apache ZooKeeper.
//
// It reads the Apache Curator ServiceDiscovery layout, which Spring Cloud Zookeeper uses:
// <root>/<name>/<id>, one znode per instance holding a Curator ServiceInstance as JSON, one
// service per <name>; or (Config.Layout) Dubbo 2's interface-level layout,
// <root>/<interface>/providers/<URL-encoded provider URL>, one service per interface, group and
// version. See docs/adapters/zookeeper.md for the mapping rule by rule.
//
// Dubbo 2 registers one provider URL per protocol, so a host exporting an interface over tri and
// dubbo has two nodes with one address: they are one instance serving both ports (mergeHosts),
// with the ID of its smallest port, the union of the labels (the smallest port's value on a
// conflict), the smallest weight given, and health Healthy only when every URL is. Operators'
// overrides (configurators) are decided per URL, so per port; but a ServiceEntry endpoint serves
// every port of its ServiceEntry (istiod's serviceentry/conversion.go makes an instance of each
// endpoint for each service port, on the port its "ports" map gives or else the service port's
// own number), so a host cannot be left out of one port alone: a host with a port disabled is
// drained on all of them. That fails closed: a port an operator disabled gets no traffic from
// the mesh, at the cost of the host's other ports.
//
// Watching costs what changes: a children watch on the root, a children watch per service and a
// data watch per instance node, every one re-armed by re-reading the path it fired on, and
// only that path. All events reach one queue through the client's event callback, so there is
// no goroutine per watch and a service that is removed leaves nothing behind (deleting a znode
// fires, and so ends, every watch on it). Listing (at start and after a session expiry) reads
// with bounded concurrency over the one connection.
//
// Sessions: a disconnection is reported unreachable only if it outlasts UnreachableAfter;
// within the session the client reconnects with its watches (ZooKeeper replays what fired
// meanwhile), so nothing is relisted. A session expiry loses every watch: the adapter relists
// everything on the new session, and the Reconciler reports only what differs.
package zookeeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// errClosing is what the dialer answers once Run is ending.
var errClosing = errors.New("zookeeper: the adapter is stopping")

// retryInterval is how long the adapter waits before reading again a path whose read failed
// for a reason other than the connection (it retries a connection loss as soon as the session
// is back), and before connecting again when no server name resolves.
const retryInterval = time.Second

// Registry watches one ZooKeeper ensemble. It holds configuration only: the state of a watch
// lives in Run, so a Registry can be run again after Run returns.
type Registry struct {
	cfg     Config
	host    *template.Template
	layout  layout
	log     *slog.Logger
	metrics *metrics
}

var _ registry.Registry = (*Registry)(nil)

// New checks cfg and returns the adapter. Its errors are configuration errors, each naming the
// flag to fix.
func New(cfg Config) (*Registry, error) {
	cfg.Servers = slices.Clone(cfg.Servers)
	host, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	for i, s := range cfg.Servers {
		cfg.Servers[i] = strings.TrimSpace(s)
	}
	var l layout = curator{}
	switch cfg.Layout {
	case LayoutDubbo:
		l = newDubbo(cfg.DubboProtocols)
	case LayoutDubbo3:
		l = newDubbo3(cfg.DubboProtocols)
	}
	log := cfg.Logger.With("zookeeper", strings.Join(cfg.Servers, ","), "root", cfg.Root, "layout", cfg.Layout)
	return &Registry{cfg: cfg, host: host, layout: l, log: log, metrics: newMetrics(cfg.Registerer)}, nil
}

// Run watches the registry until ctx is cancelled. Only its own goroutine calls the Sink.
func (r *Registry) Run(ctx context.Context, sink registry.Sink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := &watcher{
		r:          r,
		rec:        registry.NewReconciler(sink),
		wake:       make(chan struct{}, 1),
		services:   map[string]*service{},
		byPath:     map[string]string{},
		byOvrPath:  map[string]string{},
		dirtySvc:   map[string]bool{},
		dirtyOvr:   map[string]bool{},
		dirtyNode:  map[nodeKey]bool{},
		dirtyRoot:  true,
		changed:    true,
		later:      map[laterRead]*retryState{},
		retireDue:  map[string]time.Time{},
		unreadable: unreadableLog{log: r.log},
	}
	return w.run(ctx)
}

// watcher is the state of one Run. Everything but the event queue belongs to Run's goroutine.
type watcher struct {
	r     *Registry
	rec   *registry.Reconciler
	conn  *zk.Conn
	hosts *hostProvider

	mu      sync.Mutex
	queue   []zk.Event    // events from the client's goroutines, oldest first
	wake    chan struct{} // signalled when queue becomes non-empty
	dialErr error         // the last connection attempt's error (a refused TLS handshake)
	dialed  *frameConn    // the last connection dialled, closed when Run ends
	closing bool          // Run is ending: dial no more
	big     []bigAnswer   // answers over the client's limit, not yet handled

	session    int64 // the session the watches belong to; 0 before the first
	hasSession bool  // connected with a session now
	down       bool  // Unreachable reported and not yet cleared
	lastState  zk.State
	grace      *time.Timer // runs while there is no session; fires the Unreachable report
	retry      *time.Timer // runs when reads lost the connection; they start again when it fires
	waiting    bool        // reads wait for the retry timer (or the session: waitSession)
	// waitSession: the session's return ends the wait (the first lost round); after that, the
	// retry timer's backoff does.
	waitSession bool
	// lostRounds counts the rounds in a row that lost the connection.
	lostRounds int
	// silent: the server was reported as answering nothing while the session stood.
	silent bool
	// probing: a probe request is in flight; probes are their goroutines.
	probing atomic.Bool
	probes  sync.WaitGroup
	// pendingAuth are digest credentials to present before the next read; authSeen the last
	// read from AuthFile, authErr the last error reading it (logged once).
	pendingAuth, authSeen, authErr string
	// authRetry: new credentials came from the file; once presented, read everything again.
	authRetry bool
	// relist are the services the periodic relisting has yet to read again, and relistAt when
	// it started.
	relist   []string
	relistAt time.Time
	// later are the reads that failed for another reason than the connection (an ACL, an
	// answer over the client's limit): each is done again at its due time, with a backoff;
	// laterT fires at the earliest, laterNext (zero when it is not running). laterCount
	// counts them by cause; unreadable logs them, bounded.
	later      map[laterRead]*retryState
	laterT     *time.Timer
	laterNext  time.Time
	laterCount map[string]int
	unreadable unreadableLog
	// lostSession is the session of the first of lostRounds.
	lostSession int64
	// silentSession is the session the server fell silent in.
	silentSession int64
	// rootMissing is why the root cannot be listed (it does not exist), logged once; nil
	// while it can.
	rootMissing error
	// retireDue are the services with a served name that has no instance, by when the first
	// of them is to be retired; retireT fires at the earliest.
	retireDue  map[string]time.Time
	retireT    *time.Timer
	retireNext time.Time // when retireT fires; zero when it does not run

	services  map[string]*service
	byPath    map[string]string // instancesPath (and the service znode when it differs) -> service name
	byOvrPath map[string]string // overridesPath -> service name
	// The paths whose watch fired (or was never set): each is read, and its watch set, again.
	dirtyRoot bool
	dirtySvc  map[string]bool // instancesPath
	dirtyOvr  map[string]bool // overridesPath
	dirtyNode map[nodeKey]bool
	// rootOK: the root was read (or found missing) by the last read of it; no Flush before.
	rootOK bool
	// changed: something was told to the Reconciler since the last Flush.
	changed bool
	// touched: services whose nodes changed since they were last built.
	touched map[string]bool
}

type nodeKey struct{ name, id string }

// laterRead is a read to retry: the root (name ""), a service's instances or overrides, or an
// instance node's data (id).
type laterRead struct {
	name, id string
	ovr      bool
}

// service is what the adapter knows of one service znode.
type service struct {
	nodes map[string]*node // by instance id
	// served are the services built from this znode, by name, with the ports reported last
	// (kept when the last instance leaves): one in the Curator layout, one per group and
	// version in the Dubbo layout.
	served map[string]*served
	// overrides are the well-formed rules under overridesPath, in node name order.
	overrides []override
	// overrideIDs are the children of overridesPath last read, to clear the rejections of
	// those that go.
	overrideIDs []string
	// labels holds one copy of each distinct label set of the service's instances.
	labels labelSets
	// missing: its znode was found gone; the root's listing decides whether it is (so that a
	// root deleted with everything under it removes nothing: see apply).
	missing bool
}

// labelSets keeps one map per distinct label set. The instances of one service mostly carry the
// same labels (a Dubbo interface's providers: application, version, dubbo, release), and a map
// per instance was the adapter's largest cost at 100,000 instances. The maps are never modified
// once stored, so instances, and the services handed to the Sink, share them: the Sink treats
// what it is given as read-only (registry.Sink).
type labelSets struct {
	sets map[string]map[string]string
}

// intern returns the stored map equal to m (m itself the first time it is seen).
func (ls *labelSets) intern(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	k := labelKey(m)
	if have, ok := ls.sets[k]; ok {
		return have
	}
	if ls.sets == nil {
		ls.sets = map[string]map[string]string{}
	}
	// The values may be substrings of a large input (a decoded provider URL): keep copies,
	// so that the input can go.
	own := make(map[string]string, len(m))
	for k, v := range m {
		own[strings.Clone(k)] = strings.Clone(v)
	}
	ls.sets[k] = own
	return own
}

// prune drops the sets no node uses any more, once the table holds more sets than nodes: the
// cost is amortised over the interns that grew it.
func (ls *labelSets) prune(nodes map[string]*node) {
	if len(ls.sets) <= len(nodes)+8 {
		return
	}
	used := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if n.good != nil && len(n.good.inst.Labels) > 0 {
			used[labelKey(n.good.inst.Labels)] = true
		}
	}
	maps.DeleteFunc(ls.sets, func(k string, _ map[string]string) bool { return !used[k] })
}

// labelKey is a canonical form of a label set: sorted key=value pairs, NUL-separated.
func labelKey(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return b.String()
}

type served struct {
	hd hostData
	// ports are what it keeps of its ports for the time it has no instance (portMemory).
	ports portMemory
	// emptySince is when it last lost its last instance (zero while it has some): after
	// RetireEmptyAfter it is deleted.
	emptySince time.Time
}

// node is one instance znode: its last well-formed content, and why it is rejected now.
type node struct {
	good *endpoint
	err  error
}

func (w *watcher) run(ctx context.Context) error {
	cfg := &w.r.cfg
	w.grace = time.NewTimer(cfg.UnreachableAfter) // no session yet
	defer w.grace.Stop()
	w.retry = time.NewTimer(0)
	<-w.retry.C
	defer w.retry.Stop()
	w.laterT = time.NewTimer(0)
	<-w.laterT.C
	defer w.laterT.Stop()
	w.retireT = time.NewTimer(0)
	<-w.retireT.C
	defer w.retireT.Stop()
	// Liveness: how often the adapter checks that the server answers (and sends a probe when
	// the connection is idle), so that a server that stops answering is reported about
	// UnreachableAfter after it stopped, not after the client's read timeout (two thirds of
	// the session timeout) on top of it.
	live := time.NewTicker(max(cfg.UnreachableAfter/8, 10*time.Millisecond))
	defer live.Stop()

	var events <-chan zk.Event
	w.hosts = &hostProvider{quit: make(chan struct{})}
	baseDial := cfg.dialer()
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		w.mu.Lock()
		closing := w.closing
		w.mu.Unlock()
		if closing {
			return nil, errClosing // the client is closing: connect nothing more
		}
		conn, err := baseDial(network, address, timeout)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.dialErr = err
		if err != nil {
			return nil, err
		}
		if w.closing {
			conn.Close() // closed while dialling: closeAll below has run already
			return nil, errClosing
		}
		w.dialed = newFrameConn(conn, cfg.MaxBuffer, w.bigAnswer)
		return w.dialed, nil
	}
	for w.conn == nil {
		conn, ec, err := zk.Connect(cfg.Servers, cfg.SessionTimeout,
			zk.WithEventCallback(w.push),
			zk.WithLogger(zkLogger{w.r.log}),
			zk.WithLogInfo(false),
			zk.WithMaxBufferSize(cfg.MaxBuffer),
			zk.WithDialer(dial),
			zk.WithHostProvider(w.hosts))
		if err == nil {
			w.conn, events = conn, ec
			break
		}
		// Only a server name that does not resolve fails here: the client connects in
		// the background.
		w.rec.Unreachable(fmt.Errorf("zookeeper %s: %w", strings.Join(cfg.Servers, ","), err))
		w.down = true
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryInterval):
		}
	}
	// Closing the connection on cancellation makes a read in flight return at once. The client's
	// Close does not interrupt its handshake with a server (it reads the session answer with a
	// deadline of ten receive timeouts), which a server still loading its database never sends:
	// closing the socket it dialled does, and dial refuses to connect again (the client would
	// otherwise retry, and wait as long on the next socket). Run's return closes both too, for
	// it may come before the AfterFunc has run (stop then keeps it from running at all).
	closeAll := func() {
		w.conn.Close()
		w.mu.Lock()
		if !w.closing {
			close(w.hosts.quit) // a reconnection's backoff ends
		}
		w.closing = true
		if w.dialed != nil {
			w.dialed.Close()
		}
		w.mu.Unlock()
	}
	stop := context.AfterFunc(ctx, closeAll)
	defer func() {
		stop()
		closeAll()
		// The client closes its event channel once its goroutines are done: wait for that, so
		// that none outlives Run.
		for range events {
		}
		w.probes.Wait() // its request failed with the connection's close
	}()
	w.r.log.Info("watching ZooKeeper", "session_timeout", cfg.SessionTimeout, "namespace", cfg.Namespace, "tls", cfg.tlsEnabled())
	var authPoll <-chan time.Time
	if digest, err := cfg.digest(); err != nil {
		return err // checked by New: the file went in between
	} else if digest != "" {
		w.pendingAuth, w.authSeen = digest, digest
	}
	if cfg.AuthFile != "" {
		t := time.NewTicker(authPollInterval)
		defer t.Stop()
		authPoll = t.C
	}
	var relistTick <-chan time.Time
	if cfg.RelistInterval > 0 {
		t := time.NewTicker(cfg.RelistInterval)
		defer t.Stop()
		relistTick = t.C
	}

	for {
		w.drain()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if w.hasSession && w.pendingAuth != "" && !w.waiting {
			// Before any read: go-zookeeper presents credentials again on every reconnection,
			// but only those it has seen accepted, so this is retried until it is.
			if err := w.conn.AddAuth("digest", []byte(w.pendingAuth)); err != nil {
				if ctx.Err() == nil {
					w.r.log.Debug("presenting digest credentials failed; retrying", "error", err)
					w.wait()
				}
				continue
			}
			user, _, _ := strings.Cut(w.pendingAuth, ":")
			w.r.log.Info("presented digest credentials to ZooKeeper", "user", user)
			w.pendingAuth = ""
			if w.authRetry {
				// Reads that the old credentials could not make: again, with the new ones.
				w.authRetry = false
				w.markAll()
			}
			continue
		}
		if w.hasSession && w.pendingAuth == "" && !w.dirty() && !w.waiting && len(w.relist) > 0 && w.queued() == 0 {
			w.relistNext()
		}
		if w.hasSession && w.pendingAuth == "" && w.dirty() && !w.waiting {
			if err := w.round(ctx); err != nil && ctx.Err() == nil {
				w.lost(err)
			} else if err == nil {
				w.roundDone()
			}
			continue
		}
		if w.hasSession && w.rootOK && !w.dirty() && w.queued() == 0 && w.changed {
			w.build()
			w.rec.Flush()
			w.changed = false
			w.down = false
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.wake:
		case <-live.C:
			w.checkLive()
		case <-w.laterT.C:
			w.laterDue()
		case <-w.retireT.C:
			w.retireNow()
		case <-w.grace.C:
			if !w.hasSession {
				w.mu.Lock()
				why := ""
				if w.dialErr != nil {
					why = "; last connection attempt: " + w.dialErr.Error()
				}
				w.mu.Unlock()
				w.rec.Unreachable(fmt.Errorf("zookeeper %s: no session for %v (client state %v%s); serving what was read last",
					strings.Join(cfg.Servers, ","), cfg.UnreachableAfter, w.lastState, why))
				w.down = true
			}
		case <-relistTick:
			if len(w.relist) == 0 {
				w.relist = slices.Sorted(maps.Keys(w.services))
				w.relistAt = time.Now()
				w.r.metrics.relists.WithLabelValues("periodic").Inc()
			}
		case <-authPoll:
			digest, err := cfg.digest()
			switch {
			case err != nil:
				if err.Error() != w.authErr {
					w.r.log.Warn("reading the credentials file failed; keeping the credentials presented", "error", err)
				}
				w.authErr = err.Error()
			case digest != w.authSeen:
				w.r.log.Info("the credentials file changed: presenting the new credentials", "file", cfg.AuthFile)
				w.pendingAuth, w.authSeen, w.authErr, w.authRetry = digest, digest, "", true
			}
		case <-w.retry.C:
			w.waiting = false
		}
	}
}

// push queues an event from the client. It is the client's event callback: it must not block.
func (w *watcher) push(e zk.Event) {
	if e.Type == zk.EventSession && e.State == zk.StateExpired {
		// A server answered that the session expired: the client connects again for a new
		// one, and that attempt needs no pause. (The client calls this before it asks for
		// the next server.)
		w.hosts.Expired()
	}
	w.mu.Lock()
	w.queue = append(w.queue, e)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

func (w *watcher) dirty() bool {
	return w.dirtyRoot || len(w.dirtySvc) > 0 || len(w.dirtyOvr) > 0 || len(w.dirtyNode) > 0
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

func (w *watcher) sessionEvent(e zk.Event) {
	w.lastState = e.State
	switch e.State {
	case zk.StateHasSession:
		id := w.conn.SessionID()
		if id != w.session {
			if w.session != 0 {
				w.r.log.Warn("ZooKeeper session expired: relisting every service on the new session",
					"old_session", fmt.Sprintf("0x%x", w.session), "new_session", fmt.Sprintf("0x%x", id))
				w.markAll()
				w.r.metrics.relists.WithLabelValues("session_expired").Inc()
			} else {
				w.r.log.Info("ZooKeeper session established", "session", fmt.Sprintf("0x%x", id), "server", e.Server)
			}
			w.session = id
			w.r.metrics.sessions.WithLabelValues("established").Inc()
		} else if !w.hasSession {
			w.r.metrics.sessions.WithLabelValues("reconnected").Inc()
			w.r.log.Info("reconnected within the ZooKeeper session: watches kept", "server", e.Server)
			// Nothing was missed: the watches held. An outage reported
			// meanwhile ends at the next Flush without a Replace.
			w.rec.Resumed()
		}
		w.hasSession = true
		if w.waitSession {
			w.waiting = false
		}
		w.grace.Stop()
		if w.down {
			w.changed = true // the Flush that reports the registry back
		}
	case zk.StateDisconnected, zk.StateExpired:
		if e.State == zk.StateExpired {
			w.r.metrics.sessions.WithLabelValues("expired").Inc()
			w.r.log.Info("ZooKeeper session expired; reconnecting", "session", fmt.Sprintf("0x%x", w.session))
		}
		if w.hasSession {
			w.hasSession = false
			w.grace.Reset(w.r.cfg.UnreachableAfter)
		}
		w.silent = false // the grace timer takes over
	}
}

// watchFired marks the path a watch fired on to be read again.
func (w *watcher) watchFired(p string, t zk.EventType) {
	root := w.r.cfg.Root
	if p == root {
		w.dirtyRoot = true
		return
	}
	if name, ok := w.byOvrPath[p]; ok {
		w.dirtyOvr[name] = true
		return
	}
	if name, ok := w.byPath[p]; ok {
		w.dirtySvc[name] = true
		if p == root+"/"+name && w.r.layout.overridesPath(root, name) != "" {
			// The service znode's children watch stands in for a missing instances or
			// overrides node: one of them may have appeared.
			w.dirtyOvr[name] = true
		}
		return
	}
	if name, ok := w.byPath[path.Dir(p)]; ok && w.r.layout.readsData() {
		id := path.Base(p)
		// A deleted instance node is not read: its service's children watch fired in the
		// same transaction (or already had), and that read removes it.
		if _, known := w.services[name].nodes[id]; known && t != zk.EventNodeDeleted {
			w.dirtyNode[nodeKey{name, id}] = true
		}
	}
}

// relistChunk is how many services the periodic relisting reads at a time: about 3 reads
// each, a few hundred milliseconds of one connection, which is the longest it can hold back
// a change that arrives meanwhile.
const relistChunk = 256

// relistNext marks the next chunk of the periodic relisting to be read again.
func (w *watcher) relistNext() {
	n := min(relistChunk, len(w.relist))
	for _, name := range w.relist[:n] {
		s, ok := w.services[name]
		if !ok {
			continue
		}
		w.markService(name, s)
	}
	w.relist = w.relist[n:]
	if len(w.relist) == 0 {
		w.r.log.Info("periodic relisting done", "services", len(w.services), "took", time.Since(w.relistAt).Round(time.Millisecond))
	}
}

// markAll marks every path known to be read again: the watches went with the old session.
func (w *watcher) markAll() {
	w.dirtyRoot = true
	for name, s := range w.services {
		w.markService(name, s)
	}
}

// markService marks a service's paths to be read again.
func (w *watcher) markService(name string, s *service) {
	w.dirtySvc[name] = true
	if w.r.layout.overridesPath(w.r.cfg.Root, name) != "" {
		w.dirtyOvr[name] = true
	}
	if !w.r.layout.readsData() {
		return // the nodes' names are their content: the children read covers them
	}
	for id := range s.nodes {
		w.dirtyNode[nodeKey{name, id}] = true
	}
}

// job is one read: the root's children (name == ""), a service's instances (id == "") or
// overrides (ovr), or an instance node's data.
type job struct {
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
	if w.dirtyRoot {
		jobs = append(jobs, &job{})
	}
	for name := range w.dirtySvc {
		jobs = append(jobs, &job{name: name})
	}
	for name := range w.dirtyOvr {
		jobs = append(jobs, &job{name: name, ovr: true})
	}
	for k := range w.dirtyNode {
		jobs = append(jobs, &job{name: k.name, id: k.id})
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
			w.lostRounds = 0 // explained: not a connection that keeps breaking
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
	root := w.r.cfg.Root
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
		w.readChildren(j, w.r.layout.instancesPath(root, j.name))
	case j.ovr:
		w.readChildren(j, w.r.layout.overridesPath(root, j.name))
	default:
		j.data, _, _, j.err = w.conn.GetW(w.r.layout.instancesPath(root, j.name) + "/" + j.id)
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
	own := w.r.cfg.Root + "/" + j.name
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

// apply records the answer to one read.
func (w *watcher) apply(j *job) {
	root := w.r.cfg.Root
	switch {
	case j.isRoot():
		if j.err != nil {
			w.failed(laterRead{}, root, j.err)
			return
		}
		w.succeeded(laterRead{})
		w.dirtyRoot = false
		if !j.exists {
			w.rootGone()
			return
		}
		if w.rootMissing != nil {
			// Back: every watch under it went with it. Read everything again; the Flush
			// after is a Replace (the outage began with rootGone).
			w.r.log.Info("the root znode exists again: listing it", "services_known", len(w.services))
			w.rootMissing = nil
			w.markAll()
			w.dirtyRoot = false // this is its listing
		}
		w.rootOK = true
		names := map[string]bool{}
		for _, name := range j.children {
			if !w.r.layout.isService(name) {
				continue
			}
			names[name] = true
			if s, ok := w.services[name]; ok && s.missing {
				// Found gone, listed again: created anew, without the watches of the old.
				s.missing = false
				w.markService(name, s)
			} else if !ok {
				w.services[name] = &service{nodes: map[string]*node{}, served: map[string]*served{}}
				w.byPath[w.r.layout.instancesPath(root, name)] = name
				w.byPath[root+"/"+name] = name
				w.dirtySvc[name] = true
				if p := w.r.layout.overridesPath(root, name); p != "" {
					w.byOvrPath[p] = name
					w.dirtyOvr[name] = true
				}
			}
		}
		for name := range w.services {
			if !names[name] {
				w.removeService(name)
			}
		}
	case j.ovr:
		s, ok := w.services[j.name]
		delete(w.dirtyOvr, j.name)
		if !ok {
			return
		}
		if j.err != nil {
			w.failed(laterRead{name: j.name, ovr: true}, w.r.layout.overridesPath(root, j.name), j.err)
			return
		}
		w.succeeded(laterRead{name: j.name, ovr: true})
		w.accept(w.r.layout.overridesPath(root, j.name))
		w.setOverrides(j.name, s, j.children)
	case j.isSvc():
		s, ok := w.services[j.name]
		if !ok {
			delete(w.dirtySvc, j.name)
			return
		}
		if j.err != nil {
			w.failed(laterRead{name: j.name}, w.r.layout.instancesPath(root, j.name), j.err)
			return
		}
		delete(w.dirtySvc, j.name)
		w.succeeded(laterRead{name: j.name})
		w.accept(w.r.layout.instancesPath(root, j.name))
		if !j.exists {
			// Gone, or the root with everything under it: the root's listing decides, so
			// that a deleted root keeps what was served (rootGone). Its children watch
			// fired too, so it is read soon.
			s.missing = true
			w.dirtyRoot = true
			return
		}
		ids := map[string]bool{}
		for _, id := range j.children {
			if len(id) > maxNodeName {
				w.overlongNode(j.name, s, id, ids)
				continue
			}
			ids[id] = true
			if _, ok := s.nodes[id]; !ok {
				s.nodes[id] = &node{}
				if w.r.layout.readsData() {
					w.dirtyNode[nodeKey{j.name, id}] = true
				} else {
					w.parse(j.name, id, s.nodes[id], nil)
				}
			}
		}
		for id := range s.nodes {
			if !ids[id] {
				w.removeNode(j.name, id)
			}
		}
		w.touch(j.name)
	default:
		k := nodeKey{j.name, j.id}
		delete(w.dirtyNode, k)
		s, ok := w.services[j.name]
		if !ok {
			return
		}
		n, ok := s.nodes[j.id]
		if !ok {
			return
		}
		rec := w.r.layout.instancesPath(root, j.name) + "/" + j.id
		if j.err == nil {
			w.succeeded(laterRead{name: j.name, id: j.id})
		}
		switch {
		case j.err != nil:
			// Not a connection error: an ACL, most likely. Say so on the record, and read it
			// again with a backoff (no watch was set).
			err := w.retryLater(laterRead{name: j.name, id: j.id}, rec, j.err)
			n.err = bad(reasonRead, fmt.Errorf("cannot read the node: %w", err))
		case !j.exists:
			w.removeNode(j.name, j.id)
			w.touch(j.name)
			return
		case len(j.data) > maxNodeData:
			n.err = bad(reasonSize, fmt.Errorf("the node holds %d bytes, more than the %d an instance may hold", len(j.data), maxNodeData))
		default:
			w.parse(j.name, j.id, n, j.data)
			w.touch(j.name)
			return
		}
		w.report(rec, n)
		w.touch(j.name)
	}
}

// overlongNode records an instance znode whose name is longer than maxNodeName: rejected, under
// its name Cut (the same every listing, so that its deletion is seen), never read or parsed.
func (w *watcher) overlongNode(name string, s *service, id string, ids map[string]bool) {
	key := registry.Cut(id, registry.MaxRecordLen)
	ids[key] = true
	if _, ok := s.nodes[key]; ok {
		return
	}
	n := &node{err: bad(reasonSize, fmt.Errorf("the node's name is %d bytes, more than the %d an instance's may be", len(id), maxNodeName))}
	s.nodes[key] = n
	w.report(w.r.layout.instancesPath(w.r.cfg.Root, name)+"/"+key, n)
}

// setOverrides parses the children of a service's overrides node, reporting each malformed one
// (and clearing the reports of those gone), and makes the service's instances built again.
func (w *watcher) setOverrides(name string, s *service, ids []string) {
	p := w.r.layout.overridesPath(w.r.cfg.Root, name)
	slices.Sort(ids)
	for _, id := range s.overrideIDs {
		if _, found := slices.BinarySearch(ids, id); !found {
			w.accept(p + "/" + id)
		}
	}
	var rules []override
	for _, id := range ids {
		o, err := parseOverride(id)
		switch {
		case err == nil:
			rules = append(rules, o)
			w.accept(p + "/" + id)
		case errors.Is(err, errNotInstance):
			w.accept(p + "/" + id)
		default:
			w.reject(p+"/"+id, bad(reasonOverride, fmt.Errorf("override left out: %w", err)))
		}
	}
	s.overrideIDs = ids
	if !slices.Equal(rules, s.overrides) {
		s.overrides = rules
		w.touch(name)
	}
	w.changed = true
}

// parse reads instance node id of service name into n, and reports it accepted or rejected.
func (w *watcher) parse(name, id string, n *node, data []byte) {
	e, err := w.r.layout.parseInstance(name, id, data)
	switch {
	case err == nil:
		e.inst.Labels = w.services[name].labels.intern(e.inst.Labels)
		n.good, n.err = &e, nil
	case errors.Is(err, errNotInstance):
		n.good, n.err = nil, nil
	default:
		n.err = err
	}
	w.report(w.r.layout.instancesPath(w.r.cfg.Root, name)+"/"+id, n)
}

// reject reports record malformed and counts it by reason. The record is a znode's path with
// the secrets of a Dubbo URL in it redacted (redactRecord), as accept's.
func (w *watcher) reject(record string, err error) {
	w.r.metrics.rejected.WithLabelValues(reasonOf(err)).Inc()
	w.rec.Reject(redactRecord(record), err)
}

// accept reports record well-formed (again).
func (w *watcher) accept(record string) { w.rec.Accept(redactRecord(record)) }

func (w *watcher) report(rec string, n *node) {
	if n.err != nil {
		err := n.err
		if n.good != nil {
			err = fmt.Errorf("%w (its previous version is still served)", err)
		}
		w.reject(rec, err)
	} else {
		w.accept(rec)
	}
	w.changed = true
}

// wait holds reads back until the retry timer fires or, after the first round that lost the
// connection, the session is back: rounds that keep losing it back off.
func (w *watcher) wait() {
	if w.waiting {
		return
	}
	w.waiting = true
	w.waitSession = w.lostRounds <= 1
	d := retryInterval
	if w.lostRounds > 1 {
		d = backoff(retryInterval, lostRetryMax, w.lostRounds-1)
	}
	w.retry.Reset(d)
}

// lost handles a round that lost the connection (or the session): what it could not read is
// read again once the session is back, the first time, then with a backoff. A connection that
// breaks round after round while the session stands (a proxy, an answer too large to
// attribute) delivers no change: after lostRoundsUnreachable rounds that is reported.
func (w *watcher) lost(err error) {
	if w.lostRounds == 0 {
		w.lostSession = w.session
	}
	w.lostRounds++
	w.r.log.Debug("reading ZooKeeper lost the connection; retrying", "error", err, "rounds", w.lostRounds)
	w.wait()
	if w.lostRounds == lostRoundsUnreachable {
		err = fmt.Errorf("zookeeper %s: the connection broke during %d reads in a row (last: %w); changes are not arriving, serving what was read last",
			strings.Join(w.r.cfg.Servers, ","), w.lostRounds, err)
		w.r.log.Warn("ZooKeeper connection keeps breaking while reading; backing off", "error", err)
		w.rec.Unreachable(err)
		w.down = true
	}
}

// roundDone ends a run of lost rounds: when it was reported, and the watches held (the same
// session), the outage ends at the next Flush without a Replace.
func (w *watcher) roundDone() {
	if w.lostRounds >= lostRoundsUnreachable && w.session == w.lostSession {
		w.rec.Resumed()
		w.changed = true
	}
	w.lostRounds = 0
}

// failed handles a read of the root or of a service's instances or overrides that failed for
// another reason than the connection (an ACL, an answer over the client's limit): the root is
// reported unreachable, a service's node rejected, and the read is retried with a backoff
// (retryLater). The rest is served meanwhile, a service with the instances and overrides read
// last.
func (w *watcher) failed(r laterRead, p string, err error) {
	err = w.retryLater(r, p, err)
	reason := reasonRead
	if errors.Is(err, errOversized) {
		reason = reasonSize
	}
	switch {
	case r.name == "":
		w.dirtyRoot = false
		w.rootOK = false
		w.rec.Unreachable(fmt.Errorf("zookeeper: reading %s: %w", p, err))
		w.down = true
	case r.ovr:
		delete(w.dirtyOvr, r.name)
		w.reject(p, bad(reason, fmt.Errorf("cannot list the overrides: %w", err)))
		w.changed = true
	default:
		delete(w.dirtySvc, r.name)
		w.reject(p, bad(reason, fmt.Errorf("cannot list the instances: %w", err)))
		w.changed = true
	}
}

// retryLater schedules read r of path p again, after a backoff that grows with each failure,
// logs it (bounded: unreadableLog) and returns err with what to do about it.
func (w *watcher) retryLater(r laterRead, p string, err error) error {
	if errors.Is(err, zk.ErrNoAuth) {
		err = fmt.Errorf("%w: the node's ACL does not admit this client; give the credentials it names (--zk-auth-file with digest user:password) or a client certificate it names (--zk-tls-cert)", err)
	}
	cause := causeOf(err)
	st := w.later[r]
	if st == nil {
		st = &retryState{cause: cause}
		w.later[r] = st
		w.countLater(cause, 1)
	} else if st.cause != cause {
		w.countLater(st.cause, -1)
		w.countLater(cause, 1)
		st.cause = cause
	}
	st.fails++
	base := readRetryBase
	if cause == causeOversized {
		base = oversizedRetryBase
	}
	d := backoff(base, readRetryMax, st.fails)
	st.due, st.marked = time.Now().Add(d), false
	w.unreadable.note(cause, p, err, w.laterCount[cause], d)
	w.laterAt(st.due)
	return err
}

// countLater keeps the number of reads retried later, by cause, and its gauge.
func (w *watcher) countLater(cause string, n int) {
	if w.laterCount == nil {
		w.laterCount = map[string]int{}
	}
	w.laterCount[cause] += n
	w.r.metrics.backingOff.WithLabelValues(cause).Add(float64(n))
}

// succeeded ends the backoff of read r: it was answered.
func (w *watcher) succeeded(r laterRead) {
	if st, ok := w.later[r]; ok {
		delete(w.later, r)
		w.countLater(st.cause, -1)
	}
}

// laterAt makes laterT fire at t at the latest.
func (w *watcher) laterAt(t time.Time) {
	if w.laterNext.IsZero() || t.Before(w.laterNext) {
		w.laterNext = t
		w.laterT.Reset(time.Until(t))
	}
}

// laterBatch: reads due within it of the one that fired are made together.
const laterBatch = 100 * time.Millisecond

// laterDue marks the reads whose backoff has passed to be read again, forgets those of
// services and nodes gone, and sets laterT for the next.
func (w *watcher) laterDue() {
	w.laterNext = time.Time{}
	now := time.Now()
	var next time.Time
	for r, st := range w.later {
		s, ok := w.services[r.name]
		if r.name != "" && (!ok || (r.id != "" && s.nodes[r.id] == nil)) {
			delete(w.later, r)
			w.countLater(st.cause, -1)
			continue
		}
		if st.marked {
			continue
		}
		if st.due.After(now.Add(laterBatch)) {
			if next.IsZero() || st.due.Before(next) {
				next = st.due
			}
			continue
		}
		st.marked = true
		switch {
		case r.name == "":
			w.dirtyRoot = true
		case r.ovr:
			w.dirtyOvr[r.name] = true
		case r.id != "":
			w.dirtyNode[nodeKey{r.name, r.id}] = true
		default:
			w.dirtySvc[r.name] = true
		}
	}
	if !next.IsZero() {
		w.laterAt(next)
	}
}

func (w *watcher) touch(name string) {
	if w.touched == nil {
		w.touched = map[string]bool{}
	}
	w.touched[name] = true
	w.changed = true
}

func (w *watcher) removeNode(name, id string) {
	s := w.services[name]
	delete(s.nodes, id)
	delete(w.dirtyNode, nodeKey{name, id})
	w.accept(w.r.layout.instancesPath(w.r.cfg.Root, name) + "/" + id)
	w.accept(w.r.layout.instancesPath(w.r.cfg.Root, name) + "/" + id + " (duplicate)")
	w.changed = true
}

func (w *watcher) removeService(name string) {
	s := w.services[name]
	for id := range s.nodes {
		w.removeNode(name, id)
	}
	if p := w.r.layout.overridesPath(w.r.cfg.Root, name); p != "" {
		w.accept(p)
		for _, id := range s.overrideIDs {
			w.accept(p + "/" + id)
		}
		delete(w.byOvrPath, p)
	}
	delete(w.services, name)
	delete(w.byPath, w.r.layout.instancesPath(w.r.cfg.Root, name))
	delete(w.byPath, w.r.cfg.Root+"/"+name)
	delete(w.dirtySvc, name)
	delete(w.dirtyOvr, name)
	delete(w.touched, name)
	delete(w.retireDue, name)
	if w.r.layout.readsData() { // Curator: the znode's name is the service's
		w.rec.Remove(model.ServiceKey{Namespace: w.r.cfg.Namespace, Name: name})
	}
	for _, sn := range slices.Sorted(maps.Keys(s.served)) {
		if sn != name || !w.r.layout.readsData() {
			w.rec.Remove(model.ServiceKey{Namespace: w.r.cfg.Namespace, Name: sn})
		}
	}
	w.changed = true
}

// build tells the Reconciler the new state of every service touched since the last build.
func (w *watcher) build() {
	now := time.Now()
	for _, name := range slices.Sorted(maps.Keys(w.touched)) {
		s, ok := w.services[name]
		if !ok {
			continue
		}
		s.labels.prune(s.nodes)
		ns := w.r.cfg.Namespace
		// The instances by the service they belong to, and every service built before (it
		// stays, without instances, until the service znode goes).
		eps := map[string][]*endpoint{}
		hds := map[string]hostData{}
		for sn, sv := range s.served {
			hds[sn] = sv.hd
		}
		// Nodes in name order, so that of two nodes for the same instance ID (Dubbo: two
		// provider URLs with the same ip:port that differ in parameters) the same one is served
		// every time; the other is rejected until it is the only one.
		ids := map[string]map[string]string{} // service name -> instance ID -> node
		for _, id := range slices.Sorted(maps.Keys(s.nodes)) {
			n := s.nodes[id]
			dupRecord := w.r.layout.instancesPath(w.r.cfg.Root, name) + "/" + id + " (duplicate)"
			if n.good == nil {
				w.accept(dupRecord)
				continue
			}
			good := withOverrides(n.good, s.overrides)
			hd := good.svc
			if hd.Name == "" {
				hd.Name = name
			}
			hd.Namespace = ns
			if ids[hd.Name] == nil {
				ids[hd.Name] = map[string]string{}
			}
			if first, dup := ids[hd.Name][good.inst.ID]; dup {
				w.reject(dupRecord, bad(reasonDuplicate, fmt.Errorf("instance %s of service %s is also registered by node %s, which is served", good.inst.ID, hd.Name, redactURL(first))))
				continue
			}
			w.accept(dupRecord)
			ids[hd.Name][good.inst.ID] = id
			eps[hd.Name] = append(eps[hd.Name], good)
			hds[hd.Name] = hd
		}
		// Each instance's contribution to its service's ports, in node name order: an
		// instance that would make its service invalid is left out, its node rejected.
		for sn, list := range eps {
			var served []model.Port
			if sv := s.served[sn]; sv != nil {
				served = sv.ports.ports
			}
			kept, refused := admitPorts(list, served)
			for _, r := range refused {
				w.reject(w.r.layout.instancesPath(w.r.cfg.Root, name)+"/"+ids[sn][r.e.inst.ID]+" (duplicate)", r.err)
			}
			eps[sn] = kept
		}
		// Dubbo 2: the providers of one host (one URL per protocol) become one endpoint.
		if m, ok := w.r.layout.(merger); ok {
			for sn, list := range eps {
				eps[sn] = m.merge(list, &s.labels)
			}
		}
		if len(hds) == 0 && w.r.layout.readsData() {
			hds[name] = hostData{Name: name, Namespace: ns} // Curator: report the removal
		}
		delete(w.retireDue, name)
		for _, sn := range slices.Sorted(maps.Keys(hds)) {
			var last portMemory
			var emptySince time.Time
			if sv := s.served[sn]; sv != nil {
				last = sv.ports
				if len(eps[sn]) == 0 {
					emptySince = cmp.Or(sv.emptySince, now)
				}
			}
			if !emptySince.IsZero() && w.retire(name, sn, emptySince, now) {
				delete(s.served, sn)
				w.rec.Remove(model.ServiceKey{Namespace: ns, Name: sn})
				continue
			}
			svc, kept, ok, err := mapService(hds[sn], w.r.host, eps[sn], last)
			switch {
			case err != nil:
				w.reject(w.r.layout.instancesPath(w.r.cfg.Root, name), err)
			case ok:
				w.rec.Set(svc)
				s.served[sn] = &served{hd: hds[sn], ports: kept, emptySince: emptySince}
			default:
				w.rec.Remove(model.ServiceKey{Namespace: ns, Name: sn})
			}
		}
	}
	clear(w.touched)
}

// zkLogger sends the client's log lines to the adapter's logger, at debug level: what matters
// (sessions, outages) the adapter logs itself.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zk client: " + fmt.Sprintf(format, args...))
}
