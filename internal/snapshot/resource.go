package snapshot

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/galleon-mesh/galleon/internal/snapshot/protoenc"
)

// Object is what the core asks the store to serve: one resource, its body
// already marshalled deterministically.
type Object struct {
	Kind Kind
	// Name is "<namespace>/<name>", the MCP resource name.
	Name        string
	Labels      map[string]string
	Annotations map[string]string
	// Body is the deterministic wire encoding of the resource's spec.
	Body []byte
	// Shape is a hash of the spec without its endpoints. Two versions of a
	// resource with equal Shape (and metadata) differ only in endpoints,
	// which istiod can apply without a full push.
	Shape uint64
	// Origin describes the registry service the resource was made from. It
	// is not served; views (config subsets) select resources by it. Every
	// resource made from one service shares the same Origin, so a
	// WorkloadEntry goes wherever its ServiceEntry goes.
	Origin *Origin
}

// Origin is what config subset rules and shards select resources by: the
// registry service a resource was made from. It must not be modified once
// passed to the store.
type Origin struct {
	// Service is the namespace/name of the service's ServiceEntry, the same
	// for its WorkloadEntries: what places a service in a shard, since a
	// name never moves between shards.
	Service string
	// Registry names the registry ("consul", "file").
	Registry string
	// Namespace is the namespace the resources are served in.
	Namespace string
	// Hosts are the service's host names.
	Hosts []string
	// Labels are the service's labels, as served.
	Labels map[string]string
}

// Equal reports whether o and p describe the same service.
func (o *Origin) Equal(p *Origin) bool {
	if o == nil || p == nil {
		return o == p
	}
	return o.Service == p.Service && o.Registry == p.Registry && o.Namespace == p.Namespace &&
		slices.Equal(o.Hosts, p.Hosts) && maps.Equal(o.Labels, p.Labels)
}

// Change is one upsert (Object set) or deletion (Object nil).
type Change struct {
	Kind   Kind
	Name   string
	Object *Object
}

// Resource is one served resource. It is immutable: a change makes a new
// Resource.
type Resource struct {
	Name string
	// Version is a hash of the content. istiod re-applies a resource only
	// when its version moves, so an unchanged resource is never re-processed.
	Version string
	// CreateTime is FixedCreateTime(), for every resource of every store.
	CreateTime time.Time
	// Origin is the Object's Origin (nil if it gave none). Read only.
	Origin *Origin

	hash  uint64 // content hash, Version is its hex form
	shape uint64 // hash of everything but endpoints, metadata included
	// entry is the resource encoded once as one element of a
	// DiscoveryResponse's repeated `resources` field: tag, length and an Any
	// whose value is the marshalled istio.mcp.v1alpha1.Resource. A SotW
	// response is these entries one after another, so no resource is ever
	// marshalled again for any sink.
	entry    []byte
	anyStart int // where the Any begins in entry
	mcpStart int // where the MCP Resource begins in entry
	// deltaPrefix encodes, up to the Any's bytes, this resource as one
	// element of a DeltaDiscoveryResponse's `resources` field: an
	// envoy.service.discovery.v3.Resource with name and version. The Any
	// itself is shared with entry, so a Delta response is built without
	// copying or marshalling any resource.
	deltaPrefix []byte
}

// MCP returns the marshalled istio.mcp.v1alpha1.Resource. The caller must
// not modify it.
func (r *Resource) MCP() []byte { return r.entry[r.mcpStart:] }

// ResponseEntry returns the resource encoded as a DiscoveryResponse
// `resources` element (field 2). The caller must not modify it.
func (r *Resource) ResponseEntry() []byte { return r.entry }

// DeltaEntry returns the resource encoded as one DeltaDiscoveryResponse
// `resources` element: the two parts, written one after the other, are the
// element. The caller must not modify them.
func (r *Resource) DeltaEntry() (prefix, body []byte) {
	return r.deltaPrefix, r.entry[r.anyStart:]
}

// Field numbers of the envoy.service.discovery.v3 messages encoded here.
const (
	discoveryResponseResourcesField = 2 // DiscoveryResponse.resources
	deltaResponseResourcesField     = 2 // DeltaDiscoveryResponse.resources
	resourceVersionField            = 1 // Resource.version
	resourceAnyField                = 2 // Resource.resource
	resourceNameField               = 3 // Resource.name
)

