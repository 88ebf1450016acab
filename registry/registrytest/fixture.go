package registrytest

import (
	"fmt"
	"hash/fnv"

	"github.com/galleon-mesh/galleon/model"
)

// DefaultFixture returns version v of the service key, the services
// TestRegistry puts in the registry unless WithFixture says otherwise.
//
// It sticks to what most registries can hold: one HTTP port, service
// labels, and instances with an ID, an IP address, labels and a health.
// Versions cycle with period 3 and each differs from the one before:
//
//   - 0: instances <name>-1 (Healthy) and <name>-2 (Unhealthy);
//   - 1: <name>-2 turns Healthy, <name>-3 (Draining, new labels) is added,
//     a service label is added;
//   - 2: <name>-1 is removed, <name>-2 changes address, <name>-3 turns
//     Healthy, the service label is removed again.
//
// Addresses are in 10.0.0.0/8, derived from the key, so that the services
// of one test never share an address. Registry is left empty: the adapter
// fills it in, and the kit does not compare it.
func DefaultFixture(key model.ServiceKey, v int) model.Service {
	h := fnv.New32a()
	h.Write([]byte(key.String()))
	sum := h.Sum32()
	ip := func(n int) string { return fmt.Sprintf("10.%d.%d.%d", byte(sum>>8), byte(sum), n) }
	id := func(n int) string { return fmt.Sprintf("%s-%d", key.Name, n) }
	svc := model.Service{
		Namespace: key.Namespace,
		Name:      key.Name,
		Hosts:     []string{key.Name + "." + key.Namespace + ".test"},
		Ports:     []model.Port{{Number: 8080, Protocol: model.ProtocolHTTP, Name: "http"}},
		Labels:    map[string]string{"app": key.Name},
	}
	v1 := map[string]string{"version": "v1"}
	switch v % 3 {
	case 0:
		svc.Instances = []model.Instance{
			{ID: id(1), Address: ip(1), Labels: v1, Health: model.Healthy},
			{ID: id(2), Address: ip(2), Labels: v1, Health: model.Unhealthy},
		}
	case 1:
		svc.Labels = map[string]string{"app": key.Name, "tier": "backend"}
		svc.Instances = []model.Instance{
			{ID: id(1), Address: ip(1), Labels: v1, Health: model.Healthy},
			{ID: id(2), Address: ip(2), Labels: v1, Health: model.Healthy},
			{ID: id(3), Address: ip(3), Labels: map[string]string{"version": "v2"}, Health: model.Draining},
		}
	case 2:
		svc.Instances = []model.Instance{
			{ID: id(2), Address: ip(12), Labels: v1, Health: model.Healthy},
			{ID: id(3), Address: ip(3), Labels: map[string]string{"version": "v2"}, Health: model.Healthy},
		}
	}
	return svc
}
