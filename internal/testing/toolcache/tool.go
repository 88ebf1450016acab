package toolcache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tool is a third-party server binary that a script in scripts/ builds into the cache (consul,
// polaris-server): where it is, how to override it, and what builds it. The harnesses of the
// adapters' real-server tests find their servers through it.
type Tool struct {
	Name    string // the binary's name in the cache, e.g. "consul"
	Version string // the version the script builds
	EnvVar  string // the environment variable that names another binary, e.g. "GALLEON_CONSUL_BIN"
	Script  string // the script under scripts/ whose `build` builds it, e.g. "consul.sh"
	Make    string // the make target that runs the script, e.g. "consul"
	// Logf, if set, is told that a build starts and how long it took (a cold build takes
	// minutes: the Makefile's help for Make says how long).
	Logf func(format string, args ...any)
}

// CachePath is where the script puts the binary: Bin(Name, Version).
func (tl Tool) CachePath() string { return Bin(tl.Name, tl.Version) }

// Path returns the binary: $EnvVar if set, else CachePath. If the cached binary is missing it
// runs scripts/<Script> build (found with RepoRoot; two builds at once are safe: the script
// takes a lock per binary, and the second finds the first's result). Every error is one line
// that names the make target and the environment variable.
func (tl Tool) Path() (string, error) {
	if p := os.Getenv(tl.EnvVar); p != "" {
		if err := CheckExecutable(p); err != nil {
			return "", fmt.Errorf("$%s=%s: %v", tl.EnvVar, p, err)
		}
		return p, nil
	}
	p := tl.CachePath()
	if CheckExecutable(p) == nil {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("%s %s is not at %s and scripts/%s cannot be found to build it: %v (run `make %s` in the repository, or set $%s)",
			tl.Name, tl.Version, p, tl.Script, err, tl.Make, tl.EnvVar)
	}
	tl.logf("%s missing, running scripts/%s build (it takes minutes the first time)...", p, tl.Script)
	start := time.Now()
	built, err := RunScript(root, tl.Script, "build", os.Stderr) // build progress; the test log would only show it at the end
	if err != nil {
		return "", fmt.Errorf("%v (see its output above; run `make %s` to retry, or set $%s)", err, tl.Make, tl.EnvVar)
	}
	if err := CheckExecutable(built); err != nil {
		return "", fmt.Errorf("scripts/%s build printed %q: %v (run `make %s` to retry, or set $%s)", tl.Script, built, err, tl.Make, tl.EnvVar)
	}
	tl.logf("built %s in %v", built, time.Since(start).Round(time.Second))
	return built, nil
}

// Binary is Path for a test: it fails the test (never skips) with Path's error, prefixed by
// prefix (the harness's name, e.g. "consultest"), and logs a build to the test log.
func (tl Tool) Binary(t testing.TB, prefix string) string {
	t.Helper()
	if tl.Logf == nil {
		tl.Logf = func(format string, args ...any) { t.Logf(prefix+": "+format, args...) }
	}
	p, err := tl.Path()
	if err != nil {
		t.Fatalf("%s: %v", prefix, err)
	}
	return p
}

func (tl Tool) logf(format string, args ...any) {
	if tl.Logf != nil {
		tl.Logf(format, args...)
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

// RunScript runs root/scripts/<script> arg in root and returns the last line it printed on
// stdout (the scripts print their answer last), trimmed. The script's stderr goes to progress if
// that is not nil; otherwise it is kept and quoted in the error.
func RunScript(root, script, arg string, progress io.Writer) (string, error) {
	path := filepath.Join(root, "scripts", script)
	cmd := exec.Command(path, arg)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if progress != nil {
		cmd.Stderr = progress
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/%s %s failed (%v)%s", script, arg, err, quoted(stderr.String()))
	}
	out := strings.TrimSpace(stdout.String())
	if out == "" {
		return "", errors.New("scripts/" + script + " " + arg + " printed nothing" + quoted(stderr.String()))
	}
	return strings.TrimSpace(out[strings.LastIndexByte(out, '\n')+1:]), nil
}

func quoted(stderr string) string {
	if s := strings.TrimSpace(stderr); s != "" {
		return ": " + strings.ReplaceAll(s, "\n", " | ") // one line
	}
	return ""
}
