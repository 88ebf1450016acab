package wire

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// captureTap records the payloads of each type the server sent (first of each), for testdata.
type captureTap struct {
	mu  sync.Mutex
	got map[string][]byte
}

func (c *captureTap) tap(raw []byte) {
	p, err := UnmarshalPayload(raw)
	if err != nil {
		return // the test fails on it elsewhere
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got == nil {
		c.got = map[string][]byte{}
	}
	if _, ok := c.got[p.Type]; !ok {
		c.got[p.Type] = append([]byte(nil), raw...)
	}
}

// writeCaptures saves the captured payloads under testdata/polaris/ when
// GALLEON_NACOS_CAPTURE=1 (they seed the fuzz tests).
func (c *captureTap) writeCaptures(t *testing.T) {
	if os.Getenv("GALLEON_NACOS_CAPTURE") != "1" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	dir := filepath.Join("testdata", "polaris")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for typ, b := range c.got {
		if err := os.WriteFile(filepath.Join(dir, typ+".pb"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPolarisGRPC(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server")
	s := nacostest.Start(t, nacostest.Options{})

	pushes := make(chan *ServiceInfo, 16)
	var capture captureTap
	cfg := DialConfig{
		Address: s.GRPCAddr, Timeout: 5 * time.Second, ClientVersion: "Galleon:test",
		Logger: testLogger(t),
		OnPush: func(ref Ref, info *ServiceInfo) {
			if ref.Service == "wiretest" {
				pushes <- info
			}
		},
		tap: capture.tap,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ref := Ref{Group: "DEFAULT_GROUP", Service: "wiretest"}
	register(t, s, ref, "10.0.0.1", 8080, map[string]string{"k": "v"})

	var conn *Conn
	leaks := withGoroutineLabel(t, "polaris", func() {
		var err error
		start := time.Now()
		conn, err = Dial(ctx, cfg)
		if err != nil {
			t.Fatalf("Dial: %v\n%s", err, s.Tail(40))
		}
		t.Logf("Dial took %v; connection ID %s", time.Since(start), conn.ID())
	})

	// Polaris's cache refreshes every second: the registration may take that long to show.
	var info *ServiceInfo
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		info, err = conn.Subscribe(ctx, ref)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		if len(info.Hosts) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(info.Hosts) != 1 || info.Hosts[0].IP != "10.0.0.1" || info.Hosts[0].Port != 8080 || info.Hosts[0].Metadata["k"] != "v" {
		t.Fatalf("Subscribe answered %+v, want the one instance 10.0.0.1:8080 k=v", info)
	}
	t.Logf("Subscribe: %+v", info)

	// A registration change arrives as a push.
	changed := time.Now()
	register(t, s, ref, "10.0.0.2", 8080, nil)
	var pushed *ServiceInfo
	timeout := time.After(15 * time.Second)
wait:
	for {
		select {
		case p := <-pushes:
			if len(p.Hosts) == 2 {
				pushed = p
				break wait
			}
			t.Logf("push with %d hosts", len(p.Hosts))
		case <-timeout:
			t.Fatalf("no push with both instances within 15 s\n%s", s.Tail(40))
		}
	}
	t.Logf("push latency (registration answered to push received): %v", time.Since(changed))
	_ = pushed

	// ListServices pages.
	for i := range 3 {
		register(t, s, Ref{Group: "DEFAULT_GROUP", Service: fmt.Sprintf("wirelist-%d", i)}, "10.0.1.1", 80, nil)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		page, err := conn.ListServices(ctx, "", "DEFAULT_GROUP", 1, 2)
		if err != nil {
			t.Fatalf("ListServices: %v", err)
		}
		if page.Count >= 4 {
			if len(page.Names) != 2 {
				t.Fatalf("page 1 of size 2 has %d names: %+v", len(page.Names), page)
			}
			// Polaris lists a namespace's services in map order (model/service.go
			// HandleServiceListRequest over cache/service/service_bucket.go listServices):
			// pages of one listing may overlap, so only a page holding all of them is exact.
			whole, err := conn.ListServices(ctx, "", "DEFAULT_GROUP", 1, 100)
			if err != nil {
				t.Fatal(err)
			}
			all := map[string]bool{}
			for _, n := range whole.Names {
				all[n] = true
			}
			if len(all) != page.Count || whole.Count != page.Count || !all["wiretest"] || !all["wirelist-2"] {
				t.Fatalf("one page of 100 holds %v (count %d), want %d names with wiretest and wirelist-2", all, whole.Count, page.Count)
			}
			t.Logf("ListServices: count %d, pages %v", page.Count, all)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ListServices count %d after 10 s, want >= 4", page.Count)
		}
		time.Sleep(200 * time.Millisecond)
	}

	if err := conn.Unsubscribe(ctx, ref); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}

	// A connection outlives Polaris's 20 s idle ejection thanks to the health checks.
	if testing.Short() {
		t.Log("short: not waiting out Polaris's connection ejection")
	} else {
		select {
		case <-conn.Done():
			t.Fatalf("connection lost while idle: %v", conn.Err())
		case <-time.After(25 * time.Second):
		}
	}

	// A server stop closes Done with an error.
	stopped := time.Now()
	s.Stop(t)
	select {
	case <-conn.Done():
		t.Logf("Done %v after the stop: %v", time.Since(stopped), conn.Err())
		if conn.Err() == nil || errors.Is(conn.Err(), ErrClosed) {
			t.Fatalf("Err after a server stop = %v, want the loss", conn.Err())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Done not closed 20 s after the server stopped")
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	leaks()
	capture.writeCaptures(t)
	if !strings.Contains(conn.ID(), "_") {
		t.Errorf("connection ID %q is not Polaris's millis_ip_port_host", conn.ID())
	}
}
