package treerules

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/galleon-mesh/galleon"

// pkg is one directory of the main module: the module-local packages its non-test files
// import (tests may reach for test helpers anywhere below cmd).
type pkg struct {
	dir     string // slash-separated, relative to the module root
	imports map[string]bool
	files   []string // non-test .go files, relative to the root
}

// root is the main module's root: this package is internal/testing/treerules.
func root(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..", "..")
}

// packages reads the import clauses of every non-test Go file of the main module (not the
// nested modules: test/, docs/example-adapter, scripts/tools).
func packages(t *testing.T) map[string]*pkg {
	t.Helper()
	base := root(t)
	out := map[string]*pkg{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		p := out[dir]
		if p == nil {
			p = &pkg{dir: dir, imports: map[string]bool{}}
			out[dir] = p
		}
		p.files = append(p.files, rel)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if local, ok := strings.CutPrefix(path, module+"/"); ok {
				p.imports[local] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 20 {
		t.Fatalf("read %d packages under %s: is this the module root?", len(out), base)
	}
	return out
}

func under(dir, prefix string) bool { return dir == prefix || strings.HasPrefix(dir, prefix+"/") }

// TestImportsRunOneWay: the SDK (model, registry, daemon) sits at the root, the core below
// internal/, and no package imports one of a layer above it.
func TestImportsRunOneWay(t *testing.T) {
	pkgs := packages(t)
	// allowed says which module-local imports a package may have, by its directory.
	allowed := func(dir, imp string) bool {
		switch {
		case under(dir, "model"):
			return false
		case under(dir, "registry"):
			return under(imp, "model") || under(imp, "registry")
		case under(dir, "daemon"):
			return imp == "internal/server" || under(imp, "model") || under(imp, "registry")
		case under(dir, "internal/testing"), under(dir, "internal/loadtest"):
			return !under(imp, "cmd") // test and load tooling: anything below the binaries
		case under(dir, "internal/server"):
			return under(imp, "internal") || under(imp, "model") || under(imp, "registry") || under(imp, "proto")
		case under(dir, "internal"):
			return (under(imp, "internal") && !under(imp, "internal/server") && !under(imp, "internal/testing") &&
				!under(imp, "internal/loadtest")) || under(imp, "model") || under(imp, "registry") || under(imp, "proto")
		case under(dir, "adapters"):
			return true // TestAdaptersArePartners
		case under(dir, "cmd"), under(dir, "proto"):
			return true
		}
		return false
	}
	checked := 0
	for _, p := range pkgs {
		for imp := range p.imports {
			checked++
			if !allowed(p.dir, imp) {
				t.Errorf("%s imports %s: imports run cmd -> daemon -> internal/server -> internal/* -> registry -> model", p.dir, imp)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no module-local import was read")
	}
}

// TestAdaptersArePartners: an adapter's product code imports only what a partner's can (model,
// registry, daemon) and its own packages, so every build proves the SDK is enough. An adapter's
// <name>test package, the harness that runs its real server for tests, is test tooling and may
// use the harness kit (internal/testing/serverproc).
func TestAdaptersArePartners(t *testing.T) {
	pkgs := packages(t)
	adapters := 0
	for _, p := range pkgs {
		if !under(p.dir, "adapters") {
			continue
		}
		parts := strings.Split(p.dir, "/")
		if len(parts) < 2 {
			continue
		}
		adapters++
		own := "adapters/" + parts[1]
		if len(parts) == 3 && parts[2] == parts[1]+"test" || parts[1] == "zookeeper" && len(parts) == 3 && parts[2] == "zktest" {
			continue // the real server's harness
		}
		for imp := range p.imports {
			if under(imp, "model") || under(imp, "registry") || under(imp, "daemon") || under(imp, own) {
				continue
			}
			t.Errorf("%s imports %s: an adapter imports only model, registry, daemon and its own packages (%s/...)", p.dir, imp, own)
		}
	}
	if adapters < 4 {
		t.Fatalf("found %d adapter packages, want the four adapters at least", adapters)
	}
}
