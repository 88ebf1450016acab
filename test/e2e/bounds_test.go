package e2e

// Bounds in total against the real binaries (issue 27, docs/reliability.md#bounds-in-total-the-figures):
// what a registry sends is bounded by what it lists, not by its bytes, with a bounded log.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
)

// TestEurekaMillionInstancesBounded: issue 27 found 740,000 minimal instances inside the 64 MiB
// body limit took galleon-eureka to 2,230 MiB, and each refused body cost ~400 MiB again. A
// server playing Eureka (only a broken or hostile one answers this) lists two applications, then
// a million minimal instances (47 MB of JSON) at every full fetch: galleon-eureka must refuse
// the listing as it reads it (--eureka-max-instances), keep serving the two applications, and
// stay within a stated peak RSS and log volume over several refusals.
func TestEurekaMillionInstancesBounded(t *testing.T) {
	bin := galleonBinary(t, "galleon-eureka")
	small := []byte(`{"applications":{"versions__delta":"1","apps__hashcode":"UP_2_","application":[` +
		`{"name":"ORDERS","instance":[{"instanceId":"o1","hostName":"10.70.0.1","ipAddr":"10.70.0.1","status":"UP","port":{"$":8080,"@enabled":"true"}}]},` +
		`{"name":"CART","instance":[{"instanceId":"c1","hostName":"10.70.0.2","ipAddr":"10.70.0.2","status":"UP","port":{"$":8080,"@enabled":"true"}}]}]}}`)
	const n = 1_000_000
	var huge bytes.Buffer
	huge.WriteString(`{"applications":{"versions__delta":"2","apps__hashcode":"UP_1000000_","application":[{"name":"A","instance":[`)
	for i := range n {
		if i > 0 {
			huge.WriteByte(',')
		}
		fmt.Fprintf(&huge, `{"hostName":"h%07d","status":"UP","port":1}`, i)
	}
	huge.WriteString(`]}]}}`)
	// The delta lists nothing and a hashcode the local copy cannot match: a full fetch.
	delta := []byte(`{"applications":{"versions__delta":"2","apps__hashcode":"UP_1000000_","application":[]}}`)

	var flipped atomic.Bool
	var fulls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/eureka/apps/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/delta") && flipped.Load():
			w.Write(delta)
		case strings.HasSuffix(r.URL.Path, "/delta"):
			w.Write([]byte(`{"applications":{"versions__delta":"1","apps__hashcode":"UP_2_","application":[]}}`))
		case flipped.Load():
			fulls.Add(1)
			w.Write(huge.Bytes())
		default:
			w.Write(small)
		}
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })

	g := startGalleon(t, bin, "--eureka-urls", "http://"+lis.Addr().String()+"/eureka", "--eureka-poll-interval", "200ms", "--log-level", "info")
	w := watchServed(t, g.Addr, "default/orders", "default/cart")
	w.waitHolds(t, "initial state", "default/orders", "default/cart")
	before := hwmKiB(t, g.Pid())
	logBefore := logSize(t, g)

	flipped.Store(true)
	const refusals = 5
	deadline := time.Now().Add(2 * time.Minute)
	for fulls.Load() < refusals {
		if time.Now().After(deadline) {
			t.Fatalf("only %d full fetches of the huge listing in 2 minutes", fulls.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // the last one read and refused
	if !g.LogContains("more than 100000 instances") {
		t.Errorf("the refusal does not name the limit:\n%s", g.Tail(20))
	}
	peak := hwmKiB(t, g.Pid())
	grew := logSize(t, g) - logBefore
	t.Logf("galleon-eureka peak RSS %d MiB before, %d MiB after %d refused listings of %d instances (%d MB); log grew %d bytes",
		before/1024, peak/1024, fulls.Load(), n, huge.Len()/1e6, grew)
	const maxMiB = 256 // docs/reliability.md#bounds-in-total-the-figures
	if peak/1024 > maxMiB {
		t.Errorf("peak RSS %d MiB, over the bound of %d MiB", peak/1024, maxMiB)
	}
	if grew > 64<<10 {
		t.Errorf("the log grew by %d bytes over %d refusals", grew, fulls.Load())
	}
	w.checkNothingLost(t, "listings over the instance limit")
}

// logSize is the size of the binary's log file now.
func logSize(t *testing.T, g *galleon) int64 {
	t.Helper()
	fi, err := os.Stat(g.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestZooKeeperLongNamesBounded: issue 27 found 610 provider znodes with names of 200 KB (122 MB
// in ZooKeeper) made 244 MB of galleon-zookeeper's log and 863 MiB resident, and their removal
// 122 MB of log more. Record names are the registry's: what is logged and kept of each is cut.
// 600 interfaces get one provider each whose name is 200 KB and not a provider URL; the adapter
// rejects them, serves the one good interface, and stays within a stated peak RSS and log
// volume, through their creation and their removal.
func TestZooKeeperLongNamesBounded(t *testing.T) {
	bin := galleonBinary(t, "galleon-zookeeper")
	server := zktest.Start(t, zktest.Options{HeapMiB: 1536}) // the names, as UTF-16 strings, their log and snapshots
	zc, _, err := zk.Connect([]string{server.Addr()}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkQuietLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	create := func(p string, flags int32) {
		t.Helper()
		if _, err := zc.Create(p, nil, flags, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %.80s: %v", p, err)
		}
	}
	create("/dubbo", 0)
	good := "/dubbo/org.example.Good"
	create(good, 0)
	create(good+"/providers", 0)
	create(good+"/providers/"+url.QueryEscape("dubbo://10.80.0.1:20880/org.example.Good?interface=org.example.Good&side=provider"), zk.FlagEphemeral)

	g := startGalleon(t, bin, "--zk-servers", server.Addr(), "--zk-layout", "dubbo", "--log-level", "info")
	w := watchServed(t, g.Addr)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		w.mu.Lock()
		n := len(w.latest)
		w.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the good interface was never served")
		}
	}
	logBefore := logSize(t, g)

	const n, size = 600, 200_000
	pad := strings.Repeat("x", size)
	var long []string
	for i := range n {
		dir := fmt.Sprintf("/dubbo/org.example.Long%03d", i)
		create(dir, 0)
		create(dir+"/providers", 0)
		p := dir + "/providers/" + fmt.Sprintf("%03d", i) + pad // not a provider URL
		create(p, 0)
		long = append(long, p)
	}
	rejected := func() int {
		body, err := g.get(context.Background(), "/debug/status")
		if err != nil {
			return -1
		}
		var st struct {
			RejectedCount int `json:"rejectedCount"`
		}
		if err := json.Unmarshal(body, &st); err != nil {
			return -1
		}
		return st.RejectedCount
	}
	for deadline := time.Now().Add(2 * time.Minute); rejected() < n; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d long names rejected after 2 minutes", rejected(), n)
		}
	}
	for _, p := range long {
		if err := zc.Delete(p, -1); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(2 * time.Minute); rejected() != 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d rejections left 2 minutes after the long names were deleted", rejected())
		}
	}
	peak := hwmKiB(t, g.Pid()) / 1024
	grew := logSize(t, g) - logBefore
	t.Logf("galleon-zookeeper: %d names of %d KB (%d MB) rejected and removed: peak RSS %d MiB, log grew %d bytes", n, size/1000, n*size/1_000_000, peak, grew)
	const maxMiB, maxLog = 128, 256 << 10 // docs/reliability.md#bounds-in-total-the-figures
	if peak > maxMiB {
		t.Errorf("peak RSS %d MiB, over the bound of %d MiB", peak, maxMiB)
	}
	if grew > maxLog {
		t.Errorf("the log grew by %d bytes, over the bound of %d", grew, maxLog)
	}
}
