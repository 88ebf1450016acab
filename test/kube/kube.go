// Package kube runs a real Kubernetes API server for Galleon's deploy tests: etcd and
// kube-apiserver, built from the Go module proxy by `make kube` (toolcache.KubeTool) and cached outside the
// repository, started on loopback with a CA made for the run. There is no kubelet, scheduler or
// controller manager: objects are stored, validated, admitted and served, and no Pod ever runs.
//
//	c := kube.Start(t)                              // etcd + kube-apiserver, stopped in t.Cleanup
//	err := c.ApplyYAML(ctx, rendered, "galleon-test") // server-side apply, every object
//	ist := istiod.Start(t, istiod.Options{Kubeconfig: c.Kubeconfig, ...})
//
// A missing binary fails the test with the command that builds it (it never skips).
package kube

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
	"github.com/galleon-mesh/galleon/test/internal/proc"
)

// Versions of the tools the tests run: the ones toolcache.KubeTool builds.
const (
	APIServerVersion = toolcache.KubeVersion
	EtcdVersion      = toolcache.EtcdVersion
	HelmVersion      = toolcache.HelmVersion
)

// Cluster is a running etcd and kube-apiserver.
type Cluster struct {
	// Server is the API server's URL (https://127.0.0.1:<port>).
	Server string
	// Kubeconfig is a kubeconfig file for a cluster admin (group system:masters), with the CA
	// and the client certificate inline.
	Kubeconfig string
	// CAPEM is the CA that signed the API server's certificate and the client certificates.
	CAPEM []byte
	// EtcdURL is etcd's client URL (http://127.0.0.1:<port>): its /metrics say the store's size.
	EtcdURL string

	Etcd      *proc.Process
	APIServer *proc.Process

	client *http.Client
	pki    *pki
}

// Helm returns the cached helm binary's path, failing the test with the command that builds it
// when it is missing.
func Helm(t testing.TB) string {
	t.Helper()
	return binary(t, "helm")
}

// Kubectl returns the cached kubectl binary's path (for its built-in kustomize), failing the test
// with the command that builds it when it is missing.
func Kubectl(t testing.TB) string {
	t.Helper()
	return binary(t, "kubectl")
}

// binary is the cached binary of the Kubernetes-side tool name (or its $GALLEON_*_BIN); it builds
// nothing: make kube does, before the tests.
func binary(t testing.TB, name string) string {
	t.Helper()
	r, err := toolcache.KubeTool(name)
	if err != nil {
		t.Fatalf("kube: %v", err)
	}
	path, ok := toolcache.Find(r.EnvVar, r.Name, r.Version)
	if !ok {
		t.Fatalf("%s %s: %s is missing: run `go run ./internal/testing/devtool build %s` (make kube), or set %s", name, r.Version, path, name, r.EnvVar)
	}
	return path
}

