// Package legacymcp checks Galleon's legacy MCP source (istio.mcp.v1alpha1
// ResourceSource) with a client this project did not write: the generated
// ResourceSourceClient of istio.io/api v1.22.0, the last istio/api release
// that shipped the legacy services, and its networking/v1alpha3 types.
//
// It is a separate module on purpose: the main module and test/ use
// istio.io/api v1.29.2, and Go's minimal version selection would pick that
// one for both. Nothing of Galleon is imported; cmd/galleon-file is built from
// the repository root with `go build` and run as a process.
//
// Run: cd test/legacymcp && go test ./...   (see docs/legacy-mcp.md)
package legacymcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	mcp "istio.io/api/mcp/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
)

const (
	serviceEntries = "istio/networking/v1alpha3/serviceentries"
	// A collection Galleon holds nothing of: a correct source answers it
	// with an empty full state instead of tearing the stream down.
	destinationRules = "istio/networking/v1alpha3/destinationrules"
	seTypeURL        = "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry"
)

// wait bounds every wait for a response; nothing sleeps for a fixed time.
const wait = 30 * time.Second

var galleonFile string // the built cmd/galleon-file

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "galleon-legacymcp-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	galleonFile, err = build(dir)
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// build runs `go build ./cmd/galleon-file` in the main module (two levels up).
func build(dir string) (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.Contains(gomod, []byte("module github.com/galleon-mesh/galleon\n")) {
		return "", fmt.Errorf("%s is not the main module's directory (%v)", root, err)
	}
	out := filepath.Join(dir, "galleon-file")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/galleon-file")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/galleon-file in %s: %v\n%s", root, err, b)
	}
	return out, nil
}

// service is one service of the file registry: namespace "interop", one
// HTTP port 8080, the given instance addresses.
type service struct {
	name  string
	addrs []string
}

// registryYAML renders services in the format of examples/file/README.md.
func registryYAML(services ...service) string {
	var b strings.Builder
	b.WriteString("services:\n")
	for _, s := range services {
		fmt.Fprintf(&b, "- name: %s\n  namespace: interop\n  ports:\n  - {number: 8080, protocol: HTTP, name: http}\n  instances:\n", s.name)
		for _, a := range s.addrs {
			fmt.Fprintf(&b, "  - address: %s\n", a)
		}
	}
	return b.String()
}

