// Command galleon-httpcatalog serves the services of an HTTP service
// catalog (see package catalog) to istiod over MCP.
//
// Everything but the catalog's flags (addresses, logging, debouncing,
// subsets, shutdown) comes from daemon.Main; run with --help for the list.
// Every flag can also be set as GALLEON_<FLAG> (GALLEON_CATALOG_URL) or in
// the --config file.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"example.com/galleon-httpcatalog/catalog"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

func main() {
	os.Exit(daemon.Main(daemon.Spec{
		Name:     "galleon-httpcatalog",
		Registry: "httpcatalog",
		Summary:  "serves the services of an HTTP service catalog (GET <url>/v1/services) to istiod",
		Flags: func(fs *pflag.FlagSet) daemon.NewRegistry {
			var cfg catalog.Config
			cfg.AddFlags(fs)
			return func(env daemon.Env) (registry.Registry, error) {
				cfg.Logger = env.Logger
				return catalog.New(cfg)
			}
		},
	}))
}
