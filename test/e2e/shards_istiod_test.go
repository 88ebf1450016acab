package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/test/internal/proc"
	"github.com/galleon-mesh/galleon/test/istiod"
	"github.com/galleon-mesh/galleon/test/sidecar"
)

// shardStatus is what galleon's /debug/status says of each shard (internal/server/daemon.go,
// shardState): its listener and its ServiceEntry collection.
type shardStatus struct {
	Listen      string `json:"listen"`
	Collections map[string]struct {
		Version   string `json:"version"`
		Resources int    `json:"resources"`
	} `json:"collections"`
}

func shardsOf(t *testing.T, ctx context.Context, g *galleon) []shardStatus {
	t.Helper()
	st, err := galleonStatus(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	return st.Shards
}

// shardService is service i of TestShardsToIstiod: HTTP on 8080 at its own host, one instance.
func shardService(i int, instance string) fileService {
	name := fmt.Sprintf("svc-%02d", i)
	return fileService{Name: name, Namespace: "shards", Hosts: []string{name + ".shards.internal"},
		Ports:     []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}},
		Instances: []fileInstance{{ID: name + "-0", Address: instance}}}
}

// routesTo says what is wrong when HTTP to host:8080 in the sidecar's view does not reach the
// host's cluster with exactly the endpoint instance:8080.
func routesTo(v *sidecar.View, host, instance string) string {
	want := "outbound|8080||" + host
	d, err := v.HTTP("192.0.2.10", 8080, host)
	if err != nil {
		return fmt.Sprintf("HTTP Host %s: %v", host, err)
	}
	if d.Cluster != want {
		return fmt.Sprintf("HTTP Host %s goes to %s, want %s", host, d, want)
	}
	if eps, err := v.Endpoints(want); err != nil || !slices.Equal(eps, []string{instance + ":8080"}) {
		return fmt.Sprintf("cluster %s endpoints %v (%v), want [%s:8080]", want, eps, err, instance)
	}
	return ""
}

// TestShardsToIstiod serves one file registry as three shards (--shard-listen), each a config
// source of istiod, and checks through a sidecar's view that the mesh sees what one source would
// show: every service routed to its cluster and endpoints; an endpoint change re-sends one shard
// only (the other shards' versions stay) and costs istiod no full push; a removed service
// leaves the sidecar's view; galleon-file stopped, istiod keeps every shard's services, and
// restarted on the same shard addresses it serves the next change.
func TestShardsToIstiod(t *testing.T) { istiod.ForEachRelease(t, testShardsToIstiod) }

func testShardsToIstiod(t *testing.T, rel istiod.Release) {
	const services = 12
	bin := galleonBinary(t, "galleon-file")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var reg fileRegistry
	instance := func(i, v int) string { return fmt.Sprintf("10.70.%d.%d", i, v) }
	for i := range services {
		reg.Services = append(reg.Services, shardService(i, instance(i, 1)))
	}
	writeRegistryFile(t, dir, "services.yaml", reg)
	shardAddrs, err := proc.FreeAddrs(3)
	if err != nil {
		t.Fatal(err)
	}
	g := startGalleon(t, bin, "--file-dir", dir, "--file-removal-delay", "200ms", "--shard-listen", strings.Join(shardAddrs, ","))
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: shardAddrs})
	waitForServiceEntries(t, ctx, ist, "every shard's services", hasServiceEntries(reg))

	held := 0
	for i, s := range shardsOf(t, ctx, g) {
		n := s.Collections["ServiceEntry"].Resources
		if n == 0 || n == services {
			t.Errorf("shard %d (%s) holds %d of %d services: the shards do not split the registry", i, s.Listen, n, services)
		}
		held += n
	}
	if held != services {
		t.Errorf("the shards hold %d services together, want %d", held, services)
	}
	waitForView(t, ctx, ist, "every service routed", func(v *sidecar.View) string {
		for i, s := range reg.Services {
			if msg := routesTo(v, s.Hosts[0], instance(i, 1)); msg != "" {
				return msg
			}
		}
		return ""
	})

	// An endpoint of svc-00 moves: one shard's collection changes, the others keep their versions,
	// and istiod makes no full push.
	versions := func() []string {
		var out []string
		for _, s := range shardsOf(t, ctx, g) {
			out = append(out, s.Collections["ServiceEntry"].Version)
		}
		return out
	}
	pushes := trackPushes(t, ctx, ist)
	before := versions()
	moved := shardService(0, instance(0, 2))
	full := pushes.change("an endpoint of svc-00 moved", func() error {
		reg.Services[0] = moved
		writeRegistryFile(t, dir, "services.yaml", reg)
		return nil
	}, hasServiceEntries(reg))
	if full != 0 {
		t.Errorf("an endpoint-only change in one shard caused %v full pushes, want 0", full)
	}
	after := versions()
	changed := 0
	for i := range before {
		if before[i] != after[i] {
			changed++
		}
	}
	if changed != 1 {
		t.Errorf("an endpoint change of one service moved %d shards' versions (%v -> %v), want 1", changed, before, after)
	}
	waitForView(t, ctx, ist, "svc-00's new endpoint", func(v *sidecar.View) string {
		return routesTo(v, moved.Hosts[0], instance(0, 2))
	})

	// svc-01 removed: it leaves the sidecar's view; the others stay routed.
	gone := reg.Services[1]
	reg.Services = slices.Delete(reg.Services, 1, 2)
	writeRegistryFile(t, dir, "services.yaml", reg)
	allRouted := func(v *sidecar.View) string {
		for _, s := range reg.Services {
			if msg := routesTo(v, s.Hosts[0], s.Instances[0].Address); msg != "" {
				return msg
			}
		}
		return ""
	}
	waitForView(t, ctx, ist, "svc-01 removed", func(v *sidecar.View) string {
		if msg := notRouted(v, gone.Hosts[0], 8080); msg != "" {
			return msg
		}
		return allRouted(v)
	})

	// galleon-file stops: istiod holds what every shard served (its sources' last good state).
	// Restarted on the same shard addresses, it serves the next change.
	g.Stop()
	// A second for istiod's sources to see their streams end (istiod exposes no metric of it, so
	// this is not observed): what follows checks what istiod serves meanwhile.
	time.Sleep(time.Second)
	waitForView(t, ctx, ist, "galleon-file stopped", allRouted)
	reg.Services[1] = shardService(2, instance(2, 2)) // svc-02 (index 1 since svc-01 left) moves
	writeRegistryFile(t, dir, "services.yaml", reg)
	startGalleon(t, bin, "--file-dir", dir, "--file-removal-delay", "200ms", "--shard-listen", strings.Join(shardAddrs, ","))
	waitForServiceEntries(t, ctx, ist, "after the restart", hasServiceEntries(reg))
	waitForView(t, ctx, ist, "svc-02's new endpoint after the restart", allRouted)
}
