package e2e

// The abuse suite: what an operator's worst day and a hostile client did to galleon-file
// (issue 9), replayed against the real binary. Each test holds a SotW stream open, as istiod
// does, and checks that no response it receives ever lacks a service that should stay served,
// or checks the bound the server keeps.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/galleon-mesh/galleon/internal/xdsclient"
)

const seTypeURL = "networking.istio.io/v1/ServiceEntry"

// servedWatch is a SotW stream that records every response: which keys each held.
type servedWatch struct {
	mu        sync.Mutex
	must      map[string]bool
	latest    map[string]bool
	responses int
	lost      []string // "<key> missing from response N"
	err       error
}

// watchServed opens a SotW stream to addr for ServiceEntries, ACKs every response and records
// each one; must are the keys every response has to hold.
func watchServed(t *testing.T, addr string, must ...string) *servedWatch {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	st, err := xdsclient.OpenSotW(ctx, conn, xdsclient.NewNode("abuse-watch"), []string{seTypeURL})
	if err != nil {
		t.Fatal(err)
	}
	w := &servedWatch{must: map[string]bool{}}
	for _, k := range must {
		w.must[k] = true
	}
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
			keys := map[string]bool{}
			for _, r := range resp.Resources {
				keys[r.Key()] = true
			}
			w.mu.Lock()
			w.responses++
			w.latest = keys
			for k := range w.must {
				if !keys[k] {
					w.lost = append(w.lost, fmt.Sprintf("%s missing from response %d (%d resources)", k, w.responses, len(keys)))
				}
			}
			w.mu.Unlock()
			if err := st.ACK(resp); err != nil {
				return
			}
		}
	}()
	return w
}

