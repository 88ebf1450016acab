package imagebuild

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

func TestChartVersion(t *testing.T) {
	for chart, want := range map[string]string{
		"apiVersion: v2\nappVersion: \"0.1.0\"\nversion: 0.2.0\n": "0.1.0",
		"appVersion: 1.2.3  \n":                                   "1.2.3",
		"name: x\n  appVersion: 9\n":                              "",
	} {
		root := t.TempDir()
		dir := filepath.Join(root, "deploy", "helm", "galleon")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte(chart), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ChartVersion(root)
		if want == "" {
			if err == nil || !strings.Contains(err.Error(), "set GALLEON_IMAGE_VERSION") {
				t.Errorf("ChartVersion(%q) = %q, %v; want the error saying what to set", chart, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("ChartVersion(%q) = %q, %v; want %q", chart, got, err, want)
		}
	}
}

// TestAdapters: the mains of cmd/ that run daemon.Main or daemon.FleetMain, not galleonctl.
func TestAdapters(t *testing.T) {
	root, err := toolcache.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Adapters(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"galleon-consul", "galleon-eureka", "galleon-file", "galleon-fleet", "galleon-nacos", "galleon-zookeeper"}
	if !slices.Equal(got, want) {
		t.Errorf("Adapters = %v, want %v", got, want)
	}
}

// TestToolVersion: an edit of the writer's source, go.mod or go.sum gives another cache key; an
// edit of its test does not.
func TestToolVersion(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"go.mod": "module m\n", "go.sum": "", "main.go": "package main\n", "main_test.go": "package main\n"}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	first, err := ToolVersion(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 12 {
		t.Errorf("ToolVersion = %q, want 12 hex digits", first)
	}
	for _, c := range []struct {
		file    string
		changes bool
	}{{"main_test.go", false}, {"main.go", true}, {"go.sum", true}, {"go.mod", true}} {
		before, _ := ToolVersion(dir)
		if err := os.WriteFile(filepath.Join(dir, c.file), []byte("// edited\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		after, err := ToolVersion(dir)
		if err != nil {
			t.Fatal(err)
		}
		if (after != before) != c.changes {
			t.Errorf("editing %s: key %s -> %s, want a change: %v", c.file, before, after, c.changes)
		}
	}
}

func TestCASource(t *testing.T) {
	if got, want := caSource("/tmp/my-ca.pem"), "/tmp/my-ca.pem on the build host"; got != want {
		t.Errorf("caSource = %q, want %q", got, want)
	}
	got := caSource(defaultCA)
	if got != defaultCA+" on the build host" && !strings.HasPrefix(got, defaultCA+" from Debian's ca-certificates ") {
		t.Errorf("caSource(%s) = %q", defaultCA, got)
	}
}
