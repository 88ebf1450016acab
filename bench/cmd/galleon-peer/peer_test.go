package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	mcp "istio.io/api/mcp/v1alpha1"

	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/testing/daemontest"
	"github.com/galleon-mesh/galleon/internal/xdsclient"
	"github.com/galleon-mesh/galleon/internal/xdsclient/xdsclienttest"
	"github.com/galleon-mesh/galleon/registry"
)

const seType = "networking.istio.io/v1/ServiceEntry"

// TestSameResourcesAsGalleonFile runs galleon-file's daemon and the peer on one generated
// registry and checks what the benchmark relies on: the peer serves the same resources, by name
// and by byte, under the MCP resource type URL (and with the requested type URL stamped on them
// otherwise, go-control-plane's behaviour); a change reaches a Delta sink of each as the same
// bytes, and the peer's Delta response holds the changed resource only although the full set
// was re-put.
func TestSameResourcesAsGalleonFile(t *testing.T) {
	dir := t.TempDir()
	if err := filegen.Generate(filegen.GenerateConfig{Dir: dir, Services: 40, Instances: 3, PerFile: 10}); err != nil {
		t.Fatal(err)
	}
	galleonAddr, _ := daemontest.Start(t, "galleon-file", "file", func(env daemon.Env) (registry.Registry, error) {
		return file.New(file.Config{Dir: dir, Logger: env.Logger})
	}, 30*time.Second)
	peerAddr := startPeer(t, Config{Dir: dir, TypeURLs: []string{xdsclient.MCPResourceTypeURL, seType},
		Quiet: time.Millisecond, MaxDelay: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	want := sotwState(ctx, t, galleonAddr, seType)
	if len(want) != 41 {
		t.Fatalf("galleon-file serves %d ServiceEntries, want 41 (40 services and the load target)", len(want))
	}
	for _, a := range want {
		if a.GetTypeUrl() != xdsclient.MCPResourceTypeURL {
			t.Fatalf("galleon-file sends a resource as %s", a.GetTypeUrl())
		}
	}
	sameState(t, "peer, "+xdsclient.MCPResourceTypeURL, sotwState(ctx, t, peerAddr, xdsclient.MCPResourceTypeURL), want, xdsclient.MCPResourceTypeURL)
	sameState(t, "peer, "+seType, sotwState(ctx, t, peerAddr, seType), want, seType)

	// One change: the target's first instance moves, as galleon-load run does it.
	galleonDelta := openDelta(ctx, t, galleonAddr, seType)
	peerDelta := openDelta(ctx, t, peerAddr, xdsclient.MCPResourceTypeURL)
	for name, d := range map[string]*xdsclient.DeltaStream{"galleon-file": galleonDelta, "peer": peerDelta} {
		if r := recvDelta(t, d); len(r.Raw.GetResources()) != 41 {
			t.Fatalf("%s: first Delta response holds %d resources, want 41", name, len(r.Raw.GetResources()))
		}
	}
	moveTarget(t, dir, "10.251.0.1")
	got := map[string]*anypb.Any{}
	for name, d := range map[string]*xdsclient.DeltaStream{"galleon-file": galleonDelta, "peer": peerDelta} {
		r := recvDelta(t, d)
		if n := len(r.Raw.GetResources()); n != 1 || len(r.Raw.GetRemovedResources()) != 0 {
			t.Fatalf("%s: Delta response to one change holds %d resources and %d removals, want 1 and 0", name, n, len(r.Raw.GetRemovedResources()))
		}
		res := r.Raw.GetResources()[0]
		if res.GetName() != "load/load-target" {
			t.Fatalf("%s: the change sent %s, want load/load-target", name, res.GetName())
		}
		if !bytes.Contains(res.GetResource().GetValue(), []byte("10.251.0.1")) {
			t.Fatalf("%s: the changed load/load-target does not hold the new address", name)
		}
		got[name] = res.GetResource()
	}
	if !proto.Equal(got["galleon-file"], got["peer"]) {
		t.Fatal("after the change, the peer's load/load-target is not galleon-file's")
	}
}

// TestAnswersAsIstiodAsks opens one ADS stream as istiod does to a config source: a request for
// each of its config types at once (here 41), only ServiceEntries served. Every type is answered, the others with an empty set;
// with AnyTypeURL set every ServiceEntry is an Any that anypb decodes as an mcp.Resource, as
// istiod's handleMCP does, and an ACK is answered with nothing until the next change.
func TestAnswersAsIstiodAsks(t *testing.T) {
	dir := t.TempDir()
	if err := filegen.Generate(filegen.GenerateConfig{Dir: dir, Services: 5, Instances: 2}); err != nil {
		t.Fatal(err)
	}
	addr := startPeer(t, Config{Dir: dir, TypeURLs: []string{seType}, AnyTypeURL: xdsclient.MCPResourceTypeURL,
		Quiet: time.Millisecond, MaxDelay: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	types := []string{seType}
	for i := range 40 {
		types = append(types, fmt.Sprintf("example.galleon.dev/v1/Kind%d", i))
	}
	st, err := xdsclient.OpenSotW(ctx, xdsclienttest.Dial(t, addr), xdsclient.NewNode("peer-test"), types)
	if err != nil {
		t.Fatal(err)
	}
	resources := map[string]int{}
	for len(resources) < len(types) {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("after answers for %d of %d types: %v", len(resources), len(types), err)
		}
		if _, twice := resources[r.TypeURL]; twice {
			t.Fatalf("type %s answered twice without a change", r.TypeURL)
		}
		resources[r.TypeURL] = len(r.Raw.GetResources())
		for _, a := range r.Raw.GetResources() {
			var m mcp.Resource
			if err := a.UnmarshalTo(&m); err != nil {
				t.Fatalf("a resource of %s does not decode as istiod decodes it: %v", r.TypeURL, err)
			}
		}
		if err := st.ACK(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, typ := range types {
		want := 0
		if typ == seType {
			want = 6 // 5 services and the load target
		}
		if resources[typ] != want {
			t.Errorf("%s: %d resources, want %d", typ, resources[typ], want)
		}
	}
	moveTarget(t, dir, "10.251.0.2")
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r.TypeURL != seType || len(r.Raw.GetResources()) != 6 {
		t.Fatalf("after a change: %d resources of %s, want the 6 ServiceEntries", len(r.Raw.GetResources()), r.TypeURL)
	}
}

// startPeer runs a peer on free loopback ports until the test ends and waits until it is ready.
func startPeer(t *testing.T, cfg Config) (grpcAddr string) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	grpcLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- p.Run(ctx, grpcLis, httpLis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("peer: %v", err)
		}
	})
	url := "http://" + httpLis.Addr().String() + "/readyz"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return grpcLis.Addr().String()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer not ready in 30 s: %v", err)
		}
	}
}

