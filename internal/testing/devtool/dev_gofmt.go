package main

import (
	"bytes"
	"context"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

func gofmtCheckCommand() command {
	return command{
		name:  "gofmt-check",
		usage: "list the tracked .go files (generated .pb.go aside) that gofmt would change, and fail if there is one (make vet)",
		run:   runGofmtCheck,
	}
}

func runGofmtCheck(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usageError{msg: "usage: gofmt-check (no arguments)", exit: 2}
	}
	root, err := toolcache.RepoRoot()
	if err != nil {
		return err
	}
	files, err := trackedGoFiles(ctx, root)
	if err != nil {
		return err
	}
	var unformatted []string
	for _, f := range files {
		ok, err := gofmtted(filepath.Join(root, f))
		if err != nil {
			return err
		}
		if !ok {
			unformatted = append(unformatted, f)
		}
	}
	if len(unformatted) > 0 {
		fmt.Printf("gofmt needed:\n%s\n", strings.Join(unformatted, "\n"))
		return fmt.Errorf("%d files are not gofmt-formatted; do: gofmt -w them", len(unformatted))
	}
	return nil
}

// trackedGoFiles is `git ls-files '*.go'` in root without the generated .pb.go files, whose
// format is protoc-gen-go's.
func trackedGoFiles(ctx context.Context, root string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", "ls-files", "-z", "*.go")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %v (gofmt-check lists the tracked files; run it in a clone)", root, err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" && !strings.HasSuffix(f, ".pb.go") {
			files = append(files, f)
		}
	}
	return files, nil
}

// gofmtted tells whether the file is as gofmt would write it (go/format is gofmt's formatting).
// A file git tracks but the work tree lacks (deleted, not yet staged) is not checked.
func gofmtted(path string) (bool, error) {
	src, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	formatted, err := format.Source(src)
	if err != nil {
		return false, fmt.Errorf("%s does not parse: %v", path, err)
	}
	return bytes.Equal(src, formatted), nil
}
