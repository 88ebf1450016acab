// Command buildshare models what Go's build cache shares between builds: for each build, in the
// order given, the Go source it compiles and how much of that no earlier build has compiled.
//
//	buildshare LABEL=DIR=[test:]PKG[,PKG...] ...
//
// Each build is `go list -deps -json PKG...` run in module DIR (a package list written
// "test:PKG,..." is listed with -test, as `go test` compiles it). Go's build cache keys a compiled package by its source and
// by the compiled form of everything it imports, so a package is counted as shared when it, its
// module version and every package it depends on (with theirs) are the same as in an earlier
// build. Sizes are the bytes of the .go files compiled, a proxy for compile time: the model
// ignores cgo, links and the go command's own overhead.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// listed is the part of `go list -json` output the model reads.
type listed struct {
	ImportPath string
	Dir        string
	Standard   bool
	GoFiles    []string
	CgoFiles   []string
	Deps       []string
	Module     *struct {
		Path    string
		Version string
		Main    bool
	}
}

// build is one row of the report.
type build struct {
	label, dir string
	pkgs       []string
	tests      bool // list with -test
}

// row is what one build compiles, in bytes of Go source.
type row struct {
	label                 string
	packages, newPackages int
	total, added          int64
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: buildshare LABEL=DIR=[test:]PKG[,PKG...] ...")
		os.Exit(2)
	}
	var builds []build
	for _, arg := range os.Args[1:] {
		b, err := parseBuild(arg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "buildshare:", err)
			os.Exit(2)
		}
		builds = append(builds, b)
	}
	seen := map[string]bool{}
	var rows []row
	for _, b := range builds {
		pkgs, err := goList(b)
		if err != nil {
			fmt.Fprintf(os.Stderr, "buildshare: %s: %v\n", b.label, err)
			os.Exit(1)
		}
		rows = append(rows, account(b.label, pkgs, seen))
	}
	printTable(os.Stdout, rows)
}

func parseBuild(arg string) (build, error) {
	parts := strings.SplitN(arg, "=", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return build{}, fmt.Errorf("%q: want LABEL=DIR=[test:]PKG[,PKG...]", arg)
	}
	list, tests := strings.CutPrefix(parts[2], "test:")
	return build{label: parts[0], dir: parts[1], pkgs: strings.Split(list, ","), tests: tests}, nil
}

// goList runs go list for one build and returns its packages in dependency order.
func goList(b build) ([]listed, error) {
	args := []string{"list", "-deps", "-json"}
	if b.tests {
		args = append(args, "-test")
	}
	cmd := exec.Command("go", append(args, b.pkgs...)...)
	cmd.Dir = b.dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v: %s", strings.Join(cmd.Args[1:], " "), err, strings.TrimSpace(stderr.String()))
	}
	return decode(bytes.NewReader(out))
}

func decode(r io.Reader) ([]listed, error) {
	dec := json.NewDecoder(r)
	var pkgs []listed
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
}

// account adds one build's packages to seen (the cache keys compiled so far) and returns its row.
// mainKey makes main-module packages distinct per build: they are never shared across modules.
func account(label string, pkgs []listed, seen map[string]bool) row {
	byPath := make(map[string]*listed, len(pkgs))
	for i := range pkgs {
		byPath[pkgs[i].ImportPath] = &pkgs[i]
	}
	r := row{label: label, packages: len(pkgs)}
	for i := range pkgs {
		p := &pkgs[i]
		key := cacheKey(label, p, byPath)
		size := sourceBytes(p)
		r.total += size
		if !seen[key] {
			seen[key] = true
			r.added += size
			r.newPackages++
		}
	}
	return r
}

// cacheKey stands for Go's action ID: the package's identity and version and those of every
// package it depends on.
func cacheKey(label string, p *listed, byPath map[string]*listed) string {
	ids := make([]string, 0, len(p.Deps))
	for _, d := range p.Deps {
		if q := byPath[d]; q != nil {
			ids = append(ids, identity(label, q))
		}
	}
	sort.Strings(ids)
	h := sha256.New()
	io.WriteString(h, identity(label, p))
	for _, id := range ids {
		h.Write([]byte{0})
		io.WriteString(h, id)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func identity(label string, p *listed) string {
	switch {
	case p.Standard:
		return p.ImportPath + "@std"
	case p.Module == nil:
		return p.ImportPath + "@" + p.Dir
	case p.Module.Main:
		return p.ImportPath + "@main@" + label
	default:
		return p.ImportPath + "@" + p.Module.Path + "@" + p.Module.Version
	}
}

func sourceBytes(p *listed) int64 {
	var n int64
	for _, f := range append(append([]string(nil), p.GoFiles...), p.CgoFiles...) {
		if st, err := os.Stat(filepath.Join(p.Dir, f)); err == nil {
			n += st.Size()
		}
	}
	return n
}

func printTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| build, in order | packages | Go source | compiled by no earlier build |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	var total, added int64
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %.1f MB | %.1f MB (%d packages) |\n", r.label, r.packages, mb(r.total), mb(r.added), r.newPackages)
		total += r.total
		added += r.added
	}
	fmt.Fprintf(w, "| all | | %.1f MB | %.1f MB |\n", mb(total), mb(added))
}

func mb(n int64) float64 { return float64(n) / 1e6 }
