package toolcache

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// AptInstall installs the Debian packages pkgs that what (e.g. "ZooKeeper (/usr/share/java/
// zookeeper.jar)") needs, with apt-get through sudo when this is not root, refreshing the package
// lists only if the first try fails (a fresh container has none). Its progress lines (prefixed
// "who: ") and apt-get's output go to stderr. On failure the error is one line saying what
// is missing, what was tried and what to do instead (hint); the caller prefixes its own name.
// Package sources are the machine's own apt configuration: no host is named here.
func AptInstall(ctx context.Context, who, what, hint string, pkgs ...string) error {
	return aptInstall(ctx, os.Stderr, os.Geteuid() == 0, who, what, hint, pkgs)
}

func aptInstall(ctx context.Context, progress io.Writer, root bool, who, what, hint string, pkgs []string) error {
	var prefix []string
	if !root {
		if _, err := exec.LookPath("sudo"); err != nil {
			return fmt.Errorf("%s is missing and this is not root (no sudo): %s", what, hint)
		}
		prefix = []string{"sudo"}
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("%s is missing and apt-get is not available: %s", what, hint)
	}
	list := strings.Join(pkgs, " ")
	fmt.Fprintf(progress, "%s: installing %s: apt-get install -y --no-install-recommends %s ...\n", who, what, list)
	start := time.Now()
	apt := func(args ...string) error {
		argv := append(append(prefix, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"), args...)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = progress, progress
		return cmd.Run()
	}
	install := append([]string{"install", "-y", "-qq", "--no-install-recommends"}, pkgs...)
	if apt(install...) != nil {
		if apt("update", "-qq") != nil || apt(install...) != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("apt-get install %s stopped: %w", list, ctx.Err())
			}
			return fmt.Errorf("apt-get could not install %s (its output is above); tried: apt-get install, apt-get update, apt-get install; do: %s", list, hint)
		}
	}
	fmt.Fprintf(progress, "%s: installed %s in %d s\n", who, list, int(time.Since(start).Seconds()))
	return nil
}
