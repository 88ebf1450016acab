package file

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

const (
	// DefaultNamespace is used for services that name none, unless
	// Config.Namespace says otherwise.
	DefaultNamespace = "default"
	// DefaultResync is the periodic re-scan interval unless
	// Config.Resync says otherwise.
	DefaultResync = 30 * time.Second
	// DefaultRemovalDelay is Config.RemovalDelay's default: longer than a
	// non-atomic write takes (shell '>', Ansible copy without atomic
	// rename, editors saving in place), short next to how long a removed
	// instance lingers in istiod anyway.
	DefaultRemovalDelay = 2 * time.Second
	// DefaultMaxFileSize bounds one registry file unless Config.MaxFileSize
	// says otherwise: several times the whole of the load tool's
	// 10,001-service registry (its size: docs/benchmarks.md, "galleon-file
	// start"), far from what a link to /dev/zero would cost.
	DefaultMaxFileSize = 64 << 20

	// DefaultScanQuiet is Config.ScanQuiet's default: one editor save is a burst of events
	// (create, write, chmod, rename) a few milliseconds long, and should cost one scan.
	DefaultScanQuiet = 20 * time.Millisecond
	// MaxScanQuiet bounds Config.ScanQuiet: it is also the longest a stream of events may hold
	// a scan back, so that changes are still picked up while something keeps writing.
	MaxScanQuiet = 250 * time.Millisecond
)

// Config configures a file registry.
type Config struct {
	// Dir is the directory holding the registry's *.yaml / *.yml files.
	Dir string
	// Namespace is the namespace of services that give none; default
	// "default".
	Namespace string
	// Resync is the interval of the periodic re-scan that backs up the
	// file-system watch; default 30s.
	Resync time.Duration
	// MaxFileSize bounds the size of one registry file; a larger one is
	// rejected like a malformed one (its last good content stays served).
	// Default DefaultMaxFileSize.
	MaxFileSize int64
	// RemovalDelay is how long the directory must stay unchanged before a
	// scan that removes a service or an instance is reported: a file being
	// written in place (truncated, then filled; renamed away, then back)
	// reads short for a moment, and that must not remove anything from the
	// mesh. Additions and changes are reported at once. Default
	// DefaultRemovalDelay.
	RemovalDelay time.Duration
	// ScanQuiet is how long the directory must stay quiet after a file-system event before it
	// is scanned: the events of one save then cost one scan. A scan that finds a file half
	// written is safe (a removal waits for RemovalDelay, a malformed file keeps its last good
	// content) but noisy, so lower it only where files change in one step, like a Kubernetes
	// ConfigMap volume (its ..data link is swapped). Default DefaultScanQuiet, at most
	// MaxScanQuiet.
	ScanQuiet time.Duration
	// StateDir, if set, keeps each file's last good content on disk, so
	// that a file that is malformed when the adapter restarts still
	// contributes what it did before (otherwise that lives in memory
	// only). It must be a directory of its own; its files are managed here.
	StateDir string
	// Logger receives the adapter's logs; default slog.Default(). The
	// adapter logs at Warn only what the Sink does not hear about (trouble
	// with the file-system watch); the rejections and outages it reports
	// to the Sink are the Sink owner's to log, so they are at Debug here.
	Logger *slog.Logger
}

// resolve checks cfg and returns it with the directories made absolute
// (StateDir created) and every zero field set to its default.
func (cfg Config) resolve() (Config, error) {
	dir, err := resolveDir(cfg.Dir)
	if err != nil {
		return Config{}, err
	}
	cfg.Dir = dir
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if err := validLabel(cfg.Namespace); err != nil {
		return Config{}, fmt.Errorf("file registry: Namespace %q %v (--%s)", cfg.Namespace, err, flagNamespace)
	}
	if err := cfg.resolveDurations(); err != nil {
		return Config{}, err
	}
	if cfg.StateDir != "" {
		if cfg.StateDir, err = resolveStateDir(cfg.StateDir, dir); err != nil {
			return Config{}, err
		}
	}
	if cfg.MaxFileSize < 0 {
		return Config{}, fmt.Errorf("file registry: MaxFileSize %d is negative: use 0 for the default (%d bytes) (--%s)", cfg.MaxFileSize, DefaultMaxFileSize, flagMaxSize)
	}
	if cfg.MaxFileSize == 0 {
		cfg.MaxFileSize = DefaultMaxFileSize
	}
	return cfg, nil
}

// resolveDir returns the registry directory's absolute path, if it is a
// directory.
func resolveDir(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("file registry: Dir is empty: set it (--%s) to the directory that holds the registry's *.yaml files", flagDir)
	}
	dir, err := filepath.Abs(name)
	if err != nil {
		return "", fmt.Errorf("file registry: Dir %q (--%s): %w", name, flagDir, err)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("file registry: directory %s does not exist: create it or point Dir (--%s) at an existing directory", dir, flagDir)
	case err != nil:
		return "", fmt.Errorf("file registry: cannot read directory %s: %w", dir, err)
	case !fi.IsDir():
		return "", fmt.Errorf("file registry: %s is a file, not a directory: set Dir (--%s) to the directory that holds the *.yaml files", dir, flagDir)
	}
	return dir, nil
}

// resolveDurations checks Resync, RemovalDelay and ScanQuiet and sets the
// zero ones to their defaults.
func (cfg *Config) resolveDurations() error {
	if cfg.Resync < 0 {
		return fmt.Errorf("file registry: Resync %v is negative: use 0 for the default (%v) (--%s)", cfg.Resync, DefaultResync, flagRelistInterval)
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.RemovalDelay < 0 {
		return fmt.Errorf("file registry: RemovalDelay %v is negative: use 0 for the default (%v) (--%s)", cfg.RemovalDelay, DefaultRemovalDelay, flagRemovalDelay)
	}
	if cfg.RemovalDelay == 0 {
		cfg.RemovalDelay = DefaultRemovalDelay
	}
	if cfg.ScanQuiet < 0 || cfg.ScanQuiet > MaxScanQuiet {
		return fmt.Errorf("file registry: ScanQuiet %v is not in 0 to %v: use 0 for the default (%v) (--%s)", cfg.ScanQuiet, MaxScanQuiet, DefaultScanQuiet, flagScanQuiet)
	}
	if cfg.ScanQuiet == 0 {
		cfg.ScanQuiet = DefaultScanQuiet
	}
	return nil
}

// resolveStateDir returns the state directory's absolute path, created if
// missing; it must not be the registry directory dir.
func resolveStateDir(name, dir string) (string, error) {
	stateDir, err := filepath.Abs(name)
	if err != nil {
		return "", fmt.Errorf("file registry: StateDir %q (--%s): %w", name, flagStateDir, err)
	}
	if stateDir == dir {
		return "", fmt.Errorf("file registry: StateDir %s is the registry directory: give the state (--%s) a directory of its own", stateDir, flagStateDir)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", fmt.Errorf("file registry: cannot create StateDir (--%s): %w", flagStateDir, err)
	}
	return stateDir, nil
}
