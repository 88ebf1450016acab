// Command galleon-consul serves the services of HashiCorp Consul (one or
// more datacenters, through an agent) to istiod over MCP. See
// docs/adapters/consul.md.
package main

import (
	"os"

	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
)

func main() {
	os.Exit(daemon.Main(builtin.Consul()))
}
