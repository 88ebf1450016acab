package toolcache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestToolPathFromTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "server")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tl := Tool{Name: "server", Version: "1", EnvVar: "GALLEON_TOOLCACHE_TEST_BIN", Script: "server.sh", Make: "server"}
	t.Setenv(tl.EnvVar, exe)
	if p, err := tl.Path(); err != nil || p != exe {
		t.Fatalf("Path() = %q, %v; want %q", p, err, exe)
	}
	notExec := filepath.Join(dir, "data")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(tl.EnvVar, notExec)
	_, err := tl.Path()
	if err == nil || !strings.Contains(err.Error(), "not an executable file") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Path() with a non-executable $%s: %v", tl.EnvVar, err)
	}
}

func TestToolPathMissingNamesTheMakeTarget(t *testing.T) {
	t.Setenv("GALLEON_CACHE", t.TempDir())
	t.Chdir(t.TempDir()) // no repository above: nothing can build it
	tl := Tool{Name: "server", Version: "1", EnvVar: "GALLEON_TOOLCACHE_TEST_BIN", Script: "server.sh", Make: "server"}
	t.Setenv(tl.EnvVar, "")
	_, err := tl.Path()
	if err == nil {
		t.Fatal("Path() found a binary that is not there")
	}
	for _, want := range []string{"make server", "$GALLEON_TOOLCACHE_TEST_BIN", "scripts/server.sh", tl.CachePath()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
}

func TestRunScriptReturnsTheLastLine(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho progress >&2\necho first\necho \"  $1-last  \"\n"
	if err := os.WriteFile(filepath.Join(root, "scripts", "x.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := RunScript(root, "x.sh", "build", nil); err != nil || got != "build-last" {
		t.Fatalf("RunScript = %q, %v", got, err)
	}
	fail := "#!/bin/sh\necho one >&2\necho two >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(root, "scripts", "fail.sh"), []byte(fail), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := RunScript(root, "fail.sh", "build", nil)
	if err == nil || !strings.Contains(err.Error(), "one | two") {
		t.Fatalf("RunScript of a failing script: %v", err)
	}
}
