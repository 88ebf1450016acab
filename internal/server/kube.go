package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/galleon-mesh/galleon/internal/kubewrite"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// kubeOptions are the settings of the Kubernetes output (internal/kubewrite): off unless
// --output-kubernetes.
type kubeOptions struct {
	enabled          bool
	kubeconfig       string
	owner            string
	removalDelay     time.Duration
	qps              float64
	burst            int
	createNamespaces bool
	namespaces       []string

	// lease is "namespace/name" of the Lease replicas take turns on; empty: no election.
	lease                                 string
	leaseDuration, leaseRenew, leaseRetry time.Duration

	// rest is the API server's client configuration, read once by check.
	rest *rest.Config
}

// Defaults of the Kubernetes output's client: a registry storm is coalesced into rounds,
// and these bound what the rounds send.
const (
	defaultKubeQPS   = 20
	defaultKubeBurst = 40
)

func (k *kubeOptions) register(fs *pflag.FlagSet) {
	fs.BoolVar(&k.enabled, "output-kubernetes", false, "also write the served ServiceEntries and WorkloadEntries to the Kubernetes API (server-side apply), for istiod's ambient mode, kubectl and GitOps tools; the MCP servers run as before (docs/configuration.md#kubernetes-output)")
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "with --output-kubernetes: kubeconfig file of the API server to write; empty: the pod's service account (in-cluster)")
	fs.StringVar(&k.owner, "kubernetes-owner", "", "with --output-kubernetes: the galleon.io/owner label of every object written, and the only objects updated or deleted; give each Galleon deployment writing one cluster its own (default: the binary's name)")
	fs.DurationVar(&k.removalDelay, "kubernetes-removal-delay", kubewrite.DefaultRemovalDelay, "with --output-kubernetes: how long a resource must be out of the snapshot before its object is deleted")
	fs.Float64Var(&k.qps, "kubernetes-qps", defaultKubeQPS, "with --output-kubernetes: requests a second to the API server, on average (client-go's rate limiter)")
	fs.IntVar(&k.burst, "kubernetes-burst", defaultKubeBurst, "with --output-kubernetes: requests the API server may get at once above --kubernetes-qps")
	fs.StringVar(&k.lease, "kubernetes-lease", "", "with --output-kubernetes: namespace/name of a Lease (coordination.k8s.io) the replicas of one deployment take turns on, so that one writes at a time; empty: this process always writes (one replica)")
	fs.DurationVar(&k.leaseDuration, "kubernetes-lease-duration", kubewrite.DefaultLeaseDuration, "with --kubernetes-lease: how long a replica that stopped renewing keeps the lease before another takes it")
	fs.DurationVar(&k.leaseRenew, "kubernetes-lease-renew-deadline", kubewrite.DefaultRenewDeadline, "with --kubernetes-lease: how long the holder tries to renew before it gives up and stops writing (less than --kubernetes-lease-duration)")
	fs.DurationVar(&k.leaseRetry, "kubernetes-lease-retry-period", kubewrite.DefaultRetryPeriod, "with --kubernetes-lease: how often a replica tries to take or renew the lease")
	fs.StringSliceVar(&k.namespaces, "kubernetes-namespaces", nil, "with --output-kubernetes: the only namespaces written (and listed one by one: for RBAC with a Role in each); a service elsewhere is reported and not written; empty: every namespace")
	fs.BoolVar(&k.createNamespaces, "kubernetes-create-namespaces", false, "with --output-kubernetes: create a namespace a resource needs that does not exist (labelled app.kubernetes.io/managed-by=galleon); false: report it and retry")
}

