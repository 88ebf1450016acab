package toolcache

// Third-party tools are built from the Go module proxy with the smallest requests that work, and
// a failure becomes one line that says what was refused, what was tried and what to do.
//
// Why: the module proxy's answers change from day to day. A version whose `.info` it served
// yesterday may be refused today while its `.mod` and `.zip` are still served (and the other way
// round). `go build` in a module whose go.mod pins exact versions and whose go.sum is committed
// asks only for `.mod` and `.zip`; `go list -m`, `go mod download`, `go install pkg@version`,
// `@latest` and version lists ask for `.info` too. So every tool is built from a committed module
// (test/ for istiod, scripts/tools/<tool>/ for the rest) with -mod=readonly, and nothing here but
// GoDownload asks for `.info`. No registry host is named here: whatever `go env GOPROXY` says is
// used.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ToolLDFlags go in front of the -ldflags of the servers the tests run (Consul, polaris-server,
// istiod, the Kubernetes tools): no symbol table and no DWARF, which took a link of
// kube-apiserver from 10.8 to 8.2 s on two cores. Stack traces still name every function. These
// builds do not use -trimpath either: it changes every package's build cache key, so a -trimpath
// build compiles the standard library again (44 s on two cores for Consul's part of it) and shares
// nothing with the repository's own builds.
const ToolLDFlags = "-s -w"

// The environment variables of the stall watchdog (see RunGo) and their defaults.
const (
	EnvFetchStallSeconds     = "GALLEON_FETCH_STALL_SECONDS"
	EnvFetchAttempts         = "GALLEON_FETCH_ATTEMPTS"
	defaultFetchStallSeconds = 120
	defaultFetchAttempts     = 3
)

// ErrStalled is what RunGo's error wraps when go made no progress on any of its attempts.
var ErrStalled = errors.New("go made no progress (a request to the module proxy that is never answered)")

// fetchSettings are the watchdog's limits, read from the environment when a go command starts.
type fetchSettings struct {
	stall    time.Duration
	attempts int
}

func fetchSettingsFromEnv() fetchSettings {
	return fetchSettings{
		stall:    time.Duration(envInt(EnvFetchStallSeconds, defaultFetchStallSeconds)) * time.Second,
		attempts: envInt(EnvFetchAttempts, defaultFetchAttempts),
	}
}

// envInt is $name as a positive integer, or def when it is unset or not one.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name))); err == nil && n > 0 {
		return n
	}
	return def
}

// RunGo runs `go args...` in dir with env added to os.Environ() (and GOWORK=off: a go.work above
// the repository must not change which versions get built), its output appended to the file log.
//
// The proxy sometimes accepts a request and never answers it (seen 2026-11-23: a .mod fetch over
// HTTP/2 hung for 9 minutes), and go has no timeout for that: one stalled request hangs the whole
// build. So go runs under a watchdog: if its process tree uses no CPU and nothing new lands in the
// module cache for $GALLEON_FETCH_STALL_SECONDS (120), it is stopped and run again (what it had
// downloaded stays in the cache), up to $GALLEON_FETCH_ATTEMPTS (3) times; then the error wraps
// ErrStalled. Each retry is announced on stderr.
func RunGo(ctx context.Context, log, dir string, env []string, args ...string) error {
	return runGoRetried(ctx, os.Stderr, fetchSettingsFromEnv(), log, dir, env, args)
}

func runGoRetried(ctx context.Context, progress io.Writer, fs fetchSettings, log, dir string, env, args []string) error {
	if len(args) == 0 {
		return errors.New("RunGo needs a go command (build, list, ...)")
	}
	env = append(append(os.Environ(), env...), "GOWORK=off")
	for attempt := 1; ; attempt++ {
		err := runGoWatched(ctx, fs.stall, log, dir, env, args)
		if !errors.Is(err, ErrStalled) || attempt >= fs.attempts {
			return err
		}
		fmt.Fprintf(progress, "go %s stalled on the module proxy for %d s; trying again (%d of %d)\n",
			args[0], int(fs.stall.Seconds()), attempt+1, fs.attempts)
	}
}

