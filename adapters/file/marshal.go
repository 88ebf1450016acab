package file

import (
	"go.yaml.in/yaml/v3"

	"github.com/galleon-mesh/galleon/model"
)

// Marshal renders services in the file registry's format: a file the
// registry reads back as the same services. It is the inverse of parsing,
// built on the same schema, so tools that write registries (the load tool,
// tests) never restate the format.
func Marshal(services []model.Service) ([]byte, error) {
	doc := struct {
		Services []serviceSpec `yaml:"services"`
	}{Services: make([]serviceSpec, 0, len(services))}
	for _, svc := range services {
		doc.Services = append(doc.Services, specOf(svc))
	}
	return yaml.Marshal(doc)
}

func specOf(svc model.Service) serviceSpec {
	out := serviceSpec{
		Name:        svc.Name,
		Namespace:   svc.Namespace,
		Hosts:       svc.Hosts,
		Addresses:   svc.Addresses,
		Labels:      svc.Labels,
		Annotations: svc.Annotations,
		ExportTo:    svc.ExportTo,
	}
	if svc.Location == model.MeshExternal {
		out.Location = "external"
	}
	switch svc.Resolution {
	case model.ResolutionStatic:
		out.Resolution = "static"
	case model.ResolutionDNS:
		out.Resolution = "dns"
	case model.ResolutionNone:
		out.Resolution = "none"
	}
	for _, p := range svc.Ports {
		out.Ports = append(out.Ports, portSpec{Number: p.Number, Protocol: string(p.Protocol), Name: p.Name})
	}
	for _, inst := range svc.Instances {
		i := instanceSpec{
			ID:             inst.ID,
			Address:        inst.Address,
			Ports:          inst.Ports,
			Labels:         inst.Labels,
			Locality:       inst.Locality,
			Network:        inst.Network,
			Weight:         inst.Weight,
			ServiceAccount: inst.ServiceAccount,
		}
		switch inst.Health {
		case model.Unhealthy:
			i.Health = "unhealthy"
		case model.Draining:
			i.Health = "draining"
		}
		out.Instances = append(out.Instances, i)
	}
	return out
}
