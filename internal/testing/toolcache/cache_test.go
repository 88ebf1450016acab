package toolcache

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBuildCachedTwoAtOnceBuildOnce(t *testing.T) {
	t.Setenv("GALLEON_CACHE", t.TempDir())
	var builds atomic.Int32
	started := make(chan struct{})
	build := func(ctx context.Context, out string) error {
		if builds.Add(1) == 1 {
			close(started)
		}
		time.Sleep(3 * lockPoll) // long enough that the other caller finds the lock taken
		return os.WriteFile(out, []byte("#!/bin/sh\n"), 0o644)
	}
	var wg sync.WaitGroup
	var progress [2]bytes.Buffer
	var paths [2]string
	var errs [2]error
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				<-started // the first holds the lock now
			}
			paths[i], errs[i] = BuildCached(context.Background(), "server", "1.0", &progress[i], build)
		}()
	}
	wg.Wait()
	want := Bin("server", "1.0")
	for i := range 2 {
		if paths[i] != want || errs[i] != nil {
			t.Errorf("caller %d: %q, %v; want %q", i, paths[i], errs[i], want)
		}
	}
	if n := builds.Load(); n != 1 {
		t.Errorf("%d builds, want 1", n)
	}
	if got := progress[0].String(); !strings.HasPrefix(got, "built "+want+" in ") {
		t.Errorf("first caller's progress: %q", got)
	}
	if want := "another build of server 1.0 is running, waiting for it...\nusing cached " + want + " (built by a concurrent run)\n"; progress[1].String() != want {
		t.Errorf("second caller's progress:\n  %q\nwant\n  %q", progress[1].String(), want)
	}
	if err := CheckExecutable(want); err != nil {
		t.Errorf("the built binary: %v", err)
	}
	var again bytes.Buffer
	if _, err := BuildCached(context.Background(), "server", "1.0", &again, build); err != nil || again.String() != "using cached "+want+"\n" {
		t.Errorf("third call: %v, progress %q", err, again.String())
	}
}

func TestBuildCachedFailureLeavesNothing(t *testing.T) {
	t.Setenv("GALLEON_CACHE", t.TempDir())
	boom := errors.New("consul: the Go module proxy refused it; tried: x; do: y")
	_, err := BuildCached(context.Background(), "server", "1.0", nil, func(ctx context.Context, out string) error {
		if err := os.WriteFile(out, []byte("half"), 0o644); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the build's", err)
	}
	left, _ := filepath.Glob(filepath.Join(BinDir(), "*"))
	if len(left) != 0 {
		t.Errorf("a failed build left %v", left)
	}
}

func TestBuildCachedWaitEndsWithTheContext(t *testing.T) {
	t.Setenv("GALLEON_CACHE", t.TempDir())
	if err := os.MkdirAll(filepath.Join(Dir(), "locks"), 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockFile(context.Background(), filepath.Join(Dir(), "locks", "server-1.0.lock"), func() { t.Error("waited for a free lock") })
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = BuildCached(ctx, "server", "1.0", nil, func(context.Context, string) error {
		t.Error("built while another held the lock")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's", err)
	}
}

func TestLogPath(t *testing.T) {
	t.Setenv("GALLEON_CACHE", t.TempDir())
	p := LogPath("consul-1.22.6")
	if dir := filepath.Join(Dir(), "logs"); filepath.Dir(p) != dir || !strings.HasPrefix(filepath.Base(p), "consul-1.22.6.") || !strings.HasSuffix(p, ".log") {
		t.Errorf("LogPath = %q", p)
	}
	if st, err := os.Stat(filepath.Dir(p)); err != nil || !st.IsDir() {
		t.Errorf("the logs directory: %v", err)
	}
}
