package serve

import (
	"google.golang.org/grpc/mem"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// FullStateChunkSize is the size full-state bodies are cut into. A change of
// one resource copies one chunk; the transport walks size/FullStateChunkSize
// buffers per send, far fewer than one per resource (docs/benchmarks.md,
// "Against the floor" and "Figures behind the code's choices").
const FullStateChunkSize = 64 << 10

// FullState is the body of a full-state response: every resource of one
// collection version, each encoded as one element of the response's repeated
// resources field, in the collection's order. It is held as chunks of about
// FullStateChunkSize bytes, each a copy of its resources' elements.
//
// Why chunks: the transport's cost per send grows with the number of buffers
// it walks, and building one buffer per resource per version put them all
// on the critical path of every change. One contiguous copy per version
// moved the whole collection to the garbage collector per change instead. A
// FullState built from the previous version's shares every chunk whose
// resources are all unchanged (the same *snapshot.Resource values, which are
// immutable), so a change copies only the chunks it touches.
//
// A FullState is immutable once built and safe to write from many streams.
type FullState struct {
	chunks []fullStateChunk
	size   int
}

type fullStateChunk struct {
	// members are the chunk's resources, in order: what reuse is checked
	// against. A copy, so that a chunk keeps no older version's index alive.
	members []*snapshot.Resource
	buf     mem.Buffer // a SliceBuffer over the members' elements
}

// Size is the body's length in bytes.
func (f *FullState) Size() int { return f.size }

// Chunks is the number of buffers the body is written as.
func (f *FullState) Chunks() int { return len(f.chunks) }

// Message returns header followed by the body, as one Message.
func (f *FullState) Message(header []byte) *Message {
	buffers := make(mem.BufferSlice, 0, 1+len(f.chunks))
	buffers = append(buffers, mem.SliceBuffer(header))
	for _, c := range f.chunks {
		buffers = append(buffers, c.buf)
	}
	return &Message{Buffers: buffers, Size: len(header) + f.size}
}

// Element says how one resource is written as an element of a full-state
// response: Append appends it to dst, Size is how many bytes that is. An
// Element passed to FullStateOf must be comparable (an empty struct type).
type Element interface {
	Size(r *snapshot.Resource) int
	Append(dst []byte, r *snapshot.Resource) []byte
}

// fullStateKey memoises a collection's FullState per encoding.
type fullStateKey struct{ el Element }

// FullStateOf returns every resource of col as el's elements, built once per
// collection version, from the chunks of the one built for an earlier
// version (snapshot.Collection.MemoFrom). el is the memo key: a comparable
// value, one per encoding, so every caller of one encoding shares one body
// (SotW's type URL aliases among them).
func FullStateOf(col *snapshot.Collection, el Element) *FullState {
	return col.MemoFrom(fullStateKey{el}, func(prev any) any {
		p, _ := prev.(*FullState)
		return BuildFullState(p, col.Resources(), el)
	}).(*FullState)
}

// BuildFullState encodes resources (ordered by name, as a collection holds
// them) with el, which must be the same for every FullState built from
// another. Chunks of prev (nil for none) whose resources are unchanged are
// shared, not copied; prev may be any version, older or newer.
func BuildFullState(prev *FullState, resources []*snapshot.Resource, el Element) *FullState {
	var old []fullStateChunk
	if prev != nil {
		old = prev.chunks
	}
	b := fullStateBuilder{el: el, chunks: make([]fullStateChunk, 0, len(old)+2)}
	dirty := 0 // resources[dirty:i] are not in a reused chunk
	p := 0
	for i := 0; i < len(resources); {
		// Skip old chunks that begin before resources[i]: they hold names
		// that are gone, or lie in a region being rebuilt.
		for p < len(old) && old[p].members[0].Name < resources[i].Name {
			p++
		}
		if p < len(old) && sameMembers(old[p].members, resources[i:]) {
			b.encode(resources[dirty:i])
			b.chunks = append(b.chunks, old[p])
			b.size += old[p].buf.Len()
			i += len(old[p].members)
			dirty = i
			p++
			continue
		}
		i++
	}
	b.encode(resources[dirty:])
	// Removals and rebuilt regions can leave chunks much smaller than the
	// target; past twice the chunks a fresh build would make, make one.
	if len(b.chunks) > 2*(b.size/FullStateChunkSize)+16 {
		b = fullStateBuilder{el: el}
		b.encode(resources)
	}
	return &FullState{chunks: b.chunks, size: b.size}
}

// sameMembers reports whether rs begins with exactly the resources of members.
func sameMembers(members, rs []*snapshot.Resource) bool {
	if len(rs) < len(members) {
		return false
	}
	for j, r := range members {
		if rs[j] != r {
			return false
		}
	}
	return true
}

type fullStateBuilder struct {
	el     Element
	chunks []fullStateChunk
	size   int
}

// encode cuts rs into chunks of about equal size, as many as its size
// rounded to FullStateChunkSize asks for (at least one): a chunk rebuilt
// after one of its resources changed stays one chunk, instead of leaving a
// sliver behind whenever it grew across the target.
func (b *fullStateBuilder) encode(rs []*snapshot.Resource) {
	if len(rs) == 0 {
		return
	}
	total := 0
	for _, r := range rs {
		total += b.el.Size(r)
	}
	n := max(1, min((total+FullStateChunkSize/2)/FullStateChunkSize, len(rs)))
	from, written := 0, 0
	for k := 1; k <= n && from < len(rs); k++ {
		// The chunk takes resources until the body reaches k/n of total;
		// the last takes the rest.
		goal := total * k / n
		if k == n {
			goal = total
		}
		to, size := from, 0
		for to < len(rs) && (to == from || written+size < goal) {
			size += b.el.Size(rs[to])
			to++
		}
		// Its own allocation, sized exactly: a chunk outlives the others
		// built with it when they are replaced.
		buf := make([]byte, 0, size)
		for _, r := range rs[from:to] {
			buf = b.el.Append(buf, r)
		}
		b.chunks = append(b.chunks, fullStateChunk{
			members: append([]*snapshot.Resource(nil), rs[from:to]...),
			buf:     mem.SliceBuffer(buf),
		})
		b.size += len(buf)
		written += size
		from = to
	}
}
