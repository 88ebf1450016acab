package nacos

import (
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/nacos/nacostest"
	"github.com/galleon-mesh/galleon/internal/testing/polarisserver"
	"github.com/galleon-mesh/galleon/internal/testing/testpki"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// TLS to the Nacos server against a real one: polaris-server with TLS on its Nacos API, HTTP and
// gRPC (nacostest.Options.TLS). Polaris presents its certificate and asks the client for none,
// trustedCAFile or not (apiserver/nacosserver/v1/server.go, Run: ServeTLS with the certificate
// and key; v2/server.go, Run: credentials.NewServerTLSFromFile), so what can be proven here is
// server-authenticated TLS: the adapter verifies the server and is refused when it cannot. That
// the server checks a client certificate (--nacos-tls-cert) is not provable against Polaris; one
// is given below only to check that its key never shows.

// TestPolarisTLS: over TLS, verified with --nacos-tls-ca, the adapter serves what was written
// (itself over https) through either API, and sees a change; with the system's roots, or a
// server name the certificate does not hold, it stays unready and reports the server
// unreachable with the certificate's fault, no key material in its errors or logs.
func TestPolarisTLS(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server (Nacos API)")
	pki, err := testpki.Write(t.TempDir(), "galleon-nacos")
	if err != nil {
		t.Fatal(err)
	}
	s := nacostest.Start(t, nacostest.Options{
		NoHealthCheck: true,
		TLS:           &polarisserver.TLSFiles{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CAFile: pki.CA},
	})
	// Both ports speak TLS with the PKI's certificate, so a watch that works below does too, and
	// ask for no client certificate though Polaris was given a trustedCAFile.
	for _, addr := range []string{s.HTTPAddr, s.GRPCAddr} {
		requireServerOnlyTLS(t, addr, s.TLSConfig(), pki.ServerCert)
	}
	// Written over the Nacos HTTP API over https (nacostest.Client trusts the CA).
	if !strings.HasPrefix(s.BaseURL(), "https://") {
		t.Fatalf("BaseURL %s, want https://", s.BaseURL())
	}
	c := s.Client()
	ref := nacostest.Ref{Service: "sealed"}
	registered := []string{"10.9.5.1", "10.9.5.2"}
	for _, ip := range registered {
		if err := c.RegisterInstance(t.Context(), ref, nacostest.NewInstance(ip, 8080)); err != nil {
			t.Fatal(err)
		}
	}

	for i, api := range []string{APIGRPC, APIHTTP} {
		t.Run(api, func(t *testing.T) {
			// The server as Nacos's clients are given it, host:port: --nacos-tls-ca implies TLS.
			rec := startWatch(t, Config{API: api, TLSCAFile: pki.CA}, s.HTTPAddr)
			rec.WaitFor(t, 20*time.Second, servesAddresses("sealed.", registered...))
			// A change: pushed over the gRPC stream; polled (or UDP-pushed) over HTTP.
			registered = append(registered, []string{"10.9.5.3", "10.9.5.4"}[i])
			if err := c.RegisterInstance(t.Context(), ref, nacostest.NewInstance(registered[len(registered)-1], 8080)); err != nil {
				t.Fatal(err)
			}
			rec.WaitFor(t, 2*pollFloor, servesAddresses("sealed.", registered...))
		})
	}

	// The client key, offered to a server that asks for none: it must not show anywhere.
	keyPEM, err := os.ReadFile(pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		server string
		cfg    Config
		want   string // in the Unreachable error
	}{
		{"system roots grpc", s.BaseURL(), Config{API: APIGRPC, TLSCertFile: pki.ClientCert, TLSKeyFile: pki.ClientKey}, "unknown authority"},
		{"system roots http", s.BaseURL(), Config{API: APIHTTP, TLSCertFile: pki.ClientCert, TLSKeyFile: pki.ClientKey}, "unknown authority"},
		{"wrong server name grpc", s.HTTPAddr, Config{API: APIGRPC, TLSCAFile: pki.CA, TLSServerName: "nacos.example"}, "not nacos.example"},
		{"wrong server name http", s.HTTPAddr, Config{API: APIHTTP, TLSCAFile: pki.CA, TLSServerName: "nacos.example"}, "not nacos.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &syncLog{}
			rec := startWatchLogged(t, tc.cfg, logs, tc.server)
			rec.WaitForEvents(t, 20*time.Second, func(events []registrytest.Event) bool {
				return len(events) > 0 && events[len(events)-1].Op == registrytest.OpUnreachable && events[len(events)-1].Err != nil
			})
			err := rec.UnreachableError()
			t.Logf("Unreachable: %v", err)
			if err == nil || !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Unreachable(%v): want the certificate's fault, %q", err, tc.want)
			}
			if rec.Synced() {
				t.Error("a Replace came through a TLS handshake that must fail")
			}
			for _, e := range rec.Events() {
				if e.Err != nil && holdsKey(e.Err.Error(), keyPEM) {
					t.Errorf("%s carries key material: %v", e, e.Err)
				}
			}
			if holdsKey(logs.String(), keyPEM) {
				t.Error("the logs carry key material")
			}
		})
	}
}

// requireServerOnlyTLS fails t unless a TLS handshake with addr, verified by conf, gets the
// certificate of the PEM file certFile and is asked for no client certificate.
func requireServerOnlyTLS(t *testing.T, addr string, conf *tls.Config, certFile string) {
	t.Helper()
	want, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(want)
	if block == nil {
		t.Fatalf("%s: no PEM", certFile)
	}
	asked := false
	conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		asked = true
		return &tls.Certificate{}, nil // none: the handshake goes on
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, conf)
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	if got := conn.ConnectionState().PeerCertificates; len(got) == 0 || !bytes.Equal(got[0].Raw, block.Bytes) {
		t.Fatalf("%s presented another certificate than %s", addr, certFile)
	}
	if asked {
		t.Errorf("%s asked for a client certificate: Polaris verifies clients after all (see the top of this file)", addr)
	}
}

// servesAddresses says whether the state serves a service whose host starts with prefix with
// the instances at exactly these addresses.
func servesAddresses(prefix string, addrs ...string) func(map[model.ServiceKey]model.Service) bool {
	return func(state map[model.ServiceKey]model.Service) bool {
		svc, ok := served(state, prefix)
		if !ok || len(svc.Instances) != len(addrs) {
			return false
		}
		health := healthOf(svc)
		for _, a := range addrs {
			if health[a] != model.Healthy {
				return false
			}
		}
		return true
	}
}

// holdsKey says whether s holds the PEM key keyPEM or any line of its base64 body (or names a
// private key block at all).
func holdsKey(s string, keyPEM []byte) bool {
	if strings.Contains(s, "PRIVATE KEY") {
		return true
	}
	for _, line := range strings.Split(string(keyPEM), "\n") {
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") && strings.Contains(s, line) {
			return true
		}
	}
	return false
}
