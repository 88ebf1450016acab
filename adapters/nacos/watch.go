package nacos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
	"github.com/galleon-mesh/galleon/registry"
)

// The watch, as Nacos 2's own clients watch (NamingGrpcClientProxy, the Go client's
// naming_grpc), with what a mesh needs added:
//
//   - One session (conn.go) to one server at a time. At its start every (namespace, group)
//     watched is listed, page by page, and every service listed is subscribed (gRPC
//     SubscribeServiceRequest; its answer is the service's state), up to maxInFlight at a
//     time, so that 10,000 services are watched in seconds, not minutes. Then the server
//     pushes each change of a subscribed service (NotifySubscriberRequest): the pushes are
//     coalesced per service (inbox) and applied in the watch's goroutine, in order of the
//     server's lastRefTime (an older state delivered late is dropped).
//   - Every --nacos-discovery-interval the listings are read again: a new service is
//     subscribed, one gone is unsubscribed and removed (discovery.go has the rule for a
//     listing that would remove most services).
//   - A session lost (the server restarted, sent ConnectResetRequest, failed its health
//     checks) is replaced at once: the same server, else the next in --nacos-servers order,
//     and everything is listed and subscribed again. When that happens before the adapter
//     reported the registry Unreachable, the listing and the subscriptions' answers are the
//     complete current state, so only what differs from what was reported is reported
//     (Update, Delete); after an Unreachable report the first report is a Replace (the
//     Reconciler's bookkeeping). Either way nothing is missed: a push lost with the
//     connection is superseded by the subscription's answer.
//   - A server that fails is reported Degraded while another answers, probed in the
//     background with back-off, and Degraded(server, nil) when it answers again. The adapter
//     stays on the server that works (a Nacos cluster's members serve the same data): no
//     failback. When every server fails: Unreachable, and a retry with back-off.
//   - Every subscribed service is read again once per --nacos-refresh-interval (a Subscribe
//     again: its answer is the state now; the server adds no second subscription), spread
//     evenly over the interval, the answers applied only where they differ from the state
//     held (refresh). That is the safety net under the pushes: polaris-server 1.18.1 never
//     pushes a change of a service outside DEFAULT_GROUP (apiserver/nacosserver/core/push.go,
//     BasePushCenter.OnEvent, takes the group from the bare service name its storage.go gives
//     it, so it notifies the subscribers of DEFAULT_GROUP@@name), and any server may drop a
//     push to a client that is slow to take it. Alibaba's Java client has the same kind of net
//     (ServiceInfoUpdateService). Its cost is one request per service per interval whether
//     anything changed or not; a state found that no push brought is counted
//     (galleon_nacos_refresh_changes_total).
//   - With the HTTP API (Nacos 1.x): the same, with /v1/ns/instance/list (udpPort set) as the
//     subscription, the UDP push as the push, and each service read again at its cacheMillis
//     (at least pollFloor while the push is on) as Nacos 1's HostReactor does, since a UDP
//     packet can be lost.
//
// Everything but the connection's reader and the probes runs in Run's goroutine.

// Bounds of the watch.
const (
	// maxInFlight bounds the requests in flight at once (subscriptions, polls,
	// unsubscriptions): enough to hide a round trip, few enough not to flood a server.
	maxInFlight = 32
	// watchChunk is how many services' answers watchAll holds before it applies them: enough
	// that the requests in flight rarely wait for a chunk's slowest, few enough that a start
	// holds little more than what it serves.
	watchChunk = 8 * maxInFlight
	minRetry   = 500 * time.Millisecond // first retry after every server failed
	maxRetry   = 30 * time.Second
	minProbe   = time.Second // first probe of a failed server
	maxProbe   = 2 * time.Minute
	// standbyProbe is how often a server not in use, which answered last time, is probed: a
	// standby that died is reported before a failover needs it.
	standbyProbe = time.Minute
	// pollFloor and pollCeiling bound the HTTP API's poll of a service: Nacos 1 servers
	// answer cacheMillis 10 s to clients that take the push, 3 s to others; Polaris always
	// 1 s, which for 10,000 services would be 10,000 requests a second.
	pollFloor      = 10 * time.Second
	pollFloorNoUDP = time.Second
	pollCeiling    = time.Minute
	// tick is how often the probes, the HTTP polls and the refreshes due are looked for.
	tick = time.Second
	// maxRefreshShare bounds the refreshes of one tick, in shares (services / refresh
	// interval ticks).
	maxRefreshShare = 2
)

