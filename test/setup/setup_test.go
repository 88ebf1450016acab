// Package setup tests the scripts that install Galleon's third-party servers (scripts/istiod.sh,
// scripts/consul.sh, scripts/eureka.sh, scripts/proto.sh, scripts/kube.sh) where they fail: every failure must be one line that says
// what went wrong, what was tried and what to do. They run the real scripts with an empty module
// cache and tool cache against a module proxy that is off, unreachable or refusing.
package setup

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// repo is the repository root (test/setup -> ../..).
func repo(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "scripts", "istiod.sh")); err != nil {
		t.Fatalf("not the repository root: %v", err)
	}
	return root
}

// run runs a script with a clean environment: empty module, build and tool caches, none of
// Galleon's overrides, plus extra. It returns stderr and the exit code.
func run(t *testing.T, script string, args []string, extra ...string) (stderr string, code int) {
	t.Helper()
	tmp := t.TempDir()
	cmd := exec.Command(filepath.Join(repo(t), "scripts", script), args...)
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
	cmd.Env = append(env, extra...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	cmd.Stdout = &bytes.Buffer{}
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s %v did not finish within 3 minutes; stderr:\n%s", script, args, errb.String())
	}
	return errb.String(), cmd.ProcessState.ExitCode()
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

func TestIstiodBadBinaryOverride(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "pilot-discovery")
	stderr, code := run(t, "istiod.sh", []string{"build"}, "GALLEON_PILOT_DISCOVERY="+missing)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantAll(t, errorLine(t, stderr, "istiod.sh: "), "GALLEON_PILOT_DISCOVERY="+missing, "does not exist", "point it at a pilot-discovery binary", "unset it")

	stderr, code = run(t, "istiod.sh", []string{"build"}, "GALLEON_PILOT_DISCOVERY="+t.TempDir())
	if code != 1 {
		t.Errorf("directory: exit %d, want 1", code)
	}
	wantAll(t, errorLine(t, stderr, "istiod.sh: "), "is not an executable file")
}

func TestIstiodGoodBinaryOverrideSkipsTheBuild(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pilot-discovery")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// GOPROXY=off: a build would fail, so success proves nothing was built or fetched.
	tmp := t.TempDir()
	cmd := exec.Command(filepath.Join(repo(t), "scripts", "istiod.sh"), "build")
	cmd.Env = append(os.Environ(), "GALLEON_PILOT_DISCOVERY="+bin, "GOPROXY=off", "GALLEON_CACHE="+tmp)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("istiod.sh build with a good override: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != bin {
		t.Errorf("printed %q, want the override %q", got, bin)
	}
}

func TestIstiodProxyOff(t *testing.T) {
	stderr, code := run(t, "istiod.sh", []string{"build"}, "GOPROXY=off")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantAll(t, errorLine(t, stderr, "istiod.sh: "), "GOPROXY=off", "tried: go build from the committed go.sum", "GALLEON_PILOT_DISCOVERY")
}

func TestIstiodProxyUnreachable(t *testing.T) {
	addr := closedAddr(t)
	stderr, code := run(t, "istiod.sh", []string{"build"}, "GOPROXY=http://"+addr)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantAll(t, errorLine(t, stderr, "istiod.sh: "), "could not be reached", addr, "connection refused", "retry later", "GALLEON_PILOT_DISCOVERY")
}

func TestIstiodProxyRefuses(t *testing.T) {
	url, infos, total := refusingProxy(t)
	stderr, code := run(t, "istiod.sh", []string{"build"}, "GOPROXY="+url)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	line := errorLine(t, stderr, "istiod.sh: ")
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

func TestConsulBadBinaryOverride(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "consul")
	stderr, code := run(t, "consul.sh", []string{"build"}, "GALLEON_CONSUL_BIN="+missing)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantAll(t, errorLine(t, stderr, "consul.sh: "), "GALLEON_CONSUL_BIN="+missing, "does not exist", "point it at a consul binary")
}

func TestConsulProxyRefuses(t *testing.T) {
	url, infos, total := refusingProxy(t)
	stderr, code := run(t, "consul.sh", []string{"build"}, "GOPROXY="+url)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantAll(t, errorLine(t, stderr, "consul.sh: "), "refused", "403", "tried: go build github.com/hashicorp/consul@v1.22.6", "GALLEON_CONSUL_BIN")
	if total.Load() == 0 {
		t.Fatal("the proxy was never asked: the test proves nothing")
	}
	if n := infos.Load(); n != 0 {
		t.Errorf("consul.sh build asked for %d .info/list/latest files; it must ask only for .mod and .zip", n)
	}
}

func TestConsulProxyUnreachable(t *testing.T) {
	addr := closedAddr(t)
	stderr, code := run(t, "consul.sh", []string{"build"}, "GOPROXY=http://"+addr)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantAll(t, errorLine(t, stderr, "consul.sh: "), "could not be reached", "retry later", "GALLEON_CONSUL_BIN")
}

