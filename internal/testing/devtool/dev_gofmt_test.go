package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

func TestGofmtted(t *testing.T) {
	dir := t.TempDir()
	for src, want := range map[string]bool{
		"package p\n\nfunc f() {}\n":                      true,
		"package p\nfunc f()  {}\n":                       false,
		"package p\n\nimport (\n\t\"os\"\n\t\"fmt\"\n)\n": false, // gofmt sorts imports
	} {
		p := filepath.Join(dir, "x.go")
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := gofmtted(p); err != nil || got != want {
			t.Errorf("gofmtted(%q) = %v, %v; want %v", src, got, err, want)
		}
	}
	if ok, err := gofmtted(filepath.Join(dir, "gone.go")); !ok || err != nil {
		t.Errorf("a tracked file missing from the work tree: %v, %v; want it passed over", ok, err)
	}
	p := filepath.Join(dir, "bad.go")
	if err := os.WriteFile(p, []byte("package p\nfunc {"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := gofmtted(p); err == nil || !strings.Contains(err.Error(), "does not parse") {
		t.Errorf("a file that does not parse: %v", err)
	}
}

// TestTrackedGoFiles: this repository's tracked Go files, generated protobuf code aside.
func TestTrackedGoFiles(t *testing.T) {
	root, err := toolcache.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := trackedGoFiles(context.Background(), root)
	if err != nil {
		t.Skipf("%v", err)
	}
	if !slices.Contains(files, "model/model.go") && !slices.Contains(files, "daemon/daemon.go") {
		t.Errorf("neither model/model.go nor daemon/daemon.go among %d files", len(files))
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".pb.go") {
			t.Errorf("%s is generated; gofmt-check leaves it to protoc-gen-go", f)
		}
	}
}
