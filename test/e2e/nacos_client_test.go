package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nacos-group/nacos-sdk-go/v2/vo"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/internal/nacosclient"
)

// TestNacosOfficialClient proves the path a Nacos user's application takes to the server the
// Nacos tests run (polaris-server's Nacos API): the official Go client (nacos-sdk-go v2, gRPC)
// registers, updates and deregisters ephemeral instances in a namespace and a group, and what
// it wrote is read back over the Nacos HTTP API (GET /nacos/v1/ns/instance/list), the way a
// Nacos 1.x client or an operator reads it. Where Polaris differs from Alibaba's Nacos the test
// asserts Polaris's behaviour and says so: those are the differences docs/adapters/nacos.md
// lists.
func TestNacosOfficialClient(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	srv := nacostest.Start(t, nacostest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, group, svc = "dev", "G1", "inventory"
	c := nacosclient.New(t, nacosclient.Options{Servers: []nacosclient.Server{nacosServerAddr(srv)}, Namespace: ns})

	ref := nacostest.Ref{Namespace: ns, Group: group, Service: svc}
	reader := srv.Client()

	// wait reads the service over HTTP until ok accepts what is listed ("" : accepted).
	wait := func(what string, ok func([]nacostest.InstanceInfo) string) []nacostest.InstanceInfo {
		t.Helper()
		var (
			ins   []nacostest.InstanceInfo
			wrong = "nothing read yet"
		)
		start := time.Now()
		for time.Since(start) < 20*time.Second {
			if si, err := reader.Instances(ctx, ref); err != nil {
				wrong = err.Error()
			} else if ins = si.Hosts; ok(ins) == "" {
				t.Logf("%s: listed over HTTP %v after the client's call", what, time.Since(start).Round(time.Millisecond))
				return ins
			} else {
				wrong = ok(ins)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: %s (listed: %+v)", what, wrong, ins)
		return nil
	}
	find := func(ins []nacostest.InstanceInfo, ip string) (nacostest.InstanceInfo, bool) {
		i := slices.IndexFunc(ins, func(in nacostest.InstanceInfo) bool { return in.IP == ip })
		if i < 0 {
			return nacostest.InstanceInfo{}, false
		}
		return ins[i], true
	}
	ipsAre := func(want ...string) func([]nacostest.InstanceInfo) string {
		return func(ins []nacostest.InstanceInfo) string {
			var got []string
			for _, in := range ins {
				got = append(got, in.IP)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Sprintf("instances at %v, want %v", got, want)
			}
			return ""
		}
	}

	// 1. Two ephemeral instances, one with a weight, a cluster and metadata.
	a := nacosclient.Instance{IP: "10.90.0.1", Port: 9000, Weight: 2, Cluster: "c1", Metadata: map[string]string{"version": "v2", "zone": "z1"}}
	b := nacosclient.Instance{IP: "10.90.0.2", Port: 9000}
	for _, in := range []nacosclient.Instance{a, b} {
		if err := c.Register(group, svc, in); err != nil {
			t.Fatal(err)
		}
	}
	ins := wait("registered", ipsAre("10.90.0.1", "10.90.0.2"))
	got, _ := find(ins, a.IP)
	if got.Port != 9000 || got.Weight != 2 || !got.Healthy || !got.Enabled || got.ClusterName != "c1" {
		t.Errorf("10.90.0.1 listed as %+v: want port 9000, weight 2, healthy, enabled, cluster c1", got)
	}
	for k, v := range a.Metadata {
		if got.Metadata[k] != v {
			t.Errorf("10.90.0.1's metadata %v: want %s=%s", got.Metadata, k, v)
		}
	}
	// Polaris adds bookkeeping of its own to the metadata an instance was registered with
	// (apiserver/nacosserver/model/constant.go: internal-nacos-*), which Nacos does not.
	extra := maps.Clone(got.Metadata)
	for k := range a.Metadata {
		delete(extra, k)
	}
	t.Logf("metadata Polaris added to 10.90.0.1's: %v", extra)

	// 2. UpdateInstance (over gRPC a registerInstance again): weight 5 and new metadata.
	a.Weight, a.Metadata = 5, map[string]string{"version": "v3"}
	if err := c.Update(group, svc, a); err != nil {
		t.Fatal(err)
	}
	wait("weight 5, version v3", func(ins []nacostest.InstanceInfo) string {
		got, ok := find(ins, a.IP)
		if !ok || got.Weight != 5 || got.Metadata["version"] != "v3" {
			return "10.90.0.1 is not listed with weight 5 and version=v3"
		}
		if _, stale := got.Metadata["zone"]; stale {
			return "10.90.0.1 keeps metadata zone after an update without it"
		}
		return ""
	})

	// 3. A fractional weight: Nacos keeps 0.5; Polaris holds weights as whole numbers
	// (model/instance.go, Instance.ToSpecInstance: uint32(weight)), so 0.5 is 0.
	half := b
	half.Weight = 0.5
	if err := c.Update(group, svc, half); err != nil {
		t.Fatal(err)
	}
	wait("weight 0.5", func(ins []nacostest.InstanceInfo) string {
		got, ok := find(ins, b.IP)
		if !ok {
			return "10.90.0.2 not listed"
		}
		if got.Weight != 0 {
			return fmt.Sprintf("10.90.0.2's weight is %v, want 0 (Polaris truncates 0.5)", got.Weight)
		}
		return ""
	})

	// 4. enabled=false: the instance is no longer listed (Nacos and Polaris list enabled
	// instances only: core/storage.go, ListInstances with EnableOnly), and is again once
	// enabled.
	off := a
	off.Disabled = true
	if err := c.Update(group, svc, off); err != nil {
		t.Fatal(err)
	}
	wait("10.90.0.1 disabled", ipsAre("10.90.0.2"))
	if err := c.Update(group, svc, a); err != nil {
		t.Fatal(err)
	}
	wait("10.90.0.1 enabled", ipsAre("10.90.0.1", "10.90.0.2"))

	// 5. What the official client reads back over gRPC agrees (its own query, not its cache:
	// it subscribes to nothing here).
	all, err := c.Naming().SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: svc, GroupName: group})
	if err != nil {
		t.Fatalf("SelectAllInstances: %v", err)
	}
	var grpcIPs []string
	for _, in := range all {
		grpcIPs = append(grpcIPs, in.Ip)
	}
	slices.Sort(grpcIPs)
	if !slices.Equal(grpcIPs, []string{"10.90.0.1", "10.90.0.2"}) {
		t.Errorf("the official client's SelectAllInstances lists %v, want [10.90.0.1 10.90.0.2]", grpcIPs)
	}

	// 6. Deregistered: gone. Then the client closes: its ephemeral instances go with its
	// connection (v2/discover/instance.go, HandleClientDisConnect), as in Nacos 2.
	if err := c.Deregister(group, svc, b); err != nil {
		t.Fatal(err)
	}
	wait("10.90.0.2 deregistered", ipsAre("10.90.0.1"))
	c.Close()
	wait("the client closed", ipsAre())
}
