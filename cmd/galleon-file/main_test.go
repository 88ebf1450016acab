package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/testing/daemontest"
)

// TestOldFlagNamesStillWork: each flag's name before issue 28 sets the
// same value as its current name, and warns that it is deprecated.
func TestOldFlagNamesStillWork(t *testing.T) {
	values := map[string]string{
		"dir": "/srv/registry", "state-dir": "/var/lib/galleon",
		"resync": "7m", "removal-delay": "3s", "scan-quiet": "5ms",
		"max-file-size": "1024",
	}
	daemontest.CheckRenamedFlags(t, builtin.File().Flags, file.RenamedFlags(), values)
}

// TestOldDirFlagReachesTheRegistry: --dir, the old name of --file-dir, is
// what the registry is built from (a missing directory stops the start,
// naming it).
func TestOldDirFlagReachesTheRegistry(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	spec := daemon.Spec{Name: "galleon-file", Registry: "file", Summary: "test", Flags: builtin.File().Flags}
	var stderr strings.Builder
	code := daemon.Run(context.Background(), spec, []string{"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--dir", missing}, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), missing+" does not exist") || !strings.Contains(stderr.String(), "use --file-dir") {
		t.Errorf("--dir %s: exit %d, stderr:\n%s\nwant exit 2 naming the directory and --file-dir", missing, code, stderr.String())
	}
}

// TestOldFlagNamesAreHiddenFromHelp: --help lists the current names only.
func TestOldFlagNamesAreHiddenFromHelp(t *testing.T) {
	spec := daemon.Spec{Name: "galleon-file", Registry: "file", Summary: "test", Flags: builtin.File().Flags}
	var stderr strings.Builder
	if code := daemon.Run(context.Background(), spec, []string{"--help"}, &stderr); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for old, current := range file.RenamedFlags() {
		if !strings.Contains(stderr.String(), "--"+current+" ") || strings.Contains(stderr.String(), "--"+old+" ") {
			t.Errorf("--help should list --%s and not --%s:\n%s", current, old, stderr.String())
		}
	}
}
