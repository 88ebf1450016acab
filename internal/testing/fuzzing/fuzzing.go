// Package fuzzing runs the product module's fuzz targets (`devtool fuzz`, make fuzz and make
// fuzz-short). Each target parses or handles input from outside the process: a registry file, a
// Consul agent's answer, an xDS or legacy MCP client's requests. The targets are found in the
// source, so a new one runs without being listed anywhere.
//
// A failing input is written by go under the package's testdata/fuzz/<Target>/: commit it, and it
// runs as a regression test in every `go test` from then on (the seeds in the code run too).
//
// Go 1.26's fuzz coordinator can fail a target with a bare "context deadline exceeded" when a
// duration -fuzztime ends while a worker is still busy (go.dev/issue/75804, fixed in Go 1.27): on
// a loaded machine it happens with no input at fault. The short pass therefore counts inputs (Nx),
// which has no deadline; with a duration, such a failure that wrote no failing input is reported
// as that bug and not counted.
package fuzzing

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Target is one fuzz function: Name in the package Pkg, a path relative to the module's root
// written as go test takes it ("./adapters/file").
type Target struct {
	Pkg  string
	Name string
}

// Targets finds every `func FuzzXxx(f *testing.F)` in the _test.go files of the module rooted at
// root, in package order and then file order. Directories holding a module of their own (test/,
// bench/, scripts/tools/...) and those go ignores (testdata, vendor, names starting with . or _)
// are not the module's packages and are skipped; files excluded by build constraints on this
// platform are skipped as go test would.
func Targets(root string) ([]Target, error) {
	var targets []Target
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != root && skipDir(path, d.Name()) {
			return filepath.SkipDir
		}
		found, err := dirTargets(root, path)
		targets = append(targets, found...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("finding the fuzz targets under %s: %w", root, err)
	}
	return targets, nil
}

func skipDir(path, name string) bool {
	if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
		return true
	}
	_, err := os.Stat(filepath.Join(path, "go.mod"))
	return err == nil // another module
}

// dirTargets is the fuzz targets of the package in dir.
func dirTargets(root, dir string) ([]Target, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return nil, err
	}
	pkg := "./" + filepath.ToSlash(rel)
	if rel == "." {
		pkg = "."
	}
	var targets []Target
	for _, file := range files {
		if ok, err := build.Default.MatchFile(dir, filepath.Base(file)); err != nil || !ok {
			continue // another platform's file, or one go would reject as well
		}
		names, err := fileTargets(file)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			targets = append(targets, Target{Pkg: pkg, Name: n})
		}
	}
	return targets, nil
}

// fileTargets is the names of the fuzz functions declared in one test file: what go test's
// -fuzz runs, a top-level FuzzXxx (Xxx not starting with a lower-case letter) whose one
// parameter is a *testing.F.
func fileTargets(file string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	testing := testingName(f)
	if testing == "" {
		return nil, nil
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if ok && fn.Recv == nil && isFuzzName(fn.Name.Name) && takesF(fn.Type, testing) {
			names = append(names, fn.Name.Name)
		}
	}
	return names, nil
}

// testingName is the name file f gives the testing package ("" if it does not import it).
func testingName(f *ast.File) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "testing" {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return "testing"
		}
	}
	return ""
}

func isFuzzName(name string) bool {
	rest, ok := strings.CutPrefix(name, "Fuzz")
	if !ok {
		return false
	}
	r, _ := utf8.DecodeRuneInString(rest)
	return rest == "" || !unicode.IsLower(r)
}

func takesF(t *ast.FuncType, testing string) bool {
	if t.Results != nil || len(t.Params.List) != 1 || len(t.Params.List[0].Names) > 1 {
		return false
	}
	star, ok := t.Params.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == testing && sel.Sel.Name == "F"
}

// Runner runs fuzz targets one after the other with `Go test -run '^$' -fuzz '^Name$'
// -fuzztime FuzzTime Pkg` in Dir. go's output goes to Out as it comes; progress lines to Progress.
type Runner struct {
	Go       string // the go command
	Dir      string // the module's root
	FuzzTime string // a duration ("30s") or a count of inputs ("3000x")
	Out      io.Writer
	Progress io.Writer
}

// Run runs every target, even after a failure, and returns the names of those that failed (a
// failure that is Go's deadline race is reported on Progress and not counted). An error is
// returned only when ctx ends.
func (r Runner) Run(ctx context.Context, targets []Target) (failed []string, err error) {
	for _, t := range targets {
		fmt.Fprintf(r.Progress, "fuzz: %s (%s) for %s\n", t.Name, t.Pkg, r.FuzzTime)
		log, ok := r.runOne(ctx, t)
		if err := ctx.Err(); err != nil {
			return failed, err
		}
		switch {
		case ok:
		case DeadlineRace(r.FuzzTime, log):
			fmt.Fprintf(r.Progress, "fuzz: %s ended with Go's fuzztime deadline race (go.dev/issue/75804), not a failing input: not counted\n", t.Name)
		default:
			failed = append(failed, t.Name)
		}
	}
	return failed, nil
}

// runOne runs one target and returns its output and whether go test passed.
func (r Runner) runOne(ctx context.Context, t Target) ([]byte, bool) {
	var log bytes.Buffer
	cmd := exec.CommandContext(ctx, r.Go, "test", "-run", "^$", "-fuzz", "^"+t.Name+"$", "-fuzztime", r.FuzzTime, t.Pkg)
	cmd.Dir = r.Dir
	cmd.Stdout = io.MultiWriter(r.Out, &log)
	cmd.Stderr = cmd.Stdout
	err := cmd.Run()
	if err != nil && log.Len() == 0 {
		fmt.Fprintf(&log, "fuzz: %s %s: %v\n", r.Go, strings.Join(cmd.Args[1:], " "), err) // go did not start
		fmt.Fprint(r.Out, log.String())
	}
	return log.Bytes(), err == nil
}

// testLine is a t.Errorf or t.Fatalf line of go test's output ("    foo_test.go:12: ..."), or a
// panic. The indentation is matched within the line, as grep matched it.
var testLine = regexp.MustCompile(`(?m)^[ \t\v\f\r]+[a-z_]+_test\.go:[0-9]+:|panic:`)

// DeadlineRace tells whether a failed target's output is Go's fuzztime deadline race
// (go.dev/issue/75804) rather than a failing input: a duration fuzztime (a count has no
// deadline), "context deadline exceeded", no failing input written, no test's error line and no
// panic.
func DeadlineRace(fuzzTime string, log []byte) bool {
	return !strings.HasSuffix(fuzzTime, "x") &&
		bytes.Contains(log, []byte("context deadline exceeded")) &&
		!bytes.Contains(log, []byte("Failing input written")) &&
		!testLine.Match(log)
}
