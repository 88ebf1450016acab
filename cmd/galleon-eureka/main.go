// Command galleon-eureka serves the applications registered in Netflix Eureka 1.x (or a server
// with its API) to istiod as ServiceEntries: one per application, its UP instances as endpoints,
// kept current with /apps/delta and apps__hashcode reconciliation.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/eureka"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

func main() {
	os.Exit(daemon.Main(spec()))
}

func spec() daemon.Spec {
	return daemon.Spec{
		Name:     "galleon-eureka",
		Registry: "eureka",
		Summary:  "serves the applications registered in Eureka to istiod",
		Flags:    flags,
	}
}

// flags declares the adapter's flags (eureka.Config.AddFlags), keeps their names before issue 28
// working with a warning, and builds the registry from them.
func flags(fs *pflag.FlagSet) daemon.NewRegistry {
	var cfg eureka.Config
	cfg.AddFlags(fs)
	for old, current := range eureka.RenamedFlags() {
		daemon.DeprecatedFlag(fs, old, current)
	}
	return func(env daemon.Env) (registry.Registry, error) {
		cfg.Logger = env.Logger
		cfg.Registerer = env.Registerer
		return eureka.New(cfg)
	}
}