type watcher struct {
	r    *Registry
	rec  *registry.Reconciler
	svcs *services
	disc *discovery
	dial *dialer

	cur     int
	servers []serverState
	probes  chan probeResult
	wg      sync.WaitGroup

	// outage: Unreachable was reported and no session has synced since.
	outage bool
	// synced: a session has synced (the first Replace was made).
	synced bool
	retry  time.Duration
	// discoveryTold: a failed discovery was logged (once an episode).
	discoveryTold bool
	// upgrading: a check that the server watched over HTTP has a gRPC API runs (startUpgrade);
	// its result comes on upgrades. nextUpgrade is when the next may start.
	upgrading   bool
	upgrades    chan bool
	nextUpgrade time.Time
}

type serverState struct {
	down    bool
	err     error
	next    time.Time // when to probe it, unless it is the server in use
	backoff time.Duration
	probing bool
}

type probeResult struct {
	i   int
	err error
}

func newWatcher(r *Registry, sink registry.Sink) *watcher {
	rec := registry.NewReconciler(sink)
	return &watcher{
		r:        r,
		rec:      rec,
		svcs:     newServices(rec, r.mapper, r.log, r.metrics, r.cfg.MaxInstances),
		disc:     newDiscovery(),
		dial:     newDialer(r),
		servers:  make([]serverState, len(r.servers)),
		probes:   make(chan probeResult),
		upgrades: make(chan bool),
	}
}

func (w *watcher) run(ctx context.Context) error {
	// The probes stop with ctx; Run returns once they have.
	defer w.wg.Wait()
	reason := connectStart
	for {
		sess, in, err := w.connect(ctx)
		if err != nil {
			return err
		}
		w.r.metrics.connects.WithLabelValues(reason).Inc()
		reason = w.session(ctx, sess, in)
		sess.close()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// connect makes a session to the server in use, else the next that answers, retrying with
// back-off (and reporting Unreachable) while none does. Its error is ctx's.
func (w *watcher) connect(ctx context.Context) (session, *inbox, error) {
	for {
		n := len(w.r.servers)
		now := time.Now()
		// The server in use, then those not known to be down, then those down and not yet due
		// for a probe (only after the others failed).
		order := []int{w.cur}
		for pass := 0; pass < 2; pass++ {
			for k := 1; k < n; k++ {
				i := (w.cur + k) % n
				s := &w.servers[i]
				up := !s.down || !now.Before(s.next)
				if (pass == 0) == up {
					order = append(order, i)
				}
			}
		}
		var errs []error
		for _, i := range order {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			in := newInbox(w.r.cfg.MaxServices)
			sess, err := w.dial.dial(ctx, i, in)
			w.countAt(i, reqConnect, err)
			if err == nil {
				w.serverUp(i)
				w.use(i, sess)
				w.reportDown()
				return sess, in, nil
			}
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			err = w.r.redact.error(fmt.Errorf("%s: %w", w.r.servers[i].name, err))
			w.serverDown(i, err)
			errs = append(errs, err)
		}
		err := errors.Join(errs...)
		if !w.outage {
			w.r.log.Warn("no Nacos server answers: serving the last state", "err", err)
		}
		w.outage = true
		w.rec.Unreachable(err)
		w.retry = min(max(2*w.retry, minRetry), maxRetry)
		timer := time.NewTimer(jitter(w.retry))
	wait:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil, nil, ctx.Err()
			case pr := <-w.probes:
				w.probed(pr)
			case <-w.upgrades:
				w.upgrading = false // the session it was for is over
			case <-timer.C:
				break wait
			}
		}
	}
}

// use makes server i the one in use.
func (w *watcher) use(i int, sess session) {
	if i != w.cur {
		w.r.log.Warn("watching another Nacos server", "server", w.r.servers[i].name, "instead_of", w.r.servers[w.cur].name, "api", sess.api())
		w.cur = i
	} else {
		w.r.log.Info("connected to a Nacos server", "server", w.r.servers[i].name, "api", sess.api())
	}
	w.retry = 0
}

