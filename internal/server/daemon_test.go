package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/galleon-mesh/galleon/internal/pipeline"
	"github.com/galleon-mesh/galleon/internal/serve/mcp"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	"github.com/galleon-mesh/galleon/model"
	mcpv1alpha1 "github.com/galleon-mesh/galleon/proto/mcp/v1alpha1"
	"github.com/galleon-mesh/galleon/registry"
)

func testFlags(fs *pflag.FlagSet) (*options, *string) {
	var o options
	o.register(fs)
	name := fs.String("name", "none", "a test flag")
	return &o, name
}

func TestSettingsPrecedence(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "galleon.yaml")
	if err := os.WriteFile(cfg, []byte("name: from-file\nlog-level: debug\ndebounce-quiet: 250ms\npanic-threshold: 40\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GALLEON_LOG_LEVEL", "warn")
	t.Setenv("GALLEON_DEBOUNCE_QUIET", "300ms")
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	o, name := testFlags(fs)
	if err := fs.Parse([]string{"--config", cfg, "--debounce-quiet", "50ms"}); err != nil {
		t.Fatal(err)
	}
	if err := loadSettings(fs, o.config); err != nil {
		t.Fatal(err)
	}
	if *name != "from-file" || o.logLevel != "warn" || o.quiet != 50*time.Millisecond || o.panicThreshold != 40 {
		t.Fatalf("name=%q log-level=%q quiet=%v panic=%d: want file < env < flag", *name, o.logLevel, o.quiet, o.panicThreshold)
	}
}

