package wire

import (
	"bytes"
	"context"
	"log/slog"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// withGoroutineLabel runs f under a pprof label unique to the test; every goroutine f starts,
// directly or through goroutines it started (gRPC's included), inherits it. The returned
// check fails the test unless all of them have ended within 5 s.
func withGoroutineLabel(t *testing.T, name string, f func()) (check func()) {
	t.Helper()
	value := t.Name() + "/" + name
	pprof.Do(context.Background(), pprof.Labels("wiretest", value), func(context.Context) { f() })
	return func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, stacks := labelledGoroutines(value)
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d goroutines left after Close:\n%s", n, stacks)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func labelledGoroutines(value string) (int, string) {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	n := 0
	var out []string
	for _, rec := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(rec, `"wiretest":"`+value+`"`) {
			// The record starts with "<count> @ ..." .
			var c int
			for _, ch := range rec {
				if ch < '0' || ch > '9' {
					break
				}
				c = c*10 + int(ch-'0')
			}
			n += c
			out = append(out, rec)
		}
	}
	return n, strings.Join(out, "\n\n")
}

// register registers an instance of ref as a Nacos 1 client or a user's script does, over the
// Nacos 1 HTTP OpenAPI (nacostest.Client: POST /nacos/v1/ns/instance, the service name grouped
// "group@@name", which is where Polaris reads the group from).
func register(t *testing.T, s *nacostest.Server, ref Ref, ip string, port int, meta map[string]string) {
	t.Helper()
	in := nacostest.NewInstance(ip, port)
	in.Metadata = meta
	if err := s.Client().RegisterInstance(t.Context(), nacostest.Ref{Namespace: ref.Namespace, Group: ref.Group, Service: ref.Service}, in); err != nil {
		t.Fatalf("register %v %s:%d: %v", ref, ip, port, err)
	}
}
