package kubewrite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// Defaults of Config.
const (
	DefaultFieldManager = "galleon"
	DefaultRemovalDelay = 30 * time.Second
	DefaultWorkers      = 4
	// DefaultRoundSize is how many objects a round writes before it looks at the snapshot
	// again, so that a long first write (10,000 services) does not hold back a later change.
	DefaultRoundSize = 256
	// DefaultRequestTimeout bounds each request: an API server that accepts a connection and
	// never answers (overloaded, or stopped) must not hold a round, and the changes behind
	// it, for ever.
	DefaultRequestTimeout = 20 * time.Second
)

// Retry backoff after a failed request: doubles from minBackoff up to maxBackoff while
// requests keep failing.
const (
	minBackoff = time.Second
	maxBackoff = 30 * time.Second
)

// Config configures a Writer. Source, Client and Owner are required.
type Config struct {
	// Source is the snapshot to write (the core's store).
	Source snapshot.Source
	// Client reaches the API server. Its rest.Config's QPS and Burst bound the writer's
	// requests (client-go's token bucket).
	Client dynamic.Interface
	// Owner is the value of LabelOwner on every object written: one name per process, or per
	// set of replicas that take turns. Must be a valid label value.
	Owner string
	// FieldManager is the server-side apply field manager (DefaultFieldManager).
	FieldManager string
	// RemovalDelay is how long a resource must stay out of the snapshot before its object is
	// deleted (DefaultRemovalDelay).
	RemovalDelay time.Duration
	// CreateNamespaces creates a namespace that does not exist; false reports it and retries.
	CreateNamespaces bool
	// Namespaces, when set, are the only namespaces written (and listed, one by one, where
	// the writer's RBAC is a Role per namespace); a resource elsewhere is reported and skipped.
	Namespaces []string
	// Workers is how many requests are in flight at once (DefaultWorkers).
	Workers int
	// RoundSize is DefaultRoundSize when 0.
	RoundSize int
	// RequestTimeout is DefaultRequestTimeout when 0.
	RequestTimeout time.Duration
	Logger         *slog.Logger
	Registerer     prometheus.Registerer
}

// Writer writes a snapshot to the Kubernetes API (see the package documentation). One Run at a
// time: it is not safe for concurrent use.
type Writer struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	// owned is what the API server holds of this owner's, by kind and "namespace/name".
	owned map[snapshot.Kind]map[string]ownedObject
	// pending are the names to look at in the next round.
	pending map[key]struct{}
	// retry are names whose last request failed, looked at again from retryAt.
	retry   map[key]struct{}
	retryAt time.Time
	backoff time.Duration
	// gone: when each owned name was first seen out of the snapshot.
	gone map[key]time.Time
	// conflicts are names another owner holds, reported once each.
	conflicts map[key]bool
	// missingNamespaces, forbidden and outside (namespaces not in Config.Namespaces) are
	// reported once each.
	missingNamespaces, forbidden, outside map[string]bool
	// seq is the collection sequence number last looked at, by kind (0: none).
	seq map[snapshot.Kind]uint64
}

type key struct {
	kind snapshot.Kind
	name string // "namespace/name"
}

type ownedObject struct {
	hash string
	uid  types.UID
}

// New checks cfg and returns a Writer.
func New(cfg Config) (*Writer, error) {
	if cfg.Source == nil || cfg.Client == nil {
		return nil, errors.New("kubewrite: Source and Client are required")
	}
	if cfg.Owner == "" {
		return nil, errors.New("kubewrite: Owner is required")
	}
	cfg.FieldManager = cmp.Or(cfg.FieldManager, DefaultFieldManager)
	cfg.Workers = cmp.Or(cfg.Workers, DefaultWorkers)
	cfg.RoundSize = cmp.Or(cfg.RoundSize, DefaultRoundSize)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, DefaultRequestTimeout)
	cfg.RemovalDelay = cmp.Or(cfg.RemovalDelay, DefaultRemovalDelay)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Writer{cfg: cfg, log: log.With("output", "kubernetes", "owner", cfg.Owner), metrics: m}, nil
}

// reset forgets everything: a run starts from the API server's state, which another replica
// may have changed since the last run.
func (w *Writer) reset() {
	w.owned = map[snapshot.Kind]map[string]ownedObject{}
	for _, k := range snapshot.Kinds() {
		w.owned[k] = map[string]ownedObject{}
	}
	w.pending, w.retry, w.gone = map[key]struct{}{}, map[key]struct{}{}, map[key]time.Time{}
	w.conflicts, w.seq = map[key]bool{}, map[snapshot.Kind]uint64{}
	w.missingNamespaces, w.forbidden, w.outside = map[string]bool{}, map[string]bool{}, map[string]bool{}
	w.retryAt, w.backoff = time.Time{}, 0
}

