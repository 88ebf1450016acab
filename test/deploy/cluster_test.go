package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/internal/proc"
	"github.com/galleon-mesh/galleon/test/istiod"
	"github.com/galleon-mesh/galleon/test/kube"
)

// runTool runs a real tool (helm, kubectl) with env added to this process's environment and
// returns its standard output; the error carries its standard error.
func runTool(env []string, bin string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, errOut.String())
	}
	return out, nil
}

// render is runTool that fails the test when the tool fails.
func render(t testing.TB, env []string, bin string, args ...string) []byte {
	t.Helper()
	out, err := runTool(env, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// storedContainer and storedVolume are the parts of a stored pod spec the checks read.
type storedContainer struct {
	Name          string    `json:"name"`
	Args          []string  `json:"args"`
	RestartPolicy string    `json:"restartPolicy"`
	StartupProbe  *struct{} `json:"startupProbe"`
}

type storedVolume struct {
	Name   string `json:"name"`
	Secret *struct {
		SecretName string `json:"secretName"`
	} `json:"secret"`
}

// applied indexes what the API server stored by "Kind namespace/name".
type applied map[string]*unstructured.Unstructured

func apply(t testing.TB, ctx context.Context, client *kube.Client, what string, manifests []byte) applied {
	t.Helper()
	stored, err := client.ApplyYAML(ctx, manifests, "galleon-deploy-test")
	if err != nil {
		t.Fatalf("%s: the API server refused: %v", what, err)
	}
	out := applied{}
	for _, o := range stored {
		out[kube.Name(o)] = o
	}
	t.Logf("%s: %d objects stored", what, len(stored))
	return out
}

func (a applied) get(t testing.TB, name string, into any) {
	t.Helper()
	o, ok := a[name]
	if !ok {
		keys := make([]string, 0, len(a))
		for k := range a {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Fatalf("%s was not applied; applied: %v", name, keys)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestChartOnAPIServer renders every layout with the real tools and applies the objects to a real
// kube-apiserver (server-side apply, not a dry run), then reads back what it stored:
//
//   - the chart (helm template) for each adapter and galleon-fleet (its registry list in a
//     ConfigMap), standalone, with the NetworkPolicy, the
//     ServiceMonitor (after the Prometheus Operator's own CRD) and, for galleon-file, TLS from a
//     Secret;
//   - the plain standalone kustomization (kubectl kustomize);
//   - the sidecar layout: Istio's own istiod chart from the istio module, post-rendered by
//     deploy/kubernetes/sidecar/helm-post-renderer.sh, which adds galleon-file as a native
//     sidecar, with Istio's RBAC;
//   - and RBAC as the authorizer sees it: the adapters' ServiceAccounts may read nothing, istiod's
//     may read ServiceEntries.
//
// No Pod runs (there is no kubelet): deploy/README.md lists what only a real cluster shows.
func TestChartOnAPIServer(tt *testing.T) {
	t := proc.FailuresLast(tt)
	helm, kubectl := kube.Helm(t), kube.Kubectl(t)
	root := repoRoot(t)
	chart := filepath.Join(root, "deploy/helm/galleon")
	c := kube.Start(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	apply(t, ctx, client, "namespaces", []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: istio-system\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: galleon\n"))
	crdPath, err := toolcache.ServiceMonitorCRD(ctx)
	if err != nil {
		t.Fatalf("the ServiceMonitor CRD: %v", err)
	}
	crd, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatalf("the ServiceMonitor CRD: %v", err)
	}
	apply(t, ctx, client, "the Prometheus Operator's ServiceMonitor CRD", crd)
	// What cert-manager would write: the chart mounts it, the API server checks its keys.
	apply(t, ctx, client, "TLS Secret", []byte(`apiVersion: v1
kind: Secret
metadata:
  name: galleon-file-tls
  namespace: galleon
type: kubernetes.io/tls
stringData:
  tls.crt: not-checked-here
  tls.key: not-checked-here
  ca.crt: not-checked-here
`))

	adapters := []struct {
		name string
		args []string
	}{
		{"galleon-file", []string{"-f", filepath.Join(root, "deploy/helm/values-bookinfo.yaml"),
			"--set", "tls.secretName=galleon-file-tls", "--set", "tls.clientCA=true",
			"--set", "tls.allowedClients={spiffe://cluster.local/ns/istio-system/sa/galleonctl}"}},
		{"galleon-consul", []string{"--set", "adapter.args={--log-format=json,--consul-address=consul-server.consul.svc:8500}", "--set", "shards.count=2"}},
		{"galleon-zookeeper", []string{"--set", "adapter.args={--log-format=json,--zk-servers=zookeeper.zk.svc:2181}"}},
		{"galleon-eureka", []string{"--set", "adapter.args={--log-format=json,--eureka-urls=http://eureka.eureka.svc:8761/eureka}"}},
		{"galleon-nacos", []string{"--set", "adapter.args={--log-format=json,--nacos-servers=nacos.nacos.svc:8848}"}},
		{"galleon-fleet", []string{"-f", filepath.Join(root, "deploy/helm/values-fleet.yaml")}},
	}
	stored := map[string]applied{}
	for _, a := range adapters {
		args := append([]string{"template", a.name, chart, "-n", "galleon", "--set", "adapter.name=" + a.name, "--set", "serviceMonitor.enabled=true"}, a.args...)
		stored[a.name] = apply(t, ctx, client, "helm template "+a.name, render(t, nil, helm, args...))
		checkStoredAdapter(t, stored[a.name], "galleon", a.name)
	}

	// Shards (galleon-consul above, shards.count=2): NOTES.txt, which only an install renders,
	// lists every shard port as istiod's configSources, not ports.grpc.
	// (In istio-system: the objects applied to namespace galleon above belong to no release.)
	notes := string(render(t, nil, helm, "install", "galleon-consul", chart, "-n", "istio-system", "--dry-run=server",
		"--kubeconfig", c.Kubeconfig, "--set", "adapter.name=galleon-consul", "--set", "shards.count=2"))
	for _, want := range []string{"- address: xds://galleon-consul.istio-system.svc:16020\n", "- address: xds://galleon-consul.istio-system.svc:16021\n"} {
		if !strings.Contains(notes, want) {
			t.Errorf("helm install with shards.count=2: NOTES lack %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "xds://galleon-consul.istio-system.svc:16010") {
		t.Errorf("helm install with shards.count=2: NOTES still point istiod at --listen:\n%s", notes)
	}

	// TLS as the pods will see it: flags pointing at the mounted Secret's keys.
	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []storedContainer `json:"containers"`
					Volumes    []storedVolume    `json:"volumes"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	stored["galleon-file"].get(t, "Deployment galleon/galleon-file", &dep)
	args := dep.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--tls-cert=/etc/galleon/tls/tls.crt", "--tls-key=/etc/galleon/tls/tls.key", "--tls-client-ca=/etc/galleon/tls/ca.crt",
		"--tls-client-cert-optional", "--tls-allowed-clients=spiffe://cluster.local/ns/istio-system/sa/galleonctl"} {
		if !slices.Contains(args, want) {
			t.Errorf("galleon-file with tls values: args %q lack %q", args, want)
		}
	}
	if !slices.ContainsFunc(dep.Spec.Template.Spec.Volumes, func(v storedVolume) bool {
		return v.Secret != nil && v.Secret.SecretName == "galleon-file-tls"
	}) {
		t.Errorf("galleon-file with tls values: no volume mounts Secret galleon-file-tls: %+v", dep.Spec.Template.Spec.Volumes)
	}

	// The plain manifests, as `kubectl apply -k` would send them.
	kust := apply(t, ctx, client, "kubectl kustomize deploy/kubernetes/standalone", render(t, nil, kubectl, "kustomize", filepath.Join(root, "deploy/kubernetes/standalone")))
	checkStoredAdapter(t, kust, "istio-system", "galleon-file")

	// The sidecar layout: Istio's istiod chart, post-rendered with the README's post-renderer
	// (which calls kubectl kustomize) and the mesh config's configSources.
	istioChart, err := istioDiscoveryChart()
	if err != nil {
		t.Fatal(err)
	}
	sidecar := render(t, []string{"PATH=" + filepath.Dir(kubectl) + string(os.PathListSeparator) + os.Getenv("PATH")}, helm,
		"template", "istiod", istioChart, "-n", "istio-system",
		"--set-json", `meshConfig={"configSources":[{"address":"k8s://"},{"address":"xds://127.0.0.1:16010"}]}`,
		"--post-renderer", filepath.Join(root, "deploy/kubernetes/sidecar/helm-post-renderer.sh"))
	cm, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/sidecar/configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	istiodObjs := apply(t, ctx, client, "istiod chart + sidecar post-renderer + registry ConfigMap", append(append(sidecar, []byte("\n---\n")...), cm...))
	checkSidecarIstiod(t, istiodObjs)

	// The Kubernetes output (every namespace, namespaces created): its ClusterRole, its Lease Role.
	apply(t, ctx, client, "helm template galleon-writer", render(t, nil, helm, "template", "galleon-writer", chart, "-n", "galleon",
		"--set", "adapter.name=galleon-eureka", "--set", "fullnameOverride=galleon-writer",
		"--set", "adapter.args={--log-format=json,--eureka-urls=http://eureka.eureka.svc:8761/eureka}",
		"--set", "kubernetesOutput.enabled=true", "--set", "kubernetesOutput.createNamespaces=true"))

	// RBAC, as the API server's authorizer decides with what was applied.
	for _, q := range []struct {
		user, verb, group, resource, ns, name string
		want                                  bool
	}{
		{"system:serviceaccount:galleon:galleon-file", "get", "", "secrets", "galleon", "", false},
		{"system:serviceaccount:galleon:galleon-consul", "list", "", "pods", "galleon", "", false},
		{"system:serviceaccount:istio-system:galleon-file", "get", "", "configmaps", "istio-system", "", false},
		{"system:serviceaccount:istio-system:istiod", "list", "networking.istio.io", "serviceentries", "", "", true},
		{"system:serviceaccount:istio-system:istiod", "watch", "discovery.k8s.io", "endpointslices", "", "", true},
		{"system:serviceaccount:galleon:galleon-consul", "patch", "networking.istio.io", "serviceentries", "shop", "", false},
		{"system:serviceaccount:galleon:galleon-writer", "patch", "networking.istio.io", "serviceentries", "shop", "", true},
		{"system:serviceaccount:galleon:galleon-writer", "create", "networking.istio.io", "workloadentries", "shop", "", true},
		{"system:serviceaccount:galleon:galleon-writer", "list", "networking.istio.io", "serviceentries", "", "", true},
		{"system:serviceaccount:galleon:galleon-writer", "delete", "networking.istio.io", "serviceentries", "shop", "", true},
		{"system:serviceaccount:galleon:galleon-writer", "create", "", "namespaces", "", "", true},
		{"system:serviceaccount:galleon:galleon-writer", "delete", "", "namespaces", "", "", false},
		{"system:serviceaccount:galleon:galleon-writer", "create", "networking.istio.io", "virtualservices", "shop", "", false},
		{"system:serviceaccount:galleon:galleon-writer", "get", "", "secrets", "galleon", "", false},
		{"system:serviceaccount:galleon:galleon-writer", "update", "coordination.k8s.io", "leases", "galleon", "galleon-writer-writer", true},
		{"system:serviceaccount:galleon:galleon-writer", "update", "coordination.k8s.io", "leases", "galleon", "kube-controller-manager", false},
	} {
		review := map[string]any{
			"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
			"spec": map[string]any{"user": q.user, "resourceAttributes": map[string]any{
				"verb": q.verb, "group": q.group, "resource": q.resource, "namespace": q.ns, "name": q.name}},
		}
		got, err := client.Create(ctx, &unstructured.Unstructured{Object: review})
		if err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		var sar authorizationv1.SubjectAccessReview
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != q.want {
			t.Errorf("may %s %s %s.%s in %q? the API server says %v (%s), want %v", q.user, q.verb, q.resource, q.group, q.ns, sar.Status.Allowed, sar.Status.Reason, q.want)
		}
	}
}

// checkStoredAdapter checks one adapter's standalone objects as the API server stored them: the
// Service and NetworkPolicy select the Deployment's pods, the NetworkPolicy admits only istiod to
// the gRPC port, the ServiceMonitor (when there) selects the Service, no token is mounted.
func checkStoredAdapter(t testing.TB, objs applied, ns, name string) {
	t.Helper()
	var dep struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec struct {
					AutomountServiceAccountToken *bool  `json:"automountServiceAccountToken"`
					ServiceAccountName           string `json:"serviceAccountName"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	objs.get(t, fmt.Sprintf("Deployment %s/%s", ns, name), &dep)
	pod := labels.Set(dep.Spec.Template.Metadata.Labels)
	if a := dep.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("%s: the pods mount a ServiceAccount token; the adapters read no Kubernetes API", name)
	}
	if sa := dep.Spec.Template.Spec.ServiceAccountName; objs[fmt.Sprintf("ServiceAccount %s/%s", ns, sa)] == nil {
		t.Errorf("%s: ServiceAccount %s/%s was not applied", name, ns, sa)
	}

	var svc struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Selector map[string]string `json:"selector"`
		} `json:"spec"`
	}
	objs.get(t, fmt.Sprintf("Service %s/%s", ns, name), &svc)
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(pod) {
		t.Errorf("%s: Service selector %v does not select the pods %v", name, svc.Spec.Selector, pod)
	}

	var np struct {
		Spec struct {
			PodSelector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"podSelector"`
			Ingress []struct {
				From []struct {
					PodSelector *struct {
						MatchLabels map[string]string `json:"matchLabels"`
					} `json:"podSelector"`
					NamespaceSelector *struct{} `json:"namespaceSelector"`
				} `json:"from"`
				Ports []struct {
					Port any `json:"port"`
				} `json:"ports"`
			} `json:"ingress"`
		} `json:"spec"`
	}
	objs.get(t, fmt.Sprintf("NetworkPolicy %s/%s", ns, name), &np)
	if !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(pod) || len(np.Spec.PodSelector.MatchLabels) == 0 {
		t.Errorf("%s: NetworkPolicy selects %v, not the pods %v", name, np.Spec.PodSelector.MatchLabels, pod)
	}
	grpcOnlyIstiod := false
	for _, rule := range np.Spec.Ingress {
		// The rule for the gRPC port: grpc-mcp, and the shards' ports when there are shards.
		grpcRule := len(rule.Ports) > 0 && rule.Ports[0].Port == "grpc-mcp"
		for _, p := range rule.Ports[min(1, len(rule.Ports)):] {
			if name, _ := p.Port.(string); !strings.HasPrefix(name, "grpc-shard-") {
				grpcRule = false
			}
		}
		if !grpcRule {
			continue
		}
		grpcOnlyIstiod = len(rule.From) > 0
		for _, f := range rule.From {
			if f.PodSelector == nil || f.PodSelector.MatchLabels["app"] != "istiod" || f.NamespaceSelector == nil {
				grpcOnlyIstiod = false
			}
		}
	}
	if !grpcOnlyIstiod {
		t.Errorf("%s: NetworkPolicy does not admit exactly istiod pods (app: istiod, any namespace) to grpc-mcp: %+v", name, np.Spec.Ingress)
	}

	smName := fmt.Sprintf("ServiceMonitor %s/%s", ns, name)
	if _, ok := objs[smName]; !ok {
		return // the kustomization has none
	}
	var sm struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
				Path string `json:"path"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	objs.get(t, smName, &sm)
	if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Metadata.Labels)) ||
		len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http-monitoring" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("%s: ServiceMonitor %+v does not scrape the Service's http-monitoring /metrics (Service labels %v)", name, sm.Spec, svc.Metadata.Labels)
	}
}

// checkSidecarIstiod checks the stored istiod Deployment of the sidecar layout: galleon-file is a
// native sidecar (an init container with restartPolicy Always, kept by this API server) with a
// startup probe, beside istiod's own container, and the mesh config lists both sources.
func checkSidecarIstiod(t testing.TB, objs applied) {
	t.Helper()
	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					InitContainers []storedContainer `json:"initContainers"`
					Containers     []storedContainer `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	objs.get(t, "Deployment istio-system/istiod", &dep)
	spec := dep.Spec.Template.Spec
	i := slices.IndexFunc(spec.InitContainers, func(c storedContainer) bool { return c.Name == adapterName })
	switch {
	case i < 0:
		t.Errorf("stored istiod Deployment has no %s init container: %+v", adapterName, spec.InitContainers)
	case spec.InitContainers[i].RestartPolicy != "Always" || spec.InitContainers[i].StartupProbe == nil:
		t.Errorf("stored %s sidecar: restartPolicy %q, startup probe %v; want a native sidecar (Always) with a startup probe",
			adapterName, spec.InitContainers[i].RestartPolicy, spec.InitContainers[i].StartupProbe != nil)
	}
	if !slices.ContainsFunc(spec.Containers, func(c storedContainer) bool { return c.Name == "discovery" }) {
		t.Errorf("stored istiod Deployment lost istiod's own container (discovery): %+v", spec.Containers)
	}
	var mesh struct {
		Data map[string]string `json:"data"`
	}
	objs.get(t, "ConfigMap istio-system/istio", &mesh)
	for _, want := range []string{"address: k8s://", "address: xds://127.0.0.1:16010"} {
		if !strings.Contains(mesh.Data["mesh"], want) {
			t.Errorf("istiod's mesh config lacks %q:\n%s", want, mesh.Data["mesh"])
		}
	}
}

// istioDiscoveryChart is Istio's own istiod chart in the istio.io/istio module this test module
// compiles (manifests/charts/istio-control/istio-discovery), next to its CRD file.
func istioDiscoveryChart() (string, error) {
	crds, err := istiod.CRDFile(istiod.Release{Name: istiod.CompiledRelease()})
	if err != nil {
		return "", err
	}
	// crds is <module>/manifests/charts/base/files/crd-all.gen.yaml
	chart := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(crds))), "istio-control", "istio-discovery")
	if _, err := os.Stat(filepath.Join(chart, "Chart.yaml")); err != nil {
		return "", fmt.Errorf("the istiod chart of the istio module: %w", err)
	}
	return chart, nil
}
