package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/testpki"
	"github.com/galleon-mesh/galleon/test/istiod"
)

// TestTLSToIstiod: galleon-file serves its gRPC listener over TLS (--tls-cert, --tls-key) and a
// real istiod reads it with the mesh config docs/configuration.md gives (tlsSettings SIMPLE, the
// CA inline, the server's DNS SAN checked). The same istiod set-up with another CA, or with a
// SAN the certificate does not hold, refuses the source: istiod 1.29 exits at start, saying why
// (a source that fails its first connection fails istiod's start).
func TestTLSToIstiod(t *testing.T) { istiod.ForEachRelease(t, testTLSToIstiod) }

func testTLSToIstiod(t *testing.T, rel istiod.Release) {
	bin := galleonBinary(t, "galleon-file")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pki, err := testpki.Write(t.TempDir(), "galleon-e2e")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testpki.Write(t.TempDir(), "someone-else")
	if err != nil {
		t.Fatal(err)
	}
	caPEM := func(f testpki.Files) string {
		b, err := os.ReadFile(f.CA)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	dir := t.TempDir()
	writeRegistryFile(t, dir, "tls.yaml", fileRegistry{Services: []fileService{{
		Name: "secure", Namespace: "e2e", Hosts: []string{"secure.e2e.internal"},
		Ports:     []filePort{{Number: 8443, Protocol: "HTTP", Name: "http"}},
		Instances: []fileInstance{{ID: "secure-1", Address: "10.9.0.1"}},
	}}})
	g := startGalleon(t, bin, "--file-dir", dir, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey)
	// One API server for the istiods below, which run one after another.
	kubeconfig := istiod.KubeconfigFor(t, rel)

	t.Run("verified", func(t *testing.T) {
		ist := istiod.Start(t, istiod.Options{Release: rel, Kubeconfig: kubeconfig, ConfigSources: []string{g.Addr},
			SourceTLS: map[string]istiod.SourceTLS{g.Addr: {CACertificates: caPEM(pki), SNI: "localhost", SubjectAltNames: []string{"localhost"}}}})
		waitForServiceEntries(t, ctx, ist, "the service over TLS", func(ses map[string]serviceEntry) string {
			if _, ok := ses["e2e/secure"]; !ok {
				return fmt.Sprintf("no e2e/secure among %d ServiceEntries", len(ses))
			}
			return ""
		})
	})
	for _, tc := range []struct {
		name string
		tls  istiod.SourceTLS
		log  string // what istiod's log says
	}{
		{"another CA", istiod.SourceTLS{CACertificates: caPEM(other), SNI: "localhost"}, "certificate signed by unknown authority"},
		{"another SAN", istiod.SourceTLS{CACertificates: caPEM(pki), SNI: "localhost", SubjectAltNames: []string{"galleon.example"}}, "no matching SAN found"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			why := istiod.StartRefused(t, istiod.Options{Release: rel, Kubeconfig: kubeconfig, ConfigSources: []string{g.Addr},
				SourceTLS: map[string]istiod.SourceTLS{g.Addr: tc.tls}})
			if !strings.Contains(why, tc.log) {
				t.Errorf("istiod gave up, but not saying %q:\n%s", tc.log, why)
			}
		})
	}

	// Mutual TLS for the clients that can present a certificate (galleonctl here), with istiod,
	// which cannot, let in by --tls-client-cert-optional; an untrusted certificate refused.
	t.Run("mutual TLS", func(t *testing.T) {
		ctl := galleonBinary(t, "galleonctl")
		allowed, err := testpki.Write(t.TempDir(), "galleonctl", "spiffe://cluster.local/ns/ops/sa/galleonctl")
		if err != nil {
			t.Fatal(err)
		}
		g2 := startGalleon(t, bin, "--file-dir", dir, "--tls-cert", allowed.ServerCert, "--tls-key", allowed.ServerKey,
			"--tls-client-ca", allowed.CA, "--tls-client-cert-optional", "--tls-allowed-clients", "spiffe://cluster.local/ns/ops/*")
		tlsArgs := []string{"--addr", g2.Addr, "--tls-ca", allowed.CA, "--tls-server-name", "localhost"}
		out := runGalleonctl(t, ctl, append(append([]string{"get"}, tlsArgs...), "--tls-cert", allowed.ClientCert, "--tls-key", allowed.ClientKey, "-o", "names")...)
		if !strings.Contains(out, "e2e/secure") {
			t.Errorf("galleonctl with an allowed client certificate: %q, want e2e/secure", out)
		}
		// A certificate another CA signed: refused as untrusted, logged and counted. (The
		// allow-list's own refusal, same CA and another identity, is tested in registry/tlsfiles.)
		stranger, err := testpki.Write(t.TempDir(), "stranger", "spiffe://cluster.local/ns/default/sa/app")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(ctl, append(append([]string{"get"}, tlsArgs...), "--tls-cert", stranger.ClientCert, "--tls-key", stranger.ClientKey, "--timeout", "5s")...)
		if b, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("galleonctl with a certificate of another CA got through:\n%s", b)
		}
		fams, _, err := scrapeMetrics(ctx, g2)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := metricSum(fams, "galleon_tls_refused_total", map[string]string{"reason": "untrusted"}); n < 1 {
			t.Errorf("galleon_tls_refused_total{reason=untrusted} = %v after a refused client, want >= 1", n)
		}
		if !g2.LogContains("refused a TLS client") {
			t.Error("the refusal is not in galleon-file's log")
		}
		// istiod presents no certificate: let in.
		ist := istiod.Start(t, istiod.Options{Release: rel, Kubeconfig: kubeconfig, ConfigSources: []string{g2.Addr},
			SourceTLS: map[string]istiod.SourceTLS{g2.Addr: {CACertificates: caPEM(allowed), SNI: "localhost", SubjectAltNames: []string{"localhost"}}}})
		waitForServiceEntries(t, ctx, ist, "the service over TLS, client certificates optional", func(ses map[string]serviceEntry) string {
			if _, ok := ses["e2e/secure"]; !ok {
				return "no e2e/secure"
			}
			return ""
		})
	})
}
