package nacos

import (
	"math"
	"testing"

	"github.com/galleon-mesh/galleon/adapters/nacos/internal/wire"
	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
)

// FuzzMapService maps services whose names, instance fields and metadata are whatever a server
// (or whoever registers) sends, and checks for any input:
//   - no panic;
//   - a service mapped with ports is one the core accepts as it is (convert.ConvertService:
//     name, host, ports, endpoints, labels, locality), and one without ports has no instance;
//   - every rejection, of an instance or of the service, carries a reason and a bounded text,
//     under a bounded record name;
//   - labels are bounded (maxLabels).
func FuzzMapService(f *testing.F) {
	f.Add("orders", "DEFAULT_GROUP", "public", "10.0.0.1", 8080, 1.0, true, true, "DEFAULT", "protocol", "http", "", false, uint8(0))
	f.Add("providers:org.apache.demo.DemoService:1.0.0:g1", "DEFAULT_GROUP", "", "10.0.0.1", 20880, 1.0, true, true, "DEFAULT", "protocol", "tri", "", false, uint8(1))
	f.Add("demo-provider", "DUBBO", "dev", "fd00::1", 20880, 0.5, false, true, "BJ", "dubbo.metadata.revision", "abc", `[{"port":20880,"protocol":"dubbo"},{"port":50051,"protocol":"tri"}]`, true, uint8(2))
	f.Add("consumers:x::", "g", "n", "bad ip", 0, math.NaN(), true, false, "", "weight", "x", "[", false, uint8(3))
	f.Add("Orders.Service", "Shop_Group", "E3B1", "Host.Example.COM", 70000, -1.0, true, true, "C-1", "k8s-namespace", "Not_Valid", "[]", true, uint8(4))
	f.Fuzz(func(t *testing.T, service, group, namespace, ip string, port int, weight float64, healthy, enabled bool,
		cluster, key, value, endpoints string, reach bool, variant uint8) {
		m := fuzzMapper(t, variant)
		meta := map[string]string{key: value, "side": "provider", "application": value}
		if endpoints != "" {
			meta[dubboreg.EndpointsKey] = endpoints
		}
		fuzzed := wire.Instance{IP: ip, Port: port, Weight: weight, Healthy: healthy, Enabled: enabled, ClusterName: cluster, Metadata: meta}
		good := wire.Instance{IP: "10.9.9.9", Port: 20880, Weight: 1, Healthy: true, Enabled: true, Metadata: map[string]string{key: value}}
		info := &wire.ServiceInfo{Hosts: []wire.Instance{fuzzed, good, fuzzed}, ReachProtectionThreshold: reach}
		ref := wire.Ref{Namespace: namespace, Group: group, Service: service}
		out := m.mapService(ref, info)
		checkRecord(t, serviceRecord(ref))
		for rec, err := range out.rejected {
			checkRecord(t, rec)
			checkRejection(t, rec, err)
		}
		if out.skip {
			return
		}
		if out.err != nil {
			checkRejection(t, "the service", out.err)
			return
		}
		svc := out.service
		if len(svc.Ports) == 0 {
			if len(svc.Instances) != 0 {
				t.Fatalf("no port but %d instances", len(svc.Instances))
			}
			return
		}
		for _, in := range svc.Instances {
			if len(in.Labels) > maxLabels {
				t.Fatalf("%d labels", len(in.Labels))
			}
		}
		if model.DNSLabel(svc.Name) != svc.Name || svc.Name == "" {
			t.Fatalf("name %q is not a DNS label", svc.Name)
		}
		if _, err := convert.ConvertService(svc, convert.Options{Mode: convert.ModeServiceEntry}); err != nil {
			t.Fatalf("a service the mapping accepts is invalid in the core: %v\n%+v", err, svc)
		}
	})
}

// fuzzMapper is configuration i of those fuzzed: the defaults, Dubbo off, clusters as
// localities with a protect threshold and a namespace key, metadata host templates.
func fuzzMapper(t *testing.T, i uint8) *mapper {
	switch i % 4 {
	case 1:
		return testMapper(t, func(n *Naming) { n.Dubbo = false })
	case 2:
		return testMapper(t, func(n *Naming) {
			n.Cluster, n.ProtectThreshold, n.NamespaceMetaKey = ClusterAsLocality, 0.5, "k8s-namespace"
			n.DubboProtocols = map[string]string{"hessian": "HTTP2"}
		})
	case 3:
		return testMapper(t, func(n *Naming) {
			n.HostTemplate = "{{.Metadata.application}}.{{.Name}}.mesh"
			n.DubboHostTemplate = "{{.Version}}.{{.Interface}}.{{.NacosGroup}}.dubbo"
		})
	}
	return testMapper(t, nil)
}

func checkRecord(t *testing.T, rec string) {
	t.Helper()
	if len(rec) > registry.MaxRecordLen+64 {
		t.Fatalf("a %d-byte record name", len(rec))
	}
}

func checkRejection(t *testing.T, rec string, err error) {
	t.Helper()
	if err == nil || registry.ReasonOf(err, "") == "" {
		t.Fatalf("%s: rejected without a reason: %v", rec, err)
	}
	if len(err.Error()) > 1024 {
		t.Fatalf("%s: a %d-byte rejection", rec, len(err.Error()))
	}
}
