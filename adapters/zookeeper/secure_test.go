package zookeeper

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// waitUnreachable waits until the last Unreachable report's error contains substr.
func waitUnreachable(t *testing.T, rec *registrytest.Recorder, substr string) {
	t.Helper()
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		for i := len(events) - 1; i >= 0; i-- {
			if events[i].Op == registrytest.OpUnreachable {
				return events[i].Err != nil && strings.Contains(events[i].Err.Error(), substr)
			}
		}
		return false
	})
}

// TestDigestACL runs against a real ZooKeeper whose services are readable with digest
// credentials only: without them the registry is reported unreachable with what to give; with
// them from a file everything is served; a new password written to the file is presented
// within the poll interval, and a service readable only with it appears.
func TestDigestACL(t *testing.T) {
	s := startServer(t)
	c := client(t, s.Addr())
	if err := c.AddAuth("digest", []byte("galleon:first")); err != nil {
		t.Fatal(err)
	}
	first := zk.DigestACL(zk.PermAll, "galleon", "first")
	for _, p := range []string{"/secure", "/secure/orders"} {
		if _, err := c.Create(p, nil, 0, first); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Create("/secure/orders/a", goodNode("orders", "a", "10.0.0.1"), 0, first); err != nil {
		t.Fatal(err)
	}

	// No credentials: a clear error, nothing served.
	rec := run(t, Config{Servers: []string{s.Addr()}, Root: "/secure"})
	waitUnreachable(t, rec, "--zk-auth-file")
	if n := len(rec.State()); n != 0 {
		t.Fatalf("%d services served without credentials", n)
	}

	// Credentials from a file.
	file := filepath.Join(t.TempDir(), "zk-auth")
	if err := os.WriteFile(file, []byte("galleon:first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec = run(t, Config{Servers: []string{s.Addr()}, Root: "/secure", AuthFile: file})
	rec.WaitFor(t, waitTimeout, hasInstances("orders", "a"))

	// Rotation: a service readable with the new password only, then the file changes.
	if err := c.AddAuth("digest", []byte("galleon:second")); err != nil {
		t.Fatal(err)
	}
	second := zk.DigestACL(zk.PermAll, "galleon", "second")
	if _, err := c.Create("/secure/payments", nil, 0, second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create("/secure/payments/b", goodNode("payments", "b", "10.0.0.2"), 0, second); err != nil {
		t.Fatal(err)
	}
	// Listed (the root is readable) but not readable yet: rejected by its path.
	rec.WaitForEvents(t, waitTimeout, func(events []registrytest.Event) bool {
		for _, e := range events {
			if e.Op == registrytest.OpRejected && e.Record == "/secure/payments" && e.Err != nil {
				return true
			}
		}
		return false
	})
	if err := os.WriteFile(file, []byte("galleon:second\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, waitTimeout, func(st map[model.ServiceKey]model.Service) bool {
		return hasInstances("payments", "b")(st) && hasInstances("orders", "a")(st)
	})
}

// TestTLS connects to a real ZooKeeper's secure client port with mutual TLS, and checks that a
// server the CA does not vouch for is refused with an error that says so.
func TestTLS(t *testing.T) {
	s := zktest.Start(t, zktest.Options{TLS: true})
	c := client(t, s.Addr())
	w := writer{c: c, root: "/services"}
	w.ensureRoot(t)
	if err := w.set("orders", map[string][]byte{"a": goodNode("orders", "a", "10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	files := s.TLS()
	rec := run(t, Config{Servers: []string{s.SecureAddr()}, TLSCAFile: files.CA, TLSCertFile: files.ClientCert, TLSKeyFile: files.ClientKey})
	rec.WaitFor(t, waitTimeout, hasInstances("orders", "a"))

	// Another CA: the handshake fails, and the report says where. The report is made when
	// UnreachableAfter ends, naming the last dial error; a later, different message waits 30 s
	// (the Reconciler's repeat rule), so UnreachableAfter leaves the first handshake ample time
	// even on a loaded machine (CI has seen a shorter one missed).
	other := filepath.Join(t.TempDir(), "other-ca.pem")
	writeSelfSignedCA(t, other)
	rec = run(t, Config{Servers: []string{s.SecureAddr()}, TLSCAFile: other, TLSCertFile: files.ClientCert, TLSKeyFile: files.ClientKey,
		UnreachableAfter: 3 * time.Second})
	waitUnreachable(t, rec, "certificate signed by unknown authority")
	if n := len(rec.State()); n != 0 {
		t.Fatalf("%d services served from a server the CA does not vouch for", n)
	}
}

// TestSecureConfigErrors: credential and TLS settings that cannot work fail New with the flag
// to fix.
func TestSecureConfigErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not-pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"digest without colon", Config{Auth: "galleon"}, "--zk-auth: want user:password"},
		{"digest without password", Config{Auth: "galleon:"}, "--zk-auth: want user:password"},
		{"both", Config{Auth: "a:b", AuthFile: empty}, "--zk-auth and --zk-auth-file are both set"},
		{"missing file", Config{AuthFile: filepath.Join(dir, "nope")}, "--zk-auth-file:"},
		{"empty file", Config{AuthFile: empty}, "--zk-auth-file " + empty + ": want user:password"},
		{"cert without key", Config{TLSCertFile: notPEM}, "--zk-tls-cert and --zk-tls-key go together"},
		{"CA not PEM", Config{TLSCAFile: notPEM}, "--zk-tls-ca " + notPEM + ": no PEM certificate"},
		{"missing CA", Config{TLSCAFile: filepath.Join(dir, "nope")}, "--zk-tls-ca:"},
		{"bad pair", Config{TLSCertFile: notPEM, TLSKeyFile: notPEM}, "--zk-tls-cert " + notPEM},
		{"server name without TLS", Config{TLSServerName: "zk"}, "--zk-tls-server-name is set but TLS is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Servers = []string{"127.0.0.1:2181"}
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// writeSelfSignedCA writes a CA certificate that signed nothing the server presents.
func writeSelfSignedCA(t *testing.T, path string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "not the zktest CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
