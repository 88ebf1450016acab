package zookeeper

import (
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/registry"
)

// watcher is the state of one Run. Everything but the event queue belongs to Run's goroutine.
//
// Run's loop (loop) takes, each turn, the first step the state allows: apply the events queued
// by the client; with a session and reads not held back, present pending credentials, else
// read the dirty paths (after marking the periodic relisting's next chunk when nothing else
// is); once nothing is dirty or queued, build what changed and Flush. Then it waits for the
// next event or timer, each with its handler (await).
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

	sess     sessionState
	lostConn lostConnection
	live     liveness
	auth     authState
	relist   relisting
	later    laterReads
	retiring retirement

	// down: Unreachable was reported and not yet cleared by a Flush.
	down bool

	// roots are the roots watched (one per tree), by path; rootList in the Registry's order.
	roots    map[string]*rootState
	rootList []*rootState

	// services are the service znodes, by path (<root>/<name>: the root tells the tree, split).
	services  map[string]*service
	byPath    map[string]string // instancesPath (and the service znode when it differs) -> service path
	byOvrPath map[string]string // overridesPath -> service path
	dirty     dirtyPaths
	// claims are the services served, by name, with the service znodes that map to each
	// (claims.go).
	claims map[string][]claimant
	// hash keys the instance nodes (service.nodes).
	hash nodeHasher
	// parts are the host data and ports the instances share (sharedParts).
	parts sharedParts
	// changed: something was told to the Reconciler since the last Flush.
	changed bool
	// touched: services whose nodes changed since they were last built.
	touched map[string]bool
}

// rootState is one root watched.
type rootState struct {
	t *tree
	// dirty: its children watch fired (or was never set).
	dirty bool
	// ok: the root was read (or found missing) by the last read of it; no Flush before.
	ok bool
	// missing is why the root cannot be listed (it does not exist), logged once; nil while it
	// can.
	missing error
}

// split is the tree of service znode sp, and the service znode's name.
func (w *watcher) split(sp string) (*tree, string) {
	return w.roots[path.Dir(sp)].t, path.Base(sp)
}

// anyDirty: some path is to be read.
func (w *watcher) anyDirty() bool {
	for _, rs := range w.rootList {
		if rs.dirty {
			return true
		}
	}
	return w.dirty.any()
}

// rootsOK: every root was read by the last read of it.
func (w *watcher) rootsOK() bool {
	for _, rs := range w.rootList {
		if !rs.ok {
			return false
		}
	}
	return true
}

// sessionState is the client's session as the adapter saw it last.
type sessionState struct {
	id    int64 // the session the watches belong to; 0 before the first
	has   bool  // connected with a session now
	state zk.State
	grace *time.Timer // runs while there is no session; fires the Unreachable report
}

// lostConnection is the state of reads that lost the connection: they wait (waiting) for the
// retry timer or, after the first round lost, for the session's return (waitSession).
type lostConnection struct {
	retry   *time.Timer // runs when reads lost the connection; they start again when it fires
	waiting bool        // reads wait for the retry timer (or the session: waitSession)
	// waitSession: the session's return ends the wait (the first lost round); after that, the
	// retry timer's backoff does.
	waitSession bool
	// rounds counts the rounds in a row that lost the connection; session is the session of
	// the first of them.
	rounds  int
	session int64
}

// liveness is the state of checkLive.
type liveness struct {
	// silent: the server was reported as answering nothing while the session stood (session).
	silent  bool
	session int64
	// probing: a probe request is in flight; probes are their goroutines.
	probing atomic.Bool
	probes  sync.WaitGroup
}

// authState is the digest credentials' state.
type authState struct {
	// pending are digest credentials to present before the next read; seen the last read
	// from AuthFile, err the last error reading it (logged once).
	pending, seen, err string
	// retry: new credentials came from the file; once presented, read everything again.
	retry bool
}

// relisting is the periodic relisting under way: the services it has yet to read again, and
// when it started.
type relisting struct {
	names []string
	at    time.Time
}

// laterReads are the reads that failed for another reason than the connection (an ACL, an
// answer over the client's limit): each is done again at its due time, with a backoff; t fires
// at the earliest, next (zero when it is not running). count counts them by cause;
// unreadable logs them, bounded.
type laterReads struct {
	reads      map[laterRead]*retryState
	t          *time.Timer
	next       time.Time
	count      map[string]int
	unreadable unreadableLog
}

// retirement: due are the services with a served name that has no instance, by when the first
// of them is to be retired; t fires at the earliest, next (zero when it does not run).
type retirement struct {
	due  map[string]time.Time
	t    *time.Timer
	next time.Time
}

// dirtyPaths are the paths under the roots whose watch fired (or was never set): each is read,
// and its watch set, again. Services are by service znode path.
type dirtyPaths struct {
	svc  map[string]bool // instancesPath
	ovr  map[string]bool // overridesPath
	node map[nodeKey]bool
}

func (d *dirtyPaths) any() bool {
	return len(d.svc) > 0 || len(d.ovr) > 0 || len(d.node) > 0
}

type nodeKey struct{ name, id string }

// laterRead is a read to retry: a root (name "", root its path), a service's instances or
// overrides (name its service znode's path), or an instance node's data (id).
type laterRead struct {
	root     string
	name, id string
	ovr      bool
}

func newWatcher(r *Registry, sink registry.Sink) *watcher {
	w := &watcher{
		r:         r,
		rec:       registry.NewReconciler(sink),
		wake:      make(chan struct{}, 1),
		services:  map[string]*service{},
		byPath:    map[string]string{},
		byOvrPath: map[string]string{},
		roots:     map[string]*rootState{},
		claims:    map[string][]claimant{},
		dirty: dirtyPaths{
			svc:  map[string]bool{},
			ovr:  map[string]bool{},
			node: map[nodeKey]bool{},
		},
		hash:     newNodeHasher(),
		changed:  true,
		later:    laterReads{reads: map[laterRead]*retryState{}, unreadable: unreadableLog{log: r.log}},
		retiring: retirement{due: map[string]time.Time{}},
	}
	for _, t := range r.trees {
		rs := &rootState{t: t, dirty: true}
		w.roots[t.root] = rs
		w.rootList = append(w.rootList, rs)
	}
	return w
}
