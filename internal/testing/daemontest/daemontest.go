// Package daemontest runs a Galleon daemon in process for tests that need a real source: the
// daemon every binary runs (package daemon), with the registry a test gives it, on free loopback
// ports.
package daemontest

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/daemon"
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
