package zktest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/galleon-mesh/galleon/internal/testing/testpki"
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

// writeTLSFiles makes a test PKI (testpki) in dir, plus the key store ZooKeeper reads.
func writeTLSFiles(dir string) (*tlsSetup, error) {
	f, err := testpki.Write(dir, "zktest-client")
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(f.ServerKey)
	if err != nil {
		return nil, err
	}
	cert, err := os.ReadFile(f.ServerCert)
	if err != nil {
		return nil, err
	}
	setup := &tlsSetup{
		files:    TLSFiles{CA: f.CA, ClientCert: f.ClientCert, ClientKey: f.ClientKey},
		keyStore: filepath.Join(dir, "server.pem"),
	}
	if err := os.WriteFile(setup.keyStore, append(key, cert...), 0o600); err != nil {
		return nil, err
	}
	return setup, nil
}
