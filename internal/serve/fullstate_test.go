package serve

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/internal/snapshot"
)

// entryElement writes a resource as its SotW response entry.
type entryElement struct{}

func (entryElement) Size(r *snapshot.Resource) int { return len(r.ResponseEntry()) }
func (entryElement) Append(dst []byte, r *snapshot.Resource) []byte {
	return append(dst, r.ResponseEntry()...)
}

func seChange(name string, size, gen int) snapshot.Change {
	body := []byte(fmt.Sprintf("%s#%d#%s", name, gen, strings.Repeat("x", size)))
	return snapshot.Change{Kind: snapshot.ServiceEntry, Name: name,
		Object: &snapshot.Object{Kind: snapshot.ServiceEntry, Name: name, Body: body}}
}

// naive is the body as one buffer per resource would write it.
func naive(col *snapshot.Collection) []byte {
	var b []byte
	for _, r := range col.Resources() {
		b = append(b, r.ResponseEntry()...)
	}
	return b
}

func bodyBytes(f *FullState) []byte {
	var b []byte
	for _, c := range f.chunks {
		b = append(b, c.buf.ReadOnlyData()...)
	}
	return b
}

// builtAnew counts the chunks of f that are not prev's.
func builtAnew(prev, f *FullState) int {
	old := map[*byte]bool{}
	for _, c := range prev.chunks {
		old[&c.buf.ReadOnlyData()[0]] = true
	}
	n := 0
	for _, c := range f.chunks {
		if !old[&c.buf.ReadOnlyData()[0]] {
			n++
		}
	}
	return n
}

// TestFullStateFollowsChanges applies random adds, updates and removals to a
// real store and checks after each that the chunked body is byte for byte
// the resources' elements in order, that a one-resource update rebuilds at
// most the one chunk it lies in, and that the number of chunks stays near
// size/FullStateChunkSize.
func TestFullStateFollowsChanges(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	store := snapshot.NewStore()
	var initial []snapshot.Change
	names := map[string]int{} // name -> generation
	for i := range 600 {
		n := fmt.Sprintf("ns/svc-%05d", i*10)
		names[n] = 0
		initial = append(initial, seChange(n, 200+rng.Intn(1500), 0))
	}
	snap, _, err := store.Apply(initial, true)
	if err != nil {
		t.Fatal(err)
	}
	col := snap.Collection(snapshot.ServiceEntry)
	f := BuildFullState(nil, col.Resources(), entryElement{})
	if !bytes.Equal(bodyBytes(f), naive(col)) || f.Size() != len(naive(col)) {
		t.Fatal("first build: the body is not the resources' entries in order")
	}
	if want := f.Size()/FullStateChunkSize + 1; f.Chunks() > want || f.Chunks() < want-2 {
		t.Errorf("first build: %d chunks for %d bytes, want about %d", f.Chunks(), f.Size(), want)
	}
	msg := f.Message([]byte("hdr"))
	if msg.Size != 3+f.Size() || len(msg.Buffers) != 1+f.Chunks() {
		t.Errorf("Message: size %d with %d buffers, want %d with %d", msg.Size, len(msg.Buffers), 3+f.Size(), 1+f.Chunks())
	}

	pick := func() string {
		for n := range names {
			return n
		}
		return ""
	}
	for step := range 150 {
		var ch snapshot.Change
		kind := "update"
		switch r := rng.Intn(10); {
		case r < 2:
			kind = "add"
			n := fmt.Sprintf("ns/svc-%05d", rng.Intn(20000))
			if _, ok := names[n]; ok {
				continue
			}
			names[n] = 0
			ch = seChange(n, 200+rng.Intn(1500), 0)
		case r < 4:
			kind = "remove"
			n := pick()
			delete(names, n)
			ch = snapshot.Change{Kind: snapshot.ServiceEntry, Name: n}
		default:
			n := pick()
			names[n]++
			ch = seChange(n, 200+rng.Intn(1500), names[n])
		}
		snap, _, err := store.Apply([]snapshot.Change{ch}, true)
		if err != nil {
			t.Fatal(err)
		}
		col := snap.Collection(snapshot.ServiceEntry)
		next := BuildFullState(f, col.Resources(), entryElement{})
		if !bytes.Equal(bodyBytes(next), naive(col)) {
			t.Fatalf("step %d (%s %s): the body is not the resources' entries in order", step, kind, ch.Name)
		}
		if kind == "update" {
			if n := builtAnew(f, next); n > 1 {
				t.Fatalf("step %d: updating %s rebuilt %d chunks, want 1", step, ch.Name, n)
			}
		}
		if limit := 2*(next.Size()/FullStateChunkSize) + 16; next.Chunks() > limit {
			t.Fatalf("step %d: %d chunks for %d bytes (limit %d)", step, next.Chunks(), next.Size(), limit)
		}
		f = next
	}

	// Built from a newer version (a lagging stream), or from nothing: the
	// same bytes.
	older := BuildFullState(nil, col.Resources(), entryElement{})
	fromNewer := BuildFullState(f, col.Resources(), entryElement{})
	if !bytes.Equal(bodyBytes(fromNewer), bodyBytes(older)) || !bytes.Equal(bodyBytes(older), naive(col)) {
		t.Fatal("an older version built from a newer one differs from its own fresh build")
	}
	if empty := BuildFullState(f, nil, entryElement{}); empty.Size() != 0 || empty.Chunks() != 0 {
		t.Errorf("no resources: %d bytes in %d chunks", empty.Size(), empty.Chunks())
	}
}

// TestFullStateOfSharesPerEncoding checks what FullStateOf memoises: one
// body per collection version and encoding, whoever asks, and a next version
// built from it (one chunk new after one update).
func TestFullStateOfSharesPerEncoding(t *testing.T) {
	store := snapshot.NewStore()
	var changes []snapshot.Change
	for i := range 300 {
		changes = append(changes, seChange(fmt.Sprintf("ns/svc-%03d", i), 900, 0))
	}
	snap, _, err := store.Apply(changes, true)
	if err != nil {
		t.Fatal(err)
	}
	col := snap.Collection(snapshot.ServiceEntry)
	first := FullStateOf(col, entryElement{})
	if again := FullStateOf(col, entryElement{}); again != first {
		t.Fatal("a second caller of one encoding got a body of its own")
	}
	snap, _, err = store.Apply([]snapshot.Change{seChange("ns/svc-150", 900, 1)}, true)
	if err != nil {
		t.Fatal(err)
	}
	next := FullStateOf(snap.Collection(snapshot.ServiceEntry), entryElement{})
	if !bytes.Equal(bodyBytes(next), naive(snap.Collection(snapshot.ServiceEntry))) {
		t.Fatal("the next version's body is not its resources' entries")
	}
	if n := builtAnew(first, next); n != 1 || first.Chunks() < 2 {
		t.Fatalf("one update rebuilt %d of %d chunks, want 1", n, first.Chunks())
	}
}
