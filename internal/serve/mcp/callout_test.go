package mcp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	mcpv1alpha1 "github.com/galleon-mesh/galleon/proto/mcp/v1alpha1"
)

// sinkServer is a test sink in callout mode: it serves ResourceSink and
// hands each stream the source opens to the test as a *sink, which
// subscribes, reads, ACKs and NACKs exactly as over ResourceSource.
type sinkServer struct {
	mcpv1alpha1.UnimplementedResourceSinkServer
	t     *testing.T
	g     *grpc.Server
	addr  string
	sinks chan *sink
}

// startSinkServer serves ResourceSink on addr ("127.0.0.1:0" for any port).
func startSinkServer(t *testing.T, addr string, creds credentials.TransportCredentials) *sinkServer {
	t.Helper()
	var lis net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		// The port of a stopped server may take a moment to be free.
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	ss := &sinkServer{t: t, g: grpc.NewServer(opts...), addr: lis.Addr().String(), sinks: make(chan *sink, 4)}
	mcpv1alpha1.RegisterResourceSinkServer(ss.g, ss)
	go func() { _ = ss.g.Serve(lis) }()
	t.Cleanup(ss.g.Stop)
	return ss
}

// EstablishResourceStream is the sink's side of a callout stream. The
// handler itself receives, so nothing reads the stream after it returns.
func (ss *sinkServer) EstablishResourceStream(stream mcpv1alpha1.ResourceSink_EstablishResourceStreamServer) error {
	s := &sink{t: ss.t, stream: stream, cancel: func() {}, got: make(chan recvResult, 64)}
	select {
	case ss.sinks <- s:
	case <-stream.Context().Done():
		return nil
	}
	for {
		r, err := stream.Recv()
		if err != nil {
			select { // the end of the stream, unless the test stopped reading
			case s.got <- recvResult{nil, err}:
			default:
			}
			return nil
		}
		select {
		case s.got <- recvResult{r, nil}:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// accept waits for the source to open a stream.
func (ss *sinkServer) accept(id string) *sink {
	ss.t.Helper()
	select {
	case s := <-ss.sinks:
		s.id = id
		return s
	case <-time.After(10 * time.Second):
		ss.t.Fatal("the source did not open a stream to the sink")
		return nil
	}
}

// noStream checks that the source opens no stream for a while.
func (ss *sinkServer) noStream() {
	ss.t.Helper()
	select {
	case <-ss.sinks:
		ss.t.Fatal("the source opened a stream")
	case <-time.After(300 * time.Millisecond):
	}
}

var calloutRuns atomic.Int64

// callout runs RunCallout until the test ends, under a pprof label that
// every goroutine it starts inherits, and returns a stop function that
// cancels it, checks it returned context.Canceled promptly and that none of
// its goroutines is left.
func callout(t *testing.T, srv *Server, cfg CalloutConfig) (stop func(), label string) {
	t.Helper()
	if cfg.Backoff == (Backoff{}) {
		cfg.Backoff = Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	}
	label = fmt.Sprintf("callout-%d", calloutRuns.Add(1))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go pprof.Do(context.Background(), pprof.Labels("calloutTest", label), func(context.Context) {
		done <- srv.RunCallout(ctx, cfg)
	})
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("RunCallout returned %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("RunCallout did not return after cancel")
		}
		if left := waitLabelled(label, 5*time.Second); left != "" {
			t.Fatalf("goroutines RunCallout started are still running:\n%s", left)
		}
	}
	t.Cleanup(stop)
	return stop, label
}

// waitLabelled polls until no goroutine carries the calloutTest label
// value ("") or timeout passes (their stacks).
func waitLabelled(value string, timeout time.Duration) string {
	want := fmt.Sprintf("%q:%q", "calloutTest", value)
	deadline := time.Now().Add(timeout)
	for {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		var left []string
		for _, rec := range strings.Split(b.String(), "\n\n") {
			if strings.Contains(rec, "# labels: ") && strings.Contains(rec, want) {
				left = append(left, rec)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return strings.Join(left, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newCalloutServer(t *testing.T, store *snapshot.Store, logs *syncbuf.Buffer) *Server {
	opts := Options{Registerer: prometheus.NewRegistry()}
	if logs != nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	return NewServer(snapshot.Everyone(store), opts)
}

func waitCounter(t *testing.T, c prometheus.Counter, atLeast float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for counter(t, c) < atLeast {
		if time.Now().After(deadline) {
			t.Fatalf("counter at %v, want at least %v", counter(t, c), atLeast)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCalloutAckNack(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, false, "ns/a", "a1") // not ready yet
	ss := startSinkServer(t, "127.0.0.1:0", nil)
	srv := newCalloutServer(t, store, nil)
	callout(t, srv, CalloutConfig{Address: ss.addr})

	s := ss.accept("callout-sink")
	s.subscribe(ServiceEntries, false)
	s.subscribe(meshConfig, false)
	if r := s.recv(); r.Collection != meshConfig || len(r.Resources) != 0 {
		t.Fatalf("first response %v, want the empty answer for an unknown collection", r)
	}
	s.nothing() // ServiceEntries wait for ready
	put(t, store, true, "ns/b", "b1")
	first := s.recv()
	if first.Collection != ServiceEntries || first.Incremental || !slices.Equal(names(t, first), []string{"ns/a=a1", "ns/b=b1"}) {
		t.Fatalf("got %s incremental=%v %v, want the full ready state", first.Collection, first.Incremental, names(t, first))
	}
	put(t, store, true, "ns/a", "a2")
	s.nothing() // one unacknowledged response per collection
	s.ack(first, false)
	second := s.recv()
	if !slices.Equal(names(t, second), []string{"ns/a=a2", "ns/b=b1"}) {
		t.Fatalf("after ACK got %v", names(t, second))
	}
	s.nack(second, false)
	s.nothing() // the rejected state is not sent again
	put(t, store, true, "ns/a", "a3")
	if r := s.recv(); !slices.Equal(names(t, r), []string{"ns/a=a3", "ns/b=b1"}) {
		t.Fatalf("after NACK got %v, want the next version", names(t, r))
	}
	if n := counter(t, srv.metrics.acks.WithLabelValues(ServiceEntries, "nack")); n != 1 {
		t.Fatalf("nack counted %v times", n)
	}
	if n := counter(t, srv.metrics.calloutReconnects); n != 0 {
		t.Fatalf("%v reconnects on a healthy stream", n)
	}
}

func TestCalloutIncremental(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1", "ns/b", "b1", "ns/c", "c1")
	ss := startSinkServer(t, "127.0.0.1:0", nil)
	callout(t, newCalloutServer(t, store, nil), CalloutConfig{Address: ss.addr})

	s := ss.accept("callout-sink")
	s.subscribe(ServiceEntries, true)
	first := s.recv()
	if first.Incremental || len(first.Resources) != 3 {
		t.Fatalf("first response incremental=%v with %d resources, want the full state", first.Incremental, len(first.Resources))
	}
	s.ack(first, true)
	put(t, store, true, "ns/a", "a2", "ns/b", "", "ns/d", "d1")
	r := s.recv()
	if !r.Incremental || !slices.Equal(names(t, r), []string{"ns/a=a2", "ns/d=d1"}) || !slices.Equal(r.RemovedResources, []string{"ns/b"}) {
		t.Fatalf("got incremental=%v %v removed %v, want only the changes", r.Incremental, names(t, r), r.RemovedResources)
	}
}

func TestCalloutReconnectsWhenTheSinkRestarts(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	ss := startSinkServer(t, "127.0.0.1:0", nil)
	var logs syncbuf.Buffer
	srv := newCalloutServer(t, store, &logs)
	callout(t, srv, CalloutConfig{Address: ss.addr})

	s := ss.accept("callout-sink")
	s.subscribe(ServiceEntries, false)
	s.ack(s.recv(), false)

	ss.g.Stop()
	if err := s.recvErr(); err == nil {
		t.Fatal("the stream survived the sink server stopping")
	}
	put(t, store, true, "ns/b", "b1") // changed while no sink is connected
	waitCounter(t, srv.metrics.calloutReconnects, 1)

	ss2 := startSinkServer(t, ss.addr, nil)
	s2 := ss2.accept("callout-sink")
	s2.subscribe(ServiceEntries, false)
	if r := s2.recv(); r.Incremental || !slices.Equal(names(t, r), []string{"ns/a=a1", "ns/b=b1"}) {
		t.Fatalf("after reconnecting got incremental=%v %v, want the full state", r.Incremental, names(t, r))
	}
	if l := logs.String(); !strings.Contains(l, "dialing again") || !strings.Contains(l, "sink_address="+ss.addr) {
		t.Fatalf("reconnect not logged with the sink address:\n%s", l)
	}
}

func TestCalloutReturnsPromptlyOnCancel(t *testing.T) {
	store := snapshot.NewStore()
	put(t, store, true, "ns/a", "a1")
	ss := startSinkServer(t, "127.0.0.1:0", nil)
	srv := newCalloutServer(t, store, nil)
	stop, label := callout(t, srv, CalloutConfig{Address: ss.addr})
	s := ss.accept("callout-sink")
	s.subscribe(ServiceEntries, false)
	s.recv()
	if waitLabelled(label, 0) == "" {
		t.Fatal("no goroutine carries the run's label: the leak check below would prove nothing")
	}
	start := time.Now()
	stop() // checks the result and that no goroutine is left
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("RunCallout took %v to stop", d)
	}
	if err := s.recvErr(); err == nil {
		t.Fatal("the sink's stream is still open after the source stopped")
	}

	// Stopping while waiting to dial again (nobody listens) is prompt too.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	stop, _ = callout(t, srv, CalloutConfig{Address: addr, Backoff: Backoff{Initial: time.Hour, Max: time.Hour}})
	waitCounter(t, srv.metrics.calloutReconnects, 1)
	start = time.Now()
	stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("RunCallout took %v to stop during a backoff", d)
	}
}

func TestCalloutNoAddress(t *testing.T) {
	srv := newCalloutServer(t, snapshot.NewStore(), nil)
	if err := srv.RunCallout(context.Background(), CalloutConfig{}); err == nil {
		t.Fatal("RunCallout without an address did not fail")
	}
}

// testCA is a self-signed CA that issues certificates for 127.0.0.1 and
// sink.test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "galleon test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: []string{"sink.test"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestCalloutTLS(t *testing.T) {
	ca, otherCA := newTestCA(t), newTestCA(t)
	serverCert := ca.issue(t, "sink", x509.ExtKeyUsageServerAuth)
	clientCert := ca.issue(t, "galleon", x509.ExtKeyUsageClientAuth)
	cases := []struct {
		name   string
		server *tls.Config
		client *tls.Config
		ok     bool
	}{
		{"server auth", &tls.Config{Certificates: []tls.Certificate{serverCert}},
			&tls.Config{RootCAs: ca.pool}, true},
		{"mutual, server name", &tls.Config{Certificates: []tls.Certificate{serverCert},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool},
			&tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{clientCert}, ServerName: "sink.test"}, true},
		{"mutual, no client certificate", &tls.Config{Certificates: []tls.Certificate{serverCert},
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool},
			&tls.Config{RootCAs: ca.pool}, false},
		{"wrong CA", &tls.Config{Certificates: []tls.Certificate{serverCert}},
			&tls.Config{RootCAs: otherCA.pool}, false},
		{"plaintext to a TLS sink", &tls.Config{Certificates: []tls.Certificate{serverCert}}, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := snapshot.NewStore()
			put(t, store, true, "ns/a", "a1")
			ss := startSinkServer(t, "127.0.0.1:0", credentials.NewTLS(c.server))
			var logs syncbuf.Buffer
			srv := newCalloutServer(t, store, &logs)
			stop, _ := callout(t, srv, CalloutConfig{Address: ss.addr, TLS: c.client})
			if c.ok {
				s := ss.accept("tls-sink")
				s.subscribe(ServiceEntries, false)
				if r := s.recv(); !slices.Equal(names(t, r), []string{"ns/a=a1"}) {
					t.Fatalf("over TLS got %v", names(t, r))
				}
				stop()
				return
			}
			// Fails and keeps retrying, never crashing.
			waitCounter(t, srv.metrics.calloutReconnects, 3)
			ss.noStream()
			stop()
			if !strings.Contains(logs.String(), "dialing again") {
				t.Fatalf("failure not logged:\n%s", logs.String())
			}
		})
	}
}
