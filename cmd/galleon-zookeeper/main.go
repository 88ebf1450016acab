// Command galleon-zookeeper serves the services registered in Apache ZooKeeper (the Curator /
// Spring Cloud Zookeeper layout, <root>/<name>/<id>; the Dubbo 2 interface-level layout,
// <root>/<interface>/providers/<provider URL>; or the Dubbo 3 application-level layout,
// <root>/<application>/<ip:port>) to istiod as ServiceEntries.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/zookeeper"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

func main() {
	os.Exit(daemon.Main(daemon.Spec{
		Name:     "galleon-zookeeper",
		Registry: "zookeeper",
		Summary:  "serves the services registered in ZooKeeper (Curator / Spring Cloud Zookeeper, Dubbo 2 or Dubbo 3 layout) to istiod",
		Flags:    flags,
	}))
}

func flags(fs *pflag.FlagSet) daemon.NewRegistry {
	var cfg zookeeper.Config
	cfg.AddFlags(fs)
	return func(env daemon.Env) (registry.Registry, error) {
		cfg.Logger = env.Logger
		cfg.Registerer = env.Registerer
		return zookeeper.New(cfg)
	}
}
