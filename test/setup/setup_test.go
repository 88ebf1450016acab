// Package setup tests the developer tool's provisioning (internal/testing/devtool: `build`,
// `path`, `deps`, `cache-dir`, on internal/testing/toolcache) where it fails: every failure must
// be one line that says what went wrong, what was tried and what to do. The tests run the real
// tool, built once, with an empty module cache, build cache and tool cache against a module proxy
// that is off, unreachable, refusing or silent.
package setup

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// devtool is the developer tool's binary, built by TestMain before any test runs and only read
// after.
var devtool string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "galleon-setup.")
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup: a temporary directory:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	devtool = filepath.Join(dir, "devtool")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err == nil {
		cmd := exec.Command("go", "build", "-o", devtool, "./internal/testing/devtool")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOWORK=off")
		var out []byte
		if out, err = cmd.CombinedOutput(); err != nil {
			err = fmt.Errorf("%v: %s", err, out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup: cannot build the developer tool (go build ./internal/testing/devtool):", err)
		return 1
	}
	return m.Run()
}

// repo is the repository root (test/setup -> ../..).
func repo(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "testing", "devtool")); err != nil {
		t.Fatalf("not the repository root: %v", err)
	}
	return root
}

// cleanEnv is this process's environment without Galleon's overrides and go's caches and proxy,
// with empty module, build and tool caches under tmp instead, plus extra.
func cleanEnv(tmp string, extra ...string) []string {
	env := []string{
		"GOMODCACHE=" + filepath.Join(tmp, "mod"),
		"GOCACHE=" + filepath.Join(tmp, "build"),
		"GALLEON_CACHE=" + filepath.Join(tmp, "galleon"),
		"GOFLAGS=-modcacherw", // so t.TempDir can remove what a partial download left
		"GOTOOLCHAIN=local",
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "GALLEON_"), k == "GOMODCACHE", k == "GOCACHE", k == "GOFLAGS",
			k == "GOPROXY", k == "GOTOOLCHAIN", k == "XDG_CACHE_HOME":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// run runs the devtool with args in the repository with a clean environment (cleanEnv) plus
// extra. It returns stdout, stderr and the exit code.
func run(t *testing.T, args []string, extra ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(devtool, args...)
	cmd.Dir = repo(t)
	cmd.Env = cleanEnv(t.TempDir(), extra...)
	var outb, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		// An interrupt first: the devtool stops the go it runs, which a kill would leave behind.
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		t.Fatalf("devtool %v did not finish within 3 minutes; stderr:\n%s", args, errb.String())
	}
	return outb.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// errorLine returns the one line of stderr that starts with prefix, failing unless there is
// exactly one and nothing else multi-line (such as go's own output) was printed with it.
func errorLine(t *testing.T, stderr, prefix string) string {
	t.Helper()
	var found []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.HasPrefix(l, prefix) {
			found = append(found, l)
		} else if strings.HasPrefix(l, "go: ") || strings.HasPrefix(l, "\t") {
			t.Errorf("go's own output leaked to stderr: %q", l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want exactly one line starting %q on stderr, got %d:\n%s", prefix, len(found), stderr)
	}
	return found[0]
}

func wantAll(t *testing.T, line string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(line, p) {
			t.Errorf("error line does not say %q:\n%s", p, line)
		}
	}
}

func wantCode(t *testing.T, what string, code, want int) {
	t.Helper()
	if code != want {
		t.Errorf("%s: exit %d, want %d", what, code, want)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// refusingProxy answers 403 to every request, as the module proxy does for versions it will not
// serve, and counts what it was asked.
func refusingProxy(t *testing.T) (url string, infos, total *atomic.Int64) {
	t.Helper()
	infos, total = new(atomic.Int64), new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		total.Add(1)
		if strings.HasSuffix(r.URL.Path, ".info") || strings.HasSuffix(r.URL.Path, "/@v/list") || strings.HasSuffix(r.URL.Path, "/@latest") {
			infos.Add(1)
		}
		http.Error(w, "forbidden", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, infos, total
}

// silentProxy accepts every request and never answers it, as the module proxy once did for 9
// minutes; go has no timeout of its own for that.
func silentProxy(t *testing.T) string {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: lets Close return
	return srv.URL
}

// buildLine is the error line of `devtool build`.
const buildLine = "devtool build: "

func TestIstiodBadBinaryOverride(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "pilot-discovery")
	_, stderr, code := run(t, []string{"build", "pilot-discovery"}, "GALLEON_PILOT_DISCOVERY="+missing)
	wantCode(t, "missing", code, 1)
	wantAll(t, errorLine(t, stderr, buildLine), "GALLEON_PILOT_DISCOVERY="+missing, "does not exist", "point it at a pilot-discovery binary", "unset it")

	_, stderr, code = run(t, []string{"build", "pilot-discovery"}, "GALLEON_PILOT_DISCOVERY="+t.TempDir())
	wantCode(t, "directory", code, 1)
	wantAll(t, errorLine(t, stderr, buildLine), "is not an executable file")
}

func TestIstiodGoodBinaryOverrideSkipsTheBuild(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pilot-discovery")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// GOPROXY=off and empty caches: a build would fail, so success proves nothing was built or
	// fetched.
	for _, args := range [][]string{{"build", "pilot-discovery"}, {"path", "pilot-discovery"}} {
		stdout, stderr, code := run(t, args, "GALLEON_PILOT_DISCOVERY="+bin, "GOPROXY=off")
		if code != 0 {
			t.Fatalf("devtool %v with a good override: exit %d:\n%s", args, code, stderr)
		}
		if got := strings.TrimSpace(stdout); got != bin {
			t.Errorf("devtool %v printed %q, want the override %q", args, got, bin)
		}
	}
}

func TestIstiodProxyOff(t *testing.T) {
	_, stderr, code := run(t, []string{"build", "pilot-discovery"}, "GOPROXY=off")
	wantCode(t, "build", code, 1)
	wantAll(t, errorLine(t, stderr, buildLine), "GOPROXY=off", "tried: go build from the committed go.sum", "GALLEON_PILOT_DISCOVERY")
}

func TestIstiodProxyUnreachable(t *testing.T) {
	addr := closedAddr(t)
	_, stderr, code := run(t, []string{"build", "pilot-discovery"}, "GOPROXY=http://"+addr)
	wantCode(t, "build", code, 1)
	wantAll(t, errorLine(t, stderr, buildLine), "could not be reached", addr, "connection refused", "retry later", "GALLEON_PILOT_DISCOVERY")
}

func TestIstiodProxyRefuses(t *testing.T) {
	url, infos, total := refusingProxy(t)
	_, stderr, code := run(t, []string{"build", "pilot-discovery"}, "GOPROXY="+url)
	wantCode(t, "build", code, 1)
	line := errorLine(t, stderr, buildLine)
	wantAll(t, line, "refused", "@v", "403", url, "tried: go build from the committed go.sum", "GALLEON_PILOT_DISCOVERY")
	if total.Load() == 0 {
		t.Fatal("the proxy was never asked: the test proves nothing")
	}
	// The plain build asks for no .info; only the fallback spellings may, and only when
	// istio.io/istio itself was refused.
	if !strings.Contains(line, "istio.io/istio@") && infos.Load() != 0 {
		t.Errorf("%d .info/list/latest requests although istio.io/istio was never refused", infos.Load())
	}
}

func TestIstiodProxyStalls(t *testing.T) {
	url := silentProxy(t)
	start := time.Now()
	_, stderr, code := run(t, []string{"build", "pilot-discovery"}, "GOPROXY="+url,
		"GALLEON_FETCH_STALL_SECONDS=3", "GALLEON_FETCH_ATTEMPTS=2")
	wantCode(t, "build", code, 1)
	wantAll(t, errorLine(t, stderr, buildLine), "stalled", "unanswered for 3 s, 2 times", url, "retry later", "GALLEON_PILOT_DISCOVERY")
	if !strings.Contains(stderr, "trying again (2 of 2)") {
		t.Errorf("the stall was not retried:\n%s", stderr)
	}
	// Bounded: two stalls of 3 s and the go start-up, nowhere near go's own (absent) timeout.
	if took := time.Since(start); took > 90*time.Second {
		t.Errorf("a stalled proxy held the build for %v", took)
	}
}

func TestConsulBadBinaryOverride(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "consul")
	_, stderr, code := run(t, []string{"build", "consul"}, "GALLEON_CONSUL_BIN="+missing)
	wantCode(t, "build", code, 1)
	wantAll(t, errorLine(t, stderr, buildLine), "GALLEON_CONSUL_BIN="+missing, "does not exist", "point it at a consul binary")
}

func TestConsulProxyRefuses(t *testing.T) {
	url, infos, total := refusingProxy(t)
	_, stderr, code := run(t, []string{"build", "consul"}, "GOPROXY="+url)
	wantCode(t, "build", code, 1)
	wantAll(t, errorLine(t, stderr, buildLine), "refused", "403", "tried: go build github.com/hashicorp/consul@v1.22.6", "GALLEON_CONSUL_BIN")
	if total.Load() == 0 {
		t.Fatal("the proxy was never asked: the test proves nothing")
	}
	if n := infos.Load(); n != 0 {
		t.Errorf("devtool build consul asked for %d .info/list/latest files; it must ask only for .mod and .zip", n)
	}
}

func TestConsulProxyUnreachable(t *testing.T) {
	addr := closedAddr(t)
	_, stderr, code := run(t, []string{"build", "consul"}, "GOPROXY=http://"+addr)
	wantCode(t, "build", code, 1)
	wantAll(t, errorLine(t, stderr, buildLine), "could not be reached", "retry later", "GALLEON_CONSUL_BIN")
}

func TestEurekaBadBinaryOverride(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "polaris-server")
	_, stderr, code := run(t, []string{"build", "polaris-server"}, "GALLEON_POLARIS_BIN="+missing)
	wantCode(t, "build", code, 1)
	wantAll(t, errorLine(t, stderr, buildLine), "GALLEON_POLARIS_BIN="+missing, "does not exist", "point it at a polaris-server binary")
}

func TestEurekaProxyRefuses(t *testing.T) {
	url, infos, total := refusingProxy(t)
	_, stderr, code := run(t, []string{"build", "polaris-server"}, "GOPROXY="+url)
	wantCode(t, "build", code, 1)
	wantAll(t, errorLine(t, stderr, buildLine), "refused", "403", "GALLEON_POLARIS_BIN")
	if total.Load() == 0 {
		t.Fatal("the proxy was never asked: the test proves nothing")
	}
	if n := infos.Load(); n != 0 {
		t.Errorf("devtool build polaris-server asked for %d .info/list/latest files; it must ask only for .mod and .zip", n)
	}
}

func TestEurekaProxyUnreachable(t *testing.T) {
	addr := closedAddr(t)
	_, stderr, code := run(t, []string{"build", "polaris-server"}, "GOPROXY=http://"+addr)
	wantCode(t, "build", code, 1)
	wantAll(t, errorLine(t, stderr, buildLine), "could not be reached", "retry later", "GALLEON_POLARIS_BIN")
}

// The four Kubernetes-side tools are built from one committed module; each fails the same way.
func TestKubeToolsFailures(t *testing.T) {
	for _, tc := range []struct{ tool, env, module string }{
		{"kube-apiserver", "GALLEON_KUBE_APISERVER_BIN", "kube-apiserver from k8s.io/kubernetes@v1.36.3"},
		{"kubectl", "GALLEON_KUBECTL_BIN", "kubectl from k8s.io/kubernetes@v1.36.3"},
		{"etcd", "GALLEON_ETCD_BIN", "etcd from go.etcd.io/etcd/server/v3@v3.6.16"},
		{"helm", "GALLEON_HELM_BIN", "helm from helm.sh/helm/v3@v3.21.4"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			missing := filepath.Join(t.TempDir(), tc.tool)
			_, stderr, code := run(t, []string{"build", tc.tool}, tc.env+"="+missing)
			wantCode(t, "bad override", code, 1)
			wantAll(t, errorLine(t, stderr, buildLine), tc.env+"="+missing, "does not exist", "point it at a "+tc.tool+" binary")

			url, infos, total := refusingProxy(t)
			_, stderr, code = run(t, []string{"build", tc.tool}, "GOPROXY="+url)
			wantCode(t, "refusing proxy", code, 1)
			wantAll(t, errorLine(t, stderr, buildLine), "refused", "403", "tried: go build "+tc.module, tc.env)
			if total.Load() == 0 {
				t.Fatal("the proxy was never asked: the test proves nothing")
			}
			if n := infos.Load(); n != 0 {
				t.Errorf("devtool build %s asked for %d .info/list/latest files; it must ask only for .mod and .zip", tc.tool, n)
			}
		})
	}
	_, stderr, code := run(t, []string{"build", "kubelet"})
	wantCode(t, "unknown tool", code, 2)
	wantAll(t, errorLine(t, stderr, buildLine), "unknown tool kubelet", "known: ", "kube-apiserver kubectl etcd helm")
}

