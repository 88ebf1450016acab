package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/galleon-mesh/galleon/internal/testing/fuzzing"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

func fuzzCommand() command {
	return command{
		name:  "fuzz",
		usage: "[-fuzztime 30s] run every fuzz target of the product module for a while ($FUZZTIME; 3000x = 3,000 inputs each)",
		run:   runFuzz,
	}
}

func runFuzz(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
	fuzzTime := fs.String("fuzztime", devEnv("FUZZTIME", "30s"), "how long each target runs: a duration, or Nx for N inputs")
	if err := fs.Parse(args); err != nil {
		return usageError{msg: err.Error(), exit: 2}
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected arguments %q", fs.Args()), exit: 2}
	}
	root, err := toolcache.RepoRoot()
	if err != nil {
		return err
	}
	targets, err := fuzzing.Targets(root)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		return fmt.Errorf("no fuzz target found under %s: a func FuzzXxx(f *testing.F) in a _test.go file is one", root)
	}
	r := fuzzing.Runner{Go: devEnv("GO", "go"), Dir: root, FuzzTime: *fuzzTime, Out: os.Stdout, Progress: os.Stderr}
	failed, err := r.Run(ctx, targets)
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d fuzz targets failed: %s (their output is above)", len(failed), len(targets), strings.Join(failed, ", "))
	}
	return nil
}

// devEnv is $name, or def when it is unset or empty (as the scripts' ${name:-def}).
func devEnv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