// FixedCreateTime is the create_time of every resource: the Unix epoch, what istiod reads for
// an unset one. A time that depends on when a process first saw a resource would differ
// between two replicas, and after every restart, so their resources would not be byte-identical;
// it would also move the order istiod gives services that share a host (oldest first) each time
// Galleon restarted. It saves no push, and it does not order Galleon's own entries: they tie,
// and istiod breaks the tie by host and namespace (docs/architecture.md, "One host from several
// sources").
func FixedCreateTime() time.Time { return time.Unix(0, 0).UTC() }

// newResource hashes and encodes obj. createTime is the time to record when
// the resource is new; an existing resource passes its own.
func newResource(obj *Object, createTime time.Time) *Resource {
	meta := metadataHash(obj)
	hash := contentHash(obj, meta)
	r := &Resource{
		Name:       obj.Name,
		Version:    fmt.Sprintf("%016x", hash),
		CreateTime: createTime,
		Origin:     obj.Origin,
		hash:       hash,
		shape:      obj.Shape ^ meta,
	}
	res := protoenc.MCPResource{
		Name:        obj.Name,
		Version:     r.Version,
		CreateTime:  createTime,
		Labels:      obj.Labels,
		Annotations: obj.Annotations,
		TypeURL:     obj.Kind.BodyTypeURL(),
		Body:        obj.Body,
	}
	// Any{type_url = 1, value = 2}, the MCP resource written straight into its place.
	mcpLen := res.Size()
	anyLen := protowire.SizeTag(1) + protowire.SizeBytes(len(MCPResourceTypeURL)) +
		protowire.SizeTag(2) + protowire.SizeBytes(mcpLen)
	entry := make([]byte, 0, protowire.SizeTag(discoveryResponseResourcesField)+protowire.SizeBytes(anyLen))
	entry = protowire.AppendTag(entry, discoveryResponseResourcesField, protowire.BytesType)
	entry = protowire.AppendVarint(entry, uint64(anyLen))
	r.anyStart = len(entry)
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, MCPResourceTypeURL)
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendVarint(entry, uint64(mcpLen))
	r.mcpStart = len(entry)
	r.entry = res.Append(entry)

	// Resource{version = 1, name = 3, resource = 2}: field order on the wire
	// is free, so the Any goes last and is shared.
	resLen := protowire.SizeTag(resourceVersionField) + protowire.SizeBytes(len(r.Version)) +
		protowire.SizeTag(resourceNameField) + protowire.SizeBytes(len(r.Name)) +
		protowire.SizeTag(resourceAnyField) + protowire.SizeBytes(anyLen)
	p := make([]byte, 0, resLen-anyLen+protowire.SizeTag(deltaResponseResourcesField)+protowire.SizeVarint(uint64(resLen)))
	p = protowire.AppendTag(p, deltaResponseResourcesField, protowire.BytesType)
	p = protowire.AppendVarint(p, uint64(resLen))
	p = protowire.AppendTag(p, resourceVersionField, protowire.BytesType)
	p = protowire.AppendString(p, r.Version)
	p = protowire.AppendTag(p, resourceNameField, protowire.BytesType)
	p = protowire.AppendString(p, r.Name)
	p = protowire.AppendTag(p, resourceAnyField, protowire.BytesType)
	r.deltaPrefix = protowire.AppendVarint(p, uint64(anyLen))
	return r
}

// contentHash covers everything a sink sees except create_time, which is
// fixed per name anyway.
func contentHash(obj *Object, meta uint64) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString(obj.Name)
	_, _ = d.Write([]byte{0})
	_, _ = d.Write(obj.Body)
	var buf [8]byte
	putUint64(buf[:], meta)
	_, _ = d.Write(buf[:])
	return d.Sum64()
}

// metadataHash hashes labels and annotations in key order.
func metadataHash(obj *Object) uint64 {
	if len(obj.Labels) == 0 && len(obj.Annotations) == 0 {
		return 0
	}
	d := xxhash.New()
	for _, m := range []map[string]string{obj.Labels, obj.Annotations} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			_, _ = d.WriteString(k)
			_, _ = d.Write([]byte{0})
			_, _ = d.WriteString(m[k])
			_, _ = d.Write([]byte{0})
		}
		_, _ = d.Write([]byte{1})
	}
	return d.Sum64()
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}
