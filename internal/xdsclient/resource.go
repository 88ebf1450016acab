// Package xdsclient is a small client for MCP-over-xDS sources: it
// subscribes to Istio config types on an ADS stream the way istiod does for
// a `configSources: xds://` address, and unwraps the MCP resources it gets.
//
// It talks the standard protocol only (envoy.service.discovery.v3 ADS,
// istio.mcp.v1alpha1.Resource payloads), so it works against any source:
// Galleon, istiod, or a third-party MCP server. galleonctl is built on it,
// and tests use it to look at a source the way a sink does.
package xdsclient

import (
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	mcp "istio.io/api/mcp/v1alpha1"

	// ServiceEntry and WorkloadEntry bodies must be decodable by type URL.
	_ "istio.io/api/networking/v1alpha3"
)

// MCPResourceTypeURL is the type URL every resource Any of an MCP-over-xDS
// response must carry; istiod ignores anything else.
const MCPResourceTypeURL = "type.googleapis.com/istio.mcp.v1alpha1.Resource"

// Resource is one MCP resource as a sink sees it.
type Resource struct {
	// TypeURL is the collection it was received on, e.g.
	// "networking.istio.io/v1/ServiceEntry".
	TypeURL string
	// Namespace and Name are the two parts of Metadata.name
	// ("<namespace>/<name>").
	Namespace string
	Name      string
	// Version is Metadata.version: opaque, changes when the resource does.
	Version string
	// CreateTime is Metadata.create_time; zero when unset.
	CreateTime  time.Time
	Labels      map[string]string
	Annotations map[string]string
	// Body is the resource itself, e.g. an istio.networking.v1alpha3.ServiceEntry.
	Body *anypb.Any
}

// Key returns "<namespace>/<name>", the MCP resource name.
func (r *Resource) Key() string { return r.Namespace + "/" + r.Name }

// Unwrap decodes one resources[i] Any of an MCP-over-xDS response received
// on collection typeURL. It fails, as istiod would skip the resource, when
// the Any is not an MCP Resource or its name is not "<namespace>/<name>".
func Unwrap(typeURL string, a *anypb.Any) (Resource, error) {
	if a.GetTypeUrl() != MCPResourceTypeURL {
		return Resource{}, fmt.Errorf("type URL is %q, want %q: istiod ignores it", a.GetTypeUrl(), MCPResourceTypeURL)
	}
	var m mcp.Resource
	if err := a.UnmarshalTo(&m); err != nil {
		return Resource{}, fmt.Errorf("cannot decode the MCP Resource: %w", err)
	}
	return fromMCP(typeURL, &m)
}

func fromMCP(typeURL string, m *mcp.Resource) (Resource, error) {
	md := m.GetMetadata()
	ns, name, ok := strings.Cut(md.GetName(), "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return Resource{}, fmt.Errorf("metadata.name %q is not \"<namespace>/<name>\": istiod skips it", md.GetName())
	}
	r := Resource{
		TypeURL:     typeURL,
		Namespace:   ns,
		Name:        name,
		Version:     md.GetVersion(),
		Labels:      md.GetLabels(),
		Annotations: md.GetAnnotations(),
		Body:        m.GetBody(),
	}
	if ts := md.GetCreateTime(); ts != nil {
		r.CreateTime = ts.AsTime()
	}
	if r.Body == nil {
		return r, fmt.Errorf("resource %s has no body", r.Key())
	}
	return r, nil
}

// Spec decodes the body into its message type. It fails when the type is
// not linked into the program (import its istio.io/api package).
func (r *Resource) Spec() (proto.Message, error) {
	msg, err := r.Body.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("resource %s: cannot decode body %s: %w", r.Key(), r.Body.GetTypeUrl(), err)
	}
	return msg, nil
}

// Object is a resource in the shape kubectl prints it.
type Object struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   ObjectMeta      `json:"metadata"`
	Spec       json.RawMessage `json:"spec,omitempty"`
}

