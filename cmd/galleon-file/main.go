// Command galleon-file serves services kept as YAML files in a directory
// (see examples/file/README.md) to istiod over MCP.
package main

import (
	"os"

	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
)

func main() {
	os.Exit(daemon.Main(builtin.File()))
}
