package toolcache

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Canned go output, one per class Failure tells apart, as go 1.26 prints it.
var cannedLogs = []struct {
	name, log, want string
}{
	{
		name: "stalled",
		log:  "go: downloading istio.io/istio v0.0.0-20260409200358-0c774325b938\ngofetch: go build made no progress for 120 s (a request to the module proxy that is never answered); stopping it\n",
		want: "the Go module proxy (PROXY) stalled: a request went unanswered for 120 s, 3 times",
	},
	{
		name: "proxy off",
		log:  "go: github.com/hashicorp/consul@v1.22.6: module lookup disabled by GOPROXY=off\n",
		want: "module downloads are disabled (GOPROXY=off) and the module cache lacks what the build needs",
	},
	{
		name: "refused 403",
		log: "go: downloading github.com/hashicorp/consul v1.22.6\n" +
			"go: github.com/hashicorp/consul@v1.22.6: reading http://127.0.0.1:4000/github.com/hashicorp/consul/@v/v1.22.6.zip: 403 Forbidden\n",
		want: "the Go module proxy (PROXY) refused github.com/hashicorp/consul@v1.22.6 (403 Forbidden)",
	},
	{
		name: "refused 404 while stalled once",
		log: "gofetch: go build made no progress for 120 s (a request to the module proxy that is never answered); stopping it\n" +
			"go: k8s.io/api@v0.35.1: verifying go.mod: k8s.io/api@v0.35.1/go.mod: reading https://sum/lookup/k8s.io/api@v0.35.1: 404 Not Found\n",
		want: "the Go module proxy (PROXY) refused k8s.io/api@v0.35.1 (404 Not Found)",
	},
	{
		name: "unreachable",
		log:  "go: github.com/hashicorp/consul@v1.22.6: Get \"http://127.0.0.1:1/github.com/hashicorp/consul/@v/v1.22.6.mod\": dial tcp 127.0.0.1:1: connect: connection refused\n",
		want: "the Go module proxy (PROXY) could not be reached (connection refused)",
	},
	{
		name: "no such host",
		log:  "go: example.com/m@v1.0.0: Get \"http://proxy.invalid/example.com/m/@v/v1.0.0.mod\": dial tcp: lookup proxy.invalid on 127.0.0.53:53: no such host\n",
		want: "the Go module proxy (PROXY) could not be reached (no such host)",
	},
	{
		name: "no such host, no resolver named",
		log:  "go: example.com/m@v1.0.0: Get \"http://proxy.invalid/example.com/m/@v/v1.0.0.mod\": dial tcp: lookup proxy.invalid: no such host\n",
		want: "the Go module proxy (PROXY) could not be reached (dial tcp: lookup proxy.invalid: no such host)",
	},
	{
		name: "connection reset",
		log:  "go: example.com/m@v1.0.0: read tcp 127.0.0.1:5->127.0.0.1:6: read: connection reset by peer\n",
		want: "the Go module proxy (PROXY) could not be reached (connection reset by peer)",
	},
	{
		name: "checksum mismatch",
		log:  "verifying github.com/x/y@v1.2.3: checksum mismatch\n\tdownloaded: h1:aaa\n\tgo.sum:     h1:bbb\n",
		want: "a downloaded module does not match the committed go.sum (github.com/x/y@v1.2.3: checksum mismatch)",
	},
	{
		name: "missing go.sum entry",
		log:  "main.go:3:2: missing go.sum entry for module providing package github.com/x/y (imported by m); to add:\n\tgo get m\n",
		want: "the committed go.sum lacks an entry (missing go.sum entry for module providing package github.com/x/y (imported by m))",
	},
	{
		name: "other",
		log:  "go: downloading github.com/x/y v1.2.3\n# github.com/x/y\n\n./y.go:10:2: undefined: z\n",
		want: "go build failed (./y.go:10:2: undefined: z)",
	},
}

