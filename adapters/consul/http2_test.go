package consul_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/internal/testing/testpki"
)

// TestPerServiceBlockingQueriesOverHTTP2 checks the premise of a lead for
// the changes only a sweep finds today (port, meta and address edits,
// docs/notes-consul-blocking.md, "HTTP/2 on the HTTPS listener"): one
// blocking /v1/health/service/<name> per service, every one of them in
// flight at once. Over HTTP/1.1 each needs a connection, and the agent's
// default limit of 200 connections per client refuses the rest. The agent's
// HTTPS listener also speaks HTTP/2, where the queries share a few
// connections. Checked here, against a stock agent: more than 200 queries
// stay in flight over HTTP/2, none refused; an edit of one instance wakes
// its own service's query and no other. The write-to-wake times are logged,
// not asserted. GALLEON_CONSUL_H2_SERVICES sets the number of services
// (default 300).
func TestPerServiceBlockingQueriesOverHTTP2(t *testing.T) {
	n := 300
	if s := os.Getenv("GALLEON_CONSUL_H2_SERVICES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("GALLEON_CONSUL_H2_SERVICES=%q: want a positive number", s)
		}
		n = v
	}
	const edits = 5
	// At most this many connections are being dialled at once: without a
	// bound, every query waiting for a connection dials its own before the
	// first HTTP/2 connection is up, and the limit refuses some of them.
	const dialsAtOnce = 32

	pki, err := testpki.Write(t.TempDir(), "galleon")
	if err != nil {
		t.Fatal(err)
	}
	a := consultest.Start(t, consultest.Options{HTTPSCert: pki.ServerCert, HTTPSKey: pki.ServerKey, LogLevel: "warn"})
	instances := make([]consultest.Instance, n)
	for i := range instances {
		node := i % 100
		instances[i] = consultest.Instance{
			Node: fmt.Sprintf("node-%d", node), NodeAddress: fmt.Sprintf("10.2.0.%d", node+1),
			ID: fmt.Sprintf("svc-%d-0", i), Service: fmt.Sprintf("svc-%d", i), Port: 8080,
			Meta: map[string]string{"edit": "0"},
		}
	}
	start := time.Now()
	regCtx, regCancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer regCancel()
	if err := consultest.Register(regCtx, a, instances); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d services registered in %v", n, time.Since(start).Round(time.Millisecond))

	caPEM, err := os.ReadFile(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	var dials, open atomic.Int64
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: "localhost"},
		ForceAttemptHTTP2: true,
		MaxConnsPerHost:   dialsAtOnce,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			dials.Add(1)
			open.Add(1)
			return &countedConn{Conn: c, open: &open}, nil
		},
	}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: transport}
	base := "https://" + a.HTTPSAddr
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// Each service's index, read at 32 at a time.
	indexes := make([]uint64, n)
	start = time.Now()
	if err := forEach(n, 32, func(i int) error {
		got, err := blockingGet(ctx, client, fmt.Sprintf("%s/v1/health/service/svc-%d", base, i))
		indexes[i] = got.index
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d services read over HTTP/2 in %v (%d connections dialled)", n, time.Since(start).Round(time.Millisecond), dials.Load())

	// One blocking query per service, all at once.
	wakes := make(chan answer, n)
	var sent atomic.Int64
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent.Add(1) }}
	traced := httptrace.WithClientTrace(ctx, trace)
	start = time.Now()
	for i := range n {
		go func() {
			got, err := blockingGet(traced, client, fmt.Sprintf("%s/v1/health/service/svc-%d?index=%d&wait=5m", base, i, indexes[i]))
			got.service, got.err, got.at = i, err, time.Now()
			wakes <- got
		}()
	}
	for sent.Load() < int64(n) {
		select {
		case w := <-wakes:
			t.Fatalf("svc-%d's blocking query came back before any change (%d of %d sent): %s", w.service, sent.Load(), n, w)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Logf("%d blocking queries sent in %v; %d connections open (%d dialled in all; the agent allows 200 per client)", n, time.Since(start).Round(time.Millisecond), open.Load(), dials.Load())

	var took []time.Duration
	for k := range edits {
		target := (k*7919 + 13) % n
		in := instances[target]
		in.Meta = map[string]string{"edit": strconv.Itoa(k + 1)}
		written := time.Now()
		if err := consultest.Register(ctx, a, []consultest.Instance{in}); err != nil {
			t.Fatal(err)
		}
		select {
		case w := <-wakes:
			if w.err != nil || w.status != http.StatusOK || w.proto != "HTTP/2.0" {
				t.Fatalf("the edit of svc-%d: svc-%d's query answered %s; want 200 over HTTP/2.0", target, w.service, w)
			}
			if w.service != target {
				t.Fatalf("an edit of svc-%d woke svc-%d's query", target, w.service)
			}
			took = append(took, w.at.Sub(written))
		case <-time.After(30 * time.Second):
			t.Fatalf("the edit of svc-%d woke no query in 30 s", target)
		}
		select {
		case w := <-wakes:
			t.Fatalf("the edit of svc-%d also woke svc-%d's query (%s)", target, w.service, w)
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Logf("edit written -> its service's query answered, %d edits among %d services, in order: %v", edits, n, took)
	slices.Sort(took)
	t.Logf("median %v", took[len(took)/2])
}

// countedConn counts itself out of open when closed.
type countedConn struct {
	net.Conn
	open   *atomic.Int64
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.open.Add(-1)
	}
	return c.Conn.Close()
}

// answer is what one blocking query returned.
type answer struct {
	service int
	index   uint64
	status  int
	proto   string
	err     error
	at      time.Time
}

func (a answer) String() string {
	if a.err != nil {
		return a.err.Error()
	}
	return fmt.Sprintf("%d over %s, index %d", a.status, a.proto, a.index)
}

// blockingGet reads url to the end and returns its status, protocol and
// X-Consul-Index; a status other than 200 is an error.
func blockingGet(ctx context.Context, client *http.Client, url string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return answer{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	got := answer{status: resp.StatusCode, proto: resp.Proto}
	got.index, _ = strconv.ParseUint(resp.Header.Get("X-Consul-Index"), 10, 64)
	if err != nil {
		return got, err
	}
	if resp.StatusCode != http.StatusOK {
		return got, fmt.Errorf("%s: %s: %.200s", url, resp.Status, body)
	}
	return got, nil
}

// forEach runs fn(0..n-1) on at most width goroutines and returns the first
// error.
func forEach(n, width int, fn func(int) error) error {
	next := atomic.Int64{}
	errs := make(chan error, width)
	for range width {
		go func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					errs <- nil
					return
				}
				if err := fn(i); err != nil {
					next.Store(int64(n)) // stop the others
					errs <- err
					return
				}
			}
		}()
	}
	var first error
	for range width {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
