package kubewrite

import (
	"encoding/json"
	"fmt"
	"maps"

	"google.golang.org/protobuf/types/known/anypb"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/xdsclient"
)

// Labels and annotations the writer adds to every object it writes.
const (
	// LabelOwner names the writer (Config.Owner): what it lists at start, and the only objects
	// it ever updates or deletes.
	LabelOwner = "galleon.io/owner"
	// LabelRegistry is the registry the resource was made from ("consul", "file").
	LabelRegistry = "galleon.io/registry"
	// LabelManagedBy is the Kubernetes recommended label, "galleon".
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// AnnotationContentHash is the resource's version in the snapshot: a write happens only
	// when it would change.
	AnnotationContentHash = "galleon.io/content-hash"
)

// Group and version of the Istio APIs written: networking.istio.io/v1, served by Istio's
// CRDs since 1.22.
const (
	group   = "networking.istio.io"
	version = "v1"
)

// resourceOf is the API resource of a snapshot kind.
func resourceOf(k snapshot.Kind) schema.GroupVersionResource {
	switch k {
	case snapshot.WorkloadEntry:
		return schema.GroupVersionResource{Group: group, Version: version, Resource: "workloadentries"}
	default:
		return schema.GroupVersionResource{Group: group, Version: version, Resource: "serviceentries"}
	}
}

// object is the server-side apply request body of one resource.
type object struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   objectMeta      `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
}

type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// applyBody encodes r as the object to apply: r's labels and annotations, the writer's own,
// and the spec in proto JSON (camelCase names, enum names), as Istio's CRDs spell it.
func applyBody(k snapshot.Kind, r *snapshot.Resource, owner string) ([]byte, error) {
	res, err := xdsclient.Unwrap(group+"/"+version+"/"+k.String(), &anypb.Any{TypeUrl: snapshot.MCPResourceTypeURL, Value: r.MCP()})
	if err != nil {
		return nil, err
	}
	o, err := res.Object()
	if err != nil {
		return nil, err
	}
	labels := make(map[string]string, len(o.Metadata.Labels)+3)
	maps.Copy(labels, o.Metadata.Labels)
	labels[LabelOwner] = owner
	labels[LabelManagedBy] = "galleon"
	if r.Origin != nil && r.Origin.Registry != "" {
		labels[LabelRegistry] = r.Origin.Registry
	}
	annotations := make(map[string]string, len(o.Metadata.Annotations)+1)
	maps.Copy(annotations, o.Metadata.Annotations)
	annotations[AnnotationContentHash] = r.Version
	body, err := json.Marshal(object{
		APIVersion: o.APIVersion,
		Kind:       o.Kind,
		// No resourceVersion (a precondition to apply) and no creationTimestamp (the API
		// server's): MCP's version and create time are not Kubernetes'.
		Metadata: objectMeta{Name: res.Name, Namespace: res.Namespace, Labels: labels, Annotations: annotations},
		Spec:     o.Spec,
	})
	if err != nil {
		return nil, fmt.Errorf("resource %s: %w", r.Name, err)
	}
	return body, nil
}