func writeLog(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "go.log")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClassifyCannedLogs(t *testing.T) {
	fs := fetchSettings{stall: 120 * time.Second, attempts: 3}
	for _, tc := range cannedLogs {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(readLog(writeLog(t, tc.log)), "PROXY", fs); got != tc.want {
				t.Errorf("classify =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}

func TestClassifyCutsAnOtherFailureAt200Characters(t *testing.T) {
	got := classify([]string{strings.Repeat("é", 300)}, "PROXY", fetchSettings{})
	if want := "go build failed (" + strings.Repeat("é", 200) + ")"; got != want {
		t.Errorf("classify = %q", got)
	}
}

func TestRefusedModule(t *testing.T) {
	for _, tc := range []struct{ log, want string }{
		{cannedLogs[2].log, "github.com/hashicorp/consul@v1.22.6"},
		{"go: istio.io/istio@v0.0.0-20260409200358-0c774325b938: unrecognized import path \"istio.io/istio\": 410 Gone\n", "istio.io/istio@v0.0.0-20260409200358-0c774325b938"},
		{cannedLogs[4].log, ""}, // unreachable is not refused
		{"", ""},
	} {
		if got := RefusedModule(writeLog(t, tc.log)); got != tc.want {
			t.Errorf("RefusedModule(%q) = %q, want %q", tc.log, got, tc.want)
		}
	}
	if got := RefusedModule(filepath.Join(t.TempDir(), "absent.log")); got != "" {
		t.Errorf("RefusedModule of a missing log = %q", got)
	}
}

func TestFailureIsOneLineWithWhatTriedAndDo(t *testing.T) {
	t.Setenv("GOPROXY", "http://127.0.0.1:9/proxy")
	t.Setenv(EnvFetchStallSeconds, "7")
	t.Setenv(EnvFetchAttempts, "2")
	log := writeLog(t, cannedLogs[0].log)
	err := Failure("consul", log, "go build X from Y", "retry later")
	want := "consul: the Go module proxy (http://127.0.0.1:9/proxy) stalled: a request went unanswered for 7 s, 2 times; tried: go build X from Y; do: retry later (go's output: " + log + ")"
	if err == nil || err.Error() != want {
		t.Fatalf("Failure =\n  %v\nwant\n  %s", err, want)
	}
	if err := Failure("", log, "a", "b"); !strings.HasPrefix(err.Error(), "the Go module proxy") {
		t.Errorf("Failure without a tool name: %v", err)
	}
}

func TestEnvBinary(t *testing.T) {
	const v = "GALLEON_TOOLCACHE_TEST_BIN"
	t.Setenv(v, "")
	if p, set, err := EnvBinary(v, "consul"); p != "" || set || err != nil {
		t.Fatalf("unset: %q %v %v", p, set, err)
	}
	dir := t.TempDir()
	exe := filepath.Join(dir, "consul")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(v, exe)
	if p, set, err := EnvBinary(v, "consul"); p != exe || !set || err != nil {
		t.Fatalf("executable: %q %v %v", p, set, err)
	}
	fix := "; point it at a consul binary, or unset it to build one from the Go module proxy"
	for _, tc := range []struct{ val, want string }{
		{filepath.Join(dir, "absent"), v + "=" + filepath.Join(dir, "absent") + " does not exist" + fix},
		{dir, v + "=" + dir + " is not an executable file" + fix},
	} {
		t.Setenv(v, tc.val)
		if _, set, err := EnvBinary(v, "consul"); !set || err == nil || err.Error() != tc.want {
			t.Errorf("%s: set %v, err %v; want %q", tc.val, set, err, tc.want)
		}
	}
}

func TestGoModRequire(t *testing.T) {
	dir := t.TempDir()
	gomod := "module galleon-consul-build\n\ngo 1.25\n\nrequire github.com/hashicorp/consul v1.22.6\n\nrequire (\n\tgithub.com/a/b v0.1.0 // indirect\n)\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOPROXY", "off") // proves no network: a request would fail
	for module, want := range map[string]string{"github.com/hashicorp/consul": "v1.22.6", "github.com/a/b": "v0.1.0", "github.com/c/d": ""} {
		if got, err := GoModRequire(dir, module); got != want || err != nil {
			t.Errorf("GoModRequire(%s) = %q, %v; want %q", module, got, err, want)
		}
	}
	if _, err := GoModRequire(t.TempDir(), "x"); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("GoModRequire without a go.mod: %v", err)
	}
}

func TestParseStat(t *testing.T) {
	p, ok := parseStat("4242 (go (build) x) S 17 4242 4242 0 -1 4194304 100 0 0 0 30 12 5 3 20 0 8 0 1000 0 0")
	if !ok || p.ppid != 17 || p.ticks != 30+12+5+3 {
		t.Errorf("parseStat = %+v, %v", p, ok)
	}
	if _, ok := parseStat("garbage"); ok {
		t.Error("parseStat accepted garbage")
	}
}

func TestTreeCPU(t *testing.T) {
	procs := map[int]proc{1: {0, 1000}, 10: {1, 1}, 11: {10, 2}, 12: {11, 4}, 20: {1, 8}}
	if got := treeCPU(10, procs); got != 7 {
		t.Errorf("treeCPU(10) = %d, want 7", got)
	}
	if got := len(treePids(11, procs)); got != 2 {
		t.Errorf("treePids(11) has %d pids, want 2", got)
	}
}

// fakeGo puts a `go` on PATH that answers `go env GOMODCACHE` with modcache and otherwise runs
// body (sh).
func fakeGo(t *testing.T, modcache, body string) {
	t.Helper()
	bin := t.TempDir()
	script := "#!/bin/sh\nif [ \"$1\" = env ]; then echo " + modcache + "; exit 0; fi\n" + body + "\n"
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func TestWatchdogStopsASilentGoAndRetries(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: the watchdog is off here")
	}
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	// A child that ignores the interrupt (a background job of sh does): only the tree kill ends it.
	fakeGo(t, filepath.Join(dir, "mod"), "sleep 60 & echo $! >>"+pids+"; wait")
	log := filepath.Join(dir, "go.log")
	var progress bytes.Buffer
	start := time.Now()
	err := runGoRetried(context.Background(), &progress, fetchSettings{stall: time.Second, attempts: 2}, log, dir, nil, []string{"build", "./..."})
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("err = %v, want ErrStalled", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("two stalls of 1 s took %v", took)
	}
	if want := "go build stalled on the module proxy for 1 s; trying again (2 of 2)\n"; progress.String() != want {
		t.Errorf("progress = %q, want %q", progress.String(), want)
	}
	b, _ := os.ReadFile(log)
	if n := strings.Count(string(b), "gofetch: go build made no progress for 1 s"); n != 2 {
		t.Errorf("the log says %d stalls, want 2:\n%s", n, b)
	}
	if got := classify(readLog(log), "P", fetchSettings{stall: time.Second, attempts: 2}); !strings.Contains(got, "stalled") {
		t.Errorf("a stalled log classifies as %q", got)
	}
	pb, _ := os.ReadFile(pids)
	for _, f := range strings.Fields(string(pb)) {
		pid, _ := strconv.Atoi(f)
		waitGone(t, pid)
	}
	if len(strings.Fields(string(pb))) != 2 {
		t.Errorf("go ran %q times, want 2", pb)
	}
}

// waitGone fails unless pid is gone within a few seconds (init reaps the orphan).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
	}
	t.Errorf("go's child %d outlived the stall", pid)
}