// Start runs etcd and kube-apiserver in a new directory and waits until the API server is
// ready (/readyz). Both are stopped in t.Cleanup.
func Start(t testing.TB) *Cluster {
	t.Helper()
	etcdBin := binary(t, "etcd")
	apiBin := binary(t, "kube-apiserver")
	dir := t.TempDir()
	p, err := newPKI(dir)
	if err != nil {
		t.Fatalf("kube: %v", err)
	}
	c := &Cluster{CAPEM: p.caPEM, pki: p}
	var lastErr error
	// Free ports are found by binding :0 and closing, which can race with other processes.
	for attempt := 1; attempt <= 3; attempt++ {
		if lastErr = c.start(t, dir, etcdBin, apiBin, attempt); lastErr == nil {
			break
		}
		if !strings.Contains(lastErr.Error(), "address already in use") {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("kube: %v", lastErr)
	}
	return c
}

func (c *Cluster) start(t testing.TB, dir, etcdBin, apiBin string, attempt int) error {
	t.Helper()
	addrs, err := proc.FreeAddrs(3)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiAddr := addrs[0], addrs[1], addrs[2]
	suffix := ""
	if attempt > 1 {
		suffix = fmt.Sprintf(".%d", attempt)
	}
	etcd, err := proc.Start(t, proc.Config{
		Name: "etcd" + suffix,
		Path: etcdBin,
		Args: []string{
			"--name=galleon-test",
			"--data-dir=" + filepath.Join(dir, fmt.Sprintf("etcd%s.data", suffix)),
			"--listen-client-urls=http://" + etcdClient,
			"--advertise-client-urls=http://" + etcdClient,
			"--listen-peer-urls=http://" + etcdPeer,
			"--initial-advertise-peer-urls=http://" + etcdPeer,
			"--initial-cluster=galleon-test=http://" + etcdPeer,
			// A test store: losing it at a crash costs nothing, and fsync on a busy disk costs
			// seconds per write.
			"--unsafe-no-fsync",
			"--log-level=warn",
		},
		Dir: dir,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	plain := &http.Client{Timeout: 5 * time.Second}
	if err := etcd.WaitFor(ctx, func() (bool, error) {
		return httpOK(ctx, plain, "http://"+etcdClient+"/health")
	}); err != nil {
		etcd.Stop()
		return fmt.Errorf("etcd did not become healthy: %w\n%s", err, etcd.Tail(30))
	}

	_, port, _ := net.SplitHostPort(apiAddr)
	api, err := proc.Start(t, proc.Config{
		Name: "kube-apiserver" + suffix,
		Path: apiBin,
		Args: []string{
			"--etcd-servers=http://" + etcdClient,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + port,
			"--tls-cert-file=" + c.pki.servingCert,
			"--tls-private-key-file=" + c.pki.servingKey,
			"--client-ca-file=" + c.pki.caFile,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + c.pki.saPub,
			"--service-account-signing-key-file=" + c.pki.saKey,
			"--service-cluster-ip-range=10.96.0.0/16",
			// RBAC on, so the chart's Roles and bindings are checked by the authorizer that
			// reads them on a real cluster.
			"--authorization-mode=Node,RBAC",
			"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
			"--profiling=false",
			"--v=0",
		},
		Dir: dir,
	})
	if err != nil {
		etcd.Stop()
		return err
	}
	c.Server = "https://" + apiAddr
	c.client = c.pki.adminClient()
	if err := api.WaitFor(ctx, func() (bool, error) {
		return httpOK(ctx, c.client, c.Server+"/readyz")
	}); err != nil {
		api.Stop()
		etcd.Stop()
		return fmt.Errorf("kube-apiserver did not become ready: %w\n%s", err, api.Tail(40))
	}
	c.Etcd, c.APIServer = etcd, api
	c.EtcdURL = "http://" + etcdClient
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, c.pki.kubeconfig(c.Server), 0o600); err != nil {
		return err
	}
	t.Logf("kube-apiserver %s ready at %s (etcd %s, kubeconfig %s)", APIServerVersion, c.Server, etcdClient, c.Kubeconfig)
	return nil
}

func httpOK(ctx context.Context, client *http.Client, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, proc.Permanent(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(http.MaxBytesReader(nil, resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(body.String()))
	}
	return true, nil
}

// pki is the run's CA and the certificates made from it, as files in the cluster's directory.
type pki struct {
	caPEM                   []byte
	caFile                  string
	servingCert, servingKey string
	adminCertPEM            []byte
	adminKeyPEM             []byte
	saKey, saPub            string
}

func newPKI(dir string) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "galleon-test-kubernetes-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p := &pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	issue := func(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
	}
	servingCert, servingKey, err := issue(2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
	})
	if err != nil {
		return nil, err
	}
	// system:masters: every request is authorised, whatever RBAC holds.
	p.adminCertPEM, p.adminKeyPEM, err = issue(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "galleon-test-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files := []struct {
		dst  *string
		name string
		data []byte
	}{
		{&p.caFile, "ca.pem", p.caPEM},
		{&p.servingCert, "apiserver.pem", servingCert},
		{&p.servingKey, "apiserver-key.pem", servingKey},
		{&p.saKey, "sa-key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saKeyDER})},
		{&p.saPub, "sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})},
	}
	for _, f := range files {
		*f.dst = filepath.Join(dir, f.name)
		if err := os.WriteFile(*f.dst, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *pki) adminClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	cert, err := tls.X509KeyPair(p.adminCertPEM, p.adminKeyPEM)
	if err != nil {
		// Made by newPKI a moment ago: a failure here is a bug in this file.
		panic(err)
	}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs:      pool,
			Certificates: []tls.Certificate{cert},
			MinVersion:   tls.VersionTLS12,
		}},
	}
}

func (p *pki) kubeconfig(server string) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: galleon-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: galleon-test-admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: galleon-test
  context:
    cluster: galleon-test
    user: galleon-test-admin
current-context: galleon-test
`, server, b64(p.caPEM), b64(p.adminCertPEM), b64(p.adminKeyPEM)))
}
