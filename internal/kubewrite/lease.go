package kubewrite

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Defaults of LeaseConfig: client-go's and kube-controller-manager's.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// LeaseConfig names the Kubernetes Lease that replicas take turns on.
type LeaseConfig struct {
	Client    coordinationv1.CoordinationV1Interface
	Namespace string
	Name      string
	// Identity tells the replicas apart (the pod's name).
	Identity string
	// Duration, RenewDeadline and RetryPeriod are client-go's leader election timings: a
	// replica that stops renewing loses the lease after Duration at most.
	Duration, RenewDeadline, RetryPeriod time.Duration
	Logger                               *slog.Logger
}

// RunElected runs run while this process holds the lease, until ctx ends. When the lease is
// lost, run's context ends; the process campaigns again, and run starts anew when it wins.
// Runs never overlap: they are made one after the other on the caller's goroutine. The lease is
// released when ctx ends, so that another replica takes over at once.
func RunElected(ctx context.Context, cfg LeaseConfig, run func(ctx context.Context) error) error {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return errors.New("kubewrite: the lease needs a client, a namespace, a name and an identity")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     cfg.Client,
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	electionCfg := leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.Duration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.Name,
	}
	// The elector hands each term's context over; run is called here, not on client-go's
	// goroutine, so that a term never starts before the last one's run has returned.
	terms := make(chan context.Context)
	electionCfg.Callbacks = leaderelection.LeaderCallbacks{
		OnStartedLeading: func(term context.Context) {
			select {
			case terms <- term:
			case <-term.Done():
			}
		},
		OnStoppedLeading: func() { log.Info("not holding the lease: not writing") },
		OnNewLeader: func(identity string) {
			if identity != cfg.Identity {
				log.Info("another replica holds the lease", "holder", identity)
			}
		},
	}
	if _, err := leaderelection.NewLeaderElector(electionCfg); err != nil { // checks the timings
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() {
		for ctx.Err() == nil {
			elector, err := leaderelection.NewLeaderElector(electionCfg)
			if err != nil {
				return // checked above
			}
			elector.Run(ctx) // returns when the lease is lost or ctx ends
		}
	})
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case term := <-terms:
			log.Info("holding the lease: writing the Kubernetes API")
			if err := run(term); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
		}
	}
}
