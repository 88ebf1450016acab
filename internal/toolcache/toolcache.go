// Package toolcache locates third-party server binaries (istiod, consul, ...) that the scripts in
// scripts/ build and cache outside the repository: the one Go definition of the path, which
// scripts/cache-dir.sh defines for the shell (test/setup checks that the two agree).
package toolcache

import (
	"os"
	"path/filepath"
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