func TestBadSettingsSayWhatToFix(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"unknown flag", nil, []string{"--nope"}, "unknown flag: --nope"},
		{"unknown file key", nil, []string{"--config", write("unknown.yaml", "lissen: :1\n")}, `unknown key(s) lissen`},
		{"bad YAML", nil, []string{"--config", write("bad.yaml", "listen: [\n")}, "not valid YAML"},
		{"missing file", nil, []string{"--config", filepath.Join(dir, "missing.yaml")}, "--config: open"},
		{"bad env duration", map[string]string{"GALLEON_DEBOUNCE_MAX": "soon"}, nil, "environment variable GALLEON_DEBOUNCE_MAX: invalid argument"},
		{"bad file int", nil, []string{"--config", write("int.yaml", "panic-threshold: lots\n")}, `key "panic-threshold": invalid argument`},
		{"bad address", nil, []string{"--listen", "16010"}, "--listen \"16010\": want host:port"},
		{"bad enum", nil, []string{"--output", "crds"}, "--output \"crds\": want one of serviceentry, workloadentry"},
		{"bad percent", nil, []string{"--panic-threshold", "101"}, "want a percentage"},
		{"missing callout CA", nil, []string{"--mcp-callout", "127.0.0.1:15010", "--mcp-callout-ca", filepath.Join(dir, "missing-ca.pem")},
			"--mcp-callout-ca: open " + filepath.Join(dir, "missing-ca.pem")},
		{"callout CA without PEM", nil, []string{"--mcp-callout", "127.0.0.1:15010", "--mcp-callout-ca", write("ca.pem", "not a certificate\n")},
			"no PEM certificate"},
		{"callout cert without key", nil, []string{"--mcp-callout", "127.0.0.1:15010", "--mcp-callout-cert", write("cert.pem", "x")},
			"--mcp-callout-cert and --mcp-callout-key go together"},
		{"callout bad key pair", nil, []string{"--mcp-callout", "127.0.0.1:15010", "--mcp-callout-cert", write("c.pem", "x"), "--mcp-callout-key", write("k.pem", "x")},
			"--mcp-callout-cert " + filepath.Join(dir, "c.pem") + " / --mcp-callout-key " + filepath.Join(dir, "k.pem") + ": tls:"},
		{"TLS cert without key", nil, []string{"--tls-cert", write("lc.pem", "x")}, "--tls-cert and --tls-key go together"},
		{"TLS bad key pair", nil, []string{"--tls-cert", write("lc2.pem", "x"), "--tls-key", write("lk2.pem", "x")},
			"--tls-cert " + filepath.Join(dir, "lc2.pem") + " / --tls-key " + filepath.Join(dir, "lk2.pem") + ": tls:"},
		{"TLS missing key file", nil, []string{"--tls-cert", write("lc3.pem", "x"), "--tls-key", filepath.Join(dir, "none-key.pem")}, "--tls-key: open"},
		{"client CA without cert", nil, []string{"--tls-client-ca", write("lca.pem", "x")}, "--tls-client-ca needs --tls-cert"},
		{"allowed clients without CA", nil, []string{"--tls-allowed-clients", "spiffe://a/b"}, "need --tls-client-ca"},
		{"bad allowed client", nil, []string{"--tls-cert", "c", "--tls-key", "k", "--tls-client-ca", "ca", "--tls-allowed-clients", "spiffe://*/x"},
			`--tls-allowed-clients "spiffe://*/x": want a URI or DNS SAN, with at most a trailing *`},
		{"callout TLS without address", nil, []string{"--mcp-callout-server-name", "sink.example"}, "need --mcp-callout"},
		{"bad callout address", nil, []string{"--mcp-callout", "sink"}, "--mcp-callout \"sink\": want host:port"},
		{"VIP range not a CIDR", nil, []string{"--vip-ranges", "240.0.0.0"}, `--vip-ranges: "240.0.0.0" is not a CIDR block such as 240.0.0.0/4`},
		{"VIP range with host bits", map[string]string{"GALLEON_VIP_RANGES": "241.1.2.3/8"}, nil, `--vip-ranges: "241.1.2.3/8" has host bits set: did you mean 241.0.0.0/8?`},
		{"VIP range inside istiod's", nil, []string{"--vip-ranges", "240.240.1.0/24"},
			"--vip-ranges: 240.240.1.0/24 lies inside the excluded block 240.240.0.0/16 (istiod's own auto-allocation range by default): choose another range (or --vip-allocate=false)"},
		{"two IPv4 VIP ranges", nil, []string{"--vip-ranges", "241.0.0.0/8,242.0.0.0/8"}, "one IPv4 and one IPv6 range at most"},
		{"bad VIP exclusion", nil, []string{"--vip-exclude", "nope"}, `--vip-exclude: "nope" is not a CIDR block`},
		{"shard address twice", nil, []string{"--shard-listen", ":16020,:16020"}, "--shard-listen :16020: given twice (or it is --listen)"},
		{"shard on --listen", nil, []string{"--shard-listen", ":16010"}, "--shard-listen :16010: given twice (or it is --listen)"},
		{"bad shard address", nil, []string{"--shard-listen", "16020"}, "--shard-listen \"16020\": want host:port"},
		{"shards and subsets", nil, []string{"--shard-listen", ":16020", "--subsets", write("s.yaml", "subsets:\n- name: a\n  sinks: {ids: [x]}\n")}, "--shard-listen and --subsets do not go together"},
		{"negative stream limit", nil, []string{"--max-streams", "-1"}, "--max-streams -1: want 0 (no limit) or a positive number"},
		{"negative name bytes", map[string]string{"GALLEON_MAX_NAME_BYTES": "-5"}, nil, "--max-name-bytes -5: want 0 (no limit) or a positive number"},
		{"streams per client past gRPC's", nil, []string{"--max-streams-per-client", "4294967296"}, "--max-streams-per-client 4294967296: want at most 4294967295"},
		{"negative removal hold", nil, []string{"--removal-hold", "-1s"}, "--removal-hold -1s: want 0 (off) or a positive duration"},
		{"removal hold share 0", nil, []string{"--removal-hold-share", "0"}, "--removal-hold-share 0: want a percentage from 1 to 100"},
		{"kubeconfig missing", nil, []string{"--output-kubernetes", "--kubeconfig", filepath.Join(dir, "none.kubeconfig")}, "--kubeconfig " + filepath.Join(dir, "none.kubeconfig") + ": "},
		{"kubernetes outside a pod", map[string]string{"KUBERNETES_SERVICE_HOST": ""}, []string{"--output-kubernetes"}, "--output-kubernetes without --kubeconfig needs to run in a pod with a service account"},
		{"kubernetes owner not a label value", nil, []string{"--output-kubernetes", "--kubeconfig", write("k.yaml", "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c}}]\ncurrent-context: c\n"), "--kubernetes-owner", "team a/b"},
			"--kubernetes-owner \"team a/b\": not a Kubernetes label value"},
		{"kubernetes qps", map[string]string{"GALLEON_KUBERNETES_QPS": "0"}, []string{"--output-kubernetes", "--kubeconfig", write("k2.yaml", "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c}}]\ncurrent-context: c\n")},
			"--kubernetes-qps 0 and --kubernetes-burst 40: want positive numbers"},
		{"kubernetes lease not namespace/name", nil, []string{"--output-kubernetes", "--kubeconfig", write("k3.yaml", "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c}}]\ncurrent-context: c\n"), "--kubernetes-lease", "galleon"},
			"--kubernetes-lease \"galleon\": want namespace/name"},
		{"kubernetes lease timings", nil, []string{"--output-kubernetes", "--kubeconfig", write("k4.yaml", "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c}}]\ncurrent-context: c\n"), "--kubernetes-lease", "a/b", "--kubernetes-lease-renew-deadline", "2s", "--kubernetes-lease-retry-period", "2s"},
			"want duration > renew deadline > 1.2 x retry period > 0"},
		{"missing subsets file", nil, []string{"--subsets", filepath.Join(dir, "none.yaml")}, "--subsets: open " + filepath.Join(dir, "none.yaml")},
		{"misspelt subsets key", nil, []string{"--subsets", write("subsets.yaml", "subsets:\n- name: a\n  sinks: {ids: [x]}\n  service: {namespaces: [a]}\n")},
			"--subsets: " + filepath.Join(dir, "subsets.yaml") + ": yaml: unmarshal errors:\n  line 4: field service not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			code := Run(context.Background(), testSpec(nil), c.args, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), c.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and %q", code, stderr.String(), c.want)
			}
		})
	}
}

