package kubewrite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Defaults of LeaseConfig: client-go's and kube-controller-manager's.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// retryJitter is client-go's leader election jitter: a campaign retries after RetryPeriod and
// up to 1.2 times it, so that replicas started together do not ask together.
const retryJitter = 1.2

// LeaseConfig names the Kubernetes Lease that replicas take turns on.
type LeaseConfig struct {
	// Client reaches the API server; the Lease is read and written through it.
	Client    dynamic.Interface
	Namespace string
	Name      string
	// Identity tells the replicas apart (the pod's name).
	Identity string
	// Duration, RenewDeadline and RetryPeriod are client-go's leader election timings: a
	// replica that stops renewing loses the lease after Duration at most. Duration >
	// RenewDeadline > 1.2 x RetryPeriod > 0.
	Duration, RenewDeadline, RetryPeriod time.Duration
	Logger                               *slog.Logger
}

// CheckTimings says what is wrong with the timings, as client-go's leader election does.
func (c LeaseConfig) CheckTimings() error {
	if c.RetryPeriod <= 0 || float64(c.RenewDeadline) <= retryJitter*float64(c.RetryPeriod) || c.Duration <= c.RenewDeadline {
		return fmt.Errorf("lease duration %v, renew deadline %v, retry period %v: want duration > renew deadline > 1.2 x retry period > 0",
			c.Duration, c.RenewDeadline, c.RetryPeriod)
	}
	return nil
}

var leaseResource = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// RunElected runs run while this process holds the lease, until ctx ends. When the lease is
// lost, run's context ends; the process campaigns again, and run starts anew when it wins.
// Runs never overlap: they are made one after the other on the caller's goroutine. The lease is
// released when ctx ends, so that another replica takes over at once.
//
// The election is client-go's (tools/leaderelection with a LeaseLock) written on the dynamic
// client: that package's lock types use the typed clients, which register the whole Kubernetes
// API scheme and doubled every adapter's binary (docs/benchmarks.md). The rules are its rules:
// a Lease held by another is taken only once its record has not changed for Duration by this
// process's clock (no comparison of two machines' clocks), every write names the
// resourceVersion it read, and the holder that cannot renew within RenewDeadline stops.
func RunElected(ctx context.Context, cfg LeaseConfig, run func(ctx context.Context) error) error {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return errors.New("kubewrite: the lease needs a client, a namespace, a name and an identity")
	}
	if err := cfg.CheckTimings(); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &elector{cfg: cfg, leases: cfg.Client.Resource(leaseResource).Namespace(cfg.Namespace),
		log: log.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity)}
	for {
		if !e.acquire(ctx) {
			return ctx.Err()
		}
		e.log.Info("holding the lease: writing the Kubernetes API")
		err := e.lead(ctx, run)
		e.log.Info("not holding the lease: not writing")
		if ctx.Err() != nil {
			e.release()
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, context.Canceled) { // Canceled: the term ended
			e.release()
			return err
		}
	}
}

// elector is one replica's view of the Lease.
type elector struct {
	cfg    LeaseConfig
	leases dynamic.ResourceInterface
	log    *slog.Logger

	// observed is the last record read and when this process first saw it (its clock).
	observed   leaseRecord
	observedAt time.Time
}

// leaseRecord is what the election reads of a Lease's spec.
type leaseRecord struct {
	holder, renewTime string
}

// acquire campaigns until this process holds the lease (true) or ctx ends (false).
func (e *elector) acquire(ctx context.Context) bool {
	for {
		if e.tryAcquireOrRenew(ctx) {
			return true
		}
		wait := time.Duration(float64(e.cfg.RetryPeriod) * (1 + rand.Float64()*(retryJitter-1)))
		if !sleep(ctx, wait) {
			return false
		}
	}
}

