package consul

import (
	"encoding/json"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/galleon-mesh/galleon/internal/convert"
)

// FuzzMapService feeds arbitrary /v1/health/service/<name> bodies (what a
// Consul agent, or anything answering in its place, sends) through the
// mapping and the core's conversion: no panic, every rejection names its
// record, and every mapped instance has an ID and an address.
func FuzzMapService(f *testing.F) {
	for _, s := range []string{
		`[]`,
		`[{"Node":{"Node":"n1","Address":"10.0.0.1","Datacenter":"dc1"},"Service":{"ID":"web-1","Service":"web","Port":8080,"Tags":["version=v1","protocol=http"],"Meta":{"protocol":"grpc","external":"true"},"Weights":{"Passing":3,"Warning":1}},"Checks":[{"CheckID":"c","Status":"passing"}]}]`,
		`[{"Node":{"Node":"n1","Address":"not-an-ip"},"Service":{"ID":"web-1","Service":"web","Port":70000,"Address":"::1"}}]`,
		`[{"Node":null,"Service":null,"Checks":null}]`,
		`[{"Node":{"Node":"n1","Address":"10.0.0.1","TaggedAddresses":{"lan":"10.1.1.1","wan":"1.2.3.4"}},"Service":{"ID":"a","Service":"web","Port":1,"TaggedAddresses":{"lan_ipv4":{"Address":"10.2.2.2","Port":80}}},"Checks":[{"Status":"critical"},{"Status":"maintenance","CheckID":"_service_maintenance:a"}]}]`,
	} {
		f.Add([]byte(s))
	}
	cfg := Config{}.withDefaults()
	if err := cfg.Validate(); err != nil {
		f.Fatal(err)
	}
	m, err := newMapper(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var entries []*api.ServiceEntry
		if json.Unmarshal(body, &entries) != nil {
			return // the api client refuses what does not decode
		}
		p, rejected := m.mapService("dc1", "web", entries)
		for _, r := range rejected {
			if r.record == "" || r.err == nil {
				t.Fatalf("rejection without a record or an error: %+v", r)
			}
		}
		if p == nil {
			return
		}
		for _, inst := range p.instances {
			if inst.ID == "" || inst.Address == "" {
				t.Fatalf("mapped an instance without an ID or address: %+v", inst)
			}
		}
		_, _ = convert.Convert(merge([]*part{p}), convert.Options{}) // must not panic
	})
}
