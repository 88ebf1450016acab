package istiod

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/kube"
)

// KubeconfigFor returns "" for a release that starts without Kubernetes; for one that cannot
// (Release.NeedsKubernetes), it starts an API server readied by PrepareCluster and returns its
// kubeconfig, for Options.Kubeconfig. A test that starts such istiods one after another passes
// them one cluster: a new one costs about 5 s (the API server's start and Istio's CRDs), and an
// istiod started on a cluster that an earlier one used finds the CA secret it left, as a
// restarted istiod does.
func KubeconfigFor(t testing.TB, rel Release) string {
	t.Helper()
	if !rel.NeedsKubernetes() {
		return ""
	}
	c := kube.Start(t)
	PrepareCluster(t, c, rel)
	return c.Kubeconfig
}

// PrepareCluster readies a Kubernetes API server for istiod rel: the istio-system namespace
// (istiod's own, where it keeps its CA) and Istio's CRDs, from the CRD file of the istio.io/istio
// module rel was built from (CRDFile). The test fails if the API server refuses any of them.
func PrepareCluster(t testing.TB, c *kube.Cluster, rel Release) {
	t.Helper()
	crds, err := CRDFile(rel)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(crds)
	if err != nil {
		t.Fatalf("istiod %s's CRDs: %v", rel.Name, err)
	}
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: istio-system\n---\n")
	objs, err := client.ApplyYAML(ctx, append(ns, data...), "galleon-test")
	if err != nil {
		t.Fatalf("applying istio-system and Istio's CRDs (%s): %v", crds, err)
	}
	t.Logf("applied istio-system and %d Istio CRDs from %s", len(objs)-1, crds)
}

// CRDFile is the path of Istio's CRDs (manifests/charts/base/files/crd-all.gen.yaml) in the
// module cache, for the istio.io/istio version rel was built from: its known module version, or
// the version this test module compiles when rel is not one this repository pins.
func CRDFile(rel Release) (string, error) {
	version := moduleVersionOf(rel.Name)
	if version == "" {
		version = moduleVersionOf(CompiledRelease())
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "istio.io", "istio@"+version, "manifests", "charts", "base", "files", "crd-all.gen.yaml")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("the CRDs of istiod %s: %w: build that istiod first (go run ./internal/testing/devtool build pilot-discovery %s), which downloads its module", rel.Name, err, rel.Name)
	}
	return path, nil
}

// moduleVersionOf is the istio.io/istio version this repository pins for a release name, or "".
func moduleVersionOf(release string) string {
	rel, err := toolcache.LookupIstiodRelease(release)
	if err != nil {
		return ""
	}
	return rel.ModuleVersion
}
