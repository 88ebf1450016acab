package main

import (
	"log/slog"
	"slices"
	"strings"
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

// TestLayoutFlags: the command serves several layouts from one process, each with its root
// (issue 31), and refuses a combination it cannot read, naming the flag to fix.
func TestLayoutFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: nil},
		{args: []string{"--zk-layout", "curator,dubbo,dubbo3"}},
		{args: []string{"--zk-layout", "all", "--zk-root", "curator=/services,dubbo3=/services,dubbo=/reg"}},
		{args: []string{"--zk-layout", "dubbo3", "--zk-root", "/apps"}},
		{args: []string{"--zk-layout", "all", "--zk-root", "/services"}, wantErr: "--zk-root"},
		{args: []string{"--zk-layout", "curator,nacos"}, wantErr: "--zk-layout"},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		newRegistry := builtin.ZooKeeper().Flags(fs)
		if err := fs.Parse(append([]string{"--zk-servers", "127.0.0.1:2181"}, tc.args...)); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		_, err := newRegistry(daemon.Env{Logger: slog.New(slog.DiscardHandler)})
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: err = %v, want one naming %s", tc.args, err, tc.wantErr)
		}
	}
}
