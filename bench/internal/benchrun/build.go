package benchrun

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// mainModule is the product's module; the bench module replaces it with ../.
const mainModule = "github.com/galleon-mesh/galleon"

// RepoRoot is the main module's directory (the checkout), as go resolves it from the working
// directory: in the bench module through its replace directive.
func RepoRoot(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", mainModule)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("cannot find the directory of %s (go list -m: %v): run galleon-bench in the checkout's bench/", mainModule, err)
	}
	return dir, nil
}

// GoBuild runs `go build -o out pkgs...` in dir (a module's directory) with GOWORK=off, its
// output appended to log. out ending in "/" is a directory for several binaries.
func GoBuild(ctx context.Context, dir, log, out string, pkgs ...string) error {
	return goCmd(ctx, dir, log, append([]string{"build", "-o", out}, pkgs...)...)
}

// GoTestBinary runs `go test -c -o out pkg` in dir, its output appended to log.
func GoTestBinary(ctx context.Context, dir, log, out, pkg string) error {
	return goCmd(ctx, dir, log, "test", "-c", "-o", out, pkg)
}

func goCmd(ctx context.Context, dir, log string, args ...string) error {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", log, err)
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s in %s (see %s): %w", strings.Join(args, " "), dir, log, err)
	}
	return nil
}

// GitArchive extracts revision rev of the checkout repo into dest (git archive | tar -x).
func GitArchive(ctx context.Context, repo, rev, dest string) error {
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	archive := exec.CommandContext(ctx, "git", "-C", repo, "archive", rev)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dest)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var stderr strings.Builder
	archive.Stderr, untar.Stderr = &stderr, &stderr
	if err := untar.Start(); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	aerr := archive.Run()
	uerr := untar.Wait()
	if aerr != nil || uerr != nil {
		return fmt.Errorf("git archive %s | tar -x: %v %v %s", rev, aerr, uerr, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Revision is rev's short commit in repo, an error when rev names no commit.
func Revision(ctx context.Context, repo, rev string) (string, error) {
	if _, err := gitOut(ctx, repo, "rev-parse", "--verify", "--quiet", rev+"^{commit}"); err != nil {
		return "", fmt.Errorf("%s: not a revision of %s", rev, repo)
	}
	return gitOut(ctx, repo, "rev-parse", "--short", rev)
}

// CommitOf is dir's checkout's short commit, "+dirty" when it has changes; "unknown" outside
// a checkout.
func CommitOf(ctx context.Context, dir string) string {
	commit, err := gitOut(ctx, dir, "rev-parse", "--short", "HEAD")
	if err != nil {
		return "unknown"
	}
	if st, err := gitOut(ctx, dir, "status", "--porcelain"); err == nil && st != "" {
		commit += "+dirty"
	}
	return commit
}

func gitOut(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...).Output()
	return strings.TrimSpace(string(out)), err
}

// GoVersion is `go env GOVERSION` ("go" when go does not answer).
func GoVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v
	}
	return "go"
}

// GoModVersion is the version of module mod in dir's build list (go list -m), "?" when unknown.
func GoModVersion(ctx context.Context, dir, mod string) string {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", mod)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v
	}
	return "?"
}

// NeedTools fails when one of tools is not on PATH.
func NeedTools(tools ...string) error {
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%s is not on PATH", t)
		}
	}
	return nil
}

// RunTo runs argv (a Pin prefix may lead it) in the foreground, its stdout and stderr appended to
// log; the error is exec's, for the caller to explain from the log.
func RunTo(ctx context.Context, log string, argv ...string) error {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", log, err)
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	return cmd.Run()
}

// BuildBinaries builds, into BinDir, the main module's packages product (./cmd/galleon-file)
// and the bench module's packages bench (./cmd/galleon-load), root being the checkout; the go
// commands' output goes to LogDir/build.log.
func (r *Run) BuildBinaries(ctx context.Context, root string, product, bench []string) error {
	log := filepath.Join(r.LogDir, "build.log")
	for _, b := range []struct {
		dir  string
		pkgs []string
	}{{root, product}, {filepath.Join(root, "bench"), bench}} {
		if len(b.pkgs) == 0 {
			continue
		}
		if err := goCmd(ctx, b.dir, log, append([]string{"build", "-o", r.BinDir + "/"}, b.pkgs...)...); err != nil {
			return fmt.Errorf("go build %s in %s (see %s)", strings.Join(b.pkgs, " "), b.dir, log)
		}
	}
	return nil
}
