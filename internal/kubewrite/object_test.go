package kubewrite

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// The object applied is the snapshot's resource as Istio's CRD spells it, with the resource's
// labels and annotations and the writer's, and no MCP version or create time in its metadata.
func TestApplyBody(t *testing.T) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(&networking.ServiceEntry{
		Hosts:      []string{"orders.vms.internal"},
		Ports:      []*networking.ServicePort{{Number: 8080, Name: "http", Protocol: "HTTP"}},
		Resolution: networking.ServiceEntry_STATIC,
		Endpoints:  []*networking.WorkloadEntry{{Address: "10.9.0.1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	store := snapshot.NewStore()
	snap, _, err := store.Apply([]snapshot.Change{{Kind: snapshot.ServiceEntry, Name: "shop/orders", Object: &snapshot.Object{
		Kind: snapshot.ServiceEntry, Name: "shop/orders", Body: body,
		Labels:      map[string]string{"team": "a", LabelOwner: "someone-else"},
		Annotations: map[string]string{"note": "x"},
		Origin:      &snapshot.Origin{Service: "shop/orders", Registry: "consul", Namespace: "shop"},
	}}}, true)
	if err != nil {
		t.Fatal(err)
	}
	r := snap.Collection(snapshot.ServiceEntry).Get("shop/orders")
	raw, err := applyBody(snapshot.ServiceEntry, r, "galleon-consul")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.APIVersion != "networking.istio.io/v1" || got.Kind != "ServiceEntry" {
		t.Errorf("apiVersion %q kind %q", got.APIVersion, got.Kind)
	}
	if got.Metadata["namespace"] != "shop" || got.Metadata["name"] != "orders" {
		t.Errorf("metadata namespace, name = %v, %v; want shop, orders", got.Metadata["namespace"], got.Metadata["name"])
	}
	for _, k := range []string{"resourceVersion", "creationTimestamp"} {
		if _, ok := got.Metadata[k]; ok {
			t.Errorf("metadata.%s is set (%v): MCP's is not Kubernetes'", k, got.Metadata[k])
		}
	}
	labels, _ := got.Metadata["labels"].(map[string]any)
	want := map[string]string{"team": "a", LabelOwner: "galleon-consul", LabelRegistry: "consul", LabelManagedBy: "galleon"}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s = %v, want %s (labels %v)", k, labels[k], v, labels)
		}
	}
	annotations, _ := got.Metadata["annotations"].(map[string]any)
	if annotations["note"] != "x" || annotations[AnnotationContentHash] != r.Version {
		t.Errorf("annotations %v, want note=x and %s=%s", annotations, AnnotationContentHash, r.Version)
	}
	if got.Spec["resolution"] != "STATIC" || got.Spec["hosts"].([]any)[0] != "orders.vms.internal" {
		t.Errorf("spec %v: want proto JSON (resolution STATIC, hosts)", got.Spec)
	}
}
