package main

import (
	"os"
	"path/filepath"
	"testing"
)

// pkg makes a listed package with one .go file of size bytes in a new directory.
func pkg(t *testing.T, path, module, version string, size int, deps ...string) listed {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.go"), make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	p := listed{ImportPath: path, Dir: dir, GoFiles: []string{"a.go"}, Deps: deps}
	p.Module = &struct {
		Path    string
		Version string
		Main    bool
	}{Path: module, Version: version}
	return p
}

// A package is shared only when it and everything it depends on have the same versions: a
// changed dependency makes its importers compile again, as Go's build cache does.
func TestAccountSharesOnlyIdenticalClosures(t *testing.T) {
	seen := map[string]bool{}
	first := account("first", []listed{
		pkg(t, "x/b", "x/b", "v1", 100),
		pkg(t, "x/a", "x/a", "v1", 10, "x/b"),
		pkg(t, "x/c", "x/c", "v1", 1000),
	}, seen)
	if first.total != 1110 || first.added != 1110 || first.newPackages != 3 {
		t.Fatalf("first build: %+v, want everything new", first)
	}
	second := account("second", []listed{
		pkg(t, "x/b", "x/b", "v2", 100),       // another version: compiled again
		pkg(t, "x/a", "x/a", "v1", 10, "x/b"), // same version, but its dependency changed
		pkg(t, "x/c", "x/c", "v1", 1000),      // same closure: shared
	}, seen)
	if second.total != 1110 || second.added != 110 || second.newPackages != 2 {
		t.Fatalf("second build: %+v, want 110 bytes in 2 packages new", second)
	}
}

// Packages of a main module are never shared between builds of different modules.
func TestAccountMainModulePerBuild(t *testing.T) {
	seen := map[string]bool{}
	p := pkg(t, "m", "m", "", 50)
	p.Module.Main = true
	account("one", []listed{p}, seen)
	if r := account("two", []listed{p}, seen); r.added != 50 {
		t.Fatalf("main package shared across builds: %+v", r)
	}
	if r := account("one", []listed{p}, seen); r.added != 0 {
		t.Fatalf("main package of the same build counted twice: %+v", r)
	}
}

func TestParseBuild(t *testing.T) {
	b, err := parseBuild("kube=scripts/tools/kubernetes=k8s.io/a,./etcd")
	if err != nil || b.label != "kube" || b.dir != "scripts/tools/kubernetes" || len(b.pkgs) != 2 || b.pkgs[1] != "./etcd" || b.tests {
		t.Fatalf("parseBuild = %+v, %v", b, err)
	}
	b, err = parseBuild("unit=.=test:./...,./cmd/...")
	if err != nil || !b.tests || len(b.pkgs) != 2 || b.pkgs[0] != "./..." {
		t.Fatalf("parseBuild with tests = %+v, %v", b, err)
	}
	for _, bad := range []string{"", "kube", "kube=dir", "=dir=pkg", "kube==pkg"} {
		if _, err := parseBuild(bad); err == nil {
			t.Errorf("parseBuild(%q) accepted", bad)
		}
	}
}
