// Package filetest helps test with a file registry: a conformance-kit
// driver that writes the registry's directory the way an operator or a
// configuration-management tool would, and a fixture that uses every field
// of the file format.
package filetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// DirDriver drives a file-registry directory: one YAML file per service,
// each replaced atomically. It implements registrytest.Driver, Corrupter
// and Breaker.
type DirDriver struct {
	// Dir is the registry directory.
	Dir string
}

var (
	_ registrytest.Driver    = (*DirDriver)(nil)
	_ registrytest.Corrupter = (*DirDriver)(nil)
	_ registrytest.Breaker   = (*DirDriver)(nil)
)

// IndexFile is the file NewDirDriver writes: it holds no service, so that
// the directory is never empty (see NewDirDriver).
const IndexFile = "00-index.yaml"

// NewDirDriver returns a driver for dir, an existing directory, after
// writing IndexFile in it. The adapter keeps the last state when the
// directory holds no file at all (a volume mounted empty is likelier than
// intent); an operator who removes every service keeps a file, as this
// one does.
func NewDirDriver(t testing.TB, dir string) *DirDriver {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, IndexFile), []byte("services: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &DirDriver{Dir: dir}
}

// Path is the file holding one service.
func (d *DirDriver) Path(key model.ServiceKey) string {
	return filepath.Join(d.Dir, key.Namespace+"_"+key.Name+".yaml")
}

// write replaces a file atomically, as careful tools do: the adapter never
// reads a half-written file. The temporary name starts with "." so the
// adapter ignores it.
func (d *DirDriver) write(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Put writes svc's file.
func (d *DirDriver) Put(_ context.Context, svc model.Service) error {
	data, err := file.Marshal([]model.Service{svc})
	if err != nil {
		return err
	}
	return d.write(d.Path(svc.Key()), data)
}

// Remove deletes the file of key, if any.
func (d *DirDriver) Remove(_ context.Context, key model.ServiceKey) error {
	if err := os.Remove(d.Path(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Corrupt writes a file whose only service has an instance with an unknown
// health. The adapter rejects that service, naming the file and the line
// of the bad instance.
func (d *DirDriver) Corrupt(_ context.Context, key model.ServiceKey) (string, error) {
	path := d.Path(key)
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
func (d *DirDriver) Break(context.Context) error { return os.Rename(d.Dir, d.Dir+".away") }

// Restore moves the directory back after Break.
func (d *DirDriver) Restore(context.Context) error { return os.Rename(d.Dir+".away", d.Dir) }

// FullFixture extends the kit's default fixture with every field the file
// format holds, changing them between versions: give it to the kit with
// registrytest.WithFixture.
func FullFixture(key model.ServiceKey, v int) model.Service {
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