// path only looks: a tool that was not built is one line naming the command that builds it.
func TestPathOfAToolNotBuilt(t *testing.T) {
	for _, tool := range []string{"consul", "polaris-server", "pilot-discovery", "kube-apiserver"} {
		stdout, stderr, code := run(t, []string{"path", tool}, "GOPROXY=off")
		wantCode(t, "path "+tool, code, 1)
		if stdout != "" {
			t.Errorf("path %s printed %q for a binary that is not there", tool, stdout)
		}
		wantAll(t, errorLine(t, stderr, "devtool path: "), "does not exist", "devtool build "+tool)
	}
}

// deps (make deps, the first step of make test) fails the same ways, with its own advice.
func TestDepsFailures(t *testing.T) {
	const module = "docs/example-adapter" // a small module with dependencies outside the repository
	_, stderr, code := run(t, []string{"deps", "-modules", module}, "GOPROXY=off")
	wantCode(t, "proxy off", code, 1)
	wantAll(t, errorLine(t, stderr, "devtool deps: "), "GOPROXY=off",
		"tried: go list -deps -test ./... in "+module+" (committed go.sum)", "do: retry later (make test resumes where the downloads stopped)")

	url := silentProxy(t)
	_, stderr, code = run(t, []string{"deps", "-modules", module}, "GOPROXY="+url,
		"GALLEON_FETCH_STALL_SECONDS=2", "GALLEON_FETCH_ATTEMPTS=2")
	wantCode(t, "silent proxy", code, 1)
	wantAll(t, errorLine(t, stderr, "devtool deps: "), "stalled", "unanswered for 2 s, 2 times", url, "retry later")
	if !strings.Contains(stderr, "trying again (2 of 2)") {
		t.Errorf("the stall was not retried:\n%s", stderr)
	}

	_, stderr, code = run(t, []string{"deps"})
	wantCode(t, "no module", code, 2)
	wantAll(t, errorLine(t, stderr, "devtool deps: "), "no module given")
}