// staticRegistry reports a fixed listing once and waits.
// staticRegistry reports its services, and, when set, one record rejected
// and one part of the registry down.
type staticRegistry struct {
	services           []model.Service
	rejected, degraded string
}

func (r staticRegistry) Run(ctx context.Context, sink registry.Sink) error {
	sink.Replace(r.services)
	if r.rejected != "" {
		sink.Rejected(r.rejected, errors.New("port is not a number"))
	}
	if r.degraded != "" {
		sink.Degraded(r.degraded, errors.New("connection refused"))
	}
	<-ctx.Done()
	return ctx.Err()
}

func testSpec(reg registry.Registry) Spec {
	return Spec{Name: "galleon-test", Registry: "test", Summary: "test",
		Flags: func(fs *pflag.FlagSet) NewRegistry {
			fs.String("name", "", "a test flag")
			return func(Env) (registry.Registry, error) {
				if reg == nil {
					return nil, errors.New("no registry in this test")
				}
				return reg, nil
			}
		}}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestRunServesAndStopsCleanly(t *testing.T) {
	reg := staticRegistry{services: []model.Service{{
		Namespace: "ns", Name: "a", Hosts: []string{"a.ns.test"},
		Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}},
	}}, rejected: "bad.yaml:3", degraded: "dc2"}
	listen, httpAddr := freeAddr(t), freeAddr(t)
	subsets := filepath.Join(t.TempDir(), "subsets.yaml")
	if err := os.WriteFile(subsets, []byte("subsets:\n- name: team-ns\n  sinks: {ids: [istiod-ns-*]}\n  services: {namespaces: [ns]}\n- name: other\n  sinks: {ids: [istiod-other-*]}\n  services: {namespaces: [other]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncbuf.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- Run(ctx, testSpec(reg), []string{"--listen", listen, "--http", httpAddr, "--debounce-quiet", "1ms", "--subsets", subsets, "--shutdown-grace", "1m"}, &logs)
	}()

	get := func(path string) (int, string) { return httpGet("http://" + httpAddr + path) }
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get("/readyz")
		if code == http.StatusOK && strings.Contains(body, "degraded: 1 parts of the registry unreachable: dc2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %d %s\nlogs:\n%s", code, body, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, body := get("/debug/status")
	var status statusReport
	if err := json.Unmarshal([]byte(body), &status); code != 200 || err != nil {
		t.Fatalf("/debug/status: %d %s (%v)", code, body, err)
	}
	if status.Services != 1 || status.Subsets["team-ns"]["ServiceEntry"].Resources != 1 || status.Subsets["other"]["ServiceEntry"].Resources != 0 {
		t.Fatalf("/debug/status: services %d, subsets %+v", status.Services, status.Subsets)
	}
	if status.RejectedCount != 1 || len(status.Rejected) != 1 || status.Rejected[0].Record != "bad.yaml:3" || status.Degraded["dc2"] != "connection refused" {
		t.Fatalf("/debug/status: rejected %+v (%d), degraded %v; want bad.yaml:3 and dc2", status.Rejected, status.RejectedCount, status.Degraded)
	}
	code, body = get("/metrics")
	for _, want := range []string{
		"galleon_services 1",
		`galleon_registry_records_rejected_total{reason="other"} 1`, // the adapter gave no reason
		"galleon_registry_malformed_records 1",
		`galleon_registry_last_sync_timestamp_seconds{registry="test"} `,
		// Wired, and present from the start for every protocol.
		`galleon_change_ack_timeouts_total{protocol="sotw"} 0`,
		`galleon_change_ack_timeouts_total{protocol="delta"} 0`,
		`galleon_change_ack_timeouts_total{protocol="mcp"} 0`,
		`galleon_xds_streams{protocol="delta"} 0`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
	// Profiles are off unless asked for (--debug-pprof).
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap"} {
		if code, _ := get(path); code != http.StatusNotFound {
			t.Errorf("%s answers %d without --debug-pprof, want 404", path, code)
		}
	}
	// Both protocols on the one gRPC port: MCP over xDS is covered by the
	// protocol tests; check that legacy MCP is registered and serving too.
	conn, err := grpc.NewClient(listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	streamCtx, streamDone := context.WithTimeout(context.Background(), 10*time.Second)
	defer streamDone()
	mcpStream, err := mcpv1alpha1.NewResourceSourceClient(conn).EstablishResourceStream(streamCtx)
	if err != nil {
		t.Fatal(err)
	}
	if err := mcpStream.Send(&mcpv1alpha1.RequestResources{Collection: mcp.ServiceEntries, SinkNode: &mcpv1alpha1.SinkNode{Id: "test"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := mcpStream.Recv()
	if err != nil {
		t.Fatalf("legacy MCP ResourceSource on --listen: %v", err)
	}
	if len(resp.Resources) != 1 || resp.Resources[0].GetMetadata().GetName() != "ns/a" {
		t.Fatalf("legacy MCP served %v, want ns/a", resp.Resources)
	}
	// The stream stays open: stopping ends it with Unavailable, so the
	// graceful stop does not wait out --shutdown-grace (set to a minute
	// below); it once always did, and streams ended with a transport EOF.
	stopping := time.Now()
	cancel()
	if _, err := mcpStream.Recv(); grpcstatus.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("an open stream ended with %v, want Unavailable saying the source is shutting down", err)
	}
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("exit %d after cancel; logs:\n%s", code, logs.String())
		}
		if took := time.Since(stopping); took > 30*time.Second {
			t.Errorf("stopping with a stream open took %v: it waited for the grace instead of ending the stream", took)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("Run did not stop after cancel")
	}
}

// calloutSink is a legacy MCP sink in callout mode: it serves ResourceSink,
// subscribes to ServiceEntries on each stream and reports what it receives.
type calloutSink struct {
	mcpv1alpha1.UnimplementedResourceSinkServer
	got chan *mcpv1alpha1.Resources
}

func (c *calloutSink) EstablishResourceStream(stream mcpv1alpha1.ResourceSink_EstablishResourceStreamServer) error {
	if err := stream.Send(&mcpv1alpha1.RequestResources{Collection: mcp.ServiceEntries, SinkNode: &mcpv1alpha1.SinkNode{Id: "callout-test"}}); err != nil {
		return err
	}
	for {
		r, err := stream.Recv()
		if err != nil {
			return nil
		}
		select {
		case c.got <- r:
		default:
		}
	}
}

func TestRunCallsOutToASink(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	sink := &calloutSink{got: make(chan *mcpv1alpha1.Resources, 4)}
	mcpv1alpha1.RegisterResourceSinkServer(g, sink)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()

	reg := staticRegistry{services: []model.Service{{
		Namespace: "ns", Name: "a", Hosts: []string{"a.ns.test"},
		Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}},
	}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncbuf.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- Run(ctx, testSpec(reg), []string{"--listen", freeAddr(t), "--http", freeAddr(t), "--debounce-quiet", "1ms",
			"--mcp-callout", lis.Addr().String()}, &logs)
	}()
	select {
	case r := <-sink.got:
		if len(r.Resources) != 1 || r.Resources[0].GetMetadata().GetName() != "ns/a" {
			t.Fatalf("the callout sink received %v, want ns/a", r.Resources)
		}
	case code := <-exit:
		t.Fatalf("exit %d; logs:\n%s", code, logs.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("the callout sink received nothing; logs:\n%s", logs.String())
	}
	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("exit %d after cancel; logs:\n%s", code, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not stop after cancel")
	}
}

// With --debug-pprof the profiles are served, but never the command line,
// which may hold a registry token (galleon-consul --token ...).
func TestProfilesNeverServeTheCommandLine(t *testing.T) {
	store := snapshot.NewStore()
	h := httpHandler(testSpec(staticRegistry{}), pipeline.New(store, pipeline.Config{}), store, servedViews{}, prometheus.NewRegistry(), true)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "heap") {
		t.Errorf("/debug/pprof/ with --debug-pprof: %d", code)
	}
	if code, body := get("/debug/pprof/cmdline"); code == http.StatusOK || strings.Contains(body, os.Args[0]) {
		t.Errorf("/debug/pprof/cmdline answers %d with the command line", code)
	}
}

// TestAdapterFlagClashIsASettingsError: an adapter that defines a flag the
// daemon has (pflag panics on a redefined flag) gets a message saying which
// and what to do, and exit code 2.
func TestAdapterFlagClashIsASettingsError(t *testing.T) {
	spec := Spec{Name: "galleon-test", Registry: "test", Summary: "test",
		Flags: func(fs *pflag.FlagSet) NewRegistry {
			fs.String("listen", "", "clashes")
			fs.String("subsets", "", "clashes too")
			fs.String("acme-address", "", "fine")
			return func(Env) (registry.Registry, error) { return nil, errors.New("not reached") }
		}}
	var stderr syncbuf.Buffer
	if code := Run(context.Background(), spec, nil, &stderr); code != 2 {
		t.Fatalf("exit code %d, want 2; stderr:\n%s", code, stderr.String())
	}
	if got := stderr.String(); !strings.Contains(got, "--listen, --subsets") || !strings.Contains(got, "rename it") {
		t.Fatalf("stderr does not name the clashing flags and the fix:\n%s", got)
	}
	names := DaemonFlags()
	for _, want := range []string{"listen", "http", "config", "subsets", "mcp-callout", "send-timeout"} {
		if !slices.Contains(names, want) {
			t.Errorf("DaemonFlags() = %v lacks %q", names, want)
		}
	}
}

// TestDefaultPortsAreTheChartsAndManifests: --listen and --http default to
// the ports the Helm chart and the manifests expose, probe and scrape
// (ports.grpc, ports.http; the prometheus.io/port annotation), on every
// interface: the kubelet and Prometheus reach the pod by its IP.
func TestDefaultPortsAreTheChartsAndManifests(t *testing.T) {
	values, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "galleon", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"  grpc: " + strings.TrimPrefix(DefaultListen, ":") + " ", "  http: " + strings.TrimPrefix(DefaultHTTP, ":") + " "} {
		if !strings.Contains(string(values), "\n"+want) {
			t.Errorf("deploy/helm/galleon/values.yaml has no %q under ports", strings.TrimSpace(want))
		}
	}
	if DefaultListen != ":16010" || DefaultHTTP != ":16014" {
		t.Errorf("defaults %s and %s: every interface, ports 16010 and 16014 expected", DefaultListen, DefaultHTTP)
	}
	deployment, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "standalone", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--http=" + DefaultHTTP, `prometheus.io/port: "` + strings.TrimPrefix(DefaultHTTP, ":") + `"`} {
		if !strings.Contains(string(deployment), want) {
			t.Errorf("deploy/kubernetes/standalone/deployment.yaml lacks %q", want)
		}
	}
}