// waitHolds waits until the latest response holds every key of want.
func (w *servedWatch) waitHolds(t *testing.T, what string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		w.mu.Lock()
		ok := w.latest != nil
		for _, k := range want {
			ok = ok && w.latest[k]
		}
		err := w.err
		w.mu.Unlock()
		if ok {
			return
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("%s: the stream never held %v (err %v)", what, want, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkNothingLost fails the test if any response lacked a key that had to stay.
func (w *servedWatch) checkNothingLost(t *testing.T, what string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.lost) > 0 {
		t.Errorf("%s: a sink was served less than the last good state:\n  %s", what, strings.Join(w.lost, "\n  "))
	}
}

func abuseService(name, addr string) string {
	return fmt.Sprintf("- name: %s\n  namespace: abuse\n  ports: [{number: 80, protocol: HTTP}]\n  instances:\n  - {id: %s-1, address: %s}\n", name, name, addr)
}

// rssKiB is the resident set of process pid now (VmRSS), in KiB.
func rssKiB(t *testing.T, pid int) int { return procStatusKiB(t, pid, "VmRSS") }

// hwmKiB is the peak resident set of process pid (VmHWM), in KiB.
func hwmKiB(t *testing.T, pid int) int { return procStatusKiB(t, pid, "VmHWM") }

// procStatusKiB reads one "<field>: N kB" line of /proc/<pid>/status.
func procStatusKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(field + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /proc/%d/status", field, pid)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestAbuseFileWriters replays the writer patterns and special files that once made galleon-file
// serve less than the registry held, or hang.
func TestAbuseFileWriters(t *testing.T) {
	bin := galleonBinary(t, "galleon-file")
	dir := t.TempDir()
	full := "services:\n" + abuseService("one", "10.9.0.1") + abuseService("two", "10.9.0.2") + abuseService("three", "10.9.0.3")
	path := filepath.Join(dir, "a.yaml")
	writeFileAtomic(t, path, []byte(full))
	g := startGalleon(t, bin, "--file-dir", dir, "--file-removal-delay", "1s")
	w := watchServed(t, g.Addr, "abuse/one", "abuse/two", "abuse/three")
	w.waitHolds(t, "initial state", "abuse/one", "abuse/two", "abuse/three")

	write := func(b string) {
		if err := os.WriteFile(path, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Truncated, then written 0.5 s later (shell '>').
	write("")
	time.Sleep(500 * time.Millisecond)
	write(full)
	// Half written for 0.5 s.
	write(full[:len(full)/2])
	time.Sleep(500 * time.Millisecond)
	write(full)
	// Renamed away, written back 100 ms later.
	if err := os.Rename(path, filepath.Join(dir, ".a.yaml.old")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	write(full)
	// A named pipe and a link to /dev/zero with registry names.
	if err := syscall.Mkfifo(filepath.Join(dir, "p.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	// The watcher is not stuck behind them: a new file arrives.
	writeFileAtomic(t, filepath.Join(dir, "b.yaml"), []byte("services:\n"+abuseService("four", "10.9.0.4")))
	w.waitHolds(t, "a file written after the pipe and the device", "abuse/four")
	time.Sleep(2 * time.Second) // past the removal delay: a held removal would be out by now
	w.checkNothingLost(t, "non-atomic writes, a pipe, a device")
	if rss := rssKiB(t, g.Pid()); rss > 200<<10 {
		t.Errorf("galleon-file RSS %d MiB after a link to /dev/zero, want it bounded (--file-max-size)", rss>>10)
	}
	for _, name := range []string{"p.yaml", "zero.yaml"} {
		if !g.LogContains(filepath.Join(dir, name)) || !g.LogContains("not a regular file") {
			t.Errorf("no log line names %s as not a regular file", name)
		}
	}

	// SIGTERM with the stream open: the stream ends with Unavailable and the process exits well
	// before the default 5 s grace (it used to wait the whole grace and end with a transport EOF).
	start := time.Now()
	if err := g.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("galleon-file did not exit after SIGTERM")
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("SIGTERM with a stream open took %v, want less than the 5 s grace", took)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.mu.Lock()
		err := w.err
		w.mu.Unlock()
		if err != nil {
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
				t.Errorf("the stream ended with %v, want Unavailable saying the source is shutting down", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream did not end after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAbuseEmptyDirAndRestart: a directory recreated empty, and kill -9 while a file is
// malformed followed by a restart, once cost every service or that file's services.
func TestAbuseEmptyDirAndRestart(t *testing.T) {
	bin := galleonBinary(t, "galleon-file")
	root := t.TempDir()
	dir, state := filepath.Join(root, "registry"), filepath.Join(root, "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(dir, "a.yaml"), []byte("services:\n"+abuseService("one", "10.9.1.1")+abuseService("two", "10.9.1.2")))
	writeFileAtomic(t, filepath.Join(dir, "b.yaml"), []byte("services:\n"+abuseService("three", "10.9.1.3")))
	args := []string{"--file-dir", dir, "--file-state-dir", state, "--file-removal-delay", "500ms"}
	g := startGalleon(t, bin, args...)
	w := watchServed(t, g.Addr, "abuse/one", "abuse/two", "abuse/three")
	w.waitHolds(t, "initial state", "abuse/one", "abuse/two", "abuse/three")

	// Deleted and recreated empty.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := g.WaitFor(ctx, func() (bool, error) {
		resp, err := http.Get("http://" + g.HTTPAddr + "/readyz")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), "holds no *.yaml"), nil
	})
	if err != nil {
		t.Fatalf("/readyz never said the directory is empty: %v", err)
	}
	time.Sleep(time.Second) // past the removal delay
	w.checkNothingLost(t, "a directory recreated empty")

	// Files back; then one goes malformed and the process is killed, and restarted.
	writeFileAtomic(t, filepath.Join(dir, "a.yaml"), []byte("services:\n"+abuseService("one", "10.9.1.1")+abuseService("two", "10.9.1.2")))
	writeFileAtomic(t, filepath.Join(dir, "b.yaml"), []byte("services:\n"+abuseService("three", "10.9.1.3")))
	time.Sleep(500 * time.Millisecond)
	writeFileAtomic(t, filepath.Join(dir, "a.yaml"), []byte("services:\n- name: one\n  ports: [\n"))
	if !waitLog(g, "invalid YAML", 10*time.Second) {
		t.Fatal("the malformed file was not rejected")
	}
	if err := g.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-g.Done()
	g2 := startGalleon(t, bin, args...)
	w2 := watchServed(t, g2.Addr, "abuse/one", "abuse/two", "abuse/three")
	w2.waitHolds(t, "after kill -9 and a restart", "abuse/one", "abuse/two", "abuse/three")
	w2.checkNothingLost(t, "a restart with a malformed file")
	if !g2.LogContains("kept in " + state + ", is served") {
		t.Error("the restarted adapter does not say it serves the kept content of the malformed file")
	}
}

func waitLog(g *galleon, substr string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for !g.LogContains(substr) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// TestAbuseHostileClients: a client that reaches the gRPC port must not be able to grow the
// metrics, the memory or the log without bound, nor read the command line.
func TestAbuseHostileClients(t *testing.T) {
	bin := galleonBinary(t, "galleon-file")
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "a.yaml"), []byte("services:\n"+abuseService("one", "10.9.2.1")))
	g := startGalleon(t, bin, "--file-dir", dir)
	conn, err := grpc.NewClient(g.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	metricsSize := func() int {
		resp, err := http.Get("http://" + g.HTTPAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return len(b)
	}
	before := metricsSize()
	// 100 streams x 30 made-up type URLs.
	for s := range 100 {
		st, err := ads.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 30 {
			if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: fmt.Sprintf("attack.example/v1/S%dT%d", s, i)}); err != nil {
				t.Fatal(err)
			}
		}
		for range 30 {
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
		}
		st.CloseSend()
	}
	if after := metricsSize(); after > before+16<<10 {
		t.Errorf("/metrics grew from %d to %d bytes after 3,000 made-up type URLs: client-chosen label values", before, after)
	}

	// A Delta stream subscribing to more names than a stream may hold is closed.
	delta, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Two batches of 120,000 different names (the same names subscribed again count once).
	var rerr error
	for batch := 0; batch < 2 && rerr == nil; batch++ {
		names := make([]string, 0, 120_000)
		for i := range cap(names) {
			names = append(names, fmt.Sprintf("attack/b%d-n%07d", batch, i))
		}
		rerr = delta.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: seTypeURL, ResourceNamesSubscribe: names})
	}
	for rerr == nil {
		_, rerr = delta.Recv()
	}
	if status.Code(rerr) != codes.ResourceExhausted {
		t.Errorf("240,000 subscribed names: the stream ended with %v, want ResourceExhausted", rerr)
	}

	// 30 NACKs of 1 MB each: the log grows by a bounded amount.
	logBefore := len(g.Log())
	st, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: seTypeURL}); err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("x", 1<<20)
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: seTypeURL, ResponseNonce: resp.Nonce,
			ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: huge}}); err != nil {
			t.Fatal(err)
		}
		// A new version to NACK next.
		writeFileAtomic(t, filepath.Join(dir, "a.yaml"), []byte("services:\n"+abuseService("one", fmt.Sprintf("10.9.3.%d", i+1))))
		if resp, err = st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if grown := len(g.Log()) - logBefore; grown > 64<<10 {
		t.Errorf("30 NACKs of 1 MB grew the log by %d bytes, want it bounded", grown)
	}

	// Profiles are off, and the command line is never served.
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
		resp, err := http.Get("http://" + g.HTTPAddr + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s answers %d by default, want 404", p, resp.StatusCode)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the attacks took longer than two minutes")
	}
}
