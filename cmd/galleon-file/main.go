// Command galleon-file serves services kept as YAML files in a directory
// (see examples/file/README.md) to istiod over MCP.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

func main() {
	os.Exit(daemon.Main(daemon.Spec{
		Name:     "galleon-file",
		Registry: "file",
		Summary:  "serves the services described by YAML files in a directory to istiod",
		Flags: func(fs *pflag.FlagSet) daemon.NewRegistry {
			var cfg file.Config
			fs.StringVar(&cfg.Dir, "dir", "", "directory holding the registry's *.yaml files (required)")
			fs.StringVar(&cfg.Namespace, "namespace", "default", "namespace of services whose file gives none")
			fs.DurationVar(&cfg.Resync, "resync", 0, "interval of the full re-scan that backs up the file watch (0: 30s)")
			fs.DurationVar(&cfg.RemovalDelay, "removal-delay", file.DefaultRemovalDelay, "a scan that removes a service or an instance is served once the directory was unchanged this long (files written in place read short meanwhile); additions and changes are served at once")
			fs.DurationVar(&cfg.ScanQuiet, "scan-quiet", file.DefaultScanQuiet, "a file-system event is followed by a scan once the directory was quiet this long, so that one save costs one scan (at most 250ms); lower it where files change in one step, like a ConfigMap volume")
			fs.StringVar(&cfg.StateDir, "state-dir", "", "directory that keeps each file's last good content, so that a file malformed at restart still serves what it did (empty: kept in memory only)")
			fs.Int64Var(&cfg.MaxFileSize, "max-file-size", file.DefaultMaxFileSize, "largest registry file read, in bytes; a larger one is rejected and its last good content stays served")
			return func(env daemon.Env) (registry.Registry, error) {
				cfg.Logger = env.Logger
				return file.New(cfg)
			}
		},
	}))
}
