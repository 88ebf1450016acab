// Package toolcache locates third-party server binaries (istiod, consul, ...) that the scripts in
// scripts/ build and cache outside the repository: the one Go definition of the path, which
// scripts/cache-dir.sh defines for the shell (test/setup checks that the two agree).
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
// os.UserCacheDir, which differs from the shell scripts on macOS.
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

// modulePath is the main module, whose directory holds scripts/.
const modulePath = "github.com/galleon-mesh/galleon"

// RepoRoot walks up from the working directory to the directory whose go.mod declares the main
// module: where scripts/ is, to build a missing tool.
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
