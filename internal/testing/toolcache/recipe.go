package toolcache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Recipe is how one third-party binary gets into the tool cache: built with `go build` from a
// wrapper module committed in the repository (go.mod pins the upstream module, go.sum is
// committed, so the build asks the module proxy only for .mod and .zip files), under the stall
// watchdog (RunGo), with a flock between concurrent builds (BuildCached). Consul, Polaris,
// Staticcheck, IstiodRecipe and KubeTool return the recipes; Build builds, Path only looks.
type Recipe struct {
	Name    string // the binary's name in the cache, e.g. "consul"
	Version string // its version in the cache name, e.g. "1.22.6": Bin(Name, Version)
	EnvVar  string // the variable naming another binary to use instead ("" if none)
	Make    string // the make target that builds it
	ModDir  string // the wrapper module, relative to the repository root

	// Module is the upstream module ModDir's go.mod must require at ModuleVersion (CheckPin);
	// PinFix says what to do when it does not.
	Module, ModuleVersion, PinFix string

	// inputs are files of ModDir that key the build beside go.sum (Polaris's patches).
	inputs []string
	// about is how long a first build takes, for the "building ..." line ("" says nothing).
	about string
	// build writes the binary to b.out; its error is one line that says what to do.
	build func(ctx context.Context, b buildRun) error
}

// buildRun is one build of a recipe: where the repository and the wrapper module are, where the
// binary goes, the go log and where progress goes.
type buildRun struct {
	name, root, modDir, out, log string
	progress                     io.Writer
}

// CachePath is where the recipe's binary is cached: Bin(Name, Version).
func (r Recipe) CachePath() string { return Bin(r.Name, r.Version) }

// Path returns $EnvVar if set, else the cached binary; it builds nothing (devtool path).
func (r Recipe) Path() (string, error) {
	if p, set, err := r.envBinary(); set || err != nil {
		return p, err
	}
	bin := r.CachePath()
	if CheckExecutable(bin) != nil {
		return "", fmt.Errorf("%s does not exist; run `go run ./internal/testing/devtool build %s` (or make %s)", bin, r.buildArgs(), r.Make)
	}
	return bin, nil
}

// Build returns $EnvVar if set, else the cached binary, built first if it is missing or was
// built from another go.sum. Progress goes to progress (nil: nowhere); the error is one line.
func (r Recipe) Build(ctx context.Context, progress io.Writer) (string, error) {
	return r.ensure(ctx, progress, true)
}

// Tool is the recipe as a Tool whose Path builds in-process, quietly when the binary is cached.
func (r Recipe) Tool() Tool {
	return Tool{
		Name: r.Name, Version: r.Version, EnvVar: r.EnvVar, Make: r.Make,
		Build: func(ctx context.Context, progress io.Writer) (string, error) { return r.ensure(ctx, progress, false) },
	}
}

func (r Recipe) buildArgs() string {
	if r.Name == "pilot-discovery" {
		return r.Name + " " + r.Version
	}
	return r.Name
}

func (r Recipe) envBinary() (string, bool, error) {
	if r.EnvVar == "" {
		return "", false, nil
	}
	return EnvBinary(r.EnvVar, r.Name)
}

// The cache key. A binary's name says its version (consul-1.22.6), not the build list it was
// built from, so a changed go.sum (a dependency raised, a patch changed) would go on using the
// old binary. The hash of what the build reads from the repository (the wrapper module's go.sum
// and the recipe's inputs) is kept beside the binary in <bin>.gosum instead of in its name: the
// names of the binaries already cached stay valid (the Makefile, the docs and other machines'
// caches name them), and a binary that has no .gosum yet, built before there were any, is adopted
// as it is, once: it was built from the go.sum of its day, which the next change of go.sum
// replaces anyway. A different hash removes the binary, so that the build below makes it again.
// The key is coarse on purpose: the whole go.sum, not the part of it the binary's packages use
// (which would take loading them, seconds on every look-up). So a go.sum change that does not
// touch the binary (test/go.sum, which istiod 1.29.2 is built from, changes with the tests'
// dependencies) rebuilds it too; the Go build cache makes that mostly a link. Two runs that find
// the binary stale at once may both remove it; the flock of BuildCached then has one build it
// and the other use it (or, in a narrow window, build it a second time).

// stampPath is the file beside bin that holds the hash of the inputs bin was built from.
func stampPath(bin string) string { return bin + ".gosum" }

