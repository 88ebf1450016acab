package freshmachine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Rehearsal is one rehearsal of the commit checked out in Repo.
type Rehearsal struct {
	Repo     string
	Stages   []string  // make targets, in order (DefaultStages)
	Keep     bool      // keep the temporary directory (clone, caches, logs) even when every stage passed
	Progress io.Writer // every line it prints goes here (stderr)
}

// Run clones HEAD into a temporary directory, runs each stage there with Env until one fails,
// and prints the summary. It returns an error when a stage failed or the clone could not be made.
func (r Rehearsal) Run(ctx context.Context) error {
	tmp, err := os.MkdirTemp("", "galleon-fresh.")
	if err != nil {
		return err
	}
	keep := r.Keep
	defer func() { r.cleanup(tmp, keep) }()
	commit, err := r.clone(ctx, tmp)
	if err != nil {
		return err
	}
	start := time.Now()
	var results []StageResult
	for _, stage := range r.Stages {
		res := r.stage(ctx, tmp, stage)
		results = append(results, res)
		if !res.OK() {
			keep = true
			break
		}
	}
	WriteSummary(r.Progress, commit, cores(), time.Now(), results, time.Since(start))
	for _, res := range results {
		if !res.OK() {
			return fmt.Errorf("make %s %s; its log is in %s", res.Stage, res.Result, filepath.Join(tmp, "logs", res.Stage+".log"))
		}
	}
	return ctx.Err()
}

// clone clones r.Repo's HEAD into tmp/galleon and makes the empty cache directories; it returns
// the commit.
func (r Rehearsal) clone(ctx context.Context, tmp string) (string, error) {
	commit, err := gitOutput(ctx, r.Repo, "rev-parse", "HEAD")
	if err != nil {
		return "", fmt.Errorf("%s is not a git checkout (%v): the rehearsal clones its HEAD", r.Repo, err)
	}
	if status, _ := gitOutput(ctx, r.Repo, "status", "--porcelain", "--untracked-files=no"); status != "" {
		fmt.Fprintf(r.Progress, "fresh-machine: note: uncommitted changes are not rehearsed (HEAD is %s)\n", commit)
	}
	clone := filepath.Join(tmp, "galleon")
	if _, err := gitOutput(ctx, "", "clone", "--quiet", "--no-hardlinks", r.Repo, clone); err != nil {
		return "", fmt.Errorf("git clone %s: %v", r.Repo, err)
	}
	if _, err := gitOutput(ctx, clone, "checkout", "--quiet", commit); err != nil {
		return "", fmt.Errorf("git checkout %s in the clone: %v", commit, err)
	}
	for _, d := range cacheDirs(tmp) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	return commit, nil
}

// stage runs make stage in the clone, output to logs/<stage>.log, and says how it went.
func (r Rehearsal) stage(ctx context.Context, tmp, stage string) StageResult {
	log := filepath.Join(tmp, "logs", stage+".log")
	fmt.Fprintf(r.Progress, "fresh-machine: make %s (log %s) ...\n", stage, log)
	start := time.Now()
	res := StageResult{Stage: stage, Result: exitResult(runMake(ctx, filepath.Join(tmp, "galleon"), Env(os.Environ(), tmp), stage, log))}
	res.Took = time.Since(start)
	m, s := minSec(res.Took)
	fmt.Fprintf(r.Progress, "fresh-machine: make %s: %s in %d min %d s\n", stage, res.Result, m, s)
	data, _ := os.ReadFile(log)
	if !res.OK() {
		r.Progress.Write(lastLines(data, 40))
		return res
	}
	if stage == "test" {
		lines, _ := TestSummary(bytes.NewReader(data))
		for _, l := range lines {
			fmt.Fprintln(r.Progress, l)
		}
	}
	return res
}

// runMake runs `make stage` in dir with env, stdin empty, all output to the file log. When ctx
// ends, make and everything it started are stopped.
func runMake(ctx context.Context, dir string, env []string, stage, log string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, "make", stage)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 10 * time.Second
	return cmd.Run()
}

// cleanup removes tmp unless it is to be kept. The module cache is read-only by design; it is
// made writable first.
func (r Rehearsal) cleanup(tmp string, keep bool) {
	if keep {
		fmt.Fprintf(r.Progress, "kept %s\n", tmp)
		return
	}
	_ = filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o755)
		}
		return nil
	})
	if err := os.RemoveAll(tmp); err != nil {
		fmt.Fprintf(r.Progress, "fresh-machine: could not remove %s: %v\n", tmp, err)
	}
}

func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return strings.TrimSpace(string(out)), err
}
