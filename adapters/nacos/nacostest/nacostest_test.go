package nacostest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/polarisserver"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestStartStopRestart: the server answers on the Nacos HTTP port and accepts on P+1000, keeps
// its registry across a restart, and answers nothing once stopped.
func TestStartStopRestart(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+Version)
	t.Parallel()
	start := time.Now()
	s := Start(t, Options{})
	t.Logf("polaris-server %s: Nacos HTTP %s, gRPC %s, up in %v", Version, s.HTTPAddr, s.GRPCAddr, time.Since(start).Round(time.Millisecond))
	if !strings.HasPrefix(s.HTTPAddr, "127.0.0.1:") || port(s.GRPCAddr)-port(s.HTTPAddr) != 1000 {
		t.Fatalf("HTTPAddr %s, GRPCAddr %s: want 127.0.0.1:P and :P+1000", s.HTTPAddr, s.GRPCAddr)
	}
	ctx := ctxT(t, 90*time.Second)
	c := s.Client()
	ref := Ref{Service: "restart"}
	if err := c.RegisterInstance(ctx, ref, NewInstance("10.1.0.1", 80)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitInstances(ctx, ref, func(si *ServiceInfo) bool { return si.Find("10.1.0.1", 80) != nil }); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	s.Restart(t)
	t.Logf("restarted in %v", time.Since(start).Round(time.Millisecond))
	if _, err := c.WaitInstances(ctx, ref, func(si *ServiceInfo) bool { return si.Find("10.1.0.1", 80) != nil }); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	s.Stop(t)
	if s.Running() {
		t.Fatal("running after Stop")
	}
	if _, err := c.Instances(ctx, ref); err == nil {
		t.Fatal("a stopped server answers")
	}
	if c, err := net.DialTimeout("tcp", s.GRPCAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("the gRPC port accepts after Stop")
	}
}

