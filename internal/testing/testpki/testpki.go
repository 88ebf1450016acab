// Package testpki makes a throw-away PKI for tests of TLS clients against real servers: a CA, a
// server certificate for 127.0.0.1 and localhost, and a client certificate, as PEM files.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Files are the PEM files Write makes.
type Files struct {
	// CA is the CA's certificate: trust it to verify the server.
	CA string
	// ServerCert names IP 127.0.0.1 and DNS localhost (server and client auth); ServerKey is its
	// ECDSA key (PKCS #8).
	ServerCert, ServerKey string
	// ClientCert (client auth, CN as Write was given) and its key, for mutual TLS.
	ClientCert, ClientKey string
}

// Write makes a CA, a server certificate and a client certificate with common name clientCN
// and clientSANs (a URI such as spiffe://cluster.local/ns/a/sa/b, or else a DNS name) (ECDSA
// P-256, valid from an hour ago for a day, so that clock skew does not matter) and writes them
// to dir.
func Write(dir, clientCN string, clientSANs ...string) (Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "testpki CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := createCert(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Files{}, err
	}
	issue := func(tmpl *x509.Certificate) (certDER, keyDER []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		if certDER, err = createCert(tmpl, ca, &key.PublicKey, caKey); err != nil {
			return nil, nil, err
		}
		keyDER, err = x509.MarshalPKCS8PrivateKey(key)
		return certDER, keyDER, err
	}
	serverDER, serverKey, err := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
		// Client auth too, so that the same certificate also does between servers (ZooKeeper's
		// quorum TLS).
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return Files{}, err
	}
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: clientCN},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, san := range clientSANs {
		if u, err := url.Parse(san); err == nil && u.Scheme != "" {
			client.URIs = append(client.URIs, u)
		} else {
			client.DNSNames = append(client.DNSNames, san)
		}
	}
	clientDER, clientKey, err := issue(client)
	if err != nil {
		return Files{}, err
	}
	f := Files{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server-cert.pem"),
		ServerKey:  filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
	}
	for _, w := range []struct {
		path  string
		block *pem.Block
	}{
		{f.CA, &pem.Block{Type: "CERTIFICATE", Bytes: caDER}},
		{f.ServerCert, &pem.Block{Type: "CERTIFICATE", Bytes: serverDER}},
		{f.ServerKey, &pem.Block{Type: "PRIVATE KEY", Bytes: serverKey}},
		{f.ClientCert, &pem.Block{Type: "CERTIFICATE", Bytes: clientDER}},
		{f.ClientKey, &pem.Block{Type: "PRIVATE KEY", Bytes: clientKey}},
	} {
		if err := os.WriteFile(w.path, pem.EncodeToMemory(w.block), 0o600); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

// createCert signs tmpl with a random 128-bit serial number (unique, as RFC 5280 wants).
func createCert(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
}
