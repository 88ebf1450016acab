package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

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

// TestObjectsRightAfterTheirCRD applies a CRD, then (after a read that fills the client's
// discovery cache) an object of the new kind, several times over. Apply returns only when
// discovery lists a new CRD's resource, so the object's kind is always known (Established alone
// does not promise that; TestChartOnAPIServer applies a ServiceMonitor right after its CRD).
func TestObjectsRightAfterTheirCRD(t *testing.T) {
	c := Start(t)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 8 {
		group := fmt.Sprintf("g%d.galleon.test", i)
		crd := fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.%[1]s
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`, group)
		if _, err := client.ApplyYAML(ctx, []byte(crd), "galleon-test"); err != nil {
			t.Fatalf("CRD %d: %v", i, err)
		}
		if _, err := client.ApplyYAML(ctx, []byte(fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: between-%d\n  namespace: default\n", i)), "galleon-test"); err != nil {
			t.Fatalf("ConfigMap %d: %v", i, err)
		}
		obj := fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: default\nspec:\n  size: %d\n", group, i)
		if _, err := client.ApplyYAML(ctx, []byte(obj), "galleon-test"); err != nil {
			t.Errorf("a Widget right after CRD %d: %v", i, err)
		}
	}
}
