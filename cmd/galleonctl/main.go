// Command galleonctl shows what an MCP-over-xDS config source (Galleon,
// istiod, or any other) serves, the way istiod sees it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/galleon-mesh/galleon/cmd/galleonctl/internal/cli"
)

func main() {
	// Ctrl-C cancels ctx, which ends a watch cleanly (exit 0). Restoring
	// the default signal handling right then makes a second Ctrl-C kill
	// the process, should a stuck connection delay the clean exit.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