// galleon is a running galleon-file with its registry directory.
type galleon struct {
	addr, httpAddr, dir string
	args                []string // extra flags
	log                 *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// write replaces the registry file atomically (temp file + rename), so the
// adapter never reads half of it.
func (g *galleon) write(t *testing.T, services ...service) {
	t.Helper()
	tmp := filepath.Join(g.dir, ".registry.tmp")
	if err := os.WriteFile(tmp, []byte(registryYAML(services...)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(g.dir, "registry.yaml")); err != nil {
		t.Fatal(err)
	}
}

func freeAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// startGalleon runs galleon-file on free loopback ports over a registry of
// services and waits until /readyz answers 200.
func startGalleon(t *testing.T, services ...service) *galleon {
	t.Helper()
	return startGalleonWith(t, nil, services...)
}

// startGalleonWith is startGalleon with extra galleon-file flags.
func startGalleonWith(t *testing.T, args []string, services ...service) *galleon {
	t.Helper()
	g := &galleon{dir: t.TempDir(), args: args}
	g.write(t, services...)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if lastErr = g.start(t); lastErr == nil {
			return g
		}
		if !strings.Contains(lastErr.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("galleon-file did not start: %v", lastErr)
	return nil
}

func (g *galleon) start(t *testing.T) error {
	addrs, err := freeAddrs(2)
	if err != nil {
		return err
	}
	g.addr, g.httpAddr, g.log = addrs[0], addrs[1], &syncBuffer{}
	cmd := exec.Command(galleonFile, append([]string{"--listen", g.addr, "--http", g.httpAddr, "--file-dir", g.dir,
		"--log-level", "debug", "--debounce-quiet", "20ms"}, g.args...)...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GALLEON_") })
	cmd.Stdout, cmd.Stderr = g.log, g.log
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	deadline := time.Now().Add(wait)
	for {
		select {
		case <-exited:
			return fmt.Errorf("exited during start:\n%s", g.log.String())
		default:
		}
		resp, err := http.Get("http://" + g.httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Cleanup(func() {
					stop()
					if t.Failed() {
						t.Logf("galleon-file log:\n%s", g.log.String())
					}
				})
				return nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("/readyz not 200 within %v (%v):\n%s", wait, err, g.log.String())
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// sink is a legacy MCP sink built on istio.io/api v1.22.0's generated
// ResourceSourceClient. A goroutine receives, so waits have deadlines.
type sink struct {
	t           *testing.T
	stream      sinkStream
	annotations map[string]string // SinkNode annotations sent with every request
	got         chan result
}

// sinkStream is the sink's end of a stream: a ResourceSource client stream,
// or the stream of a ResourceSink server that Galleon dialed (callout).
type sinkStream interface {
	Send(*mcp.RequestResources) error
	Recv() (*mcp.Resources, error)
}

type result struct {
	r   *mcp.Resources
	err error
}

func openSink(t *testing.T, g *galleon) *sink {
	t.Helper()
	conn, err := grpc.Dial(g.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := mcp.NewResourceSourceClient(conn).EstablishResourceStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{t: t, stream: stream, got: make(chan result, 64)}
	go func() {
		for {
			r, err := stream.Recv()
			s.got <- result{r, err}
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (s *sink) send(req *mcp.RequestResources) {
	s.t.Helper()
	annotations := map[string]string{"istio.io/version": "1.8"}
	maps.Copy(annotations, s.annotations)
	req.SinkNode = &mcp.SinkNode{Id: "legacymcp-test", Annotations: annotations}
	if err := s.stream.Send(req); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sink) ack(r *mcp.Resources, incremental bool) {
	s.t.Helper()
	s.send(&mcp.RequestResources{Collection: r.Collection, ResponseNonce: r.Nonce, Incremental: incremental})
}

func (s *sink) recv() *mcp.Resources {
	s.t.Helper()
	select {
	case res := <-s.got:
		if res.err != nil {
			s.t.Fatalf("stream ended: %v", res.err)
		}
		return res.r
	case <-time.After(wait):
		s.t.Fatalf("no response within %v", wait)
		return nil
	}
}

// entry is one received ServiceEntry.
type entry struct {
	version string
	hosts   []string
	addrs   []string
}

// decode unmarshals every resource body with istio.io/api v1.22.0's
// ServiceEntry; it fails the test on anything an old sink could not read.
func decode(t *testing.T, r *mcp.Resources) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	for _, res := range r.Resources {
		md := res.GetMetadata()
		if md.GetName() == "" || md.GetVersion() == "" {
			t.Fatalf("resource without name or version: %v", md)
		}
		if got := res.GetBody().GetTypeUrl(); got != seTypeURL {
			t.Fatalf("%s: body type URL %q, want %q", md.GetName(), got, seTypeURL)
		}
		var se networking.ServiceEntry
		if err := res.GetBody().UnmarshalTo(&se); err != nil {
			t.Fatalf("%s: %v", md.GetName(), err)
		}
		e := entry{version: md.GetVersion(), hosts: se.GetHosts()}
		for _, ep := range se.GetEndpoints() {
			e.addrs = append(e.addrs, ep.GetAddress())
		}
		sort.Strings(e.addrs)
		if _, dup := out[md.GetName()]; dup {
			t.Fatalf("%s sent twice", md.GetName())
		}
		out[md.GetName()] = e
	}
	return out
}

// matches reports whether held is exactly services (names, hosts, endpoint
// addresses).
func matches(held map[string]entry, services ...service) bool {
	if len(held) != len(services) {
		return false
	}
	for _, s := range services {
		e, ok := held["interop/"+s.name]
		want := slices.Sorted(slices.Values(s.addrs))
		if !ok || !slices.Equal(e.hosts, []string{s.name + ".interop.internal"}) || !slices.Equal(e.addrs, want) {
			return false
		}
	}
	return true
}

func describe(held map[string]entry) string {
	var names []string
	for n, e := range held {
		names = append(names, fmt.Sprintf("%s%v%v@%s", n, e.hosts, e.addrs, e.version))
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

var (
	svcA  = service{"a", []string{"10.0.0.1", "10.0.0.2"}}
	svcB  = service{"b", []string{"10.0.1.1"}}
	svcC  = service{"c", []string{"10.0.2.1"}}
	svcA2 = service{"a", []string{"10.0.0.1", "10.0.0.3"}} // an endpoint replaced
	svcB2 = service{"b", []string{"10.0.1.1", "10.0.1.2"}} // an endpoint added
	svcD  = service{"d", []string{"10.0.3.1"}}
)

// TestFullState: a sink that does not ask for incremental updates gets the
// full state, every time, and it decodes with Istio's own types.
func TestFullState(t *testing.T) {
	g := startGalleon(t, svcA, svcB, svcC)
	s := openSink(t, g)
	s.send(&mcp.RequestResources{Collection: serviceEntries})

	r := s.recv()
	if r.Collection != serviceEntries || r.Incremental || r.Nonce == "" || r.SystemVersionInfo == "" {
		t.Fatalf("first response: collection %q incremental %v nonce %q version %q", r.Collection, r.Incremental, r.Nonce, r.SystemVersionInfo)
	}
	if held := decode(t, r); !matches(held, svcA, svcB, svcC) {
		t.Fatalf("first response holds %s, want a, b, c", describe(held))
	}
	s.ack(r, false)
	first := r.SystemVersionInfo

	g.write(t, svcA2, svcB)
	for {
		r = s.recv()
		if r.Incremental || len(r.RemovedResources) > 0 {
			t.Fatalf("incremental response (incremental=%v removed=%v) to a sink that did not ask", r.Incremental, r.RemovedResources)
		}
		if r.SystemVersionInfo == first {
			t.Fatalf("version %q sent again after it was ACKed", first)
		}
		held := decode(t, r)
		s.ack(r, false)
		if matches(held, svcA2, svcB) {
			break
		}
		t.Logf("intermediate full state %s: %s", r.SystemVersionInfo, describe(held))
	}
}

// TestIncrementalAndResume: a sink that asks for incremental updates gets
// full state first, then only changes and removals; a third stream that
// resumes with initial_resource_versions gets only what it lacks.
func TestIncrementalAndResume(t *testing.T) {
	g := startGalleon(t, svcA, svcB, svcC)
	s := openSink(t, g)
	s.send(&mcp.RequestResources{Collection: serviceEntries, Incremental: true})

	r := s.recv()
	if r.Incremental || len(r.RemovedResources) > 0 {
		t.Fatalf("first response on an incremental stream: incremental=%v removed=%v, want full state", r.Incremental, r.RemovedResources)
	}
	held := decode(t, r)
	if !matches(held, svcA, svcB, svcC) {
		t.Fatalf("first response holds %s, want a, b, c", describe(held))
	}
	s.ack(r, true)

	// a changes, b stays, c goes: only a and the removal of c may come.
	g.write(t, svcA2, svcB)
	var updated, removed []string
	held = applyUntil(t, s, held, func(r *mcp.Resources, names []string) {
		if slices.Contains(names, "interop/b") {
			t.Fatalf("incremental response resends the unchanged interop/b: %v", names)
		}
		updated = append(updated, names...)
		removed = append(removed, r.RemovedResources...)
	}, svcA2, svcB)
	if !slices.Contains(updated, "interop/a") || !slices.Equal(removed, []string{"interop/c"}) {
		t.Fatalf("incremental responses updated %v removed %v; want a updated, c removed", updated, removed)
	}

	// A third stream resumes from what the second holds, after b changed,
	// d was added and a removed: it must get b and d, and the removal of a.
	before := held
	resume := map[string]string{}
	for name, e := range before {
		resume[name] = e.version
	}
	g.write(t, svcB2, svcD)
	applyUntil(t, s, held, func(*mcp.Resources, []string) {}, svcB2, svcD)

	s3 := openSink(t, g)
	s3.send(&mcp.RequestResources{Collection: serviceEntries, Incremental: true, InitialResourceVersions: resume})
	r = s3.recv()
	if !r.Incremental {
		t.Fatalf("resumed stream's first response is full state; want only what the sink lacks")
	}
	got := decode(t, r)
	names := slices.Sorted(maps.Keys(got))
	if !slices.Equal(names, []string{"interop/b", "interop/d"}) || !slices.Equal(r.RemovedResources, []string{"interop/a"}) {
		t.Fatalf("resumed stream got %v removed %v; want [interop/b interop/d] removed [interop/a]", names, r.RemovedResources)
	}
	resumed := maps.Clone(before)
	maps.Copy(resumed, got)
	for _, n := range r.RemovedResources {
		delete(resumed, n)
	}
	if !matches(resumed, svcB2, svcD) {
		t.Fatalf("resumed sink holds %s, want b (2 endpoints) and d", describe(resumed))
	}
	s3.ack(r, true)
}

// applyUntil receives incremental responses on s, applies them to held
// (ACKing each) and calls each for every one, until held is exactly want.
func applyUntil(t *testing.T, s *sink, held map[string]entry, each func(*mcp.Resources, []string), want ...service) map[string]entry {
	t.Helper()
	next := maps.Clone(held)
	for !matches(next, want...) {
		r := s.recv()
		if !r.Incremental {
			t.Fatalf("full-state response %s on an incremental stream after the first", r.SystemVersionInfo)
		}
		changed := decode(t, r)
		var names []string
		for n, e := range changed {
			names = append(names, n)
			next[n] = e
		}
		sort.Strings(names)
		for _, n := range r.RemovedResources {
			if _, ok := next[n]; !ok {
				t.Fatalf("removal of %s, which the sink does not hold", n)
			}
			delete(next, n)
		}
		each(r, names)
		s.ack(r, true)
	}
	return next
}

// TestNACK: a rejected state is not sent again; the next response is a
// newer state. Stream order proves it: a resend would arrive first.
func TestNACK(t *testing.T) {
	g := startGalleon(t, svcA, svcB)
	s := openSink(t, g)
	s.send(&mcp.RequestResources{Collection: serviceEntries})
	r := s.recv()
	rejected := r.SystemVersionInfo
	s.send(&mcp.RequestResources{Collection: serviceEntries, ResponseNonce: r.Nonce,
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "rejected by the legacymcp test"}})

	g.write(t, svcA, svcB, svcC)
	for {
		r = s.recv()
		if r.SystemVersionInfo == rejected {
			t.Fatalf("the NACKed version %q was sent again", rejected)
		}
		held := decode(t, r)
		s.ack(r, false)
		if matches(held, svcA, svcB, svcC) {
			return
		}
	}
}

// TestUnknownCollection: a collection Galleon holds nothing of is answered
// with an empty full state, and the stream goes on serving.
func TestUnknownCollection(t *testing.T) {
	g := startGalleon(t, svcA)
	s := openSink(t, g)
	s.send(&mcp.RequestResources{Collection: destinationRules})
	r := s.recv()
	if r.Collection != destinationRules || len(r.Resources) != 0 || r.Incremental || r.Nonce == "" {
		t.Fatalf("answer for %s: collection %q, %d resources, incremental %v, nonce %q; want an empty full state",
			destinationRules, r.Collection, len(r.Resources), r.Incremental, r.Nonce)
	}
	s.ack(r, false)

	s.send(&mcp.RequestResources{Collection: serviceEntries})
	r = s.recv()
	if r.Collection != serviceEntries {
		t.Fatalf("got collection %q, want %s", r.Collection, serviceEntries)
	}
	if held := decode(t, r); !matches(held, svcA) {
		t.Fatalf("holds %s, want a", describe(held))
	}
	s.ack(r, false)

	// Half-close: Galleon ends the stream cleanly.
	if err := s.stream.(mcp.ResourceSource_EstablishResourceStreamClient).CloseSend(); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-s.got:
		if !errors.Is(res.err, io.EOF) {
			t.Fatalf("after CloseSend: %v, %v; want io.EOF", res.r, res.err)
		}
	case <-time.After(wait):
		t.Fatal("stream not ended after CloseSend")
	}
}
