package file

import (
	"reflect"
	"testing"

	"github.com/galleon-mesh/galleon/model"
)

func TestMarshalRoundTrips(t *testing.T) {
	want := []model.Service{
		{
			Namespace: "shop", Name: "cart",
			Hosts: []string{"cart.shop.internal", "cart.example.com"}, Addresses: []string{"240.0.0.10"},
			Ports:       []model.Port{{Number: 8080, Protocol: model.ProtocolHTTP, Name: "web"}, {Number: 9090, Protocol: model.ProtocolGRPC}},
			Labels:      map[string]string{"app": "cart"},
			Annotations: map[string]string{"owner": "team-a"},
			Location:    model.MeshExternal, Resolution: model.ResolutionDNS, ExportTo: []string{"shop", "web"},
			Instances: []model.Instance{
				{ID: "a", Address: "vm1.shop.internal", Ports: map[uint32]uint32{8080: 18080}, Labels: map[string]string{"version": "v1"},
					Locality: "eu/eu-1/a", Network: "vpc-1", Weight: 3, ServiceAccount: "cart"},
				{ID: "b", Address: "vm2.shop.internal", Health: model.Unhealthy},
				{ID: "c", Address: "vm3.shop.internal", Health: model.Draining},
			},
		},
		{Namespace: "default", Name: "plain", Hosts: []string{"plain.default.internal"},
			Ports: []model.Port{{Number: 5432, Protocol: model.ProtocolTCP}}, Resolution: model.ResolutionStatic,
			Instances: []model.Instance{{ID: "10.0.0.1", Address: "10.0.0.1"}}},
	}
	data, err := Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	parsed, rej := parseFile("services.yaml", data, "default")
	if rej != nil {
		t.Fatalf("Marshal's output does not parse: %v\n%s", rej.err, data)
	}
	if len(parsed.services) != len(want) || len(parsed.rejected) != 0 {
		t.Fatalf("parsed %d services, %d rejected; want %d\n%s", len(parsed.services), len(parsed.rejected), len(want), data)
	}
	for i, p := range parsed.services {
		if !reflect.DeepEqual(p.svc, want[i]) {
			t.Errorf("service %d round-trips as\n%+v\nwant\n%+v\nfrom\n%s", i, p.svc, want[i], data)
		}
	}
}
