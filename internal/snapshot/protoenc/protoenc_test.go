package protoenc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

var deterministic = proto.MarshalOptions{Deterministic: true}

// The messages have the fields the encoders write, no more: a field istio.io/api adds
// would be left out of every resource without this test failing here.
func TestFieldsKnown(t *testing.T) {
	for _, tc := range []struct {
		msg    proto.Message
		fields []protoreflect.FieldNumber
	}{
		{&networking.WorkloadEntry{}, []protoreflect.FieldNumber{1, 2, 3, 4, 5, 6, 7}},
		{&mcp.Resource{}, []protoreflect.FieldNumber{1, 2}},
		{&mcp.Metadata{}, []protoreflect.FieldNumber{1, 2, 3, 4, 5}},
		{&anypb.Any{}, []protoreflect.FieldNumber{1, 2}},
		{&timestamppb.Timestamp{}, []protoreflect.FieldNumber{1, 2}},
	} {
		d := tc.msg.ProtoReflect().Descriptor()
		var got []protoreflect.FieldNumber
		for i := range d.Fields().Len() {
			got = append(got, d.Fields().Get(i).Number())
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.fields) {
			t.Errorf("%s has fields %v; the encoder writes %v: extend it", d.FullName(), got, tc.fields)
		}
	}
	if f := (&networking.ServiceEntry{}).ProtoReflect().Descriptor().Fields().ByName("endpoints"); f == nil || f.Number() != serviceEntryEndpoints {
		t.Errorf("ServiceEntry.endpoints is not field %d", serviceEntryEndpoints)
	}
}

func TestAppendEndpoints(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		endpoints := make([]*networking.WorkloadEntry, rng.IntN(4))
		for j := range endpoints {
			endpoints[j] = randomWorkloadEntry(rng)
		}
		want, err := deterministic.Marshal(&networking.ServiceEntry{Endpoints: endpoints})
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte("prefix")
		got := AppendEndpoints(prefix, endpoints)
		if !bytes.Equal(got[len(prefix):], want) || !bytes.Equal(got[:len(prefix)], []byte("prefix")) {
			t.Fatalf("case %d: %v\nencoded %x\nproto   %x", i, endpoints, got[len(prefix):], want)
		}
		for _, we := range endpoints {
			want, _ := deterministic.Marshal(we)
			if got := AppendWorkloadEntry(nil, we); !bytes.Equal(got, want) || sizeWorkloadEntry(we) != len(want) {
				t.Fatalf("case %d: %v\nencoded %x (size %d)\nproto   %x", i, we, got, sizeWorkloadEntry(we), want)
			}
		}
	}
}

func TestMCPResource(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	times := []time.Time{time.Unix(0, 0), time.Unix(1700000000, 123456789), time.Unix(-5, 0), time.Unix(0, 1)}
	for i := range 2000 {
		r := MCPResource{
			Name:        randomString(rng),
			Version:     randomString(rng),
			CreateTime:  times[rng.IntN(len(times))],
			Labels:      randomStringMap(rng),
			Annotations: randomStringMap(rng),
			TypeURL:     randomString(rng),
		}
		if rng.IntN(4) > 0 {
			r.Body = []byte(randomString(rng) + randomString(rng))
		}
		want, err := deterministic.Marshal(&mcp.Resource{
			Metadata: &mcp.Metadata{
				Name: r.Name, CreateTime: timestamppb.New(r.CreateTime), Version: r.Version,
				Labels: r.Labels, Annotations: r.Annotations,
			},
			Body: &anypb.Any{TypeUrl: r.TypeURL, Value: r.Body},
		})
		if err != nil {
			t.Fatal(err)
		}
		got := r.Append(nil)
		if !bytes.Equal(got, want) || r.Size() != len(want) {
			t.Fatalf("case %d: %+v\nencoded %x (size %d)\nproto   %x", i, r, got, r.Size(), want)
		}
	}
}

func randomWorkloadEntry(rng *rand.Rand) *networking.WorkloadEntry {
	if rng.IntN(20) == 0 {
		return &networking.WorkloadEntry{}
	}
	we := &networking.WorkloadEntry{
		Address:        randomString(rng),
		Labels:         randomStringMap(rng),
		Network:        randomString(rng),
		Locality:       randomString(rng),
		ServiceAccount: randomString(rng),
	}
	if rng.IntN(2) == 0 {
		we.Weight = rng.Uint32() >> rng.IntN(32)
	}
	if n := rng.IntN(4); n > 0 {
		we.Ports = map[string]uint32{}
		for range n {
			we.Ports[randomString(rng)] = rng.Uint32() >> rng.IntN(33)
		}
	}
	return we
}

func randomStringMap(rng *rand.Rand) map[string]string {
	n := rng.IntN(5)
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		m[randomString(rng)] = randomString(rng)
	}
	return m
}

// randomString is empty a quarter of the time, otherwise up to 200 bytes (lengths over 127
// take a two-byte varint), sometimes not ASCII.
func randomString(rng *rand.Rand) string {
	switch rng.IntN(8) {
	case 0, 1:
		return ""
	case 2:
		return fmt.Sprintf("%x-é-%d", rng.Uint64(), rng.IntN(1000))
	case 3:
		return string(bytes.Repeat([]byte{'a' + byte(rng.IntN(26))}, 100+rng.IntN(100)))
	}
	return fmt.Sprintf("k%d", rng.IntN(50))
}