// lead runs run for one term: renewals every RetryPeriod on a goroutine of their own, which
// ends the term when none has succeeded for RenewDeadline.
func (e *elector) lead(ctx context.Context, run func(ctx context.Context) error) error {
	term, end := context.WithCancel(ctx)
	defer end()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		defer end()
		renewed := time.Now()
		for sleep(term, e.cfg.RetryPeriod) {
			if e.tryAcquireOrRenew(term) {
				renewed = time.Now()
			} else if time.Since(renewed) >= e.cfg.RenewDeadline {
				e.log.Warn("the lease was not renewed within the renew deadline: giving it up", "renew_deadline", e.cfg.RenewDeadline)
				return
			}
		}
	})
	return run(term)
}

// tryAcquireOrRenew takes or renews the lease once; true when this process holds it after.
func (e *elector) tryAcquireOrRenew(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	now := time.Now()
	cur, err := e.leases.Get(ctx, e.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
			"metadata": map[string]any{"name": e.cfg.Name, "namespace": e.cfg.Namespace},
		}}
		e.setSpec(lease, now, true, 0)
		if _, err := e.leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			e.log.Debug("cannot create the lease", "err", err)
			return false
		}
		e.see(leaseRecord{holder: e.cfg.Identity}, now)
		return true
	}
	if err != nil {
		e.log.Debug("cannot read the lease", "err", err)
		return false
	}
	holder, _, _ := unstructured.NestedString(cur.Object, "spec", "holderIdentity")
	renewTime, _, _ := unstructured.NestedString(cur.Object, "spec", "renewTime")
	rec := leaseRecord{holder: holder, renewTime: renewTime}
	if rec != e.observed {
		if holder != "" && holder != e.cfg.Identity && holder != e.observed.holder {
			e.log.Info("another replica holds the lease", "holder", holder)
		}
		e.see(rec, now)
	}
	if holder != "" && holder != e.cfg.Identity && now.Before(e.observedAt.Add(e.cfg.Duration)) {
		return false // held, and renewed within Duration as far as this process has seen
	}
	transitions, _, _ := unstructured.NestedInt64(cur.Object, "spec", "leaseTransitions")
	if holder != e.cfg.Identity {
		transitions++
	}
	e.setSpec(cur, now, holder != e.cfg.Identity, transitions)
	if _, err := e.leases.Update(ctx, cur, metav1.UpdateOptions{}); err != nil { // names the resourceVersion read
		e.log.Debug("cannot write the lease", "err", err)
		return false
	}
	e.see(leaseRecord{holder: e.cfg.Identity}, now)
	return true
}

// setSpec makes lease's spec say that this process holds it from now (acquired: a new term).
func (e *elector) setSpec(lease *unstructured.Unstructured, now time.Time, acquired bool, transitions int64) {
	stamp := metav1.NewMicroTime(now).UTC().Format(metav1.RFC3339Micro)
	spec, _, _ := unstructured.NestedMap(lease.Object, "spec")
	if spec == nil {
		spec = map[string]any{}
	}
	spec["holderIdentity"] = e.cfg.Identity
	spec["leaseDurationSeconds"] = int64(e.cfg.Duration / time.Second)
	spec["renewTime"] = stamp
	if acquired {
		spec["acquireTime"] = stamp
		spec["leaseTransitions"] = transitions
	}
	lease.Object["spec"] = spec
}

func (e *elector) see(rec leaseRecord, now time.Time) { e.observed, e.observedAt = rec, now }

// release gives the lease up if this process holds it, so that another replica takes it at
// once, as client-go does with ReleaseOnCancel: no holder, a one-second duration.
func (e *elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	cur, err := e.leases.Get(ctx, e.cfg.Name, metav1.GetOptions{})
	if err != nil {
		return
	}
	if holder, _, _ := unstructured.NestedString(cur.Object, "spec", "holderIdentity"); holder != e.cfg.Identity {
		return
	}
	if err := unstructured.SetNestedField(cur.Object, "", "spec", "holderIdentity"); err != nil {
		return
	}
	if err := unstructured.SetNestedField(cur.Object, int64(1), "spec", "leaseDurationSeconds"); err != nil {
		return
	}
	if _, err := e.leases.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		e.log.Warn("cannot release the lease; another replica takes it once it expires", "err", err)
	}
}
