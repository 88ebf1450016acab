package protoenc

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of istio.mcp.v1alpha1.Resource and Metadata, google.protobuf.Any and
// google.protobuf.Timestamp.
const (
	resourceMetadata = 1
	resourceBody     = 2

	metadataName        = 1
	metadataCreateTime  = 2
	metadataVersion     = 3
	metadataLabels      = 4
	metadataAnnotations = 5

	anyTypeURL = 1
	anyValue   = 2

	timestampSeconds = 1
	timestampNanos   = 2
)

// MCPResource is an istio.mcp.v1alpha1.Resource: its metadata, and its body as an Any of
// TypeURL holding the encoded Body.
type MCPResource struct {
	Name, Version       string
	CreateTime          time.Time
	Labels, Annotations map[string]string
	TypeURL             string
	Body                []byte
}

// Size is the length of r's encoding.
func (r *MCPResource) Size() int {
	meta := r.metadataSize()
	return sizeMessage(resourceMetadata, meta) + sizeMessage(resourceBody, r.bodySize())
}

// Append appends r's encoding to b.
func (r *MCPResource) Append(b []byte) []byte {
	var keys []string // scratch space for sorting the maps' keys
	b = protowire.AppendTag(b, resourceMetadata, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(r.metadataSize()))
	b = appendString(b, metadataName, r.Name)
	b = protowire.AppendTag(b, metadataCreateTime, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(r.timestampSize()))
	if s := r.CreateTime.Unix(); s != 0 {
		b = protowire.AppendTag(b, timestampSeconds, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s))
	}
	if n := r.CreateTime.Nanosecond(); n != 0 {
		b = protowire.AppendTag(b, timestampNanos, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(n))
	}
	b = appendString(b, metadataVersion, r.Version)
	b, keys = appendStringMap(b, metadataLabels, r.Labels, keys)
	b, _ = appendStringMap(b, metadataAnnotations, r.Annotations, keys)

	b = protowire.AppendTag(b, resourceBody, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(r.bodySize()))
	b = appendString(b, anyTypeURL, r.TypeURL)
	if len(r.Body) > 0 {
		b = protowire.AppendTag(b, anyValue, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Body)
	}
	return b
}

func (r *MCPResource) metadataSize() int {
	return sizeString(metadataName, r.Name) +
		sizeMessage(metadataCreateTime, r.timestampSize()) +
		sizeString(metadataVersion, r.Version) +
		sizeStringMap(metadataLabels, r.Labels) +
		sizeStringMap(metadataAnnotations, r.Annotations)
}

func (r *MCPResource) timestampSize() int {
	n := 0
	if s := r.CreateTime.Unix(); s != 0 {
		n += protowire.SizeTag(timestampSeconds) + protowire.SizeVarint(uint64(s))
	}
	if ns := r.CreateTime.Nanosecond(); ns != 0 {
		n += protowire.SizeTag(timestampNanos) + protowire.SizeVarint(uint64(ns))
	}
	return n
}

func (r *MCPResource) bodySize() int {
	n := sizeString(anyTypeURL, r.TypeURL)
	if len(r.Body) > 0 {
		n += protowire.SizeTag(anyValue) + protowire.SizeBytes(len(r.Body))
	}
	return n
}