// sotwState is the first SotW response of addr for typeURL, by resource name.
func sotwState(ctx context.Context, t *testing.T, addr, typeURL string) map[string]*anypb.Any {
	t.Helper()
	st, err := xdsclient.OpenSotW(ctx, xdsclienttest.Dial(t, addr), xdsclient.NewNode("peer-test"), []string{typeURL})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*anypb.Any{}
	for _, a := range resp.Raw.GetResources() {
		out[mcpName(t, a)] = a
	}
	return out
}

// sameState fails unless got holds want's resources, each as the same istio.mcp.v1alpha1.Resource
// bytes in an Any of typeURL.
func sameState(t *testing.T, what string, got, want map[string]*anypb.Any, typeURL string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d resources, galleon-file %d", what, len(got), len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Fatalf("%s: no %s", what, name)
		case g.GetTypeUrl() != typeURL:
			t.Fatalf("%s: %s sent as %s, want %s", what, name, g.GetTypeUrl(), typeURL)
		case !bytes.Equal(g.GetValue(), w.GetValue()):
			t.Fatalf("%s: %s differs from galleon-file's bytes", what, name)
		}
	}
}

// mcpName is the metadata name of the istio.mcp.v1alpha1.Resource in a, whatever a's type URL.
func mcpName(t *testing.T, a *anypb.Any) string {
	t.Helper()
	var m mcp.Resource
	if err := proto.Unmarshal(a.GetValue(), &m); err != nil {
		t.Fatalf("resource is not an istio.mcp.v1alpha1.Resource: %v", err)
	}
	return m.GetMetadata().GetName()
}

func openDelta(ctx context.Context, t *testing.T, addr, typeURL string) *xdsclient.DeltaStream {
	t.Helper()
	d, err := xdsclient.OpenDelta(ctx, xdsclienttest.Dial(t, addr), xdsclient.NewNode("peer-test"), []string{typeURL})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// recvDelta receives and acknowledges the next Delta response.
func recvDelta(t *testing.T, d *xdsclient.DeltaStream) *xdsclient.DeltaResponse {
	t.Helper()
	r, err := d.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ACK(r); err != nil {
		t.Fatal(err)
	}
	return r
}

// moveTarget moves the load target's first instance to addr, replacing the file with a rename as
// galleon-load run does.
func moveTarget(t *testing.T, dir, addr string) {
	t.Helper()
	path := filepath.Join(dir, filegen.TargetFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(raw), "address: ")
	if i < 0 {
		t.Fatalf("%s has no address", path)
	}
	j := i + strings.IndexByte(string(raw[i:]), ',')
	changed := fmt.Sprintf("%saddress: %s%s", raw[:i], addr, raw[j:])
	tmp := filepath.Join(dir, ".target.tmp")
	if err := os.WriteFile(tmp, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