// GoBuild runs `go build -o out args... pkg` in the module dir under RunGo's watchdog, output
// appended to log. GOFLAGS from the environment are kept (e.g. -buildvcs=false) but -mod is forced
// to readonly: a build must never edit the committed go.mod/go.sum or resolve a version it does
// not pin. Callers put ToolLDFlags in front of their -ldflags.
func GoBuild(ctx context.Context, log, dir, out, pkg string, args ...string) error {
	goArgs := append(append([]string{"build", "-o", out}, args...), pkg)
	return RunGo(ctx, log, dir, []string{readonlyGOFLAGS()}, goArgs...)
}

// readonlyGOFLAGS is GOFLAGS=<the environment's GOFLAGS> -mod=readonly.
func readonlyGOFLAGS() string {
	return "GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=readonly")
}

// GoDownload asks the proxy for one spelling of a module version (query is module@tag,
// module@branch or a pseudo-version) from inside the module dir, so that what it resolves to lands
// in the module cache; output appended to log. Used only as a fallback spelling after a plain
// build was refused: it does ask for `.info`. It runs under the watchdog too.
func GoDownload(ctx context.Context, log, dir, query string) error {
	flags := "GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod")
	return RunGo(ctx, log, dir, []string{flags}, "mod", "download", query)
}

// GoModRequire returns the version dir/go.mod requires of module, read from the file itself with
// `go mod edit -json` (no network: `go list -m` would ask the proxy for `.info`); "" if it requires
// none.
func GoModRequire(dir, module string) (string, error) {
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("cannot read %s/go.mod: go mod edit -json: %v%s", dir, err, quotedExitErr(err))
	}
	var mod struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("cannot read %s/go.mod: go mod edit -json printed %v", dir, err)
	}
	for _, r := range mod.Require {
		if r.Path == module {
			return r.Version, nil
		}
	}
	return "", nil
}

func quotedExitErr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return quoted(string(ee.Stderr))
	}
	return ""
}

// EnvBinary is the check of a GALLEON_*_BIN override: path is $envVar and set is true if it is
// set; err says what to fix if it is set to anything but an executable file (tool names what it
// should point at, e.g. "consul").
func EnvBinary(envVar, tool string) (path string, set bool, err error) {
	val := os.Getenv(envVar)
	if val == "" {
		return "", false, nil
	}
	fix := "; point it at a " + tool + " binary, or unset it to build one from the Go module proxy"
	st, err := os.Stat(val)
	switch {
	case err != nil:
		return val, true, fmt.Errorf("%s=%s does not exist%s", envVar, val, fix)
	case st.IsDir() || st.Mode()&0o111 == 0:
		return val, true, fmt.Errorf("%s=%s is not an executable file%s", envVar, val, fix)
	}
	return val, true, nil
}

// goProxy is GOPROXY as go sees it, for messages only.
func goProxy() string {
	if out, err := exec.Command("go", "env", "GOPROXY").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	if p := os.Getenv("GOPROXY"); p != "" {
		return p
	}
	return "unknown"
}