// scriptedRegistry runs each step the test sends, in order.
type scriptedRegistry struct{ steps chan func(registry.Sink) }

func (r scriptedRegistry) Run(ctx context.Context, sink registry.Sink) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case step := <-r.steps:
			step(sink)
		}
	}
}

// TestReadinessSaysWhy: /readyz says why it is not ready when the adapter
// told (a missing ZooKeeper root, say), and says a removal is held by the
// emptiness rule, which /debug/status details (issue 27).
func TestReadinessSaysWhy(t *testing.T) {
	reg := scriptedRegistry{steps: make(chan func(registry.Sink))}
	listen, httpAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncbuf.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- Run(ctx, testSpec(reg), []string{"--listen", listen, "--http", httpAddr, "--debounce-quiet", "1ms", "--removal-hold", "1h"}, &logs)
	}()
	get := func(path string) (int, string) { return httpGet("http://" + httpAddr + path) }
	waitReady := func(what string, ok func(code int, body string) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			code, body := get("/readyz")
			if ok(code, body) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz never said %s: %d %s\nlogs:\n%s", what, code, body, logs.String())
			}
		}
	}
	reg.steps <- func(s registry.Sink) {
		s.Unreachable(errors.New(`root znode "/dubbo" does not exist: check --zk-root`))
	}
	waitReady("why it is not ready", func(code int, body string) bool {
		return code == http.StatusServiceUnavailable && strings.Contains(body, `not ready: the registry has not been listed yet: root znode "/dubbo" does not exist`)
	})
	svc := model.Service{Namespace: "ns", Name: "a", Hosts: []string{"a.ns.test"}, Ports: []model.Port{{Number: 80, Protocol: model.ProtocolHTTP}}}
	reg.steps <- func(s registry.Sink) { s.Unreachable(nil); s.Replace([]model.Service{svc}) }
	waitReady("ready", func(code int, body string) bool { return code == http.StatusOK && body == "ready\n" })
	reg.steps <- func(s registry.Sink) { s.Replace(nil) }
	waitReady("the hold", func(code int, body string) bool {
		return code == http.StatusOK && strings.Contains(body, "ready (holding a removal: the registry's answer would remove 1 of 1 services")
	})
	code, body := get("/debug/status")
	var status statusReport
	if err := json.Unmarshal([]byte(body), &status); code != 200 || err != nil {
		t.Fatalf("/debug/status: %d %s (%v)", code, body, err)
	}
	if status.Held == nil || status.Held.Services != 1 || len(status.Held.Examples) != 1 || status.Held.Examples[0] != "ns/a" || status.Services != 1 {
		t.Fatalf("/debug/status: held %+v, services %d; want ns/a held and served", status.Held, status.Services)
	}
	if _, metrics := get("/metrics"); !strings.Contains(metrics, "galleon_registry_removals_held 1") {
		t.Error("/metrics lacks galleon_registry_removals_held 1")
	}
	cancel()
	if code := <-exit; code != 0 {
		t.Fatalf("exit %d\n%s", code, logs.String())
	}
}

// httpGet returns the status and body of a GET, or 0 and the error.
func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
