package main

import (
	"context"
	"os"
	"strings"

	"github.com/galleon-mesh/galleon/internal/testing/freshmachine"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

func freshMachineCommand() command {
	return command{
		name: "fresh-machine",
		usage: "rehearse a new user's first run: clone HEAD to a temp dir, run make demo and make test with empty Go and tool caches, print the time of each " +
			"(FRESH_KEEP=1 keeps the temp dir; FRESH_STAGES=\"test\" runs only some)",
		run: runFreshMachine,
	}
}

func runFreshMachine(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usageError{msg: "usage: fresh-machine (no arguments; FRESH_KEEP=1, FRESH_STAGES=\"demo test\")", exit: 2}
	}
	root, err := toolcache.RepoRoot()
	if err != nil {
		return err
	}
	stages := freshmachine.DefaultStages
	if s := strings.Fields(os.Getenv("FRESH_STAGES")); len(s) > 0 {
		stages = s
	}
	r := freshmachine.Rehearsal{Repo: root, Stages: stages, Keep: os.Getenv("FRESH_KEEP") != "", Progress: os.Stderr}
	return r.Run(ctx)
}
