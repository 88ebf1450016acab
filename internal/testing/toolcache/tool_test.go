package toolcache

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestToolPathFromTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "server")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tl := Tool{Name: "server", Version: "1", EnvVar: "GALLEON_TOOLCACHE_TEST_BIN", Make: "server"}
	t.Setenv(tl.EnvVar, exe)
	if p, err := tl.Path(); err != nil || p != exe {
		t.Fatalf("Path() = %q, %v; want %q", p, err, exe)
	}
	notExec := filepath.Join(dir, "data")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(tl.EnvVar, notExec)
	_, err := tl.Path()
	if err == nil || !strings.Contains(err.Error(), "not an executable file") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Path() with a non-executable $%s: %v", tl.EnvVar, err)
	}
}

func TestToolPathMissingNamesTheMakeTarget(t *testing.T) {
	t.Setenv("GALLEON_CACHE", t.TempDir())
	tl := Tool{Name: "server", Version: "1", EnvVar: "GALLEON_TOOLCACHE_TEST_BIN", Make: "server"}
	t.Setenv(tl.EnvVar, "")
	_, err := tl.Path()
	if err == nil {
		t.Fatal("Path() found a binary that is not there")
	}
	for _, want := range []string{"make server", "$GALLEON_TOOLCACHE_TEST_BIN", tl.CachePath()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
}

// skipRecorder is a testing.TB that records Skipf instead of skipping, so that a test can look at
// what RequireRealServers does in both states of the switch.
type skipRecorder struct {
	testing.TB
	skipped string
}

func (r *skipRecorder) Helper() {}

func (r *skipRecorder) Skipf(format string, args ...any) { r.skipped = fmt.Sprintf(format, args...) }

func TestRequireRealServers(t *testing.T) {
	for _, v := range []string{"", "0", "true"} {
		t.Setenv(EnvRealServers, v)
		r := &skipRecorder{TB: t}
		RequireRealServers(r, "consul 1.22.6")
		if want := "this test runs a real server (consul 1.22.6); set GALLEON_REAL_SERVERS=1 (make test sets it) to run it"; r.skipped != want {
			t.Errorf("%s=%q: skip %q, want %q", EnvRealServers, v, r.skipped, want)
		}
	}
	t.Setenv(EnvRealServers, "1")
	r := &skipRecorder{TB: t}
	RequireRealServers(r, "ZooKeeper")
	if r.skipped != "" {
		t.Errorf("skipped with the switch on: %q", r.skipped)
	}
}

// Without the switch, Binary skips before it looks for, or builds, anything.
func TestToolBinarySkipsWithoutTheSwitch(t *testing.T) {
	t.Setenv(EnvRealServers, "")
	built := false
	tl := Tool{Name: "server", Version: "1", EnvVar: "GALLEON_TOOLCACHE_TEST_BIN", Make: "server",
		Build: func(context.Context, io.Writer) (string, error) { built = true; return "/bin/true", nil }}
	skipped, returned := false, false
	t.Run("harness", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		tl.Binary(t, "servertest")
		returned = true
	})
	if !skipped || returned || built {
		t.Errorf("Binary without the switch: skipped %v, returned %v, built %v; want a skip only", skipped, returned, built)
	}
	t.Setenv(EnvRealServers, "1")
	if p := tl.Binary(t, "servertest"); p != "/bin/true" || !built {
		t.Errorf("Binary with the switch = %q (built %v), want Build's answer", p, built)
	}
}
