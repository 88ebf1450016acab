package cli

import (
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/internal/serve/mcp"
	"github.com/galleon-mesh/galleon/internal/serve/xds"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	"github.com/galleon-mesh/galleon/internal/xdsclient"
)

func TestLegacyCollections(t *testing.T) {
	for _, tc := range []struct {
		types, want, err string
	}{
		{"serviceentries", mcp.ServiceEntries, ""},
		{"se", mcp.ServiceEntries, ""},
		{"workloadentries", mcp.WorkloadEntries, ""},
		{"we, se,serviceentry", mcp.WorkloadEntries + " " + mcp.ServiceEntries, ""},
		{"istio/networking/v1alpha3/destinationrules", "istio/networking/v1alpha3/destinationrules", ""},
		{"pods", "", "legacy MCP collection"},
		{"se,", "", "empty type"},
	} {
		got, err := legacyCollections(tc.types)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("legacyCollections(%q) error = %v, want %q", tc.types, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("legacyCollections(%q) = %v, %v; want %s", tc.types, got, err, tc.want)
		}
	}
	// The names galleonctl sends are the ones Galleon's server holds.
	if xdsclient.LegacyServiceEntries != mcp.ServiceEntries || xdsclient.LegacyWorkloadEntries != mcp.WorkloadEntries {
		t.Errorf("xdsclient collections %s, %s differ from internal/serve/mcp's", xdsclient.LegacyServiceEntries, xdsclient.LegacyWorkloadEntries)
	}
	if !isLegacyCollection(mcp.ServiceEntries) || isLegacyCollection(seV1) {
		t.Error("isLegacyCollection confuses collections and type URLs")
	}
}

func TestLegacyUsage(t *testing.T) {
	ctx := context.Background()
	code, out, _ := run(ctx, "watch", "--help")
	if code != 0 || !strings.Contains(out, "--protocol mcp --incremental") || !strings.Contains(out, "-incremental") {
		t.Errorf("watch --help lacks the legacy MCP example or flag:\n%s", out)
	}
	for _, args := range [][]string{
		{"get", "--protocol", "grpc"},
		{"watch", "--protocol", "mcp", "--delta"},
		{"watch", "--incremental"},
		{"get", "--protocol", "mcp", "--type", "pods"},
	} {
		if code, _, errOut := run(ctx, args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, errOut)
		}
	}
}

// legacySource serves a snapshot store with Galleon's real legacy MCP
// server (internal/serve/mcp) on a loopback port, with the daemon's gRPC options.
func legacySource(t *testing.T) (*snapshot.Store, string) {
	t.Helper()
	store := snapshot.NewStore()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(xds.GRPCServerOptions()...)
	mcp.NewServer(snapshot.Everyone(store), mcp.Options{}).Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return store, lis.Addr().String()
}

