package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// runLint is static analysis beyond go vet (make lint, part of make test): staticcheck, at the
// version scripts/tools/lint/go.mod pins, built there from its committed go.sum and cached, run
// on each module given (directories relative to the repository root: the Makefile's MODULES).
// The checks are chosen in staticcheck.conf at the repository root, which staticcheck reads for
// every module below it.
//
// Not here: a `go mod tidy -diff` check. Tidy needs the go.mod of the test dependencies of every
// dependency, which the module cache make deps fills does not hold; fetching them would add
// minutes and many proxy requests to every CI run. A go.mod that a build needs changed already
// fails: every build and test runs with -mod=readonly.
func runLint(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{msg: "lint MODULE...: name the module directories (the Makefile passes $(MODULES))", exit: 2}
	}
	root, err := toolcache.RepoRoot()
	if err != nil {
		return fmt.Errorf("%v (run it inside the repository)", err)
	}
	sc, err := toolcache.Staticcheck().Build(ctx, os.Stderr)
	if err != nil {
		return err
	}
	var failed []string
	for _, mod := range args {
		// What staticcheck loads is fetched first, under the stall watchdog, not from inside
		// staticcheck (make deps has usually fetched it already; then this takes a second).
		if err := downloadModule(ctx, root, mod); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "lint: staticcheck ./... in %s\n", mod)
		cmd := exec.CommandContext(ctx, sc, "./...")
		cmd.Dir = filepath.Join(root, mod)
		cmd.Env = append(os.Environ(), "GOWORK=off")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failed = append(failed, mod)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("staticcheck found problems in %s (listed above): fix them, or justify a //lint:ignore", strings.Join(failed, " "))
	}
	return nil
}

// goPassthrough runs go args in dir (GOWORK=off, env added), its output on stderr, for the
// maintainers' commands that are watched by a person, not by the stall watchdog.
func goPassthrough(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s in %s: %v (its output is above)", strings.Join(args, " "), dir, err)
	}
	return nil
}