func (k *kubeOptions) check() error {
	if !k.enabled {
		return nil
	}
	var errs []error
	if k.owner != "" {
		if msgs := validation.IsValidLabelValue(k.owner); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--kubernetes-owner %q: not a Kubernetes label value: %s", k.owner, strings.Join(msgs, "; ")))
		}
	}
	if k.removalDelay <= 0 {
		errs = append(errs, fmt.Errorf("--kubernetes-removal-delay %v: want a positive duration, e.g. 30s", k.removalDelay))
	}
	if k.qps <= 0 || k.burst < 1 {
		errs = append(errs, fmt.Errorf("--kubernetes-qps %v and --kubernetes-burst %d: want positive numbers", k.qps, k.burst))
	}
	for _, ns := range k.namespaces {
		if len(validation.IsDNS1123Label(ns)) > 0 {
			errs = append(errs, fmt.Errorf("--kubernetes-namespaces: %q is not a namespace name", ns))
		}
	}
	if len(k.namespaces) > 0 && k.createNamespaces {
		errs = append(errs, errors.New("--kubernetes-create-namespaces and --kubernetes-namespaces do not go together: the namespaces written are known, create them"))
	}
	if k.lease != "" {
		ns, name, ok := strings.Cut(k.lease, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			errs = append(errs, fmt.Errorf("--kubernetes-lease %q: want namespace/name, e.g. istio-system/galleon-consul", k.lease))
		}
		timings := kubewrite.LeaseConfig{Duration: k.leaseDuration, RenewDeadline: k.leaseRenew, RetryPeriod: k.leaseRetry}
		if err := timings.CheckTimings(); err != nil {
			errs = append(errs, fmt.Errorf("--kubernetes-lease-duration, --kubernetes-lease-renew-deadline, --kubernetes-lease-retry-period: %w", err))
		}
	}
	var err error
	if k.rest, err = k.restConfig(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (k *kubeOptions) restConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if k.kubeconfig != "" {
		if cfg, err = clientcmd.BuildConfigFromFlags("", k.kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", k.kubeconfig, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("--output-kubernetes without --kubeconfig needs to run in a pod with a service account: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(k.qps), k.burst
	cfg.UserAgent = "galleon"
	return cfg, nil
}

// output builds the Kubernetes output on store, as the part the daemon runs; owner is the default
// --kubernetes-owner.
func (k *kubeOptions) output(store snapshot.Source, owner string, log *slog.Logger, metrics prometheus.Registerer) (func(ctx context.Context) error, error) {
	cfg := k.rest // check read it
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--output-kubernetes: %w", err)
	}
	if k.owner != "" {
		owner = k.owner
	}
	log.Info("writing to the Kubernetes API", "server", cfg.Host, "owner", owner, "removal_delay", k.removalDelay,
		"qps", k.qps, "burst", k.burst, "create_namespaces", k.createNamespaces, "namespaces", k.namespaces, "lease", k.lease)
	w, err := kubewrite.New(kubewrite.Config{
		Source: store, Client: client, Owner: owner, RemovalDelay: k.removalDelay,
		CreateNamespaces: k.createNamespaces, Namespaces: k.namespaces, Logger: log, Registerer: metrics,
		// A round of about a burst's worth of objects, so that at a low rate the writer looks
		// at the snapshot again within seconds.
		RoundSize: min(kubewrite.DefaultRoundSize, max(kubewrite.DefaultWorkers, k.burst)),
	})
	if err != nil {
		return nil, err
	}
	// client-go logs through klog (the API server's warnings, say): into this process's log,
	// not stderr's own format.
	klog.SetSlogLogger(log.With("component", "client-go"))
	if k.lease == "" {
		return w.Run, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("--kubernetes-lease: this replica's identity: %w", err)
	}
	ns, name, _ := strings.Cut(k.lease, "/")
	lease := kubewrite.LeaseConfig{
		Client: client, Namespace: ns, Name: name, Identity: fmt.Sprintf("%s_%d", host, os.Getpid()),
		Duration: k.leaseDuration, RenewDeadline: k.leaseRenew, RetryPeriod: k.leaseRetry, Logger: log,
	}
	return func(ctx context.Context) error { return kubewrite.RunElected(ctx, lease, w.Run) }, nil
}
