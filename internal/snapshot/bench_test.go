package snapshot

import (
	"fmt"
	"testing"
)

// BenchmarkApplyOneChange measures Store.Apply of one changed resource at
// 10,000 ServiceEntries, alone and with config subset views (each keeping
// about a tenth of the services): what subsets add to every change.
func BenchmarkApplyOneChange(b *testing.B) {
	const services = 10000
	for _, views := range []int{0, 8} {
		b.Run(fmt.Sprintf("views=%d", views), func(b *testing.B) {
			s := NewStore()
			origins := make([]*Origin, 10)
			for i := range origins {
				origins[i] = &Origin{Registry: "bench", Namespace: fmt.Sprintf("team-%d", i)}
			}
			changes := make([]Change, services)
			for i := range changes {
				name := fmt.Sprintf("team-%d/svc-%05d", i%10, i)
				changes[i] = Change{Kind: ServiceEntry, Name: name, Object: &Object{Kind: ServiceEntry, Name: name,
					Body: fmt.Appendf(nil, "body-%d-0", i), Shape: 1, Origin: origins[i%10]}}
			}
			if _, _, err := s.Apply(changes, true); err != nil {
				b.Fatal(err)
			}
			for v := range views {
				ns := fmt.Sprintf("team-%d", v)
				s.NewView(func(r *Resource) bool { return r.Origin != nil && r.Origin.Namespace == ns })
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				n := i % services
				ch := changes[n]
				ch.Object = &Object{Kind: ServiceEntry, Name: ch.Name, Body: fmt.Appendf(nil, "body-%d-%d", n, i+1), Shape: 1, Origin: ch.Object.Origin}
				if _, _, err := s.Apply([]Change{ch}, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
