package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/galleon-mesh/galleon/test/internal/proc"
)

// Client talks to the cluster as its admin: server-side apply of rendered manifests, and reads.
type Client struct {
	Dynamic dynamic.Interface
	disco   discovery.DiscoveryInterface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
}

// Client returns a client for the cluster's admin.
func (c *Cluster) Client() (*Client, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(c.pki.kubeconfig(c.Server))
	if err != nil {
		return nil, err
	}
	return newClient(cfg)
}

func newClient(cfg *rest.Config) (*Client, error) {
	// client-go's default client-side limit (5 requests a second, bursts of 10) made applying
	// Istio's 15 CRDs and waiting on them take 4.4 s against a loopback API server that answers
	// each request in milliseconds; 1.2 s of it was the applies.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 1000
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{Dynamic: dyn, disco: disco, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}, nil
}

// Decode splits a multi-document YAML stream into objects, skipping empty documents (Helm
// writes one per template that renders nothing).
func Decode(manifests []byte) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// ApplyYAML applies every object of a multi-document YAML stream (see Apply).
func (k *Client) ApplyYAML(ctx context.Context, manifests []byte, fieldManager string) ([]*unstructured.Unstructured, error) {
	objs, err := Decode(manifests)
	if err != nil {
		return nil, err
	}
	return k.Apply(ctx, objs, fieldManager)
}

// Apply creates or updates each object with server-side apply (not a dry run), as `kubectl
// apply --server-side --force-conflicts` does: Namespaces and CustomResourceDefinitions first,
// then a wait until every CRD is Established and listed by discovery, then the rest in order. It returns what the API server
// stored, and every object it refused, each error naming the object.
func (k *Client) Apply(ctx context.Context, objs []*unstructured.Unstructured, fieldManager string) ([]*unstructured.Unstructured, error) {
	var first, rest []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace", "CustomResourceDefinition":
			first = append(first, o)
		default:
			rest = append(rest, o)
		}
	}
	var stored []*unstructured.Unstructured
	var errs []error
	var crds []string
	for _, o := range first {
		got, err := k.applyOne(ctx, o, fieldManager)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		stored = append(stored, got)
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o.GetName())
		}
	}
	// The API server establishes CRDs concurrently: wait once all are applied.
	for _, name := range crds {
		if err := k.waitEstablished(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	if len(first) > 0 {
		// New kinds are served now: forget what discovery said before.
		k.mapper.Reset()
	}
	for _, o := range rest {
		got, err := k.applyOne(ctx, o, fieldManager)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		stored = append(stored, got)
	}
	return stored, errors.Join(errs...)
}

// Name is "Kind namespace/name" (or "Kind name"), how errors and tests name an object.
func Name(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", o.GetKind(), ns, o.GetName())
	}
	return fmt.Sprintf("%s %s", o.GetKind(), o.GetName())
}

func (k *Client) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		// The mapper asks discovery again only when its cache is not fresh; a kind served since
		// the cache was filled needs a reset.
		k.mapper.Reset()
		m, err = k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: the API server does not serve %s: %w", Name(o), gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := o.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		return k.Dynamic.Resource(m.Resource).Namespace(ns), nil
	}
	return k.Dynamic.Resource(m.Resource), nil
}

func (k *Client) applyOne(ctx context.Context, o *unstructured.Unstructured, fieldManager string) (*unstructured.Unstructured, error) {
	r, err := k.resource(o)
	if err != nil {
		return nil, err
	}
	got, err := r.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name(o), err)
	}
	return got, nil
}

// Get reads one object back (kind and names as in o).
func (k *Client) Get(ctx context.Context, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	r, err := k.resource(o)
	if err != nil {
		return nil, err
	}
	return r.Get(ctx, o.GetName(), metav1.GetOptions{})
}

// Create creates o (for kinds that are only ever created, such as SubjectAccessReview) and
// returns what the API server answered.
func (k *Client) Create(ctx context.Context, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	r, err := k.resource(o)
	if err != nil {
		return nil, err
	}
	got, err := r.Create(ctx, o, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name(o), err)
	}
	return got, nil
}

// waitEstablished waits until the CRD is Established and discovery lists its resource in every
// served version. Established alone does not promise discovery: the API server's discovery
// controller updates its document on its own schedule (kube-rs/kube#951 documents the same), and
// a mapper that read discovery in between would call the new kind not served.
func (k *Client) waitEstablished(ctx context.Context, name string) error {
	crds := k.Dynamic.Resource(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := proc.WaitFor(ctx, func() (bool, error) {
		u, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
			return false, proc.Permanent(err)
		}
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			return false, fmt.Errorf("CustomResourceDefinition %s not Established yet", name)
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gv := crd.Spec.Group + "/" + v.Name
			list, err := k.disco.ServerResourcesForGroupVersion(gv)
			if err != nil {
				return false, fmt.Errorf("discovery of %s: %w", gv, err)
			}
			if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == crd.Spec.Names.Plural }) {
				return false, fmt.Errorf("discovery does not list %s in %s yet", crd.Spec.Names.Plural, gv)
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("CustomResourceDefinition %s: %w", name, err)
	}
	return nil
}
