package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// coreCommands are the devtool's commands defined in this file.
func coreCommands() []command {
	return []command{
		{
			name:  "deps",
			usage: `-modules "DIR..." | DIR...  download what each Go module needs to build and test, under the stall watchdog (make deps)`,
			run:   runDeps,
		},
		{
			name:  "cache-dir",
			usage: "[dir | bin [NAME VERSION]]  print the tool cache's directory, its bin/, or a binary's path there",
			run:   runCacheDir,
		},
	}
}

// runDeps downloads what every module given (directories relative to the repository root) needs
// to build and test, before anything else of `make test` runs: `go list -deps -test ./...` loads
// every package and test of a module, which needs each module's .mod and .zip and nothing else
// (no .info). It runs under the stall watchdog (toolcache.RunGo), so a request the module proxy
// never answers is retried instead of hanging `go vet` or `go test` until CI's time runs out.
func runDeps(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("deps", flag.ContinueOnError)
	list := fs.String("modules", "", "the module directories, relative to the repository root, space-separated (make's $(MODULES))")
	if err := fs.Parse(args); err != nil {
		return usageError{msg: err.Error(), exit: 2}
	}
	modules := append(strings.Fields(*list), fs.Args()...)
	if len(modules) == 0 {
		return usageError{msg: `no module given: deps -modules "DIR..." (the Makefile passes $(MODULES))`, exit: 2}
	}
	root, err := toolcache.RepoRoot()
	if err != nil {
		return fmt.Errorf("%v (run it inside the repository)", err)
	}
	for _, mod := range modules {
		if err := downloadModule(ctx, root, mod); err != nil {
			return err
		}
	}
	return nil
}

// downloadModule is runDeps for one module directory; its error is one line.
func downloadModule(ctx context.Context, root, mod string) error {
	dir := filepath.Join(root, mod)
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return fmt.Errorf("%s is not a Go module (no go.mod there): fix the module list (the Makefile's MODULES)", mod)
	}
	log := toolcache.LogPath("deps-" + strings.ReplaceAll(mod, "/", "-"))
	start := time.Now()
	flags := "GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=readonly")
	if err := toolcache.RunGo(ctx, log, dir, []string{flags}, "list", "-deps", "-test", "./..."); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped while downloading the modules of %s: %w", mod, ctx.Err())
		}
		return toolcache.Failure("", log, "go list -deps -test ./... in "+mod+" (committed go.sum)",
			"retry later (make test resumes where the downloads stopped)")
	}
	os.Remove(log) // kept only when something went wrong
	if took := time.Since(start); took > 2*time.Second {
		fmt.Fprintf(os.Stderr, "devtool deps: modules of %s ready in %d s\n", mod, int(took.Seconds()))
	}
	return nil
}

// runCacheDir prints the tool cache's paths (as scripts/cache-dir.sh did): its directory (no
// argument, or dir), its bin/ (bin), or where a binary is cached (bin NAME VERSION).
func runCacheDir(_ context.Context, args []string) error {
	what := "dir"
	if len(args) > 0 {
		what = args[0]
	}
	switch {
	case what == "dir" && len(args) <= 1:
		fmt.Println(toolcache.Dir())
	case what == "bin" && len(args) == 3:
		fmt.Println(toolcache.Bin(args[1], args[2]))
	case what == "bin" && len(args) == 1:
		fmt.Println(toolcache.BinDir())
	default:
		return usageError{msg: "usage: cache-dir [dir | bin [NAME VERSION]]", exit: 2}
	}
	return nil
}
