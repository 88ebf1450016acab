package file_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/common/model"
	"github.com/galleon-mesh/galleon/common/registry"
	"github.com/galleon-mesh/galleon/common/registrytest"
)

// TestConformance runs the adapter SDK's conformance kit against the file
// adapter. The "real registry" of the file adapter is its directory: the
// driver writes one YAML file per service, the way an operator or a
// configuration-management tool would.
func TestConformance(t *testing.T) {
	d := &dirDriver{dir: t.TempDir()}
	registrytest.TestRegistry(t,
		func(t *testing.T) registry.Registry {
			reg, err := file.New(file.Config{Dir: d.dir, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return reg
		},
		d,
		// The file format holds every field of the model: check them all.
		registrytest.WithFixture(fullFixture),
	)
}

// fullFixture extends the default fixture with every field the file format
// holds, changing them between versions.
func fullFixture(key model.ServiceKey, v int) model.Service {
	svc := registrytest.DefaultFixture(key, v)
	svc.Annotations = map[string]string{"example.com/owner": "team-" + key.Name}
	switch v % 3 {
	case 0:
		svc.Addresses = []string{"240.0.0.10"}
		svc.Resolution = model.ResolutionStatic
	case 1:
		svc.Hosts = append(svc.Hosts, key.Name+".example.com")
		svc.Ports = append(svc.Ports, model.Port{Number: 9090, Protocol: model.ProtocolGRPC, Name: "grpc"})
		svc.ExportTo = []string{".", "istio-system"}
		svc.Location = model.MeshExternal
		svc.Resolution = model.ResolutionDNS
	case 2:
		svc.Ports = append(svc.Ports, model.Port{Number: 9090, Protocol: model.ProtocolTCP})
		svc.Annotations = nil
	}
	for i := range svc.Instances {
		inst := &svc.Instances[i]
		inst.Locality = fmt.Sprintf("region-a/zone-%d", i+v%2)
		inst.ServiceAccount = key.Name
		if v%3 == 1 && i == 0 {
			inst.Ports = map[uint32]uint32{8080: 18080}
			inst.Weight = 5
			inst.Network = "vm-net"
		}
	}
	return svc
}

// dirDriver drives a file-registry directory. It implements
// registrytest.Driver, Corrupter and Breaker.
type dirDriver struct {
	dir string
}

var (
	_ registrytest.Driver    = (*dirDriver)(nil)
	_ registrytest.Corrupter = (*dirDriver)(nil)
	_ registrytest.Breaker   = (*dirDriver)(nil)
)

// path is the file holding one service.
func (d *dirDriver) path(key model.ServiceKey) string {
	return filepath.Join(d.dir, key.Namespace+"_"+key.Name+".yaml")
}

// write replaces a file atomically, as careful tools do: the adapter never
// reads a half-written file. The temporary name starts with "." so the
// adapter ignores it.
func (d *dirDriver) write(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (d *dirDriver) Put(_ context.Context, svc model.Service) error {
	data, err := yaml.Marshal(fileDoc{Services: []serviceYAML{toYAML(svc)}})
	if err != nil {
		return err
	}
	return d.write(d.path(svc.Key()), data)
}

func (d *dirDriver) Remove(_ context.Context, key model.ServiceKey) error {
	if err := os.Remove(d.path(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Corrupt writes a file whose only service has an instance with an unknown
// health. The adapter rejects that service, naming the file and the line
// of the bad instance.
func (d *dirDriver) Corrupt(_ context.Context, key model.ServiceKey) (string, error) {
	path := d.path(key)
	content := strings.Join([]string{
		"services:",
		"- name: " + key.Name,
		"  namespace: " + key.Namespace,
		"  ports: [{number: 80, protocol: HTTP}]",
		"  instances:",
		"  - address: 10.0.0.1", // line 6
		"    health: sick",
		"",
	}, "\n")
	return path + ":6", d.write(path, []byte(content))
}

// Break moves the directory away, which the adapter reports as
// Unreachable; Restore moves it back.
func (d *dirDriver) Break(context.Context) error   { return os.Rename(d.dir, d.dir+".away") }
func (d *dirDriver) Restore(context.Context) error { return os.Rename(d.dir+".away", d.dir) }

// The file format, as documented in package file.

type fileDoc struct {
	Services []serviceYAML `yaml:"services"`
}

type serviceYAML struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Hosts       []string          `yaml:"hosts,omitempty"`
	Addresses   []string          `yaml:"addresses,omitempty"`
	Ports       []portYAML        `yaml:"ports"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
	Location    string            `yaml:"location,omitempty"`
	Resolution  string            `yaml:"resolution,omitempty"`
	ExportTo    []string          `yaml:"exportTo,omitempty"`
	Instances   []instanceYAML    `yaml:"instances,omitempty"`
}

type portYAML struct {
	Number   uint32 `yaml:"number"`
	Protocol string `yaml:"protocol,omitempty"`
	Name     string `yaml:"name,omitempty"`
}

type instanceYAML struct {
	ID             string            `yaml:"id,omitempty"`
	Address        string            `yaml:"address"`
	Ports          map[uint32]uint32 `yaml:"ports,omitempty"`
	Labels         map[string]string `yaml:"labels,omitempty"`
	Locality       string            `yaml:"locality,omitempty"`
	Network        string            `yaml:"network,omitempty"`
	Weight         uint32            `yaml:"weight,omitempty"`
	Health         string            `yaml:"health,omitempty"`
	ServiceAccount string            `yaml:"serviceAccount,omitempty"`
}

func toYAML(svc model.Service) serviceYAML {
	out := serviceYAML{
		Name:        svc.Name,
		Namespace:   svc.Namespace,
		Hosts:       svc.Hosts,
		Addresses:   svc.Addresses,
		Labels:      svc.Labels,
		Annotations: svc.Annotations,
		Location:    [...]string{model.MeshInternal: "internal", model.MeshExternal: "external"}[svc.Location],
		Resolution: [...]string{model.ResolutionAuto: "auto", model.ResolutionStatic: "static",
			model.ResolutionDNS: "dns", model.ResolutionNone: "none"}[svc.Resolution],
		ExportTo: svc.ExportTo,
	}
	for _, p := range svc.Ports {
		out.Ports = append(out.Ports, portYAML{Number: p.Number, Protocol: string(p.Protocol), Name: p.Name})
	}
	for _, inst := range svc.Instances {
		out.Instances = append(out.Instances, instanceYAML{
			ID:             inst.ID,
			Address:        inst.Address,
			Ports:          inst.Ports,
			Labels:         inst.Labels,
			Locality:       inst.Locality,
			Network:        inst.Network,
			Weight:         inst.Weight,
			Health:         [...]string{model.Healthy: "healthy", model.Unhealthy: "unhealthy", model.Draining: "draining"}[inst.Health],
			ServiceAccount: inst.ServiceAccount,
		})
	}
	return out
}