// seChange is an upsert (hosts given) or a deletion (none) of a ServiceEntry.
func seChange(t *testing.T, name string, hosts ...string) snapshot.Change {
	t.Helper()
	ch := snapshot.Change{Kind: snapshot.ServiceEntry, Name: name}
	if len(hosts) > 0 {
		body, err := proto.MarshalOptions{Deterministic: true}.Marshal(&networking.ServiceEntry{
			Hosts:      hosts,
			Ports:      []*networking.ServicePort{{Number: 80, Protocol: "HTTP", Name: "http"}},
			Resolution: networking.ServiceEntry_STATIC,
			Endpoints:  []*networking.WorkloadEntry{{Address: "10.0.0.1"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		ch.Object = &snapshot.Object{Kind: snapshot.ServiceEntry, Name: name, Labels: map[string]string{"app": "x"}, Body: body}
	}
	return ch
}

// apply makes one new snapshot of changes.
func apply(t *testing.T, store *snapshot.Store, changes ...snapshot.Change) {
	t.Helper()
	if _, _, err := store.Apply(changes, true); err != nil {
		t.Fatal(err)
	}
}

func TestGetLegacy(t *testing.T) {
	store, addr := legacySource(t)
	apply(t, store, seChange(t, "shop/b", "b.example"), seChange(t, "bookinfo/a", "a.example"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	code, out, errOut := run(ctx, "get", "--protocol", "mcp", "--addr", addr)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, want := range []string{
		"kind: List",
		"- apiVersion: networking.istio.io/v1alpha3\n  kind: ServiceEntry\n  metadata:\n",
		"    labels:\n      app: x\n    name: a\n    namespace: bookinfo\n    resourceVersion: ",
		"    - a.example\n",
		"    name: b\n    namespace: shop\n",
		"resolution: STATIC",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("get --protocol mcp output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "name: a") > strings.Index(out, "name: b") {
		t.Errorf("not sorted by namespace/name:\n%s", out)
	}

	code, out, errOut = run(ctx, "get", "--protocol", "mcp", "--addr", addr, "--type", "se,istio/networking/v1alpha3/destinationrules", "-o", "names")
	if code != 0 || out != "ServiceEntry/bookinfo/a\nServiceEntry/shop/b\n" {
		t.Errorf("get -o names over two collections (one Galleon holds nothing of): exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestGetLegacyUnimplemented(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer() // no services: what an istiod >= 1.9 answers
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, _, errOut := run(ctx, "get", "--protocol", "mcp", "--addr", lis.Addr().String(), "--timeout", "5s")
	if code != 1 || !strings.Contains(errOut, "does not serve legacy MCP") {
		t.Errorf("exit %d, stderr %q; want 1 and an explanation", code, errOut)
	}
}

// waitFor polls out until it matches re, or fails at the deadline.
func waitFor(t *testing.T, out *syncbuf.Buffer, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindString(out.String()); m != "" {
			return m
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	t.Fatalf("no line matching %s in:\n%s", re, out.String())
	return ""
}

func TestWatchLegacy(t *testing.T) {
	for _, incremental := range []bool{false, true} {
		name := "full"
		if incremental {
			name = "incremental"
		}
		t.Run(name, func(t *testing.T) {
			store, addr := legacySource(t)
			apply(t, store, seChange(t, "ns/a", "a.example"), seChange(t, "ns/b", "b.example"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			args := []string{"watch", "--protocol", "mcp", "--addr", addr, "--timeout", "10s"}
			if incremental {
				args = append(args, "--incremental")
			}
			var stdout, stderr syncbuf.Buffer
			done := make(chan int, 1)
			go func() { done <- Run(ctx, args, &stdout, &stderr) }()

			ts := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\S* `
			waitFor(t, &stdout, regexp.MustCompile(ts+regexp.QuoteMeta(mcp.ServiceEntries)+
				` full version="[^"]+" nonce="[^"]+" resources=2 sent=2 added=\[ns/a ns/b\]\n`))

			// One snapshot with three changes: one response. Galleon sends
			// it only once the first was ACKed, so it also proves the ACK.
			apply(t, store, seChange(t, "ns/a", "a2.example"), seChange(t, "ns/b"), seChange(t, "ns/c", "c.example"))
			want := ` full version="[^"]+" nonce="[^"]+" resources=2 sent=2 added=\[ns/c\] updated=\[ns/a\] removed=\[ns/b\]\n`
			if incremental {
				want = ` incremental version="[^"]+" nonce="[^"]+" resources=2 sent=2 added=\[ns/c\] updated=\[ns/a\] removed=\[ns/b\]\n`
			}
			waitFor(t, &stdout, regexp.MustCompile(ts+regexp.QuoteMeta(mcp.ServiceEntries)+want))

			// Incremental: only what changed is sent (sent=1), the rest held.
			apply(t, store, seChange(t, "ns/c", "c2.example"))
			want = ` full version="[^"]+" nonce="[^"]+" resources=2 sent=2 updated=\[ns/c\]\n`
			if incremental {
				want = ` incremental version="[^"]+" nonce="[^"]+" resources=2 sent=1 updated=\[ns/c\]\n`
			}
			waitFor(t, &stdout, regexp.MustCompile(ts+regexp.QuoteMeta(mcp.ServiceEntries)+want))
			if n := strings.Count(stdout.String(), "\n"); n != 3 {
				t.Errorf("%d lines, want 3:\n%s", n, stdout.String())
			}
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("exit %d after Ctrl-C, stderr:\n%s", code, stderr.String())
			}
			if stderr.String() != "" {
				t.Errorf("stderr: %s", stderr.String())
			}
		})
	}
}