// No source names a registry's host: the Go proxy comes from `go env GOPROXY`, apt's sources
// from the machine's apt configuration. Checked: every Go file of the repository, the Makefile,
// scripts/ and .ci/.
func TestRepositoryNamesNoRegistryHost(t *testing.T) {
	root := repo(t)
	hosts := registryHosts(t)
	if len(hosts) == 0 {
		t.Fatal("found no registry host to look for (go env GOPROXY and GOSUMDB name none)")
	}
	scanned := 0
	check := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Error(err)
			return
		}
		scanned++
		for _, h := range hosts {
			if bytes.Contains(b, []byte(h)) {
				t.Errorf("%s names %s; read it from where it is configured (go env GOPROXY, apt) instead", strings.TrimPrefix(path, root+"/"), h)
			}
		}
	}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(path, root+"/")
		switch {
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules"):
			return filepath.SkipDir
		case d.IsDir():
			return nil
		case strings.HasSuffix(path, ".go"), d.Name() == "Makefile", d.Name() == "go.work",
			strings.HasPrefix(rel, "scripts/"), strings.HasPrefix(rel, ".ci/"):
			check(path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if scanned < 100 {
		t.Errorf("scanned only %d files: the walk missed the sources", scanned)
	}
}

// registryHosts are the package registries this machine uses, read from where they are
// configured (never written in the repository): go env GOPROXY and GOSUMDB, and the apt sources.
func registryHosts(t *testing.T) []string {
	t.Helper()
	var hosts []string
	for _, v := range []string{"GOPROXY", "GOSUMDB"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		for _, f := range strings.FieldsFunc(string(out), func(r rune) bool { return r == ',' || r == '|' || r == ' ' || r == '\n' }) {
			f = strings.TrimPrefix(strings.TrimPrefix(f, "https://"), "http://")
			if h, _, _ := strings.Cut(f, "/"); strings.Contains(h, ".") && !strings.HasPrefix(h, "127.") {
				hosts = append(hosts, h)
			}
		}
	}
	apt, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	for _, p := range append(apt, "/etc/apt/sources.list") {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, m := range regexp.MustCompile(`https?://([^/\s]+)`).FindAllStringSubmatch(string(b), -1) {
			hosts = append(hosts, m[1])
		}
	}
	return hosts
}

// TestCachePathIsOne: `devtool cache-dir` (what the Makefile and the docs use) and
// internal/testing/toolcache (what the harnesses use) give the documented path for every way the
// environment can set it (an empty variable counts as unset).
func TestCachePathIsOne(t *testing.T) {
	home := t.TempDir()
	for _, tc := range []struct {
		env  map[string]string
		want string // the cache directory
	}{
		{map[string]string{"HOME": home, "XDG_CACHE_HOME": "", "GALLEON_CACHE": ""}, filepath.Join(home, ".cache", "galleon")},
		{map[string]string{"HOME": home, "XDG_CACHE_HOME": filepath.Join(home, "xdg"), "GALLEON_CACHE": ""}, filepath.Join(home, "xdg", "galleon")},
		{map[string]string{"HOME": home, "XDG_CACHE_HOME": filepath.Join(home, "xdg"), "GALLEON_CACHE": filepath.Join(home, "own")}, filepath.Join(home, "own")},
	} {
		env := []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range tc.env {
			env = append(env, k+"="+v)
			t.Setenv(k, v)
		}
		for _, c := range []struct {
			args    []string
			want    string
			library string
		}{
			{nil, tc.want, toolcache.Dir()},
			{[]string{"dir"}, tc.want, toolcache.Dir()},
			{[]string{"bin"}, filepath.Join(tc.want, "bin"), toolcache.BinDir()},
			{[]string{"bin", "consul", "1.2.3"}, filepath.Join(tc.want, "bin", "consul-1.2.3"), toolcache.Bin("consul", "1.2.3")},
		} {
			cmd := exec.Command(devtool, append([]string{"cache-dir"}, c.args...)...)
			cmd.Env = env
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: devtool cache-dir %v: %v", tc.env, c.args, err)
			}
			if got := strings.TrimSpace(string(out)); got != c.want || c.library != c.want {
				t.Errorf("%v: cache-dir %v: devtool says %s, internal/testing/toolcache %s; want %s", tc.env, c.args, got, c.library, c.want)
			}
		}
	}
	_, stderr, code := run(t, []string{"cache-dir", "lib"})
	wantCode(t, "cache-dir lib", code, 2)
	wantAll(t, errorLine(t, stderr, "devtool cache-dir: "), "usage: cache-dir [dir | bin [NAME VERSION]]")
}
