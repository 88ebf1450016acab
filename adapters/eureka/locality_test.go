package eureka

import (
	"context"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/eurekatest"
	"github.com/galleon-mesh/galleon/adapters/eureka/internal/wire"
	"github.com/galleon-mesh/galleon/model"
)

// TestLocalityRealServer, against a real Eureka API server (Polaris): instances registered the
// Spring Cloud way (metadata zone, no region) get the region of --eureka-region, one whose
// metadata names a region keeps it, one whose zone is an AWS availability zone gets that zone's
// region; without --eureka-region the Spring zone alone gives no locality, never "/zone-a".
func TestLocalityRealServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := eurekatest.Start(t, eurekatest.Options{})
	registerAll(ctx, t, []*eurekatest.Server{s},
		eurekatest.Instance{App: "geo", ID: "geo-1", IPAddr: "10.5.0.1", Port: 8080, Metadata: map[string]string{"zone": "zone-a"}},
		eurekatest.Instance{App: "geo", ID: "geo-2", IPAddr: "10.5.0.2", Port: 8080, Metadata: map[string]string{"zone": "us-east-1b"}},
		eurekatest.Instance{App: "geo", ID: "geo-3", IPAddr: "10.5.0.3", Port: 8080, Metadata: map[string]string{"zone": "zone-b", "region": "eu-central"}},
		eurekatest.Instance{App: "geo", ID: "geo-4", IPAddr: "10.5.0.4", Port: 8080})
	eurekatest.RenewEvery(t, s, 10*time.Second, func() map[string][]string {
		return map[string][]string{"GEO": {"geo-1", "geo-2", "geo-3", "geo-4"}}
	})
	waitListed(ctx, t, s, "GEO", "geo-4", wire.StatusUp)
	localities := func(want map[string]string) func(map[model.ServiceKey]model.Service) bool {
		return func(st map[model.ServiceKey]model.Service) bool {
			svc, ok := st[model.ServiceKey{Namespace: "eureka-test", Name: "geo"}]
			if !ok || len(svc.Instances) != len(want) {
				return false
			}
			for _, in := range svc.Instances {
				if l, ok := want[in.ID]; !ok || l != in.Locality {
					return false
				}
			}
			return true
		}
	}
	for _, tc := range []struct {
		region string
		want   map[string]string
	}{
		{"eu-west-1", map[string]string{"geo-1": "eu-west-1/zone-a", "geo-2": "us-east-1/us-east-1b", "geo-3": "eu-central/zone-b", "geo-4": "eu-west-1"}},
		{"", map[string]string{"geo-1": "", "geo-2": "us-east-1/us-east-1b", "geo-3": "eu-central/zone-b", "geo-4": ""}},
	} {
		_, rec := runAdapter(t, Config{URLs: []string{s.BaseURL()}, PollInterval: 200 * time.Millisecond, Region: tc.region})
		rec.WaitFor(t, 20*time.Second, localities(tc.want))
		for _, in := range rec.State()[model.ServiceKey{Namespace: "eureka-test", Name: "geo"}].Instances {
			t.Logf("--eureka-region %q: %s locality %q (labels %v)", tc.region, in.ID, in.Locality, in.Labels)
		}
	}
}
