package file

import (
	"github.com/spf13/pflag"
)

// The adapter's flag names (without "--"). Every message that asks an
// operator to change a setting names it by one of these.
const (
	flagDir            = "file-dir"
	flagNamespace      = "namespace"
	flagRelistInterval = "file-relist-interval"
	flagRemovalDelay   = "file-removal-delay"
	flagScanQuiet      = "file-scan-quiet"
	flagStateDir       = "file-state-dir"
	flagMaxSize        = "file-max-size"
)

// RenamedFlags maps each flag's name before issue 28 to its name now. The
// command (cmd/galleon-file) keeps the old names working, with a warning,
// through daemon.DeprecatedFlag.
func RenamedFlags() map[string]string {
	return map[string]string{
		"dir":           flagDir,
		"resync":        flagRelistInterval,
		"removal-delay": flagRemovalDelay,
		"scan-quiet":    flagScanQuiet,
		"state-dir":     flagStateDir,
		"max-file-size": flagMaxSize,
	}
}

// AddFlags declares the adapter's flags on fs, each setting a field of c.
// It leaves the names before issue 28 (RenamedFlags) to the command: this
// package does not import the daemon, so that a program that only reads a
// registry directory (bench/cmd/galleon-peer, a partner's tool) does not link Galleon's
// server.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Dir, flagDir, "", "directory holding the registry's *.yaml files (required)")
	fs.StringVar(&c.Namespace, flagNamespace, DefaultNamespace, "namespace of services whose file gives none")
	fs.DurationVar(&c.Resync, flagRelistInterval, 0, "interval of the full re-scan that backs up the file watch (0: 30s)")
	fs.DurationVar(&c.RemovalDelay, flagRemovalDelay, DefaultRemovalDelay, "a scan that removes a service or an instance is served once the directory was unchanged this long (files written in place read short meanwhile); additions and changes are served at once")
	fs.DurationVar(&c.ScanQuiet, flagScanQuiet, DefaultScanQuiet, "a file-system event is followed by a scan once the directory was quiet this long, so that one save costs one scan (at most 250ms); lower it where files change in one step, like a ConfigMap volume")
	fs.StringVar(&c.StateDir, flagStateDir, "", "directory that keeps each file's last good content, so that a file malformed at restart still serves what it did (empty: kept in memory only)")
	fs.Int64Var(&c.MaxFileSize, flagMaxSize, DefaultMaxFileSize, "largest registry file read, in bytes; a larger one is rejected and its last good content stays served")
}
