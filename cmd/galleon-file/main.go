// Command galleon-file serves services kept as YAML files in a directory
// (see examples/file/README.md) to istiod over MCP.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

func main() {
	os.Exit(daemon.Main(daemon.Spec{
		Name:     "galleon-file",
		Registry: "file",
		Summary:  "serves the services described by YAML files in a directory to istiod",
		Flags:    flags,
	}))
}

// flags declares the adapter's flags (file.Config.AddFlags), keeps their
// names before issue 28 working with a warning, and builds the registry
// from them.
func flags(fs *pflag.FlagSet) daemon.NewRegistry {
	var cfg file.Config
	cfg.AddFlags(fs)
	for old, current := range file.RenamedFlags() {
		daemon.DeprecatedFlag(fs, old, current)
	}
	return func(env daemon.Env) (registry.Registry, error) {
		cfg.Logger = env.Logger
		return file.New(cfg)
	}
}
