package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/galleon-mesh/galleon/internal/serve/mcp"
	"github.com/galleon-mesh/galleon/internal/serve/shard"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	"github.com/galleon-mesh/galleon/internal/xdsclient"
	"github.com/galleon-mesh/galleon/model"
)

// sotwNames are the names of the resources of typeURL addr serves a new SotW stream.
func sotwNames(t *testing.T, addr, typeURL string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := xdsclient.FirstSotW(ctx, addr, "istiod-test", typeURL)
	if err != nil {
		t.Fatalf("%s: %v", addr, err)
	}
	var names []string
	for _, r := range resp.Resources {
		names = append(names, r.Key())
	}
	return names
}

// sotwServiceEntries is sotwNames of ServiceEntries.
func sotwServiceEntries(t *testing.T, addr string) []string {
	return sotwNames(t, addr, "networking.istio.io/v1/ServiceEntry")
}

// TestShardsServeEachServiceOnce runs a binary with three shard listeners:
// each serves the services whose ServiceEntry name hashes to it, with their
// WorkloadEntries, together every service exactly once, over MCP over xDS
// and legacy MCP alike, while --listen still serves everything;
// /debug/status lists what each holds.
func TestShardsServeEachServiceOnce(t *testing.T) {
	const services, shards = 40, 3
	var reg staticRegistry
	want := make([][]string, shards) // by shard, as shard.Of places them
	for i := range services {
		name := fmt.Sprintf("svc-%02d", i)
		host := name + ".ns.test"
		reg.services = append(reg.services, model.Service{Namespace: "ns", Name: name, Hosts: []string{host},
			Ports:     []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}},
			Instances: []model.Instance{{ID: "a", Address: fmt.Sprintf("10.0.%d.1", i)}, {ID: "b", Address: fmt.Sprintf("10.0.%d.2", i)}}})
		s := shard.Of(&snapshot.Resource{Name: "ns/" + name, Origin: &snapshot.Origin{Service: "ns/" + name}}, shards)
		want[s] = append(want[s], "ns/"+name)
	}
	for s := range want {
		if len(want[s]) == 0 {
			t.Fatalf("shard %d holds none of the %d test services: the hash spreads badly", s, services)
		}
	}
	listen, httpAddr := freeAddr(t), freeAddr(t)
	shardAddrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncbuf.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- Run(ctx, testSpec(reg), []string{"--listen", listen, "--http", httpAddr, "--debounce-quiet", "1ms", "--output", "workloadentry",
			"--shard-listen", shardAddrs[0] + "," + shardAddrs[1] + "," + shardAddrs[2]}, &logs)
	}()
	defer func() {
		cancel()
		if code := <-exit; code != 0 {
			t.Errorf("exit %d; logs:\n%s", code, logs.String())
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := httpGet("http://" + httpAddr + "/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready; logs:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	seen := map[string]int{}
	for s, addr := range shardAddrs {
		got := sotwServiceEntries(t, addr)
		slices.Sort(got)
		if !slices.Equal(got, want[s]) {
			t.Errorf("shard %d (%s) serves %v, want %v", s, addr, got, want[s])
		}
		for _, n := range got {
			seen[n]++
		}
		// A service's WorkloadEntries are in its ServiceEntry's shard (the
		// pipeline gives them its Origin.Service), not placed by their own names.
		if wes := sotwNames(t, addr, "networking.istio.io/v1/WorkloadEntry"); len(wes) != 2*len(want[s]) {
			t.Errorf("shard %d serves %d WorkloadEntries for its %d services, want 2 each: %v", s, len(wes), len(want[s]), wes)
		}
	}
	if len(seen) != services {
		t.Errorf("the shards serve %d services together, want all %d", len(seen), services)
	}
	for n, c := range seen {
		if c != 1 {
			t.Errorf("%s is served by %d shards, want 1", n, c)
		}
	}
	if all := sotwServiceEntries(t, listen); len(all) != services {
		t.Errorf("--listen serves %d services beside the shards, want all %d", len(all), services)
	}

	// Legacy MCP sinks are routed the same way.
	conn, err := grpc.NewClient(shardAddrs[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	streamCtx, streamDone := context.WithTimeout(context.Background(), 10*time.Second)
	defer streamDone()
	legacy, err := xdsclient.OpenLegacy(streamCtx, conn, "legacy-sink", []string{mcp.ServiceEntries}, false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := legacy.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Resources) != len(want[1]) {
		t.Errorf("legacy MCP on shard 1 serves %d services, want %d", len(resp.Resources), len(want[1]))
	}

	_, metrics := httpGet("http://" + httpAddr + "/metrics")
	for s := range shards {
		if line := fmt.Sprintf("galleon_shard_services{shard=\"%d\"} %d\n", s, len(want[s])); !strings.Contains(metrics, line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}

	_, body := httpGet("http://" + httpAddr + "/debug/status")
	var status statusReport
	if err := json.Unmarshal([]byte(body), &status); err != nil {
		t.Fatalf("/debug/status: %v\n%s", err, body)
	}
	if len(status.Shards) != shards {
		t.Fatalf("/debug/status lists %d shards, want %d: %s", len(status.Shards), shards, body)
	}
	for s, st := range status.Shards {
		if st.Listen != shardAddrs[s] || st.Collections["ServiceEntry"].Resources != len(want[s]) {
			t.Errorf("/debug/status shard %d: %s with %d ServiceEntries, want %s with %d", s, st.Listen,
				st.Collections["ServiceEntry"].Resources, shardAddrs[s], len(want[s]))
		}
	}
}

// Shards are told apart by the port a stream arrives on: a shard on --listen's port, on another
// address, would take --listen's streams, and is refused at start.
func TestShardOnTheListenPortIsRefused(t *testing.T) {
	listen := freeAddr(t)
	_, port, _ := strings.Cut(listen, ":")
	var logs syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // ends a run that wrongly serves
	defer cancel()
	code := Run(ctx, testSpec(staticRegistry{}), []string{"--listen", listen, "--http", freeAddr(t),
		"--shard-listen", "127.0.0.2:" + port}, &logs)
	if code == 0 || !strings.Contains(logs.String(), "has --listen's port "+port) {
		t.Errorf("exit %d, logs:\n%s\nwant a refusal naming --listen's port %s", code, logs.String(), port)
	}
}
