package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/galleon-mesh/galleon/test/istiod"
	"github.com/galleon-mesh/galleon/test/kube"
)

var serviceEntryResource = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "serviceentries"}

// istioAPIServer starts a kube-apiserver with the Istio CRDs of rel and the namespaces given, and
// returns it with an admin client.
func istioAPIServer(t *testing.T, ctx context.Context, rel istiod.Release, namespaces ...string) (*kube.Cluster, *kube.Client) {
	t.Helper()
	c := kube.Start(t)
	istiod.PrepareCluster(t, c, rel)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	var yaml strings.Builder
	for _, ns := range namespaces {
		fmt.Fprintf(&yaml, "apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n---\n", ns)
	}
	if _, err := client.ApplyYAML(ctx, []byte(yaml.String()), "galleon-e2e"); err != nil {
		t.Fatalf("namespaces %v: %v", namespaces, err)
	}
	return c, client
}

// firstRelease is the matrix's first istiod release: its CRDs are the ones every release reads.
func firstRelease(t *testing.T) istiod.Release {
	t.Helper()
	rels, err := istiod.Releases()
	if err != nil {
		t.Fatal(err)
	}
	return rels[0]
}

// TestKubernetesOutput runs galleon-file with --output-kubernetes against a real API server
// with Istio's CRDs: its ServiceEntries are written with server-side apply and its labels,
// an edit is written and nothing else is, an object another owner wrote is left alone, a
// missing namespace is reported and written once it exists, a removal waits for the removal
// delay, and a restart rewrites nothing that is already right but deletes what went meanwhile.
func TestKubernetesOutput(t *testing.T) {
	bin := galleonBinary(t, "galleon-file")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// shop exists and holds a ServiceEntry of the name Galleon's legacy would take, written by
	// someone else; payments does not exist yet.
	c, client := istioAPIServer(t, ctx, firstRelease(t), "shop")
	if _, err := client.ApplyYAML(ctx, []byte(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: legacy, namespace: shop}
spec:
  hosts: [legacy.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: tls, protocol: TLS}]
`), "someone-else"); err != nil {
		t.Fatal(err)
	}
	ses := client.Dynamic.Resource(serviceEntryResource)
	get := func(ns, name string) (*unstructured.Unstructured, error) {
		return ses.Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	}
	legacyBefore, err := get("shop", "legacy")
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	service := func(name, ns string, addrs ...string) fileService {
		s := fileService{Name: name, Namespace: ns, Hosts: []string{name + ".vms.internal"},
			Ports: []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}}}
		for i, a := range addrs {
			s.Instances = append(s.Instances, fileInstance{ID: fmt.Sprintf("%s-%d", name, i), Address: a})
		}
		return s
	}
	reg := fileRegistry{Services: []fileService{
		service("orders", "shop", "10.9.0.1", "10.9.0.2"),
		service("stock", "shop", "10.9.1.1"),
		service("legacy", "shop", "10.9.2.1"),
		service("billing", "payments", "10.9.3.1"),
	}}
	writeRegistryFile(t, dir, "vms.yaml", reg)
	const removalDelay = 3 * time.Second
	args := []string{"--file-dir", dir, "--output-kubernetes", "--kubeconfig", c.Kubeconfig,
		"--kubernetes-removal-delay", removalDelay.String(), "--removal-hold", "0"}
	g := startGalleon(t, bin, args...)

	waitFor := func(what string, cond func() (bool, error)) {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 45*time.Second)
		defer wcancel()
		if err := g.WaitFor(wctx, cond); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, g.Tail(30))
		}
	}
	endpointsOf := func(o *unstructured.Unstructured) []string {
		eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
		var out []string
		for _, e := range eps {
			if m, ok := e.(map[string]any); ok {
				out = append(out, fmt.Sprint(m["address"]))
			}
		}
		slices.Sort(out)
		return out
	}
	waitEndpoints := func(what, ns, name string, want ...string) *unstructured.Unstructured {
		t.Helper()
		var o *unstructured.Unstructured
		waitFor(what, func() (bool, error) {
			var err error
			if o, err = get(ns, name); apierrors.IsNotFound(err) {
				return false, nil
			} else if err != nil {
				return false, err
			}
			return slices.Equal(endpointsOf(o), want), nil
		})
		return o
	}

	// 1. Written, with the owner's labels, the content hash, one field manager.
	orders := waitEndpoints("shop/orders written", "shop", "orders", "10.9.0.1", "10.9.0.2")
	stock := waitEndpoints("shop/stock written", "shop", "stock", "10.9.1.1")
	labels := orders.GetLabels()
	if labels["galleon.io/owner"] != "galleon-file" || labels["galleon.io/registry"] != "file" || labels["app.kubernetes.io/managed-by"] != "galleon" {
		t.Errorf("shop/orders labels %v: want galleon.io/owner=galleon-file, galleon.io/registry=file, app.kubernetes.io/managed-by=galleon", labels)
	}
	if orders.GetAnnotations()["galleon.io/content-hash"] == "" {
		t.Errorf("shop/orders has no galleon.io/content-hash annotation: %v", orders.GetAnnotations())
	}
	if hosts, _, _ := unstructured.NestedStringSlice(orders.Object, "spec", "hosts"); !slices.Equal(hosts, []string{"orders.vms.internal"}) {
		t.Errorf("shop/orders spec.hosts %v", hosts)
	}
	var managers []string
	for _, f := range orders.GetManagedFields() {
		managers = append(managers, f.Manager+"/"+string(f.Operation))
	}
	if !slices.Equal(managers, []string{"galleon/Apply"}) {
		t.Errorf("shop/orders field managers %v, want [galleon/Apply]", managers)
	}

	// 2. Another owner's object is left alone, and reported.
	waitFor("the conflict on shop/legacy reported", func() (bool, error) {
		fams, _, err := scrapeMetrics(ctx, g)
		if err != nil {
			return false, err
		}
		n, _ := metricSum(fams, "galleon_kubernetes_conflicts", nil)
		return n == 1, nil
	})
	legacy, err := get("shop", "legacy")
	if err != nil {
		t.Fatal(err)
	}
	if legacy.GetResourceVersion() != legacyBefore.GetResourceVersion() || legacy.GetLabels()["galleon.io/owner"] != "" {
		t.Errorf("shop/legacy, another owner's, was changed: resourceVersion %s -> %s, labels %v",
			legacyBefore.GetResourceVersion(), legacy.GetResourceVersion(), legacy.GetLabels())
	}

	// 3. A namespace that does not exist is reported, and its object written once it exists.
	waitFor("payments' missing namespace reported", func() (bool, error) {
		fams, _, err := scrapeMetrics(ctx, g)
		if err != nil {
			return false, err
		}
		n, _ := metricSum(fams, "galleon_kubernetes_writes_total", map[string]string{"result": "missing_namespace"})
		return n >= 1, nil
	})
	if !g.LogContains("the namespace does not exist") {
		t.Errorf("no log line says the namespace payments does not exist:\n%s", g.Tail(30))
	}
	if _, err := client.ApplyYAML(ctx, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: payments}\n"), "galleon-e2e"); err != nil {
		t.Fatal(err)
	}
	waitEndpoints("payments/billing written once its namespace exists", "payments", "billing", "10.9.3.1")

	// 4. An edit is written; what did not change is not (server-side apply of an unchanged
	// object would leave its resourceVersion as it is: count the requests).
	applied := func() float64 {
		t.Helper()
		fams, _, err := scrapeMetrics(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := metricSum(fams, "galleon_kubernetes_writes_total", map[string]string{"result": "applied"})
		return n
	}
	appliedBefore := applied()
	reg.Services[0].Instances[1].Address = "10.9.0.3"
	writeRegistryFile(t, dir, "vms.yaml", reg)
	waitEndpoints("shop/orders edited", "shop", "orders", "10.9.0.1", "10.9.0.3")
	if n := applied() - appliedBefore; n != 1 {
		t.Errorf("one service edited: %v objects applied, want 1", n)
	}
	if s, err := get("shop", "stock"); err != nil || s.GetResourceVersion() != stock.GetResourceVersion() {
		t.Errorf("shop/stock, unchanged, was written again (resourceVersion %s -> %v, %v)", stock.GetResourceVersion(), s.GetResourceVersion(), err)
	}

	// 5. A removal waits for the removal delay.
	reg.Services = slices.Delete(reg.Services, 1, 2) // stock
	removed := time.Now()
	writeRegistryFile(t, dir, "vms.yaml", reg)
	waitFor("shop/stock deleted", func() (bool, error) {
		_, err := get("shop", "stock")
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if took := time.Since(removed); took < removalDelay {
		t.Errorf("shop/stock deleted %v after it left the registry, before the removal delay (%v)", took, removalDelay)
	}

	// 6. A restart rewrites nothing already right, and deletes what left meanwhile.
	g.Stop()
	ordersBefore, err := get("shop", "orders")
	if err != nil {
		t.Fatal(err)
	}
	reg.Services = slices.DeleteFunc(reg.Services, func(s fileService) bool { return s.Name == "billing" })
	writeRegistryFile(t, dir, "vms.yaml", reg)
	g = startGalleon(t, bin, args...)
	waitFor("payments/billing deleted after the restart", func() (bool, error) {
		_, err := get("payments", "billing")
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if n := applied(); n != 0 {
		t.Errorf("after a restart with nothing changed but a removal, %v objects were applied, want 0", n)
	}
	if o, err := get("shop", "orders"); err != nil || o.GetResourceVersion() != ordersBefore.GetResourceVersion() {
		t.Errorf("shop/orders was written again after a restart (resourceVersion %s -> %v, %v)", ordersBefore.GetResourceVersion(), o.GetResourceVersion(), err)
	}
	if l, err := get("shop", "legacy"); err != nil || l.GetResourceVersion() != legacyBefore.GetResourceVersion() {
		t.Errorf("shop/legacy, another owner's, changed after the restart: %v, %v", l.GetResourceVersion(), err)
	}
}

// TestKubernetesOutputLease runs two replicas of galleon-file on one registry with
// --kubernetes-lease: one writes, the other stands by and writes nothing; when the writer stops,
// the other takes the lease, rewrites nothing already right, and writes the next change.
func TestKubernetesOutputLease(t *testing.T) {
	bin := galleonBinary(t, "galleon-file")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, client := istioAPIServer(t, ctx, firstRelease(t), "shop", "galleon")
	dir := t.TempDir()
	reg := fileRegistry{Services: []fileService{{Name: "orders", Namespace: "shop", Hosts: []string{"orders.vms.internal"},
		Ports: []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}}, Instances: []fileInstance{{ID: "orders-1", Address: "10.9.0.1"}}}}}
	writeRegistryFile(t, dir, "vms.yaml", reg)
	args := []string{"--file-dir", dir, "--output-kubernetes", "--kubeconfig", c.Kubeconfig,
		"--kubernetes-lease", "galleon/galleon-file-writer", "--kubernetes-lease-duration", "3s",
		"--kubernetes-lease-renew-deadline", "2s", "--kubernetes-lease-retry-period", "250ms"}
	metric := func(g *galleon, name string, labels map[string]string) float64 {
		t.Helper()
		fams, _, err := scrapeMetrics(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := metricSum(fams, name, labels)
		return n
	}
	applied := func(g *galleon) float64 {
		return metric(g, "galleon_kubernetes_writes_total", map[string]string{"result": "applied"})
	}
	waitFor := func(g *galleon, what string, cond func() (bool, error)) {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 45*time.Second)
		defer wcancel()
		if err := g.WaitFor(wctx, cond); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, g.Tail(30))
		}
	}
	ses := client.Dynamic.Resource(serviceEntryResource).Namespace("shop")
	waitAddress := func(g *galleon, what, addr string) {
		t.Helper()
		waitFor(g, what, func() (bool, error) {
			o, err := ses.Get(ctx, "orders", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			} else if err != nil {
				return false, err
			}
			eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
			return len(eps) == 1 && eps[0].(map[string]any)["address"] == addr, nil
		})
	}

	first := startGalleon(t, bin, args...)
	waitAddress(first, "the first replica writes shop/orders", "10.9.0.1")
	second := startGalleon(t, bin, args...)
	waitFor(second, "the second replica stands by", func() (bool, error) {
		return second.LogContains("another replica holds the lease"), nil
	})
	if w := metric(first, "galleon_kubernetes_writing", nil); w != 1 {
		t.Errorf("the first replica's galleon_kubernetes_writing is %v, want 1", w)
	}
	if w := metric(second, "galleon_kubernetes_writing", nil); w != 0 {
		t.Errorf("the standby's galleon_kubernetes_writing is %v, want 0", w)
	}
	reg.Services[0].Instances[0].Address = "10.9.0.2"
	writeRegistryFile(t, dir, "vms.yaml", reg)
	waitAddress(first, "the holder writes an edit", "10.9.0.2")
	if n := applied(second); n != 0 {
		t.Errorf("the standby applied %v objects, want 0", n)
	}

	// The holder stops (SIGTERM releases the lease): the standby takes over and rewrites nothing.
	first.Stop()
	waitFor(second, "the standby takes the lease", func() (bool, error) {
		return metric(second, "galleon_kubernetes_writing", nil) == 1 && metric(second, "galleon_kubernetes_objects", map[string]string{"kind": "ServiceEntry"}) == 1, nil
	})
	if n := applied(second); n != 0 {
		t.Errorf("after taking the lease over objects that were right, the new holder applied %v, want 0", n)
	}
	reg.Services[0].Instances[0].Address = "10.9.0.3"
	writeRegistryFile(t, dir, "vms.yaml", reg)
	waitAddress(second, "the new holder writes the next edit", "10.9.0.3")
	if n := applied(second); n != 1 {
		t.Errorf("the new holder applied %v objects for one edit, want 1", n)
	}

	// The holder stalls (SIGSTOP: no release, no renewal): a third replica takes the lease once
	// it has gone unrenewed for the lease duration, and writes; the stalled one, resumed, finds
	// the lease taken and stops writing.
	third := startGalleon(t, bin, args...)
	waitFor(third, "the third replica stands by", func() (bool, error) {
		return third.LogContains("another replica holds the lease"), nil
	})
	pid := second.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stalled := true
	t.Cleanup(func() {
		if stalled {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	waitFor(third, "the third replica takes the lease of the stalled holder", func() (bool, error) {
		return metric(third, "galleon_kubernetes_writing", nil) == 1, nil
	})
	lease, err := client.Dynamic.Resource(schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}).Namespace("galleon").Get(ctx, "galleon-file-writer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder, _, _ := unstructured.NestedString(lease.Object, "spec", "holderIdentity"); !strings.HasSuffix(holder, fmt.Sprintf("_%d", third.Pid())) {
		t.Errorf("the Lease's holder is %q, want the third replica (pid %d)", holder, third.Pid())
	}
	reg.Services[0].Instances[0].Address = "10.9.0.4"
	writeRegistryFile(t, dir, "vms.yaml", reg)
	waitAddress(third, "the third replica writes an edit", "10.9.0.4")
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stalled = false
	waitFor(second, "the resumed replica stops writing", func() (bool, error) {
		return metric(second, "galleon_kubernetes_writing", nil) == 0, nil
	})
}

// TestKubernetesOutputChartRBAC renders the chart with the Kubernetes output on, one namespace
// allowed, applies it to a real API server, and runs galleon-file with the Deployment's own
// Kubernetes flags as the chart's ServiceAccount (impersonated): its RBAC is enough to list,
// write and take the Lease, and a service in a namespace the chart does not grant is reported,
// not attempted.
func TestKubernetesOutputChartRBAC(t *testing.T) {
	bin := galleonBinary(t, "galleon-file")
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, client := istioAPIServer(t, ctx, firstRelease(t), "galleon", "shop", "other")
	out, err := exec.CommandContext(ctx, kube.Helm(t), "template", "galleon-file", filepath.Join(root, "deploy/helm/galleon"), "-n", "galleon",
		"-f", filepath.Join(root, "deploy/helm/values-bookinfo.yaml"),
		"--set", "kubernetesOutput.enabled=true", "--set", "kubernetesOutput.namespaces={shop}", "--set", "kubernetesOutput.removalDelay=2s").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	objs, err := client.ApplyYAML(ctx, out, "galleon-e2e")
	if err != nil {
		t.Fatalf("applying the chart: %v", err)
	}
	var flags []string
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		for _, a := range args {
			if strings.HasPrefix(a, "--kubernetes-") || a == "--output-kubernetes" {
				flags = append(flags, a)
			}
		}
		if mount, _, _ := unstructured.NestedBool(o.Object, "spec", "template", "spec", "automountServiceAccountToken"); !mount {
			t.Errorf("the Deployment mounts no ServiceAccount token with the Kubernetes output on")
		}
	}
	if !slices.Contains(flags, "--output-kubernetes") || !slices.Contains(flags, "--kubernetes-lease=galleon/galleon-file-writer") {
		t.Fatalf("the chart's Kubernetes flags %q lack --output-kubernetes or the Lease", flags)
	}

	// The chart's ServiceAccount, impersonated by the admin's kubeconfig.
	admin, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	asSA := strings.Replace(string(admin), "  user:\n", "  user:\n    as: system:serviceaccount:galleon:galleon-file\n    as-groups: [system:serviceaccounts, system:serviceaccounts:galleon, system:authenticated]\n", 1)
	if err := os.WriteFile(kubeconfig, []byte(asSA), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeRegistryFile(t, dir, "vms.yaml", fileRegistry{Services: []fileService{
		{Name: "orders", Namespace: "shop", Hosts: []string{"orders.vms.internal"}, Ports: []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}},
			Instances: []fileInstance{{ID: "orders-1", Address: "10.9.0.1"}}},
		{Name: "audit", Namespace: "other", Hosts: []string{"audit.vms.internal"}, Ports: []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}},
			Instances: []fileInstance{{ID: "audit-1", Address: "10.9.9.1"}}},
	}})
	g := startGalleon(t, bin, append([]string{"--file-dir", dir, "--kubeconfig", kubeconfig}, flags...)...)
	wctx, wcancel := context.WithTimeout(ctx, 45*time.Second)
	defer wcancel()
	if err := g.WaitFor(wctx, func() (bool, error) {
		_, err := client.Dynamic.Resource(serviceEntryResource).Namespace("shop").Get(ctx, "orders", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("shop/orders not written as the chart's ServiceAccount: %v\n%s", err, g.Tail(30))
	}
	if !g.LogContains("not written: the namespace is not one the writer may write") {
		t.Errorf("no log line says other/audit is outside the chart's namespaces:\n%s", g.Tail(30))
	}
	fams, _, err := scrapeMetrics(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	for _, result := range []string{"forbidden", "failed"} {
		if n, _ := metricSum(fams, "galleon_kubernetes_writes_total", map[string]string{"result": result}); n != 0 {
			t.Errorf("%v requests %s as the chart's ServiceAccount, want 0:\n%s", n, result, g.Tail(30))
		}
	}
	if _, err := client.Dynamic.Resource(serviceEntryResource).Namespace("other").Get(ctx, "audit", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("other/audit, outside the chart's namespaces: %v, want not found", err)
	}
	lease, err := client.Dynamic.Resource(schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}).Namespace("galleon").Get(ctx, "galleon-file-writer", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Lease: %v", err)
	}
	if holder, _, _ := unstructured.NestedString(lease.Object, "spec", "holderIdentity"); holder == "" {
		t.Errorf("the Lease galleon/galleon-file-writer has no holder")
	}
}

// TestKubernetesOutputOutages: an outage of the API server (its process stopped) loses nothing:
// the adapter keeps serving, and what changed meanwhile is written once the API server answers
// again; a registry outage keeps the last good state, so the objects stay.
func TestKubernetesOutputOutages(t *testing.T) {
	bin := galleonBinary(t, "galleon-file")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, client := istioAPIServer(t, ctx, firstRelease(t), "shop")
	dir := t.TempDir()
	service := func(name, addr string) fileService {
		return fileService{Name: name, Namespace: "shop", Hosts: []string{name + ".vms.internal"},
			Ports: []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}}, Instances: []fileInstance{{ID: name + "-1", Address: addr}}}
	}
	reg := fileRegistry{Services: []fileService{service("orders", "10.9.0.1"), service("stock", "10.9.1.1"), service("billing", "10.9.2.1")}}
	writeRegistryFile(t, dir, "vms.yaml", reg)
	g := startGalleon(t, bin, "--file-dir", dir, "--output-kubernetes", "--kubeconfig", c.Kubeconfig, "--kubernetes-removal-delay", "1s")
	ses := client.Dynamic.Resource(serviceEntryResource).Namespace("shop")
	held := func() map[string]string {
		t.Helper()
		list, err := ses.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, o := range list.Items {
			eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
			if len(eps) == 1 {
				out[o.GetName()] = fmt.Sprint(eps[0].(map[string]any)["address"])
			}
		}
		return out
	}
	waitHeld := func(what string, want map[string]string) {
		t.Helper()
		var got map[string]string
		wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
		defer wcancel()
		if err := g.WaitFor(wctx, func() (bool, error) { got = held(); return maps.Equal(got, want), nil }); err != nil {
			t.Fatalf("%s: the API server holds %v, want %v: %v\n%s", what, got, want, err, g.Tail(30))
		}
	}
	waitHeld("written", map[string]string{"orders": "10.9.0.1", "stock": "10.9.1.1", "billing": "10.9.2.1"})

	// The API server stops answering (its process stopped, connections open): an edit and a
	// removal meanwhile.
	pid := c.APIServer.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	reg.Services = []fileService{service("orders", "10.9.0.2"), service("stock", "10.9.1.1")}
	writeRegistryFile(t, dir, "vms.yaml", reg)
	time.Sleep(3 * time.Second) // past the removal delay, while the API server is out
	if _, err := g.get(ctx, "/readyz"); err != nil {
		t.Errorf("galleon-file not ready while the API server is out: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	waitHeld("after the API server came back", map[string]string{"orders": "10.9.0.2", "stock": "10.9.1.1"})

	// The registry answers empty (galleon-file: its directory emptied, which it takes for an
	// outage): the last good state is served, so nothing is deleted past the removal delay.
	if err := os.Remove(filepath.Join(dir, "vms.yaml")); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := g.WaitFor(wctx, func() (bool, error) { return g.LogContains("registry unreachable: serving the last good state"), nil }); err != nil {
		t.Fatalf("the emptied registry was not taken for an outage: %v\n%s", err, g.Tail(20))
	}
	time.Sleep(3 * time.Second) // three removal delays
	if got := held(); !maps.Equal(got, map[string]string{"orders": "10.9.0.2", "stock": "10.9.1.1"}) {
		t.Errorf("after the registry answered empty (an outage), the API server holds %v, want orders and stock as they were", got)
	}
}
