// Command galleon-nacos serves the services registered in Alibaba Nacos (1.x, 2.x, 3.x, or a
// server with its API) to istiod as ServiceEntries: one per (namespace, group, service), kept
// current by the server's pushes (gRPC subscriptions; the UDP push and a poll on 1.x). See
// docs/adapters/nacos.md.
package main

import (
	"os"

	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
)

func main() {
	os.Exit(daemon.Main(builtin.Nacos()))
}
