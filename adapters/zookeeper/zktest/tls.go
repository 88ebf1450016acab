package zktest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files a TLS client of a test server needs. They are made afresh for each
// Start (or StartEnsemble) under the test's temporary directory.
type TLSFiles struct {
	// CA is the test CA's certificate: trust it to verify the server, whose certificate names
	// IP 127.0.0.1 and DNS localhost.
	CA string
	// ClientCert is a client certificate the CA signed (CN zktest-client, client auth), for a
	// server that needs or wants one (Options.ClientAuth); ClientKey is its ECDSA key (PKCS #8).
	ClientCert, ClientKey string
}

// ClientConfig returns a TLS configuration that trusts the test CA, presents the client
// certificate and expects the server to be 127.0.0.1.
func (f TLSFiles) ClientConfig() (*tls.Config, error) {
	if f.CA == "" {
		return nil, errors.New("zktest: no TLS files (the server was started without Options.TLS)")
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("zktest: no certificate in %s", f.CA)
	}
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1"}, nil
}

// tlsSetup is what a server's zoo.cfg names: the client's files plus the server's key store.
type tlsSetup struct {
	files TLSFiles
	// keyStore holds the server's private key and certificate in one PEM file, the form
	// ZooKeeper's ssl.keyStore.type=PEM reads (it takes the key and the chain from one file).
	keyStore string
}

// writeTLSFiles makes a test CA, a server certificate and a client certificate (ECDSA P-256,
// valid from an hour ago for a day, so that clock skew does not matter) and writes them to dir.
func writeTLSFiles(dir string) (*tlsSetup, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "zktest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := createCert(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
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
		// Client auth too, so that the same certificate would also do for quorum TLS.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	clientDER, clientKey, err := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "zktest-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	setup := &tlsSetup{
		files: TLSFiles{
			CA:         filepath.Join(dir, "ca.pem"),
			ClientCert: filepath.Join(dir, "client.pem"),
			ClientKey:  filepath.Join(dir, "client-key.pem"),
		},
		keyStore: filepath.Join(dir, "server.pem"),
	}
	for _, f := range []struct {
		path   string
		blocks []*pem.Block
	}{
		{setup.files.CA, []*pem.Block{{Type: "CERTIFICATE", Bytes: caDER}}},
		{setup.files.ClientCert, []*pem.Block{{Type: "CERTIFICATE", Bytes: clientDER}}},
		{setup.files.ClientKey, []*pem.Block{{Type: "PRIVATE KEY", Bytes: clientKey}}},
		{setup.keyStore, []*pem.Block{{Type: "PRIVATE KEY", Bytes: serverKey}, {Type: "CERTIFICATE", Bytes: serverDER}}},
	} {
		var data []byte
		for _, b := range f.blocks {
			data = append(data, pem.EncodeToMemory(b)...)
		}
		if err := os.WriteFile(f.path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return setup, nil
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