func TestWatchdogLetsADownloadingGoFinish(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: the watchdog is off here")
	}
	dir := t.TempDir()
	mod := filepath.Join(dir, "mod")
	if err := os.MkdirAll(filepath.Join(mod, "cache", "download"), 0o755); err != nil {
		t.Fatal(err)
	}
	// No CPU to speak of, but a new file in the module cache every 0.3 s for 3.6 s, well beyond
	// the stall time: progress.
	fakeGo(t, mod, "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 0.3; : >"+mod+"/cache/download/f$i; done; echo built")
	log := filepath.Join(dir, "go.log")
	var progress bytes.Buffer
	if err := runGoRetried(context.Background(), &progress, fetchSettings{stall: 2 * time.Second, attempts: 1}, log, dir, nil, []string{"build"}); err != nil {
		t.Fatalf("a go that downloads was stopped: %v; log:\n%s", err, readLog(log))
	}
	if b, _ := os.ReadFile(log); string(b) != "built\n" {
		t.Errorf("log = %q", b)
	}
}

func TestRunGoPassesEnvAndGoFailure(t *testing.T) {
	dir := t.TempDir()
	fakeGo(t, filepath.Join(dir, "mod"), "echo \"GOWORK=$GOWORK GOFLAGS=$GOFLAGS args=$*\"; exit 3")
	t.Setenv("GOFLAGS", "-buildvcs=false")
	t.Setenv("GOWORK", "/some/go.work")
	log := filepath.Join(dir, "go.log")
	err := GoBuild(context.Background(), log, dir, "/out/x", "example.com/x", "-ldflags", ToolLDFlags)
	if err == nil || errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("GoBuild of a failing go: %v", err)
	}
	b, _ := os.ReadFile(log)
	if want := "GOWORK=off GOFLAGS=-buildvcs=false -mod=readonly args=build -o /out/x -ldflags -s -w example.com/x\n"; string(b) != want {
		t.Errorf("go saw\n  %q\nwant\n  %q", b, want)
	}
}

func TestRunGoStopsOnContext(t *testing.T) {
	dir := t.TempDir()
	fakeGo(t, filepath.Join(dir, "mod"), "exec sleep 60")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := RunGo(ctx, filepath.Join(dir, "go.log"), dir, nil, "build")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("stopping took %v", took)
	}
}