// The patterns of go's output Failure classifies by (POSIX: leftmost-longest, as grep -E).
var (
	refusedModuleRE = regexp.MustCompilePOSIX(`[A-Za-z0-9./_~-]+@v[^:[:space:]]+: (reading|verifying|unrecognized import path)[^[:cntrl:]]*(403|404|410|Forbidden|Not Found|Gone)`)
	refusedStatusRE = regexp.MustCompilePOSIX(`(403|404|410)[^[:cntrl:]]*`)
	stalledRE       = regexp.MustCompilePOSIX(`^gofetch: .* made no progress`)
	unreachableRE   = regexp.MustCompilePOSIX(`dial tcp|connection refused|no such host|i/o timeout|TLS handshake timeout|network is unreachable|connection reset`)
	unreachableWhy  = regexp.MustCompilePOSIX(`(dial tcp[^:]*:[^:]*: |)(connection refused|no such host|i/o timeout|TLS handshake timeout|network is unreachable|connection reset[^[:cntrl:]]*)`)
	checksumRE      = regexp.MustCompilePOSIX(`[^[:space:]]+@v[^:]+: checksum mismatch`)
	missingSumRE    = regexp.MustCompilePOSIX(`missing go.sum entry[^;]*`)
	uninteresting   = regexp.MustCompilePOSIX(`^go: downloading|^#|^[[:space:]]*$`)
)

// RefusedModule returns the module@version the proxy refused or could not find (403, 404, 410)
// according to go's output in the file log; "" if the failure was something else.
func RefusedModule(log string) string {
	return refusedModule(readLog(log))
}

func refusedModule(lines []string) string {
	if m := firstMatch(lines, refusedModuleRE); m != "" {
		mod, _, _ := strings.Cut(m, ": ")
		return mod
	}
	return ""
}

// Failure is the one-line error of a failed go command: "TOOL: what failed (classified from go's
// output in the file log); tried: TRIED; do: FIX (go's output: LOG)". With tool "" the line starts
// at what failed (for a caller that prefixes its own name).
func Failure(tool, log, tried, fix string) error {
	what := classify(readLog(log), goProxy(), fetchSettingsFromEnv())
	line := fmt.Sprintf("%s; tried: %s; do: %s (go's output: %s)", what, tried, fix, log)
	if tool != "" {
		line = tool + ": " + line
	}
	return errors.New(line)
}

// classify says in a few words what went wrong, from go's output lines.
func classify(lines []string, proxy string, fs fetchSettings) string {
	mod := refusedModule(lines)
	off := anyContains(lines, "GOPROXY=off")
	switch {
	case firstMatch(lines, stalledRE) != "" && !off && mod == "":
		return fmt.Sprintf("the Go module proxy (%s) stalled: a request went unanswered for %d s, %d times",
			proxy, int(fs.stall.Seconds()), fs.attempts)
	case off:
		return "module downloads are disabled (GOPROXY=off) and the module cache lacks what the build needs"
	case mod != "":
		status := "refused"
		for _, l := range lines {
			if strings.Contains(l, mod) {
				if s := refusedStatusRE.FindString(l); s != "" {
					status = s
					break
				}
			}
		}
		return fmt.Sprintf("the Go module proxy (%s) refused %s (%s)", proxy, mod, status)
	case firstMatch(lines, unreachableRE) != "":
		return fmt.Sprintf("the Go module proxy (%s) could not be reached (%s)", proxy, firstMatch(lines, unreachableWhy))
	case anyContains(lines, "checksum mismatch"):
		return fmt.Sprintf("a downloaded module does not match the committed go.sum (%s)", firstMatch(lines, checksumRE))
	case anyContains(lines, "missing go.sum entry"):
		return fmt.Sprintf("the committed go.sum lacks an entry (%s)", firstMatch(lines, missingSumRE))
	}
	first := ""
	for _, l := range lines {
		if !uninteresting.MatchString(l) {
			first = l
			break
		}
	}
	if r := []rune(first); len(r) > 200 {
		first = string(r[:200])
	}
	return fmt.Sprintf("go build failed (%s)", first)
}

// readLog is the lines of the file log; none if it cannot be read.
func readLog(log string) []string {
	b, err := os.ReadFile(log)
	if err != nil {
		return nil
	}
	return strings.Split(string(b), "\n")
}

// firstMatch is re's first match in lines, line by line as grep -o; "" if none.
func firstMatch(lines []string, re *regexp.Regexp) string {
	for _, l := range lines {
		if m := re.FindString(l); m != "" {
			return m
		}
	}
	return ""
}

func anyContains(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
