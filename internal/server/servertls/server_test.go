package servertls

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/galleon-mesh/galleon/internal/testing/testpki"
)

// echoServer accepts TLS connections with s's configuration and echoes lines back until the
// test ends.
func echoServer(t *testing.T, s *Server) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", s.Config())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return lis.Addr().String()
}

// dial connects trusting caFile, presenting the client certificate of pki when given, and
// checks one echo round trip.
func dial(addr, caFile string, client *testpki.Files) (*tls.Conn, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	if client != nil {
		cert, err := tls.LoadX509KeyPair(client.ClientCert, client.ClientKey)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	if err := roundTrip(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// roundTrip writes a line and reads it back (TLS 1.3 reports a refused client certificate only
// at the first read).
func roundTrip(c *tls.Conn) error {
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return io.ErrUnexpectedEOF
	}
	return nil
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil { // as a Secret volume swaps its files
		t.Fatal(err)
	}
}

func counter(t *testing.T, v *prometheus.CounterVec, label string) float64 {
	t.Helper()
	var m dto.Metric
	if err := v.WithLabelValues(label).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestServerReloadsFiles: a new certificate in the files is served to the next handshake, a
// connection made before keeps working, and files that do not load leave the last good ones in
// use.
func TestServerReloadsFiles(t *testing.T) {
	a, err := testpki.Write(t.TempDir(), "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := testpki.Write(t.TempDir(), "b")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	copyFile(t, a.ServerCert, certFile)
	copyFile(t, a.ServerKey, keyFile)
	s, err := NewServer(ServerFiles{CertFile: certFile, KeyFile: keyFile}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := echoServer(t, s)
	old, err := dial(addr, a.CA, nil)
	if err != nil {
		t.Fatalf("before the rotation, trusting CA a: %v", err)
	}
	defer old.Close()

	copyFile(t, b.ServerCert, certFile)
	copyFile(t, b.ServerKey, keyFile)
	future := time.Now().Add(2 * time.Second) // a modification time that surely differs
	for _, f := range []string{certFile, keyFile} {
		if err := os.Chtimes(f, future, future); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var c *tls.Conn
	for c, err = dial(addr, b.CA, nil); err != nil && time.Now().Before(deadline); c, err = dial(addr, b.CA, nil) {
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("after the rotation, trusting CA b: %v", err)
	}
	c.Close()
	if _, err := dial(addr, a.CA, nil); err == nil {
		t.Error("after the rotation a client trusting only CA a still connects")
	}
	if err := roundTrip(old); err != nil {
		t.Errorf("the connection made before the rotation broke: %v", err)
	}
	if n := counter(t, s.reloads, "ok"); n != 1 {
		t.Errorf("galleon_tls_reloads_total{result=ok} = %v, want 1", n)
	}

	// A half-written rotation: the key does not match. The last good pair stays in use.
	copyFile(t, a.ServerKey, keyFile)
	later := future.Add(2 * time.Second)
	if err := os.Chtimes(keyFile, later, later); err != nil {
		t.Fatal(err)
	}
	time.Sleep(checkFilesEvery + 100*time.Millisecond)
	if c, err := dial(addr, b.CA, nil); err != nil {
		t.Errorf("with a key that does not match the certificate: %v (want the last good pair served)", err)
	} else {
		c.Close()
	}
	if n := counter(t, s.reloads, "error"); n < 1 {
		t.Errorf("galleon_tls_reloads_total{result=error} = %v, want at least 1", n)
	}
}

// TestServerClientChecks: mutual TLS refuses a client without a certificate, one from another
// CA and one without an allowed identity, each counted under its reason; with the certificate
// optional, a client without one is let in.
func TestServerClientChecks(t *testing.T) {
	pki, err := testpki.Write(t.TempDir(), "istiod", "spiffe://cluster.local/ns/istio-system/sa/istiod")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testpki.Write(t.TempDir(), "other", "spiffe://cluster.local/ns/istio-system/sa/istiod")
	if err != nil {
		t.Fatal(err)
	}
	newServer := func(optional bool, allowed ...string) (*Server, string) {
		s, err := NewServer(ServerFiles{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA,
			OptionalClientCert: optional, AllowedClients: allowed}, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		return s, echoServer(t, s)
	}

	s, addr := newServer(false, "spiffe://cluster.local/ns/istio-system/*")
	if c, err := dial(addr, pki.CA, &pki); err != nil {
		t.Errorf("an allowed client: %v", err)
	} else {
		c.Close()
	}
	if _, err := dial(addr, pki.CA, nil); err == nil {
		t.Error("a client without a certificate was let in")
	}
	if _, err := dial(addr, pki.CA, &other); err == nil {
		t.Error("a client whose certificate another CA signed was let in")
	}
	for reason, want := range map[string]float64{RefusedNoCertificate: 1, RefusedUntrusted: 1, RefusedNotAllowed: 0} {
		if n := counter(t, s.refused, reason); n != want {
			t.Errorf("galleon_tls_refused_total{reason=%s} = %v, want %v", reason, n, want)
		}
	}

	s, addr = newServer(false, "spiffe://cluster.local/ns/other/sa/galleonctl", "galleonctl.example")
	if _, err := dial(addr, pki.CA, &pki); err == nil {
		t.Error("a client with no allowed identity was let in")
	}
	if n := counter(t, s.refused, RefusedNotAllowed); n != 1 {
		t.Errorf("galleon_tls_refused_total{reason=not_allowed} = %v, want 1", n)
	}

	s, addr = newServer(true)
	if c, err := dial(addr, pki.CA, nil); err != nil {
		t.Errorf("optional client certificate, a client without one: %v", err)
	} else {
		c.Close()
	}
	if _, err := dial(addr, pki.CA, &other); err == nil {
		t.Error("optional client certificate: a client presenting an untrusted one was let in")
	}
	if n := counter(t, s.refused, RefusedUntrusted); n != 1 {
		t.Errorf("galleon_tls_refused_total{reason=untrusted} = %v, want 1", n)
	}
}

func TestNewServerErrorsNameTheFlag(t *testing.T) {
	pki, err := testpki.Write(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	flags := ServerFiles{CertFlag: "--tls-cert", KeyFlag: "--tls-key", ClientCAFlag: "--tls-client-ca"}
	for _, tc := range []struct {
		files ServerFiles
		want  string
	}{
		{ServerFiles{CertFile: "/nonexistent", KeyFile: pki.ServerKey}, "--tls-cert: open /nonexistent"},
		{ServerFiles{CertFile: pki.ServerCert, KeyFile: pki.ClientKey}, "--tls-cert " + pki.ServerCert + " / --tls-key " + pki.ClientKey},
		{ServerFiles{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.ServerKey}, "--tls-client-ca " + pki.ServerKey + ": no PEM certificate"},
	} {
		f := tc.files
		f.CertFlag, f.KeyFlag, f.ClientCAFlag = flags.CertFlag, flags.KeyFlag, flags.ClientCAFlag
		_, err := NewServer(f, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.files, err, tc.want)
		}
	}
}
