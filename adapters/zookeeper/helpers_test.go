package zookeeper

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// reasonOf is the reason err was given (bad), or other: the label the core counts it under.
func reasonOf(err error) string { return registry.ReasonOf(err, reasonOther) }

// waitTimeout bounds every wait for a report; generous for -race on two loaded cores.
const waitTimeout = 20 * time.Second

// testLogger discards the adapter's logs unless GALLEON_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("GALLEON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// client is a ZooKeeper client for the test's own writes, closed when the test ends.
func client(t testing.TB, addr string) *zk.Conn {
	t.Helper()
	return clientOf(t, []string{addr})
}

// clientOf is a client of any of addrs (an ensemble's members). It is as robust as the adapter
// under load and across a server's restart (CI saw a stock client's write fail after a restart,
// "zk: could not connect to a server", and its first attempt reach the server only after the
// handshake's ten read timeouts, see zktest.ClientDial):
// it dials with zktest.ClientDial, which bounds the session handshake, and tries the servers
// with testHosts, which never makes the client fail the requests it holds while it has no
// connection (go-zookeeper fails them with ErrNoServer whenever its host provider asks for a
// pause). A request sent meanwhile waits for the connection; one in flight when the connection
// breaks fails, and writer retries it.
func clientOf(t testing.TB, addrs []string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(addrs, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(nopLogger{}),
		zk.WithDialer(zktest.ClientDial), zk.WithHostProvider(&testHosts{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// The first request waits for the session.
	if err := retry(func() error { _, _, err := c.Exists("/"); return err }); err != nil {
		t.Fatal(err)
	}
	return c
}

// testHosts is the adapter's hostProvider that never asks the client to pause (which would fail
// the requests it holds): it pauses itself, waitAllTried, when every server has been tried.
type testHosts struct{ hostProvider }

const waitAllTried = 200 * time.Millisecond

func (h *testHosts) Next() (string, bool) {
	server, pause := h.hostProvider.Next()
	if pause {
		time.Sleep(waitAllTried)
	}
	return server, false
}

// retry calls write until it succeeds, fails for another reason than the connection, or
// waitTimeout has passed: a write whose connection broke is made again (writer's writes are
// idempotent: each reads what is there first).
func retry(write func() error) error {
	deadline := time.Now().Add(waitTimeout)
	for {
		err := write()
		if err == nil || !errConnection(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// writer writes Curator instance nodes under root: zktest.Writer, each write tried again for
// waitTimeout while the connection breaks.
type writer struct {
	c    *zk.Conn
	root string
}

func (w *writer) zw() *zktest.Writer {
	return &zktest.Writer{Conn: w.c, Root: w.root, Timeout: waitTimeout}
}

// curatorJSON is what Curator's JsonInstanceSerializer writes for a Spring Cloud Zookeeper
// instance listening on port (and sslPort when not 0).
func curatorJSON(name, id, address string, port, sslPort int, meta map[string]string) []byte {
	return zktest.CuratorJSON(name, id, address, port, sslPort, meta)
}

func (w *writer) ensureRoot(t testing.TB) {
	t.Helper()
	if err := w.zw().EnsureRoot(); err != nil {
		t.Fatal(err)
	}
}

// set makes service name hold exactly nodes (id -> data), in one transaction.
func (w *writer) set(name string, nodes map[string][]byte) error { return w.zw().Set(name, nodes) }

// remove deletes service name and its nodes, in one transaction.
func (w *writer) remove(name string) error { return w.zw().Remove(name) }

// run runs reg with a Recorder until the test ends, then checks that Run returned
// context.Canceled promptly and that the Sink calls keep the contract.
func run(t *testing.T, cfg Config) *registrytest.Recorder {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	reg, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return runRegistry(t, reg)
}

// runRegistry is run for a Registry the test made (and may have adjusted) itself.
func runRegistry(t *testing.T, reg *Registry) *registrytest.Recorder {
	t.Helper()
	rec := registrytest.NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := reg.Run(ctx, rec)
		rec.Close()
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return within 10s of its cancellation")
		}
		if err := rec.Check(); err != nil {
			t.Errorf("Sink calls break the contract: %v\n%s", err, rec.Dump())
		}
	})
	return rec
}

// startServer starts a ZooKeeper server that accepts nodes up to 4 MiB (to test oversized ones).
func startServer(t *testing.T) *zktest.Server {
	return zktest.Start(t, zktest.Options{MaxBuffer: 4 << 20})
}

func key(name string) model.ServiceKey {
	return model.ServiceKey{Namespace: DefaultNamespace, Name: name}
}

// instanceIDs returns the instance IDs of svc, sorted.
func instanceIDs(svc model.Service) []string {
	var ids []string
	for _, inst := range svc.Instances {
		ids = append(ids, inst.ID)
	}
	sort.Strings(ids)
	return ids
}
