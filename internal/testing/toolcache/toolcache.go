// Package toolcache builds, caches and locates the third-party server binaries (istiod, consul,
// ...) the tests, the demo and the benchmarks run, outside the repository:
//
//	${GALLEON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/galleon}
//	    bin/<name>-<version>   one binary per version; never committed
//	    locks/                 flock files that serialise concurrent builds (BuildCached)
//	    logs/                  go's output of a build (LogPath), kept when it failed
//
// Builds ask the Go module proxy only for what committed go.sums pin, under a stall watchdog, and
// fail with one line that says what to do (gofetch.go). The devtool (internal/testing/devtool) is
// its command line; the harnesses call it as a function. Tool.Binary and RequireRealServers are
// the switch of the real-server test tier (GALLEON_REAL_SERVERS).
package toolcache

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Dir is ${GALLEON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/galleon}. It deliberately does not use
// os.UserCacheDir, which differs from $XDG_CACHE_HOME's convention on macOS.
func Dir() string {
	if d := os.Getenv("GALLEON_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "galleon")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "galleon")
}

// Bin is the cached path of binary name at version: <Dir>/bin/<name>-<version>.
func Bin(name, version string) string {
	return filepath.Join(Dir(), "bin", name+"-"+version)
}

// Find returns the binary named by the environment variable envVar if it is set, otherwise
// Bin(name, version). ok reports whether the file exists and is executable.
func Find(envVar, name, version string) (path string, ok bool) {
	path = os.Getenv(envVar)
	if path == "" {
		path = Bin(name, version)
	}
	st, err := os.Stat(path)
	return path, err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// modulePath is the main module, whose directory holds the tools' wrapper modules.
const modulePath = "github.com/galleon-mesh/galleon"

// RepoRoot walks up from the working directory to the directory whose go.mod declares the main
// module: where the wrapper modules (scripts/tools/*, test/) are, to build a missing tool.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(bytes.NewReader(b))
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) >= 2 && f[0] == "module" && strings.Trim(f[1], `"`) == modulePath {
					return dir, nil
				}
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}