// session watches over sess until it is lost or ctx is cancelled, and says why it ended (the
// reason of the next connection).
func (w *watcher) session(ctx context.Context, sess session, in *inbox) string {
	if reason, err := w.sync(ctx, sess); err != nil {
		return w.failed(ctx, sess, err, reason)
	}
	w.nextUpgrade = time.Now().Add(jitter(standbyProbe))
	discover := time.NewTicker(w.r.cfg.DiscoveryInterval)
	defer discover.Stop()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-sess.done():
			err := w.r.redact.error(sess.err())
			w.r.log.Warn("the connection to the Nacos server was lost: connecting again", "server", w.r.servers[w.cur].name, "err", err)
			return connectLost
		case <-in.signal:
			pending, overflow := in.take()
			for _, ref := range slices.SortedFunc(maps.Keys(pending), compareRefs) {
				w.svcs.apply(ref, pending[ref], true)
			}
			if overflow {
				w.r.metrics.pushes.WithLabelValues(pushOverflow).Inc()
				w.r.log.Warn("more Nacos services pushed at once than are watched: watching every service again", "max", w.r.cfg.MaxServices)
				if reason, err := w.sync(ctx, sess); err != nil {
					return w.failed(ctx, sess, err, reason)
				}
				w.r.metrics.connects.WithLabelValues(connectOverflow).Inc()
				continue
			}
			w.rec.Flush()
		case <-discover.C:
			if err := w.rediscover(ctx, sess); err != nil {
				return w.failed(ctx, sess, err, connectLost)
			}
		case ok := <-w.upgrades:
			w.upgrading = false
			if ok && sess.api() == APIHTTP {
				w.r.log.Info("the Nacos server has a gRPC API now: watching over it", "server", w.r.servers[w.cur].name)
				return connectAPIChange
			}
		case <-ticker.C:
			w.startProbes(ctx)
			w.startUpgrade(ctx, sess)
			if sess.polls() {
				if err := w.poll(ctx, sess); err != nil {
					return w.failed(ctx, sess, err, connectLost)
				}
			} else if w.r.cfg.RefreshInterval > 0 {
				if err := w.refresh(ctx, sess); err != nil {
					return w.failed(ctx, sess, err, connectLost)
				}
			}
		case pr := <-w.probes:
			w.probed(pr)
		}
	}
}

// failed ends a session after err: the server is marked down unless ctx ended it.
func (w *watcher) failed(ctx context.Context, sess session, err error, reason string) string {
	if ctx.Err() != nil {
		return ""
	}
	err = w.r.redact.error(fmt.Errorf("%s: %w", w.r.servers[w.cur].name, err))
	w.r.log.Warn("a Nacos request failed: connecting again", "err", err)
	w.serverDown(w.cur, err)
	return reason
}

// sync lists every service and watches it on a new session (or after pushes were lost), then
// reports: a Replace at the start and after an outage, otherwise what differs.
func (w *watcher) sync(ctx context.Context, sess session) (string, error) {
	start := time.Now()
	w.svcs.resetAnswers()
	refs, err := w.discover(ctx, sess)
	if err != nil {
		// A listing refused (or unreadable) at a sync: without it the state would be
		// incomplete, so the session counts as failed (a permission the user lacks is told as
		// Unreachable, with the server's answer).
		return connectRetry, err
	}
	if err := w.reconcile(ctx, sess, refs, true); err != nil {
		return connectLost, err
	}
	w.rec.Flush()
	if w.outage {
		w.r.log.Info("a Nacos server answers again", "server", w.r.servers[w.cur].name)
	}
	w.outage, w.synced = false, true
	took := time.Since(start)
	w.r.metrics.syncDuration.Observe(took.Seconds())
	w.r.log.Info("watching Nacos services", "server", w.r.servers[w.cur].name, "api", sess.api(), "services", len(w.svcs.entries),
		"took", took.Round(time.Millisecond))
	return "", nil
}

// rediscover reads the listings again and watches what they add, removes what they no longer
// list. A listing the server refused keeps its last answer; a lost server ends the session.
func (w *watcher) rediscover(ctx context.Context, sess session) error {
	refs, err := w.discover(ctx, sess)
	if err != nil {
		if _, ok := errors.AsType[*discoverErr](err); !ok {
			return err
		}
		if !w.discoveryTold {
			w.r.log.Warn("a Nacos service listing failed: its last answer stands", "err", w.r.redact.error(err))
			w.discoveryTold = true
		}
	} else {
		w.discoveryTold = false
	}
	if err := w.reconcile(ctx, sess, refs, false); err != nil {
		return err
	}
	w.rec.Flush()
	return nil
}

