package server

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

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
	if _, err := k.restConfig(); err != nil {
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

// writer builds the Kubernetes output on store; owner is the default --kubernetes-owner.
func (k *kubeOptions) writer(store snapshot.Source, owner string, log *slog.Logger, metrics prometheus.Registerer) (*kubewrite.Writer, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--output-kubernetes: %w", err)
	}
	if k.owner != "" {
		owner = k.owner
	}
	log.Info("writing to the Kubernetes API", "server", cfg.Host, "owner", owner, "removal_delay", k.removalDelay,
		"qps", k.qps, "burst", k.burst, "create_namespaces", k.createNamespaces)
	return kubewrite.New(kubewrite.Config{
		Source: store, Client: client, Owner: owner, RemovalDelay: k.removalDelay,
		CreateNamespaces: k.createNamespaces, Logger: log, Registerer: metrics,
	})
}