// No script may name a registry's host: the proxy comes from `go env GOPROXY`.
func TestScriptsNameNoRegistryHost(t *testing.T) {
	root := repo(t)
	hosts := registryHosts(t)
	if len(hosts) == 0 {
		t.Fatal("found no registry host to look for (go env GOPROXY and GOSUMDB name none)")
	}
	err := filepath.WalkDir(filepath.Join(root, "scripts"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, h := range hosts {
			if bytes.Contains(b, []byte(h)) {
				t.Errorf("%s names %s; read the proxy from `go env GOPROXY` instead", strings.TrimPrefix(path, root+"/"), h)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
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

func TestIstiodProxyStalls(t *testing.T) {
	url := silentProxy(t)
	start := time.Now()
	stderr, code := run(t, "istiod.sh", []string{"build"}, "GOPROXY="+url,
		"GALLEON_FETCH_STALL_SECONDS=3", "GALLEON_FETCH_ATTEMPTS=2")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantAll(t, errorLine(t, stderr, "istiod.sh: "), "stalled", "unanswered for 3 s, 2 times", url, "retry later", "GALLEON_PILOT_DISCOVERY")
	if !strings.Contains(stderr, "trying again (2 of 2)") {
		t.Errorf("the stall was not retried:\n%s", stderr)
	}
	// Bounded: two stalls of 3 s and the go start-up, nowhere near go's own (absent) timeout.
	if took := time.Since(start); took > 90*time.Second {
		t.Errorf("a stalled proxy held the build for %v", took)
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

// TestCachePathIsOne: scripts/cache-dir.sh (the shell's definition of the
// tool cache) and internal/testing/toolcache (the Go one) give the same path for
// every way the environment can set it (an empty variable counts as unset
// in both).
func TestCachePathIsOne(t *testing.T) {
	home := t.TempDir()
	for _, env := range []map[string]string{
		{"HOME": home, "XDG_CACHE_HOME": "", "GALLEON_CACHE": ""},
		{"HOME": home, "XDG_CACHE_HOME": filepath.Join(home, "xdg"), "GALLEON_CACHE": ""},
		{"HOME": home, "XDG_CACHE_HOME": filepath.Join(home, "xdg"), "GALLEON_CACHE": filepath.Join(home, "own")},
	} {
		cmd := exec.Command("bash", filepath.Join(repo(t), "scripts", "cache-dir.sh"), "bin", "consul", "1.2.3")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
			t.Setenv(k, v)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: scripts/cache-dir.sh: %v", env, err)
		}
		if got, want := toolcache.Bin("consul", "1.2.3"), strings.TrimSpace(string(out)); got != want {
			t.Errorf("%v: internal/testing/toolcache says %s, scripts/cache-dir.sh %s", env, got, want)
		}
	}
}

func TestEurekaBadBinaryOverride(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "polaris-server")
	stderr, code := run(t, "eureka.sh", []string{"build"}, "GALLEON_POLARIS_BIN="+missing)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantAll(t, errorLine(t, stderr, "eureka.sh: "), "GALLEON_POLARIS_BIN="+missing, "does not exist", "point it at a polaris-server binary")
}

func TestEurekaProxyRefuses(t *testing.T) {
	url, infos, total := refusingProxy(t)
	stderr, code := run(t, "eureka.sh", []string{"build"}, "GOPROXY="+url)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantAll(t, errorLine(t, stderr, "eureka.sh: "), "refused", "403", "GALLEON_POLARIS_BIN")
	if total.Load() == 0 {
		t.Fatal("the proxy was never asked: the test proves nothing")
	}
	if n := infos.Load(); n != 0 {
		t.Errorf("eureka.sh build asked for %d .info/list/latest files; it must ask only for .mod and .zip", n)
	}
}

func TestEurekaProxyUnreachable(t *testing.T) {
	addr := closedAddr(t)
	stderr, code := run(t, "eureka.sh", []string{"build"}, "GOPROXY=http://"+addr)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantAll(t, errorLine(t, stderr, "eureka.sh: "), "could not be reached", "retry later", "GALLEON_POLARIS_BIN")
}

// scripts/kube.sh builds four tools from one committed module; each fails the same way.
func TestKubeToolsFailures(t *testing.T) {
	for _, tc := range []struct{ tool, env, module string }{
		{"kube-apiserver", "GALLEON_KUBE_APISERVER_BIN", "kube-apiserver from k8s.io/kubernetes@v1.36.3"},
		{"kubectl", "GALLEON_KUBECTL_BIN", "kubectl from k8s.io/kubernetes@v1.36.3"},
		{"etcd", "GALLEON_ETCD_BIN", "etcd from go.etcd.io/etcd/server/v3@v3.6.16"},
		{"helm", "GALLEON_HELM_BIN", "helm from helm.sh/helm/v3@v3.21.4"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			missing := filepath.Join(t.TempDir(), tc.tool)
			stderr, code := run(t, "kube.sh", []string{"build", tc.tool}, tc.env+"="+missing)
			if code != 1 {
				t.Errorf("bad override: exit %d, want 1", code)
			}
			wantAll(t, errorLine(t, stderr, "kube.sh: "), tc.env+"="+missing, "does not exist", "point it at a "+tc.tool+" binary")

			url, infos, total := refusingProxy(t)
			stderr, code = run(t, "kube.sh", []string{"build", tc.tool}, "GOPROXY="+url)
			if code != 1 {
				t.Errorf("refusing proxy: exit %d, want 1", code)
			}
			wantAll(t, errorLine(t, stderr, "kube.sh: "), "refused", "403", "tried: go build "+tc.module, tc.env)
			if total.Load() == 0 {
				t.Fatal("the proxy was never asked: the test proves nothing")
			}
			if n := infos.Load(); n != 0 {
				t.Errorf("kube.sh build %s asked for %d .info/list/latest files; it must ask only for .mod and .zip", tc.tool, n)
			}
		})
	}
	stderr, code := run(t, "kube.sh", []string{"build", "kubelet"})
	if code != 2 {
		t.Errorf("unknown tool: exit %d, want 2", code)
	}
	wantAll(t, errorLine(t, stderr, "kube.sh: "), "unknown tool kubelet", "known: kube-apiserver kubectl etcd helm")
}