// TestStartServerAndClose: the form for a program that is not a test.
func TestStartServerAndClose(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+Version)
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	s, err := StartServer(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Client().Services(ctx, "", "", 1, 10); err != nil {
		s.Close()
		t.Fatalf("StartServer returned, but the service list does not answer: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Proc().Running() {
		t.Error("still runs after Close")
	}
}

// TestPolarisNacosSemantics pins what Polaris 1.18.1 makes of Nacos HTTP v1 writes, the
// differences from Alibaba's Nacos that docs/adapters/nacos.md lists.
func TestPolarisNacosSemantics(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+Version)
	t.Parallel()
	s := Start(t, Options{})
	ctx := ctxT(t, 2*time.Minute)
	c := s.Client()

	ref := Ref{Service: "sem"}
	a := NewInstance("10.2.0.1", 8080)
	a.Weight, a.Metadata, a.Cluster = 2.5, map[string]string{"version": "v1"}, "c1"
	down := NewInstance("10.2.0.2", 8080)
	down.Healthy = false
	off := NewInstance("10.2.0.3", 8080)
	off.Enabled = false
	light := NewInstance("10.2.0.4", 8080)
	light.Weight = 0.5
	for _, in := range []Instance{a, down, off, light} {
		if err := c.RegisterInstance(ctx, ref, in); err != nil {
			t.Fatal(err)
		}
	}
	si, err := c.WaitInstances(ctx, ref, func(si *ServiceInfo) bool { return len(si.Hosts) == 3 })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("instance list: %s", strings.Join(strings.Fields(string(si.Raw)), " "))
	if si.Name != "DEFAULT_GROUP@@sem" || si.GroupName != DefaultGroup {
		t.Errorf("name %q group %q", si.Name, si.GroupName)
	}
	h := si.Find("10.2.0.1", 8080)
	switch {
	case h == nil:
		t.Fatal("10.2.0.1 not listed")
	case h.Weight != 2: // Polaris keeps weights as integers: 2.5 -> 2
		t.Errorf("weight %v, want 2 (truncated)", h.Weight)
	case !h.Ephemeral: // written persistent, read back ephemeral
		t.Errorf("ephemeral %v, want true", h.Ephemeral)
	case h.ClusterName != "c1" || h.Metadata["version"] != "v1":
		t.Errorf("cluster %q metadata %v", h.ClusterName, h.Metadata)
	case h.Metadata["internal-nacos-cluster"] != "c1" || h.Metadata["internal-nacos-service"] != "DEFAULT_GROUP@@sem":
		t.Errorf("metadata %v: want Polaris's internal-nacos-* keys", h.Metadata)
	}
	if h := si.Find("10.2.0.2", 8080); h == nil || h.Healthy {
		t.Errorf("registered healthy=false: %+v", h)
	}
	if si.Find("10.2.0.3", 8080) != nil {
		t.Error("a disabled instance is listed")
	}
	if h := si.Find("10.2.0.4", 8080); h == nil || h.Weight != 0 {
		t.Errorf("weight 0.5: %+v, want 0", h)
	}

	// A registration without metadata is refused (the Nacos clients always send some).
	_, err = c.Do(ctx, http.MethodPost, "/v1/ns/instance", url.Values{"serviceName": {"nometa"}, "ip": {"10.2.0.9"}, "port": {"1"}})
	var se *StatusError
	if !errors.As(err, &se) || !strings.Contains(se.Body, "metadata") {
		t.Errorf("registration without metadata: %v, want refused", err)
	}

	// The group is read from serviceName only ("G@@svc"): groupName alone is ignored.
	_, err = c.Do(ctx, http.MethodPost, "/v1/ns/instance", url.Values{"serviceName": {"grp"}, "groupName": {"G1"}, "ip": {"10.2.1.1"}, "port": {"1"}, "metadata": {"{}"}})
	if err != nil {
		t.Fatal(err)
	}
	g := Ref{Group: "G2", Service: "grp"}
	if err := c.RegisterInstance(ctx, g, NewInstance("10.2.1.2", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitInstances(ctx, Ref{Service: "grp"}, func(si *ServiceInfo) bool { return si.Find("10.2.1.1", 1) != nil }); err != nil {
		t.Errorf("groupName=G1 without G1@@ in serviceName: %v", err)
	}
	if _, err := c.WaitInstances(ctx, g, func(si *ServiceInfo) bool { return si.Find("10.2.1.2", 1) != nil && si.GroupName == "G2" }); err != nil {
		t.Fatal(err)
	}
	// A new namespace is created by the first registration in it.
	ns := Ref{Namespace: "ns-auto", Service: "auto"}
	if err := c.RegisterInstance(ctx, ns, NewInstance("10.2.2.1", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitInstances(ctx, ns, func(si *ServiceInfo) bool { return len(si.Hosts) == 1 }); err != nil {
		t.Fatal(err)
	}

	// The service list: DEFAULT_GROUP's lists every service of the namespace, other groups'
	// under Polaris's name "G2__grp"; count is the namespace's, whatever the group.
	count, names, err := c.Services(ctx, "", "", 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DEFAULT_GROUP services: count %d %q", count, names)
	if !slices.Contains(names, "sem") || !slices.Contains(names, "G2__grp") {
		t.Errorf("DEFAULT_GROUP list %q: want sem and G2__grp", names)
	}
	count2, names2, err := c.Services(ctx, "", "G2", 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("G2 services: count %d %q", count2, names2)
	if !slices.Equal(names2, []string{"grp"}) || count2 != count {
		t.Errorf("G2 list: count %d %q, want the namespace's count %d and [grp]", count2, names2, count)
	}

	// Deregistration, and the instance is gone.
	if err := c.DeregisterInstance(ctx, ref, light); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitInstances(ctx, ref, func(si *ServiceInfo) bool { return si.Find("10.2.0.4", 8080) == nil }); err != nil {
		t.Fatal(err)
	}
	// An update: weight and metadata.
	a.Weight, a.Metadata = 7, map[string]string{"version": "v2"}
	if err := c.UpdateInstance(ctx, ref, a); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitInstances(ctx, ref, func(si *ServiceInfo) bool {
		h := si.Find("10.2.0.1", 8080)
		return h != nil && h.Weight == 7 && h.Metadata["version"] == "v2"
	}); err != nil {
		t.Fatal(err)
	}
}

// TestHeartbeats: an instance written over HTTP v1, persistent or not, turns unhealthy without
// heartbeats and healthy again with them.
func TestHeartbeats(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+Version)
	t.Parallel()
	s := Start(t, Options{})
	ctx := ctxT(t, 2*time.Minute)
	c := s.Client()
	ref := Ref{Service: "beats"}
	in := NewInstance("10.3.0.1", 80)
	if err := c.RegisterInstance(ctx, ref, in); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.WaitInstances(ctx, ref, func(si *ServiceInfo) bool { h := si.Find(in.IP, in.Port); return h != nil && !h.Healthy }); err != nil {
		t.Fatal(err)
	}
	t.Logf("persistent instance without beats unhealthy after %v", time.Since(start).Round(time.Second))
	stop := c.KeepAlive(ctx, time.Second, func() map[Ref][]Instance { return map[Ref][]Instance{ref: {in}} })
	defer stop()
	start = time.Now()
	if _, err := c.WaitInstances(ctx, ref, func(si *ServiceInfo) bool { h := si.Find(in.IP, in.Port); return h != nil && h.Healthy }); err != nil {
		t.Fatal(err)
	}
	t.Logf("healthy again %v after beats started", time.Since(start).Round(time.Millisecond))
}

// TestProtectThreshold: below the threshold Polaris serves every instance as healthy and says
// reachProtectionThreshold.
func TestProtectThreshold(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+Version)
	t.Parallel()
	s := Start(t, Options{})
	ctx := ctxT(t, time.Minute)
	c := s.Client()
	ref := Ref{Group: "G", Service: "protected"}
	if err := c.CreateService(ctx, ref, ServiceOptions{ProtectThreshold: 0.6}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateService(ctx, ref, ServiceOptions{ProtectThreshold: 0.6}); err != nil {
		t.Fatalf("a second create: %v", err)
	}
	up := NewInstance("10.4.0.1", 80)
	down := NewInstance("10.4.0.2", 80)
	down.Healthy = false
	for _, in := range []Instance{up, down} {
		if err := c.RegisterInstance(ctx, ref, in); err != nil {
			t.Fatal(err)
		}
	}
	si, err := c.WaitInstances(ctx, ref, func(si *ServiceInfo) bool { return len(si.Hosts) == 2 })
	if err != nil {
		t.Fatal(err)
	}
	if !si.ReachProtectionThreshold || !si.Find("10.4.0.2", 80).Healthy {
		t.Errorf("1 of 2 healthy under threshold 0.6: %s", si.Raw)
	}
	// Without a threshold (another service), the unhealthy one is served unhealthy.
	plain := Ref{Service: "plain"}
	for _, in := range []Instance{up, down} {
		if err := c.RegisterInstance(ctx, plain, in); err != nil {
			t.Fatal(err)
		}
	}
	si, err = c.WaitInstances(ctx, plain, func(si *ServiceInfo) bool { return len(si.Hosts) == 2 })
	if err != nil {
		t.Fatal(err)
	}
	if si.ReachProtectionThreshold || si.Find("10.4.0.2", 80).Healthy {
		t.Errorf("no threshold: %s", si.Raw)
	}
}

// TestAuth: with client auth on, Polaris's Nacos HTTP API still answers reads without a token,
// refuses every write and every login (it never sees the token), and Client writes through
// Polaris's own API.
func TestAuth(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+Version)
	t.Parallel()
	s := Start(t, Options{Auth: true})
	ctx := ctxT(t, time.Minute)
	if s.Username != polarisserver.AdminUser || s.Password == "" {
		t.Fatalf("Username %q, Password set %v", s.Username, s.Password != "")
	}
	c := s.Client()
	ref := Ref{Service: "authed"}
	if err := c.RegisterInstance(ctx, ref, NewInstance("10.5.0.1", 80)); err != nil {
		t.Fatal(err)
	}
	si, err := c.WaitInstances(ctx, ref, func(si *ServiceInfo) bool { return len(si.Hosts) == 1 })
	if err != nil {
		t.Fatal(err)
	}
	if h := si.Hosts[0]; !h.Healthy || h.ClusterName != DefaultCluster {
		t.Errorf("written through Polaris: %s", si.Raw)
	}

	plain := NewClient(s.BaseURL(), "", nil)
	err = plain.RegisterInstance(ctx, ref, NewInstance("10.5.0.2", 80))
	if err == nil || !strings.Contains(err.Error(), "invalid token") {
		t.Errorf("a Nacos v1 write with auth on: %v, want refused", err)
	}
	for _, pw := range []string{s.Password, "wrong"} {
		plain.Username, plain.Password = s.Username, pw
		if _, _, err := plain.Login(ctx); err == nil || strings.Contains(err.Error(), s.Password) {
			t.Errorf("login: %v, want refused (and no password in the error)", err)
		}
	}
}

// TestPolarisWithoutAuthLoginEchoes: with auth off, Polaris's login takes any password and
// gives it back as the token.
func TestPolarisWithoutAuthLoginEchoes(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+Version)
	t.Parallel()
	s := Start(t, Options{})
	ctx := ctxT(t, time.Minute)
	c := NewClient(s.BaseURL(), "", nil)
	c.Username, c.Password = "anyone", "anything"
	tok, ttl, err := c.Login(ctx)
	if err != nil || tok != "anything" || ttl != 120*time.Second {
		t.Fatalf("login: %q %v %v, want the password back, 120 s", tok, ttl, err)
	}
	if err := c.RegisterInstance(ctx, Ref{Service: "x"}, NewInstance("10.6.0.1", 1)); err != nil {
		t.Fatalf("a write with the echoed token: %v", err)
	}
}

// TestNoHealthCheck: with health checks off, an instance keeps the health it was written with.
func TestNoHealthCheck(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+Version)
	t.Parallel()
	s := Start(t, Options{NoHealthCheck: true})
	ctx := ctxT(t, time.Minute)
	c := s.Client()
	ref := Ref{Service: "nocheck"}
	up, down := NewInstance("10.8.0.1", 80), NewInstance("10.8.0.2", 80)
	down.Healthy = false
	for _, in := range []Instance{up, down} {
		if err := c.RegisterInstance(ctx, ref, in); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Beat(ctx, ref, down); err != nil {
		t.Logf("a beat with health checks off: %v", err)
	}
	time.Sleep(30 * time.Second)
	si, err := c.Instances(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if u, d := si.Find("10.8.0.1", 80), si.Find("10.8.0.2", 80); u == nil || d == nil || !u.Healthy || d.Healthy {
		t.Errorf("30 s after registration: %s", si.Raw)
	}
}