// Run writes until ctx ends: it waits for a ready snapshot, lists what the owner holds, then
// follows the snapshot. It returns ctx's error. It may be called again once it has returned
// (a replica that regains its lease): each run starts from a new listing.
func (w *Writer) Run(ctx context.Context) error {
	w.reset()
	w.metrics.writing.Set(1)
	defer w.metrics.writing.Set(0)
	changed, cancel := w.cfg.Source.Subscribe()
	defer cancel()
	for !w.cfg.Source.Current().Ready {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
	for wait := minBackoff; ; wait = min(2*wait, maxBackoff) {
		err := w.listOwned(ctx)
		if err == nil {
			break
		}
		w.log.Warn("cannot list the objects this owner wrote; retrying", "in", wait, "err", err)
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		next := w.round(ctx, w.cfg.Source.Current())
		if len(w.pending) > 0 {
			// More to write: look at the snapshot again first, without waiting.
			select {
			case <-ctx.Done():
				return ctx.Err()
			default:
				continue
			}
		}
		timer.Reset(time.Hour)
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-timer.C:
		}
	}
}

// listOwned reads every object of this owner, of every kind, into owned.
func (w *Writer) listOwned(ctx context.Context) error {
	sel := LabelOwner + "=" + w.cfg.Owner
	namespaces := w.cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, k := range snapshot.Kinds() {
		owned := map[string]ownedObject{}
		for _, ns := range namespaces {
			cont := ""
			for {
				rctx, cancel := context.WithTimeout(ctx, w.cfg.RequestTimeout)
				list, err := w.cfg.Client.Resource(resourceOf(k)).Namespace(ns).List(rctx, metav1.ListOptions{LabelSelector: sel, Limit: 500, Continue: cont})
				cancel()
				if err != nil {
					return fmt.Errorf("listing %s: %w", resourceOf(k).Resource, err)
				}
				for _, o := range list.Items {
					owned[o.GetNamespace()+"/"+o.GetName()] = ownedObject{hash: o.GetAnnotations()[AnnotationContentHash], uid: o.GetUID()}
				}
				if cont = list.GetContinue(); cont == "" {
					break
				}
			}
		}
		w.owned[k] = owned
		w.seq[k] = 0
		w.metrics.objects.WithLabelValues(k.String()).Set(float64(len(owned)))
	}
	w.log.Info("listed the objects this owner wrote", "serviceentries", len(w.owned[snapshot.ServiceEntry]), "workloadentries", len(w.owned[snapshot.WorkloadEntry]))
	return nil
}

// round queues what changed in snap since the last round, writes up to RoundSize of the queue,
// and returns when the next round is due for a timer (zero: only for a change).
func (w *Writer) round(ctx context.Context, snap *snapshot.Snapshot) time.Time {
	if !snap.Ready {
		return time.Time{} // no write, no delete until it is ready again
	}
	now := time.Now()
	for _, k := range snapshot.Kinds() {
		col := snap.Collection(k)
		if col.Seq == w.seq[k] && w.seq[k] != 0 {
			continue
		}
		names, ok := col.ChangedSince(w.seq[k])
		if w.seq[k] == 0 || !ok {
			names = names[:0]
			for _, r := range col.Resources() {
				names = append(names, r.Name)
			}
			names = slices.AppendSeq(names, maps.Keys(w.owned[k]))
		}
		for _, n := range names {
			w.pending[key{k, n}] = struct{}{}
		}
		w.seq[k] = col.Seq
	}
	if len(w.retry) > 0 && !now.Before(w.retryAt) {
		maps.Copy(w.pending, w.retry)
		clear(w.retry)
	}
	for k, since := range w.gone {
		if now.Sub(since) >= w.cfg.RemovalDelay {
			w.pending[k] = struct{}{}
		}
	}

	var work []task
	for _, k := range slices.SortedFunc(maps.Keys(w.pending), compareKeys) {
		if len(work) == w.cfg.RoundSize {
			break
		}
		delete(w.pending, k)
		if t, ok := w.plan(k, snap.Collection(k.kind).Get(k.name), now); ok {
			work = append(work, t)
		}
	}
	// The metrics follow each request, not each round: at a low rate a round lasts seconds.
	w.metrics.pending.Set(float64(len(w.pending) + len(work) + len(w.retry) + len(w.gone)))
	results := make([]result, len(work))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(w.cfg.Workers, len(work)) {
		wg.Go(func() {
			for i := range next {
				results[i] = w.do(ctx, work[i])
				w.metrics.writes.WithLabelValues(work[i].kind.String(), results[i].outcome).Inc()
				if !w.retried(results[i].outcome) {
					w.metrics.pending.Dec()
				}
			}
		})
	}
	for i := range work {
		next <- i
	}
	close(next)
	wg.Wait()
	failed := false
	for i, t := range work {
		failed = w.record(t, results[i]) || failed
	}
	switch {
	case failed:
		w.backoff = min(max(2*w.backoff, minBackoff), maxBackoff)
		w.retryAt = time.Now().Add(w.backoff)
	case len(work) > 0:
		w.backoff = 0
	}
	w.metrics.pending.Set(float64(len(w.pending) + len(w.retry) + len(w.gone)))
	w.metrics.conflicts.Set(float64(len(w.conflicts)))
	var due time.Time
	if len(w.retry) > 0 {
		due = w.retryAt
	}
	for _, since := range w.gone {
		if t := since.Add(w.cfg.RemovalDelay); due.IsZero() || t.Before(due) {
			due = t
		}
	}
	return due
}

