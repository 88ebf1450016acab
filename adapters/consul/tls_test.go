package consul_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// TestMutualTLS reads a real agent through a TLS front that requires a
// client certificate (the agent's own HTTPS listener behaves the same for
// the client): CA, client certificate and server name come from the flags.
func TestMutualTLS(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a, consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: "tls-1", Service: "secure", Port: 443, Check: "passing"})

	dir := t.TempDir()
	ca, caKey := newCA(t)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	serverCert := issue(t, ca, caKey, "consul.test", x509.ExtKeyUsageServerAuth)
	clientCert := issue(t, ca, caKey, "galleon", x509.ExtKeyUsageClientAuth)
	writePEM(t, filepath.Join(dir, "client.pem"), "CERTIFICATE", clientCert.Certificate[0])
	keyDER, err := x509.MarshalPKCS8PrivateKey(clientCert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "client-key.pem"), "PRIVATE KEY", keyDER)

	target, _ := url.Parse(a.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	front := httptest.NewUnstartedServer(proxy)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	front.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	front.StartTLS()
	t.Cleanup(front.Close)
	addr := strings.TrimPrefix(front.URL, "https://")

	t.Run("client certificate", func(t *testing.T) {
		cfg := testConfig(a)
		cfg.Address = addr // no scheme: the TLS flags turn https on
		cfg.CAFile, cfg.CertFile, cfg.KeyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
		cfg.TLSServerName = "consul.test"
		r := run(t, cfg)
		r.waitService(t, "secure", "the service over mutual TLS", func(s model.Service) bool { return len(s.Instances) == 1 })
	})
	t.Run("service watches over HTTP/1.1", func(t *testing.T) {
		// This front speaks HTTP/1.1 only, where every watch would hold
		// a connection: the adapter watches no service on its own, and
		// sweeps find what the signals do not name.
		cfg := testConfig(a)
		cfg.Address = "https://" + addr
		cfg.CAFile, cfg.CertFile, cfg.KeyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
		cfg.TLSServerName = "consul.test"
		cfg.ServiceWatches = 10
		r := run(t, cfg)
		r.waitService(t, "secure", "the service over HTTP/1.1", func(s model.Service) bool { return len(s.Instances) == 1 })
		register(t, a, consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: "tls-1", Service: "secure", Port: 443, Check: "passing",
			Meta: map[string]string{"owner": "team-h1"}})
		r.waitService(t, "secure", "the meta edit, found by a sweep", func(s model.Service) bool { return s.Instances[0].Labels["owner"] == "team-h1" })
		if got := r.counter(t, "galleon_consul_service_watches"); got != 0 {
			t.Errorf("%v services watched over HTTP/1.1; want none", got)
		}
		if sweeps := r.counter(t, "galleon_consul_sweeps_total"); sweeps < 1 {
			t.Errorf("%v sweeps; want the one that found the meta edit", sweeps)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		cfg := testConfig(a)
		cfg.Address = "https://" + addr
		cfg.CAFile, cfg.TLSServerName = filepath.Join(dir, "ca.pem"), "consul.test"
		r := run(t, cfg)
		r.rec.WaitForEvents(t, waitFor, func(events []registrytest.Event) bool { return lastUnreachable(events) != nil })
		if r.rec.Synced() {
			t.Fatal("synced without a client certificate")
		}
		t.Logf("without a client certificate: %v", r.rec.UnreachableError())
	})
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "galleon test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
