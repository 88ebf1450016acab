package kube

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/galleon-mesh/galleon/internal/toolcache"
)

// TestVersionsMatchScript keeps the versions the tests look for in step with what
// scripts/kube.sh builds.
func TestVersionsMatchScript(t *testing.T) {
	root, err := toolcache.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "kube.sh"), "versions").Output()
	if err != nil {
		t.Fatalf("scripts/kube.sh versions: %v", err)
	}
	want := map[string]string{"kube-apiserver": APIServerVersion, "kubectl": APIServerVersion, "etcd": EtcdVersion, "helm": HelmVersion}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			got[f[0]] = f[1]
		}
	}
	for tool, v := range want {
		if got[tool] != v {
			t.Errorf("scripts/kube.sh builds %s %q, the tests look for %q", tool, got[tool], v)
		}
	}
}

// TestApplyAndRead starts etcd and kube-apiserver, applies objects with server-side apply and
// reads them back; an object the API server's validation refuses is reported by name.
func TestApplyAndRead(t *testing.T) {
	c := Start(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stored, err := client.ApplyYAML(ctx, []byte(`apiVersion: v1
kind: Namespace
metadata:
  name: kube-test
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: kube-test
data:
  answer: "42"
`), "galleon-test")
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 2 {
		t.Fatalf("stored %d objects, want 2", len(stored))
	}
	got, err := client.Get(ctx, stored[1])
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(got.Object, "data", "answer"); v != "42" || got.GetUID() == "" {
		t.Errorf("read back ConfigMap kube-test/settings: data.answer %q, uid %q", v, got.GetUID())
	}

	// Validation is the API server's: a Service port out of range is refused, named.
	_, err = client.ApplyYAML(ctx, []byte(`apiVersion: v1
kind: Service
metadata:
  name: bad
  namespace: kube-test
spec:
  ports:
  - port: 70000
`), "galleon-test")
	if err == nil || !strings.Contains(err.Error(), "Service kube-test/bad") || !strings.Contains(err.Error(), "70000") {
		t.Errorf("applying a Service with port 70000: want an error naming Service kube-test/bad and the port, got %v", err)
	}
}
