// Command galleon-consul serves the services of HashiCorp Consul (one or
// more datacenters, through an agent) to istiod over MCP. See
// docs/adapters/consul.md.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/consul"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

func main() {
	os.Exit(daemon.Main(daemon.Spec{
		Name:     "galleon-consul",
		Registry: "consul",
		Summary:  "serves the services of a Consul catalog to istiod",
		Flags:    flags,
	}))
}

// flags declares the adapter's flags (consul.Config.AddFlags), keeps their
// names before issue 28 working with a warning, and builds the registry
// from them.
func flags(fs *pflag.FlagSet) daemon.NewRegistry {
	var cfg consul.Config
	cfg.AddFlags(fs)
	for old, current := range consul.RenamedFlags() {
		daemon.DeprecatedFlag(fs, old, current)
	}
	return func(env daemon.Env) (registry.Registry, error) {
		cfg.Logger = env.Logger
		cfg.Registerer = env.Registerer
		return consul.New(cfg)
	}
}
