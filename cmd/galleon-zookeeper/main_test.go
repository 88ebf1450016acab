package main

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
)

// TestFlagsDoNotClash checks that no flag of the adapter is one the daemon defines.
func TestFlagsDoNotClash(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	builtin.ZooKeeper().Flags(fs)
	own := daemon.DaemonFlags()
	fs.VisitAll(func(f *pflag.Flag) {
		if slices.Contains(own, f.Name) {
			t.Errorf("--%s is a daemon flag", f.Name)
		}
	})
}
