// Package daemontest runs a Galleon daemon in process for tests that need a real source: the
// daemon every binary runs (package daemon), with the registry a test gives it, on free loopback
// ports.
package daemontest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

// FreeAddr is a loopback address free when it was asked for.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start runs the daemon named name (registry kind registryKind) with the registry newRegistry
// makes, serving gRPC on listen and HTTP on httpAddr (--debounce-quiet 1ms), stops it when the
// test ends, and waits until /readyz answers 200 (the registry was listed once) or ready passes.
func Start(t testing.TB, name, registryKind string, newRegistry daemon.NewRegistry, ready time.Duration) (listen, httpAddr string) {
	t.Helper()
	listen, httpAddr = FreeAddr(t), FreeAddr(t)
	spec := daemon.Spec{Name: name, Registry: registryKind, Summary: "test",
		Flags: func(*pflag.FlagSet) daemon.NewRegistry { return newRegistry }}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- daemon.Run(ctx, spec, []string{"--listen", listen, "--http", httpAddr, "--debounce-quiet", "1ms"}, io.Discard)
	}()
	t.Cleanup(func() { cancel(); <-exited })
	for deadline := time.Now().Add(ready); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return listen, httpAddr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready on %s in %v: %v", name, httpAddr, ready, err)
		}
	}
}

// errStop is what ParseFlags' constructor returns, so that the daemon exits before it starts
// a server.
var errStop = errors.New("stop here")

// ParseFlags runs the daemon's settings parsing for a binary whose Spec.Flags is flags, with
// args (and loopback addresses), and returns the parsed flag set and what the daemon wrote to
// stderr. It stops before the registry is built: the constructor flags returns is not called.
func ParseFlags(t testing.TB, flags func(*pflag.FlagSet) daemon.NewRegistry, args ...string) (*pflag.FlagSet, string) {
	t.Helper()
	var got *pflag.FlagSet
	spec := daemon.Spec{Name: "galleon-test", Registry: "test", Summary: "test",
		Flags: func(fs *pflag.FlagSet) daemon.NewRegistry {
			got = fs
			_ = flags(fs)
			return func(daemon.Env) (registry.Registry, error) { return nil, errStop }
		}}
	var stderr strings.Builder
	if code := daemon.Run(context.Background(), spec, append([]string{"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, args...), &stderr); code != 2 {
		t.Fatalf("%v: exit %d, want 2 (the constructor's error); stderr:\n%s", args, code, stderr.String())
	}
	return got, stderr.String()
}

// CheckRenamedFlags checks that each old name in renamed (old -> current) sets the same value
// as its current name, one that is not the default, and prints the deprecation warning.
// values holds a value to set for each old name; an old name without one is set to
// "x-<old>" (a string flag's value).
func CheckRenamedFlags(t *testing.T, flags func(*pflag.FlagSet) daemon.NewRegistry, renamed, values map[string]string) {
	t.Helper()
	if len(renamed) == 0 {
		t.Fatal("no renamed flags to check")
	}
	for old, current := range renamed {
		t.Run(old, func(t *testing.T) {
			value, ok := values[old]
			if !ok {
				value = "x-" + old
			}
			want, _ := ParseFlags(t, flags, "--"+current, value)
			got, stderr := ParseFlags(t, flags, "--"+old, value)
			if g, w := got.Lookup(current).Value.String(), want.Lookup(current).Value.String(); g != w || g == want.Lookup(current).DefValue {
				t.Errorf("--%s %s sets --%s to %q, want %q", old, value, current, g, w)
			}
			if !strings.Contains(stderr, "Flag --"+old+" has been deprecated, use --"+current) {
				t.Errorf("--%s gave no deprecation warning; stderr:\n%s", old, stderr)
			}
		})
	}
}