// reconcile makes the services watched refs: those no longer listed are unwatched and
// removed, the new ones (all of them when all is set: a new session) watched and applied.
func (w *watcher) reconcile(ctx context.Context, sess session, refs []wire.Ref, all bool) error {
	var gone []wire.Ref
	for ref := range w.svcs.entries {
		if _, found := slices.BinarySearchFunc(refs, ref, compareRefs); !found {
			gone = append(gone, ref)
		}
	}
	var todo []wire.Ref
	for _, ref := range refs {
		e := w.svcs.entries[ref]
		if all || e == nil || e.retry {
			w.svcs.add(ref)
			todo = append(todo, ref)
		}
	}
	for _, ref := range gone {
		w.svcs.remove(ref)
	}
	if !all && len(gone) > 0 {
		// Best effort: a subscription left behind costs the server a push now and then, and
		// ends with the connection.
		err := w.each(ctx, gone, func(ctx context.Context, _ int, ref wire.Ref) error {
			err := sess.unwatch(ctx, ref)
			if sess.api() == APIGRPC {
				w.count(reqUnsubscribe, err)
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	if err := w.watchAll(ctx, sess, todo); err != nil {
		return err
	}
	w.r.metrics.subscriptions.Set(float64(len(w.svcs.entries)))
	return nil
}

// watchAll watches refs on sess, maxInFlight at a time, and applies the answers, watchChunk
// refs at a time. A server that answers an error for one service fails that service only
// (retried at the next discovery); a lost server fails the whole, the chunks before it applied
// (answers of the server, as true as any).
func (w *watcher) watchAll(ctx context.Context, sess session, refs []wire.Ref) error {
	for start := 0; start < len(refs); start += watchChunk {
		if err := w.watchChunk(ctx, sess, refs, start, min(start+watchChunk, len(refs))); err != nil {
			return err
		}
	}
	return nil
}

// watchChunk is watchAll for refs[start:end]. The answers are held until the chunk's last one,
// then applied: holding every answer of a start instead (the decoded instances and their
// metadata) doubled the live heap at 10,000 services x 10 (docs/benchmarks.md).
func (w *watcher) watchChunk(ctx context.Context, sess session, refs []wire.Ref, start, end int) error {
	kind := reqSubscribe
	if sess.api() == APIHTTP {
		kind = reqInstances
	}
	infos := make([]*wire.ServiceInfo, end-start)
	errs := make([]error, end-start)
	// Each goroutine writes its own index; they are read after each has waited for them all.
	err := w.each(ctx, refs[start:end], func(ctx context.Context, i int, ref wire.Ref) error {
		infos[i], errs[i] = sess.watch(ctx, ref)
		w.count(kind, errs[i])
		return errs[i]
	})
	if err != nil {
		return err
	}
	now := time.Now()
	for n, ref := range refs[start:end] {
		i := start + n
		if errs[n] != nil {
			w.svcs.failed(ref, w.r.redact.error(errs[n]))
			continue
		}
		w.svcs.apply(ref, infos[n], false)
		e := w.svcs.entries[ref]
		switch {
		case e == nil:
		case sess.polls():
			e.nextPoll = now.Add(w.pollEvery(infos[n]))
		case e.nextRefresh.Before(now):
			// Spread evenly over one interval: refs watched together (every service, at a
			// sync) are refreshed one after the other, not all at once.
			e.nextRefresh = now.Add(w.refreshEvery() * time.Duration(i+1) / time.Duration(len(refs)))
		}
	}
	return nil
}

// refreshEvery is how often each subscribed service is refreshed: the refresh interval, or
// longer, so that the refreshes stay within their rate (Config.RefreshMaxRate).
func (w *watcher) refreshEvery() time.Duration {
	byRate := time.Duration(float64(len(w.svcs.entries)) / w.r.cfg.RefreshMaxRate * float64(time.Second))
	return max(w.r.cfg.RefreshInterval, byRate)
}

// refresh reads again, over gRPC, the subscribed services whose refresh is due (see the
// comment at the top): about N/interval a second, maxInFlight at a time, each at most
// maxRefreshShare times that in one tick should the watch fall behind. Only a state that
// differs from the one held is applied.
func (w *watcher) refresh(ctx context.Context, sess session) error {
	now := time.Now()
	w.svcs.lost(now)
	interval := w.refreshEvery()
	var due []*entry
	for _, e := range w.svcs.entries {
		if e.answered && !e.retry && !now.Before(e.nextRefresh) {
			due = append(due, e)
		}
	}
	if len(due) == 0 {
		return nil
	}
	// Those due longest first; at most twice the share of one tick, so that a watch that fell
	// behind (a slow server, a push storm) catches up without a burst.
	slices.SortFunc(due, func(a, b *entry) int {
		return cmp.Or(a.nextRefresh.Compare(b.nextRefresh), compareRefs(a.ref, b.ref))
	})
	share := int(math.Ceil(float64(len(w.svcs.entries)) * float64(tick) / float64(interval)))
	if n := maxRefreshShare * max(share, 1); len(due) > n {
		due = due[:n]
	}
	refs := make([]wire.Ref, len(due))
	for i, e := range due {
		refs[i] = e.ref
		// The next one interval after this one was due, so the spread stays even; one that
		// fell a whole interval behind starts again from now.
		e.nextRefresh = e.nextRefresh.Add(interval)
		if e.nextRefresh.Before(now) {
			e.nextRefresh = now.Add(interval)
		}
	}
	infos := make([]*wire.ServiceInfo, len(refs))
	errs := make([]error, len(refs))
	err := w.each(ctx, refs, func(ctx context.Context, i int, ref wire.Ref) error {
		infos[i], errs[i] = sess.watch(ctx, ref)
		w.count(reqRefresh, errs[i])
		return errs[i]
	})
	if err != nil {
		return err
	}
	now = time.Now()
	for i, ref := range refs {
		if errs[i] != nil {
			w.svcs.failed(ref, w.r.redact.error(errs[i]))
			continue
		}
		w.svcs.refreshed(ref, infos[i], now)
	}
	w.rec.Flush()
	return nil
}

// each runs f for every ref (with its index), maxInFlight at a time. An error f returns that
// is an answer of the server is f's to record; any other (the server is gone) stops the rest
// and is returned.
func (w *watcher) each(ctx context.Context, refs []wire.Ref, f func(ctx context.Context, i int, ref wire.Ref) error) error {
	if len(refs) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once  sync.Once
		fatal error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, maxInFlight)
	for i, ref := range refs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(ctx, i, ref); err != nil && !answered(err) {
				once.Do(func() { fatal = err })
				cancel()
			}
		}()
	}
	wg.Wait()
	if fatal != nil {
		return fatal
	}
	return ctx.Err()
}

// pollEvery is how long until a service read over HTTP is read again: its cacheMillis, within
// bounds, with up to a fifth more at random so that the polls spread.
func (w *watcher) pollEvery(info *wire.ServiceInfo) time.Duration {
	floor := pollFloor
	if w.r.cfg.UDPPort < 0 {
		floor = pollFloorNoUDP
	}
	d := time.Duration(info.CacheMillis) * time.Millisecond
	return jitter(min(max(d, floor), pollCeiling))
}

// poll reads again the services due (HTTP API), the safety net under the UDP push.
func (w *watcher) poll(ctx context.Context, sess session) error {
	now := time.Now()
	var due []wire.Ref
	for ref, e := range w.svcs.entries {
		if !now.Before(e.nextPoll) {
			due = append(due, ref)
		}
	}
	if len(due) == 0 {
		return nil
	}
	slices.SortFunc(due, compareRefs)
	if err := w.watchAll(ctx, sess, due); err != nil {
		return err
	}
	w.rec.Flush()
	return nil
}

// count counts a request to the server in use.
func (w *watcher) count(kind string, err error) { w.countAt(w.cur, kind, err) }

// countAt counts a request to server i by its result.
func (w *watcher) countAt(i int, kind string, err error) {
	w.r.metrics.requests.WithLabelValues(w.r.servers[i].name, kind, resultOf(err)).Inc()
}

// resultOf is the result label of a request's error.
func resultOf(err error) string {
	switch {
	case err == nil:
		return resultOK
	case isA[*wire.ServerError](err):
		return resultServerError
	case isA[*wire.DecodeError](err):
		return resultMalformed
	}
	return resultUnreachable
}

func isA[T error](err error) bool {
	_, ok := errors.AsType[T](err)
	return ok
}

// jitter is d plus up to a fifth of d more, at random.
func jitter(d time.Duration) time.Duration { return d + rand.N(d/5+1) }