// inputsHash is the SHA-256 of the wrapper module's go.sum and the recipe's inputs.
func (r Recipe) inputsHash(root string) (string, error) {
	h := sha256.New()
	for _, name := range append([]string{"go.sum"}, r.inputs...) {
		data, err := os.ReadFile(filepath.Join(root, r.ModDir, name))
		if err != nil {
			return "", fmt.Errorf("%s: cannot read %s: %v", r.Name, filepath.Join(r.ModDir, name), err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fresh reports whether the cached bin was built from inputs whose hash is sum, adopting a
// binary without a stamp. A stale binary is removed.
func fresh(bin, sum string, progress io.Writer) (bool, error) {
	if CheckExecutable(bin) != nil {
		return false, nil
	}
	stamp, err := os.ReadFile(stampPath(bin))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return true, writeStamp(bin, sum)
	case err != nil:
		return false, fmt.Errorf("cannot read %s: %v", stampPath(bin), err)
	case strings.TrimSpace(string(stamp)) == sum:
		return true, nil
	}
	fmt.Fprintf(progress, "%s was built from another go.sum; building it again\n", bin)
	// A process that runs the old binary keeps it; unlinking does not stop it.
	if err := os.Remove(bin); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("cannot remove the stale %s: %v (remove it by hand)", bin, err)
	}
	return false, nil
}

func writeStamp(bin, sum string) error {
	if err := os.WriteFile(stampPath(bin), []byte(sum+"\n"), 0o644); err != nil {
		return fmt.Errorf("cannot write %s: %v (set GALLEON_CACHE to a writable directory)", stampPath(bin), err)
	}
	return nil
}

// ensure is Build; announceCached says whether a cached binary is reported to progress (the
// devtool does, a test harness that asks for it every test does not).
func (r Recipe) ensure(ctx context.Context, progress io.Writer, announceCached bool) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	if p, set, err := r.envBinary(); set || err != nil {
		return p, err
	}
	bin := r.CachePath()
	root, err := RepoRoot()
	if err != nil {
		if CheckExecutable(bin) == nil {
			return bin, nil // nothing to compare it with outside the repository
		}
		return "", fmt.Errorf("%s %s is not at %s and %s cannot be found to build it: %v (run `make %s` in the repository%s)",
			r.Name, r.Version, bin, r.ModDir, err, r.Make, r.orSetEnv())
	}
	if err := r.CheckPin(root); err != nil {
		return "", err
	}
	sum, err := r.inputsHash(root)
	if err != nil {
		return "", err
	}
	ok, err := fresh(bin, sum, progress)
	if err != nil {
		return "", err
	}
	if ok && !announceCached {
		return bin, nil
	}
	return BuildCached(ctx, r.Name, r.Version, progress, func(ctx context.Context, out string) error {
		run := buildRun{name: r.Name, root: root, modDir: filepath.Join(root, r.ModDir), out: out, log: LogPath(r.Name + "-" + r.Version), progress: progress}
		if r.about != "" {
			fmt.Fprintf(progress, "building %s %s from %s/go.mod (%s; log %s)...\n", r.Name, r.Version, r.ModDir, r.about, run.log)
		}
		if err := r.build(ctx, run); err != nil {
			return err
		}
		// Written before BuildCached renames out into place: a binary without its stamp
		// would be adopted as it is.
		return writeStamp(bin, sum)
	})
}

func (r Recipe) orSetEnv() string {
	if r.EnvVar == "" {
		return ""
	}
	return ", or set $" + r.EnvVar
}

// CheckPin returns nil if ModDir's go.mod requires Module at ModuleVersion (read from the file:
// no network), else an error that says what to do.
func (r Recipe) CheckPin(root string) error {
	if r.Module == "" {
		return nil
	}
	got, err := GoModRequire(filepath.Join(root, r.ModDir), r.Module)
	if err != nil {
		return fmt.Errorf("%s: %v", r.Name, err)
	}
	if got != r.ModuleVersion {
		if got == "" {
			got = "nothing"
		}
		return fmt.Errorf("%s/go.mod requires %s %s, expected %s: %s", r.ModDir, r.Module, got, r.ModuleVersion, r.PinFix)
	}
	return nil
}

// goBuild is the usual recipe body: go build pkg in the wrapper module with ToolLDFlags and
// ldflags; a failure is classified by Failure with tried and fix.
func goBuild(pkg, ldflags, tried, fix string) func(ctx context.Context, b buildRun) error {
	return func(ctx context.Context, b buildRun) error {
		if err := GoBuild(ctx, b.log, b.modDir, b.out, pkg, "-ldflags", strings.TrimSpace(ToolLDFlags+" "+ldflags)); err != nil {
			return Failure(b.name, b.log, tried, fix)
		}
		return nil
	}
}

// printVersion runs `bin version` into progress, as the scripts did after a build: the binary
// says what it is. Its failure does not fail the build.
func printVersion(ctx context.Context, bin string, progress io.Writer) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "version")
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run()
	progress.Write(out.Bytes())
}
