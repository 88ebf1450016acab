// Command galleon-fleet runs several registries of any kind (Consul, Eureka, file, Nacos,
// ZooKeeper) side by side from one registry list, and serves them to istiod as one config
// source in which no host is served twice. See docs/running-several-registries.md.
package main

import (
	"os"

	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
)

func main() {
	os.Exit(daemon.FleetMain(daemon.FleetSpec{
		Name:    "galleon-fleet",
		Summary: "serves the services of several registries, merged by host, to istiod",
		Kinds:   builtin.All(),
	}))
}
