package file_test

import (
	"log/slog"
	"testing"

	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/adapters/file/filetest"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// TestConformance runs the adapter SDK's conformance kit against the file
// adapter. The "real registry" of the file adapter is its directory: the
// driver (filetest.DirDriver) writes one YAML file per service, the way an
// operator or a configuration-management tool would.
func TestConformance(t *testing.T) {
	// The driver keeps a file with no service in the directory: the
	// adapter keeps the last state when the directory holds no file at all.
	d := filetest.NewDirDriver(t, t.TempDir())
	registrytest.TestRegistry(t,
		func(t *testing.T) registry.Registry {
			reg, err := file.New(file.Config{Dir: d.Dir, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return reg
		},
		d,
		// The file format holds every field of the model: check them all.
		registrytest.WithFixture(filetest.FullFixture),
	)
}
