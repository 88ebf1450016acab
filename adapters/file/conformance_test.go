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

	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// TestConformance runs the adapter SDK's conformance kit against the file
// adapter. The "real registry" of the file adapter is its directory: the
// driver writes one YAML file per service, the way an operator or a
// configuration-management tool would.
func TestConformance(t *testing.T) {
	d := &dirDriver{dir: t.TempDir()}
	// The adapter keeps the last state when the directory holds no file at
	// all (a volume mounted empty is likelier than intent); an operator who
	// removes every service keeps a file, as this one does.
	if err := os.WriteFile(filepath.Join(d.dir, "00-index.yaml"), []byte("services: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
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
	data, err := file.Marshal([]model.Service{svc})
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