// ObjectMeta is the subset of Kubernetes ObjectMeta that MCP carries.
type ObjectMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// CreationTimestamp is RFC 3339 in UTC, seconds precision, like
	// Kubernetes; omitted when the source sent none.
	CreationTimestamp string            `json:"creationTimestamp,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
}

// Object converts r into the kubectl-like object: apiVersion and kind come
// from the collection ("group/version/Kind"), spec is the body in proto
// JSON (camelCase field names, enum names), as Istio's CRDs spell it.
func (r *Resource) Object() (Object, error) {
	apiVersion, kind := GroupVersionKind(r.TypeURL, r.Body.GetTypeUrl())
	obj := Object{
		APIVersion: apiVersion,
		Kind:       kind,
		Metadata: ObjectMeta{
			Name:            r.Name,
			Namespace:       r.Namespace,
			ResourceVersion: r.Version,
			Labels:          r.Labels,
			Annotations:     r.Annotations,
		},
	}
	if !r.CreateTime.IsZero() {
		obj.Metadata.CreationTimestamp = r.CreateTime.UTC().Format(time.RFC3339)
	}
	msg, err := r.Spec()
	if err != nil {
		return obj, err
	}
	spec, err := protojson.Marshal(msg)
	if err != nil {
		return obj, fmt.Errorf("resource %s: %w", r.Key(), err)
	}
	obj.Spec = spec
	return obj, nil
}

// GroupVersionKind returns the kubectl apiVersion and kind for a
// collection type URL "group/version/Kind". For any other type URL
// (e.g. "type.googleapis.com/..."), they are derived from the body's proto
// name: istio.networking.v1alpha3.ServiceEntry is
// networking.istio.io/v1alpha3 ServiceEntry.
func GroupVersionKind(collection, bodyTypeURL string) (apiVersion, kind string) {
	if parts := strings.Split(collection, "/"); len(parts) == 3 && !strings.Contains(parts[0], "googleapis") {
		if parts[0] == "core" || parts[0] == "" {
			return parts[1], parts[2]
		}
		return parts[0] + "/" + parts[1], parts[2]
	}
	full := protoreflect.FullName(bodyTypeURL[strings.LastIndex(bodyTypeURL, "/")+1:])
	kind = string(full.Name())
	pkg := strings.Split(string(full.Parent()), ".") // istio.networking.v1alpha3
	if len(pkg) == 3 && pkg[0] == "istio" {
		return pkg[1] + ".istio.io/" + pkg[2], kind
	}
	return string(full.Parent()), kind
}

// Diff is what changed between two states of one collection.
type Diff struct {
	Added, Updated, Removed []string // "<namespace>/<name>", sorted
}

// Empty reports whether nothing changed.
func (d Diff) Empty() bool { return len(d.Added)+len(d.Updated)+len(d.Removed) == 0 }

// DiffSotW compares two full states (SotW responses) of one collection. A
// resource counts as updated when its Metadata.version changed; when the
// source sends no versions, when anything in it changed.
func DiffSotW(prev, next []Resource) Diff {
	old := make(map[string]*Resource, len(prev))
	for i := range prev {
		old[prev[i].Key()] = &prev[i]
	}
	var d Diff
	seen := make(map[string]bool, len(next))
	for i := range next {
		r := &next[i]
		k := r.Key()
		if seen[k] {
			continue // a duplicate in next; the first one counts
		}
		seen[k] = true
		o, ok := old[k]
		switch {
		case !ok:
			d.Added = append(d.Added, k)
		case Changed(o, r):
			d.Updated = append(d.Updated, k)
		}
	}
	for k := range old {
		if !seen[k] {
			d.Removed = append(d.Removed, k)
		}
	}
	sort.Strings(d.Added)
	sort.Strings(d.Updated)
	sort.Strings(d.Removed)
	return d
}

// Changed reports whether b is a new version of a. The version decides
// (that is what istiod looks at); without versions, the content does.
func Changed(a, b *Resource) bool {
	if a.Version != "" || b.Version != "" {
		return a.Version != b.Version
	}
	return !a.CreateTime.Equal(b.CreateTime) ||
		!maps.Equal(a.Labels, b.Labels) ||
		!maps.Equal(a.Annotations, b.Annotations) ||
		!proto.Equal(a.Body, b.Body)
}
