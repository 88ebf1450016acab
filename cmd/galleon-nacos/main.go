// Command galleon-nacos serves the services registered in Alibaba Nacos (1.x, 2.x, 3.x, or a
// server with its API) to istiod as ServiceEntries: one per (namespace, group, service), kept
// current by the server's pushes (gRPC subscriptions; the UDP push and a poll on 1.x). See
// docs/adapters/nacos.md.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/nacos"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

func main() {
	os.Exit(daemon.Main(spec()))
}

func spec() daemon.Spec {
	return daemon.Spec{
		Name:     "galleon-nacos",
		Registry: "nacos",
		Summary:  "serves the services registered in Nacos to istiod",
		Flags:    flags,
	}
}

// flags declares the adapter's flags (nacos.Config.AddFlags) and builds the registry from them.
func flags(fs *pflag.FlagSet) daemon.NewRegistry {
	var cfg nacos.Config
	cfg.AddFlags(fs)
	return func(env daemon.Env) (registry.Registry, error) {
		cfg.Logger = env.Logger
		cfg.Registerer = env.Registerer
		return nacos.New(cfg)
	}
}
