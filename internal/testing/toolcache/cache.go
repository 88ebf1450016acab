package toolcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// BinDir is <Dir>/bin, where every cached binary is.
func BinDir() string { return filepath.Join(Dir(), "bin") }

// LogPath is a fresh path for the log of one build or download named name:
// <Dir>/logs/<name>.<timestamp>.log. It creates the logs directory; if that fails, opening the
// log fails and says why.
func LogPath(name string) string {
	dir := filepath.Join(Dir(), "logs")
	_ = os.MkdirAll(dir, 0o755) // an error shows when the log is opened
	return filepath.Join(dir, name+"."+time.Now().Format("20060102T150405")+".log")
}

// lockPoll is how often a build waiting for another's lock checks again (and checks ctx).
const lockPoll = 200 * time.Millisecond

// BuildCached makes Bin(name, version) exist, calling build(ctx, out) (which must write the
// binary to out) only if it does not exist yet, and returns its path. Concurrent callers, in this
// process or another, are serialised by flock on <Dir>/locks/<name>-<version>.lock; the binary is
// built under a temporary name and renamed into place, so a half-written binary is never visible.
// Progress ("using cached ...", "another build ... waiting", "built ... in N s") goes to progress
// (nil: nowhere).
func BuildCached(ctx context.Context, name, version string, progress io.Writer, build func(ctx context.Context, out string) error) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	bin := Bin(name, version)
	if CheckExecutable(bin) == nil {
		fmt.Fprintf(progress, "using cached %s\n", bin)
		return bin, nil
	}
	lockDir := filepath.Join(Dir(), "locks")
	for _, d := range []string{BinDir(), lockDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("cannot create the tool cache's %s: %v (set GALLEON_CACHE to a writable directory)", d, err)
		}
	}
	unlock, err := lockFile(ctx, filepath.Join(lockDir, name+"-"+version+".lock"), func() {
		fmt.Fprintf(progress, "another build of %s %s is running, waiting for it...\n", name, version)
	})
	if err != nil {
		return "", err
	}
	defer unlock()
	if CheckExecutable(bin) == nil {
		fmt.Fprintf(progress, "using cached %s (built by a concurrent run)\n", bin)
		return bin, nil
	}
	tmp := bin + ".tmp." + strconv.Itoa(os.Getpid())
	defer os.Remove(tmp) // gone after the rename; what a failed build left otherwise
	start := time.Now()
	if err := build(ctx, tmp); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("the build of %s %s wrote no binary: %v", name, version, err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("cannot move the built %s into the tool cache: %v", name, err)
	}
	fmt.Fprintf(progress, "built %s in %d s\n", bin, int(time.Since(start).Seconds()))
	return bin, nil
}

// lockFile takes an exclusive flock on path, calling waiting once if another holder makes it
// wait. The wait polls so that ctx can end it. unlock releases the lock and closes the file.
func lockFile(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cannot open the lock %s: %v (set GALLEON_CACHE to a writable directory)", path, err)
	}
	unlock = func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return unlock, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("cannot lock %s: %v", path, err)
		}
		if !told {
			waiting()
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("gave up waiting for the build holding %s: %w", path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}
