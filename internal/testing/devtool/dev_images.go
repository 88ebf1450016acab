package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/galleon-mesh/galleon/internal/testing/imagebuild"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

const imagesUsage = "[DIR | test | deps | tool]  one OCI image per adapter, no container engine, into DIR (default <cache>/images); " +
	"test: into <cache>/images-test, then scripts/tools/images' tests on them; deps: download their modules; tool: print the image writer's path"

func imagesCommand() command {
	return command{name: "images", usage: imagesUsage, run: runImages}
}

func runImages(ctx context.Context, args []string) error {
	root, err := toolcache.RepoRoot()
	if err != nil {
		return err
	}
	b := imagebuild.Builder{Root: root, Out: os.Stdout, Progress: os.Stderr}
	if len(args) > 1 || len(args) == 1 && (args[0] == "help" || strings.HasPrefix(args[0], "-")) {
		return usageError{msg: "usage: images " + imagesUsage, exit: 2}
	}
	sub := ""
	if len(args) == 1 {
		sub = args[0]
	}
	switch sub {
	case "test":
		return b.Test(ctx)
	case "deps":
		return b.Deps(ctx)
	case "tool":
		tool, err := b.Tool(ctx)
		if err == nil {
			fmt.Println(tool)
		}
		return err
	}
	out := filepath.Join(toolcache.Dir(), "images")
	if sub != "" {
		if out, err = filepath.Abs(sub); err != nil {
			return err
		}
	}
	version := os.Getenv("GALLEON_IMAGE_VERSION")
	if version == "" {
		if version, err = imagebuild.ChartVersion(root); err != nil {
			return err
		}
	}
	return b.Build(ctx, out, version)
}
