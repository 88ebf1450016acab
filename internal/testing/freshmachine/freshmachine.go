// Package freshmachine rehearses a new user's first run (`devtool fresh-machine`, make
// fresh-machine): it clones the current commit into a temporary directory and runs the README's
// two commands there, `make demo` then `make test`, with an empty Go module cache, an empty Go
// build cache, an empty Galleon tool cache (istiod, Consul, protoc plugins) and an empty user
// cache directory (staticcheck keeps its analysis there), then prints the wall time of each stage.
//
// What it cannot empty: Debian packages already installed on this machine (protoc, and later
// ZooKeeper) and the Go toolchain itself. Everything else starts from nothing. Output of each
// stage goes to <tmp>/logs/<stage>.log; the last lines of a failing stage are printed.
package freshmachine

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// DefaultStages are the make targets rehearsed unless FRESH_STAGES names others.
var DefaultStages = []string{"demo", "test"}

// overrides are the environment variables that point Galleon at binaries or files a developer
// already has; a new user has none of them.
func overrides() []string {
	return []string{
		"GALLEON_PILOT_DISCOVERY", "GALLEON_CONSUL_BIN", "GALLEON_ISTIOD_RELEASES", "GALLEON_E2E_BIN_DIR",
		"GALLEON_KUBE_APISERVER_BIN", "GALLEON_KUBECTL_BIN", "GALLEON_ETCD_BIN", "GALLEON_HELM_BIN",
		"GALLEON_POLARIS_BIN", "GALLEON_STATICCHECK", "GALLEON_ZOOKEEPER_CLASSPATH", "GALLEON_ZOOKEEPER_JAVA_DIR",
	}
}

// Env is a new user's environment built from base (os.Environ()): the caches under tmp, all
// empty, and none of Galleon's overrides.
func Env(base []string, tmp string) []string {
	set := []string{
		"GOMODCACHE=" + filepath.Join(tmp, "gomodcache"),
		"GOCACHE=" + filepath.Join(tmp, "gocache"),
		"GALLEON_CACHE=" + filepath.Join(tmp, "galleon-cache"),
		// staticcheck keeps its analysis cache under the user cache directory, not Go's build cache.
		"XDG_CACHE_HOME=" + filepath.Join(tmp, "user-cache"),
		"STATICCHECK_CACHE=" + filepath.Join(tmp, "user-cache", "staticcheck"),
		"GOWORK=off",
	}
	drop := map[string]bool{}
	for _, name := range overrides() {
		drop[name] = true
	}
	for _, kv := range set {
		name, _, _ := strings.Cut(kv, "=")
		drop[name] = true
	}
	var env []string
	for _, kv := range base {
		if name, _, _ := strings.Cut(kv, "="); !drop[name] {
			env = append(env, kv)
		}
	}
	return append(env, set...)
}

// cacheDirs are the directories Env points the caches at, created empty before the first stage.
func cacheDirs(tmp string) []string {
	var dirs []string
	for _, d := range []string{"logs", "gomodcache", "gocache", "galleon-cache", filepath.Join("user-cache", "staticcheck")} {
		dirs = append(dirs, filepath.Join(tmp, d))
	}
	return dirs
}

// StageResult is how one stage ended: Result is "ok" or "FAILED (exit N)".
type StageResult struct {
	Stage  string
	Result string
	Took   time.Duration
}

// OK tells whether the stage passed.
func (s StageResult) OK() bool { return s.Result == "ok" }

// minSec is d as whole minutes and the seconds left, as the summary prints it.
func minSec(d time.Duration) (int, int) {
	s := int(d.Seconds())
	return s / 60, s % 60
}

// WriteSummary prints the rehearsal's table: each stage run, then the total.
func WriteSummary(w io.Writer, commit string, cores int, day time.Time, stages []StageResult, total time.Duration) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "fresh-machine rehearsal of %s (%d cores, %s):\n", commit, cores, day.UTC().Format("2006-01-02"))
	for _, s := range stages {
		m, sec := minSec(s.Took)
		fmt.Fprintf(w, "  make %-5s %-12s %3d min %2d s\n", s.Stage, s.Result, m, sec)
	}
	m, sec := minSec(total)
	fmt.Fprintf(w, "  total                   %3d min %2d s\n", m, sec)
}

// testSummary is a line of go test's own summary in a make test log, as CI shows them.
var testSummary = regexp.MustCompile(`^(ok|FAIL|---|PASS)[[:space:]]`)

// TestSummary is go test's summary lines of a make test log (ok / FAIL per package, failed
// tests), passed tests left out.
func TestSummary(log io.Reader) ([]string, error) {
	var lines []string
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if l := sc.Text(); testSummary.MatchString(l) && !strings.Contains(l, "--- PASS") {
			lines = append(lines, l)
		}
	}
	return lines, sc.Err()
}

// lastLines is the last n lines of data.
func lastLines(data []byte, n int) []byte {
	data = bytes.TrimSuffix(data, []byte("\n"))
	for i := len(data) - 1; i >= 0; i-- {
		if data[i] == '\n' {
			if n--; n == 0 {
				return append(data[i+1:], '\n')
			}
		}
	}
	if len(data) == 0 {
		return nil
	}
	return append(data, '\n')
}

// exitResult is the stage result of make's error.
func exitResult(err error) string {
	if err == nil {
		return "ok"
	}
	if ee, ok := err.(*exec.ExitError); ok && ee.Exited() {
		return fmt.Sprintf("FAILED (exit %d)", ee.ExitCode())
	}
	return "FAILED (" + err.Error() + ")"
}

// cores is what nproc prints: the CPUs this process may run on.
func cores() int { return runtime.NumCPU() }

// killGroup stops a stage's make and everything it started (go test, servers), which share its
// process group.
func killGroup(cmd *exec.Cmd) error {
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
}
