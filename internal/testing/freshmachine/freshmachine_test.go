package freshmachine

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEnv(t *testing.T) {
	base := []string{
		"PATH=/usr/bin", "HOME=/root", "GOFLAGS=-count=1",
		"GALLEON_CONSUL_BIN=/opt/consul", "GALLEON_PILOT_DISCOVERY=/opt/pd", "GALLEON_POLARIS_BIN=/opt/p",
		"GOMODCACHE=/root/go/pkg/mod", "GOCACHE=/root/.cache/go-build", "GALLEON_CACHE=/root/.cache/galleon",
		"XDG_CACHE_HOME=/root/.cache", "GOWORK=/src/go.work", "GALLEON_FETCH_ATTEMPTS=5",
	}
	want := []string{
		"PATH=/usr/bin", "HOME=/root", "GOFLAGS=-count=1", "GALLEON_FETCH_ATTEMPTS=5",
		"GOMODCACHE=/t/gomodcache", "GOCACHE=/t/gocache", "GALLEON_CACHE=/t/galleon-cache",
		"XDG_CACHE_HOME=/t/user-cache", "STATICCHECK_CACHE=/t/user-cache/staticcheck", "GOWORK=off",
	}
	if got := Env(base, "/t"); !slices.Equal(got, want) {
		t.Errorf("Env =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestWriteSummary: the table fresh-machine.sh printed, column for column.
func TestWriteSummary(t *testing.T) {
	var b bytes.Buffer
	stages := []StageResult{
		{Stage: "demo", Result: "ok", Took: 7*time.Minute + 3*time.Second + 900*time.Millisecond},
		{Stage: "test", Result: "FAILED (exit 2)", Took: 61*time.Minute + 45*time.Second},
	}
	WriteSummary(&b, "0123abc", 2, time.Date(2026, 11, 27, 23, 59, 0, 0, time.UTC), stages, 68*time.Minute+49*time.Second)
	want := "\n" +
		"fresh-machine rehearsal of 0123abc (2 cores, 2026-11-27):\n" +
		"  make demo  ok             7 min  3 s\n" +
		"  make test  FAILED (exit 2)  61 min 45 s\n" +
		"  total                    68 min 49 s\n"
	if b.String() != want {
		t.Errorf("summary:\n%q\nwant\n%q", b.String(), want)
	}
}

func TestTestSummary(t *testing.T) {
	log := "go vet ./...\n=== RUN   TestA\n--- PASS: TestA (0.00s)\n--- FAIL: TestB (0.01s)\nPASS\nok  \tgithub.com/x/a\t1.2s\nFAIL\tgithub.com/x/b\t0.3s\nokay\n    --- FAIL: TestB/sub\n"
	got, err := TestSummary(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--- FAIL: TestB (0.01s)", "ok  \tgithub.com/x/a\t1.2s", "FAIL\tgithub.com/x/b\t0.3s"}
	if !slices.Equal(got, want) {
		t.Errorf("TestSummary = %q, want %q", got, want)
	}
}

func TestLastLines(t *testing.T) {
	cases := map[string]string{"": "", "a": "a\n", "a\nb\nc\n": "b\nc\n", "a\nb\nc": "b\nc\n", "b\nc\n": "b\nc\n"}
	for in, want := range cases {
		if got := string(lastLines([]byte(in), 2)); got != want {
			t.Errorf("lastLines(%q, 2) = %q, want %q", in, got, want)
		}
	}
}

func TestExitResult(t *testing.T) {
	err := exec.Command("sh", "-c", "exit 3").Run()
	if got := exitResult(err); got != "FAILED (exit 3)" {
		t.Errorf("exitResult = %q", got)
	}
	if got := exitResult(nil); got != "ok" {
		t.Errorf("exitResult(nil) = %q", got)
	}
}