// String names the object in logs: "ServiceEntry namespace/name".
func (k key) String() string { return k.kind.String() + " " + k.name }

func compareKeys(a, b key) int {
	return cmp.Or(cmp.Compare(a.kind, b.kind), strings.Compare(a.name, b.name))
}

// task is one request a round makes.
type task struct {
	key
	res   *snapshot.Resource // to apply; nil: delete
	known bool               // the owner's object exists (skip the ownership check)
	uid   types.UID          // of the object to delete
}

// plan decides what name k needs, given the snapshot's resource r (nil: absent).
func (w *Writer) plan(k key, r *snapshot.Resource, now time.Time) (task, bool) {
	have, ours := w.owned[k.kind][k.name]
	t := task{key: k, res: r, known: ours, uid: have.uid}
	if ns, _, _ := strings.Cut(k.name, "/"); r != nil && !ours && len(w.cfg.Namespaces) > 0 && !slices.Contains(w.cfg.Namespaces, ns) {
		if !w.outside[ns] {
			w.outside[ns] = true
			w.log.Warn("not written: the namespace is not one the writer may write (--kubernetes-namespaces)", "namespace", ns, "object", t.key.String())
		}
		w.metrics.writes.WithLabelValues(k.kind.String(), outcomeOutside).Inc()
		return t, false
	}
	if r != nil {
		delete(w.gone, k)
		return t, !ours || have.hash != r.Version
	}
	delete(w.conflicts, k)
	if !ours {
		delete(w.gone, k)
		return t, false
	}
	since, ok := w.gone[k]
	if !ok {
		w.gone[k] = now
		return t, false
	}
	return t, now.Sub(since) >= w.cfg.RemovalDelay
}

// result is what a task's request did.
type result struct {
	outcome string    // a galleon_kubernetes_writes_total result label
	uid     types.UID // of the object applied
	err     error
}

// Outcomes of a task.
const (
	outcomeApplied          = "applied"
	outcomeDeleted          = "deleted"
	outcomeConflict         = "conflict"           // another owner's object: left alone
	outcomeInvalid          = "invalid"            // refused by the API server's validation: retried when it changes
	outcomeMissingNamespace = "missing_namespace"  // retried
	outcomeForbidden        = "forbidden"          // by RBAC: retried
	outcomeOutside          = "outside_namespaces" // not in Config.Namespaces: skipped
	outcomeFailed           = "failed"             // retried
)

