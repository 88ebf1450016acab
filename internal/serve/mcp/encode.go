package mcp

import (
	"strconv"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/snapshot"
)

type wireMessage = serve.Message

// istio.mcp.v1alpha1.Resources field numbers.
const (
	fieldSystemVersionInfo = 1
	fieldCollection        = 2
	fieldResources         = 3
	fieldRemovedResources  = 4
	fieldNonce             = 5
	fieldIncremental       = 6
)

// emptyVersion is the version of a collection this server holds nothing of.
const emptyVersion = "0"

// nonceOf names a full-state response by the collection sequence it
// carries. The same version always has the same nonce, which is what lets
// every stream share one encoding; a stream never has two responses of one
// collection with the same sequence outstanding, so the nonce still says
// which one an ACK is for. Incremental responses add a per-stream counter
// ("<seq>.<n>"), so the two kinds never share a nonce.
func nonceOf(seq uint64) string { return strconv.FormatUint(seq, 10) }

// fullKey memoises full-state encodings in a Collection, apart from the
// keys of package xds.
type fullKey struct{ collection string }

// resourcesElement writes a resource as a Resources `resources` element: a
// tag and length, then its pre-marshalled istio.mcp.v1alpha1.Resource.
type resourcesElement struct{}

func (resourcesElement) Size(r *snapshot.Resource) int {
	return protowire.SizeTag(fieldResources) + protowire.SizeBytes(len(r.MCP()))
}

func (resourcesElement) Append(dst []byte, r *snapshot.Resource) []byte {
	dst = protowire.AppendTag(dst, fieldResources, protowire.BytesType)
	return protowire.AppendBytes(dst, r.MCP())
}

// fullEncoded returns the full-state Resources message of a collection
// version under a collection name, encoding it on first use: the header
// (version, collection, nonce) and each resource as a `resources` element.
// Every stream shares the result, and the next version shares the chunks of
// its body that did not change (serve.FullStateOf).
func fullEncoded(col *snapshot.Collection, collection string) *wireMessage {
	// Outside Memo's build: Memo holds the collection's memo lock, which
	// FullStateOf takes too.
	body := serve.FullStateOf(col, resourcesElement{})
	return col.Memo(fullKey{collection}, func() any {
		return body.Message(encodeHeader(col.Version, collection, nonceOf(col.Seq), false, nil))
	}).(*wireMessage)
}

// incrementalEncoded builds an incremental Resources message for one stream.
// Only the header and the few bytes before each resource are new; the
// resources' bytes are shared.
func incrementalEncoded(version, collection, nonce string, changed []*snapshot.Resource, removed []string) *wireMessage {
	return encodeResources(encodeHeader(version, collection, nonce, true, removed), changed)
}

// emptyEncoded is the full-state answer for a collection this server holds
// nothing of.
func emptyEncoded(collection string) *wireMessage {
	return encodeResources(encodeHeader(emptyVersion, collection, nonceOf(0), false, nil), nil)
}

func encodeHeader(version, collection, nonce string, incremental bool, removed []string) []byte {
	n := len(version) + len(collection) + len(nonce) + 16
	for _, name := range removed {
		n += len(name) + 4
	}
	b := make([]byte, 0, n)
	b = protowire.AppendTag(b, fieldSystemVersionInfo, protowire.BytesType)
	b = protowire.AppendString(b, version)
	b = protowire.AppendTag(b, fieldCollection, protowire.BytesType)
	b = protowire.AppendString(b, collection)
	for _, name := range removed {
		b = protowire.AppendTag(b, fieldRemovedResources, protowire.BytesType)
		b = protowire.AppendString(b, name)
	}
	b = protowire.AppendTag(b, fieldNonce, protowire.BytesType)
	b = protowire.AppendString(b, nonce)
	b = protowire.AppendTag(b, fieldIncremental, protowire.VarintType)
	b = protowire.AppendVarint(b, protowire.EncodeBool(incremental))
	return b
}

// maxEntryPrefix is the longest tag-and-length before a resource: a one-byte
// tag and a length varint of at most five bytes (messages stay under 4 GiB).
const maxEntryPrefix = 1 + 5

// encodeResources appends to header one `resources` element per resource:
// a tag and length, from one shared arena, then the resource's own bytes.
func encodeResources(header []byte, resources []*snapshot.Resource) *wireMessage {
	buffers := make(mem.BufferSlice, 0, 1+2*len(resources))
	buffers = append(buffers, mem.SliceBuffer(header))
	size := len(header)
	// Never grown past its capacity, so earlier slices of it stay valid.
	arena := make([]byte, 0, maxEntryPrefix*len(resources))
	for _, r := range resources {
		body := r.MCP()
		start := len(arena)
		arena = protowire.AppendTag(arena, fieldResources, protowire.BytesType)
		arena = protowire.AppendVarint(arena, uint64(len(body)))
		prefix := arena[start:len(arena):len(arena)]
		buffers = append(buffers, mem.SliceBuffer(prefix), mem.SliceBuffer(body))
		size += len(prefix) + len(body)
	}
	return &wireMessage{Buffers: buffers, Size: size}
}
