package toolcache

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// Tool is a third-party server binary built into the cache (consul, polaris-server): where it
// is, how to override it, and what builds it. The harnesses of the adapters' real-server tests
// find their servers through it; Recipe.Tool makes one.
type Tool struct {
	Name    string // the binary's name in the cache, e.g. "consul"
	Version string // the version in the cache name, e.g. "1.22.6"
	EnvVar  string // the environment variable that names another binary, e.g. "GALLEON_CONSUL_BIN"
	Make    string // the make target that builds it, e.g. "consul"
	// Build, if set, returns the binary ($EnvVar, the cache, or a build into the cache,
	// in-process), telling progress what it builds; its error is one line that says what to do.
	Build func(ctx context.Context, progress io.Writer) (string, error)
}

// CachePath is where the binary is cached: Bin(Name, Version).
func (tl Tool) CachePath() string { return Bin(tl.Name, tl.Version) }

// Path returns the binary: Build's answer when Build is set; otherwise $EnvVar if set, else
// CachePath if it is there. Every error is one line that says what to do.
func (tl Tool) Path() (string, error) {
	if tl.Build != nil {
		// A cold build takes minutes: its progress goes to stderr as it happens, where the
		// test log would show it only at the end.
		return tl.Build(context.Background(), os.Stderr)
	}
	if p, set, err := EnvBinary(tl.EnvVar, tl.Name); set || err != nil {
		return p, err
	}
	p := tl.CachePath()
	if err := CheckExecutable(p); err != nil {
		return "", fmt.Errorf("%s %s is not at %s: run `make %s`, or set $%s", tl.Name, tl.Version, p, tl.Make, tl.EnvVar)
	}
	return p, nil
}

// Binary is Path for a test. Without GALLEON_REAL_SERVERS=1 it skips the test (see
// RequireRealServers); with it, it fails the test (never skips) with Path's error, prefixed by
// prefix (the harness's name, e.g. "consultest").
func (tl Tool) Binary(t testing.TB, prefix string) string {
	t.Helper()
	RequireRealServers(t, tl.Name+" "+tl.Version)
	p, err := tl.Path()
	if err != nil {
		t.Fatalf("%s: %v", prefix, err)
	}
	return p
}

// EnvRealServers is the switch of the real-server test tier: the tests that run Consul,
// polaris-server or ZooKeeper run only when it is "1" (make test sets it), so that a plain
// `go test ./...` needs no server, builds nothing and installs nothing.
const EnvRealServers = "GALLEON_REAL_SERVERS"

// RequireRealServers skips the test unless $GALLEON_REAL_SERVERS is "1". what names the server
// the test would run (e.g. "consul 1.22.6", "ZooKeeper"). Every entry point of a harness that
// starts, builds or installs a real server calls it (through Binary, or directly) before anything
// else.
func RequireRealServers(t testing.TB, what string) {
	t.Helper()
	if os.Getenv(EnvRealServers) != "1" {
		t.Skipf("this test runs a real server (%s); set %s=1 (make test sets it) to run it", what, EnvRealServers)
	}
}

// RequireFullTier skips the test unless $GALLEON_REAL_SERVERS is "1": for the few tests that need
// no server but move hundreds of megabytes (what says how much), which would take the quick tier,
// a plain `go test ./...`, past its two minutes on two cores. make test runs them, race detector
// on; `go test -short` skipped them before the tiers existed and still does.
func RequireFullTier(t testing.TB, what string) {
	t.Helper()
	if os.Getenv(EnvRealServers) != "1" {
		t.Skipf("this test %s: part of make test's full tier; set %s=1 to run it", what, EnvRealServers)
	}
}

// CheckExecutable returns nil if p is an executable file, else why not.
func CheckExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// quoted is a command's stderr on one line, after ": " (nothing if it said nothing).
func quoted(stderr string) string {
	if s := strings.TrimSpace(stderr); s != "" {
		return ": " + strings.ReplaceAll(s, "\n", " | ") // one line
	}
	return ""
}