func (w *Writer) do(ctx context.Context, t task) result {
	// One bound for the task's requests (a read, an apply, a namespace made and the apply
	// again at most).
	ctx, cancel := context.WithTimeout(ctx, w.cfg.RequestTimeout)
	defer cancel()
	ns, name, _ := strings.Cut(t.name, "/")
	ri := w.cfg.Client.Resource(resourceOf(t.kind)).Namespace(ns)
	if t.res == nil {
		err := ri.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &t.uid}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return result{outcome: outcomeDeleted}
		case apierrors.IsConflict(err):
			// The object of that name is not the one this owner wrote any more.
			return result{outcome: outcomeConflict, err: err}
		case apierrors.IsForbidden(err):
			return result{outcome: outcomeForbidden, err: err}
		}
		return result{outcome: outcomeFailed, err: err}
	}
	body, err := applyBody(t.kind, t.res, w.cfg.Owner)
	if err != nil {
		return result{outcome: outcomeInvalid, err: err}
	}
	if !t.known {
		cur, err := ri.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err):
			return result{outcome: outcomeForbidden, err: err}
		case err != nil:
			return result{outcome: outcomeFailed, err: err}
		case cur.GetLabels()[LabelOwner] != w.cfg.Owner:
			return result{outcome: outcomeConflict, err: fmt.Errorf("it exists, written by %s", writtenBy(cur))}
		}
	}
	force := true
	out, err := ri.Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: w.cfg.FieldManager, Force: &force})
	if apierrors.IsNotFound(err) && w.cfg.CreateNamespaces {
		if err = w.createNamespace(ctx, ns); err == nil {
			out, err = ri.Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: w.cfg.FieldManager, Force: &force})
		}
	}
	switch {
	case err == nil:
		return result{outcome: outcomeApplied, uid: out.GetUID()}
	case apierrors.IsNotFound(err):
		return result{outcome: outcomeMissingNamespace, err: err}
	case apierrors.IsForbidden(err):
		return result{outcome: outcomeForbidden, err: err}
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return result{outcome: outcomeInvalid, err: err}
	}
	return result{outcome: outcomeFailed, err: err}
}

// writtenBy names who wrote o, for a conflict's log line.
func writtenBy(o *unstructured.Unstructured) string {
	if owner := o.GetLabels()[LabelOwner]; owner != "" {
		return "owner " + owner
	}
	var managers []string
	for _, f := range o.GetManagedFields() {
		managers = append(managers, f.Manager)
	}
	if len(managers) == 0 {
		return "another client"
	}
	return "field managers " + strings.Join(slices.Compact(slices.Sorted(slices.Values(managers))), ", ")
}

func (w *Writer) createNamespace(ctx context.Context, ns string) error {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion("v1")
	o.SetKind("Namespace")
	o.SetName(ns)
	o.SetLabels(map[string]string{LabelManagedBy: "galleon"})
	_, err := w.cfg.Client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, o, metav1.CreateOptions{FieldManager: w.cfg.FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		w.metrics.writes.WithLabelValues("Namespace", outcomeFailed).Inc()
		return err
	}
	if err == nil {
		w.metrics.writes.WithLabelValues("Namespace", "created").Inc()
		w.log.Info("created a namespace", "namespace", ns)
	}
	return nil
}

// record applies a task's result to the writer's state; it reports whether the task is to be
// retried.
func (w *Writer) record(t task, r result) bool {
	owned := w.owned[t.kind]
	defer func() { w.metrics.objects.WithLabelValues(t.kind.String()).Set(float64(len(owned))) }()
	switch r.outcome {
	case outcomeApplied:
		owned[t.name] = ownedObject{hash: t.res.Version, uid: r.uid}
		delete(w.conflicts, t.key)
	case outcomeDeleted:
		delete(owned, t.name)
		delete(w.gone, t.key)
		w.log.Info("deleted", "object", t.key.String(), "absent_for", w.cfg.RemovalDelay)
	case outcomeConflict:
		if t.res == nil { // deleted and made again by someone else: not ours any more
			delete(owned, t.name)
			delete(w.gone, t.key)
		}
		if !w.conflicts[t.key] {
			w.conflicts[t.key] = true
			w.log.Warn("left alone: the object belongs to another owner", "object", t.key.String(), "err", r.err)
		}
	case outcomeInvalid:
		w.log.Error("the API server refused the object; it is written again when it changes", "object", t.key.String(), "err", r.err)
	case outcomeMissingNamespace:
		ns, _, _ := strings.Cut(t.name, "/")
		if !w.missingNamespaces[ns] {
			w.missingNamespaces[ns] = true
			w.log.Warn("the namespace does not exist: create it, or run with --kubernetes-create-namespaces; retrying", "namespace", ns, "object", t.key.String())
		}
	case outcomeForbidden:
		ns, _, _ := strings.Cut(t.name, "/")
		if !w.forbidden[ns] {
			w.forbidden[ns] = true
			w.log.Warn("the API server forbids this writer to write the namespace: grant it the chart's RBAC there (docs/configuration.md#kubernetes-output); retrying", "namespace", ns, "object", t.key.String(), "err", r.err)
		}
	case outcomeFailed:
		w.log.Warn("write failed; retrying", "object", t.key.String(), "err", r.err)
	}
	if !w.retried(r.outcome) {
		return false
	}
	w.retry[t.key] = struct{}{}
	return true
}

// retried says whether a task with this outcome is retried (and so stays pending).
func (*Writer) retried(outcome string) bool {
	switch outcome {
	case outcomeMissingNamespace, outcomeForbidden, outcomeFailed:
		return true
	}
	return false
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
