// Package builtin describes Galleon's own adapters as the daemon runs them: one Spec per
// registry kind, which its galleon-<kind> binary runs alone and galleon-fleet runs side by side.
// A partner's adapter is described the same way (daemon.Spec) in its own binary.
package builtin

import (
	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/consul"
	"github.com/galleon-mesh/galleon/adapters/eureka"
	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/adapters/nacos"
	"github.com/galleon-mesh/galleon/adapters/zookeeper"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

// All returns every built-in adapter.
func All() []daemon.Spec {
	return []daemon.Spec{Consul(), Eureka(), File(), Nacos(), ZooKeeper()}
}

// Consul is galleon-consul's adapter.
func Consul() daemon.Spec {
	return daemon.Spec{
		Name:     "galleon-consul",
		Registry: "consul",
		Summary:  "serves the services of a Consul catalog to istiod",
		Flags:    consulFlags,
	}
}

// consulFlags declares the adapter's flags (consul.Config.AddFlags), keeps their
// names before issue 28 working with a warning, and builds the registry
// from them.
func consulFlags(fs *pflag.FlagSet) daemon.NewRegistry {
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

// Eureka is galleon-eureka's adapter.
func Eureka() daemon.Spec {
	return daemon.Spec{
		Name:     "galleon-eureka",
		Registry: "eureka",
		Summary:  "serves the applications registered in Eureka to istiod",
		Flags:    eurekaFlags,
	}
}

// eurekaFlags declares the adapter's flags (eureka.Config.AddFlags), keeps their names before issue 28
// working with a warning, and builds the registry from them.
func eurekaFlags(fs *pflag.FlagSet) daemon.NewRegistry {
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

// File is galleon-file's adapter.
func File() daemon.Spec {
	return daemon.Spec{
		Name:     "galleon-file",
		Registry: "file",
		Summary:  "serves the services described by YAML files in a directory to istiod",
		Flags:    fileFlags,
	}
}

// fileFlags declares the adapter's flags (file.Config.AddFlags), keeps their
// names before issue 28 working with a warning, and builds the registry
// from them.
func fileFlags(fs *pflag.FlagSet) daemon.NewRegistry {
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

// Nacos is galleon-nacos's adapter.
func Nacos() daemon.Spec {
	return daemon.Spec{
		Name:     "galleon-nacos",
		Registry: "nacos",
		Summary:  "serves the services registered in Nacos to istiod",
		Flags:    nacosFlags,
	}
}

// nacosFlags declares the adapter's flags (nacos.Config.AddFlags) and builds the registry from them.
func nacosFlags(fs *pflag.FlagSet) daemon.NewRegistry {
	var cfg nacos.Config
	cfg.AddFlags(fs)
	return func(env daemon.Env) (registry.Registry, error) {
		cfg.Logger = env.Logger
		cfg.Registerer = env.Registerer
		return nacos.New(cfg)
	}
}

// ZooKeeper is galleon-zookeeper's adapter.
func ZooKeeper() daemon.Spec {
	return daemon.Spec{
		Name:     "galleon-zookeeper",
		Registry: "zookeeper",
		Summary:  "serves the services registered in ZooKeeper (Curator / Spring Cloud Zookeeper, Dubbo 2 and Dubbo 3 layouts, one or several side by side) to istiod",
		Flags:    zookeeperFlags,
	}
}

func zookeeperFlags(fs *pflag.FlagSet) daemon.NewRegistry {
	var cfg zookeeper.Config
	cfg.AddFlags(fs)
	return func(env daemon.Env) (registry.Registry, error) {
		cfg.Logger = env.Logger
		cfg.Registerer = env.Registerer
		return zookeeper.New(cfg)
	}
}
