// Command galleon-eureka serves the applications registered in Netflix Eureka 1.x (or a server
// with its API) to istiod as ServiceEntries: one per application, its UP instances as endpoints,
// kept current with /apps/delta and apps__hashcode reconciliation.
package main

import (
	"os"

	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
)

func main() {
	os.Exit(daemon.Main(builtin.Eureka()))
}
