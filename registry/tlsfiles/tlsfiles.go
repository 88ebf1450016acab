// Package tlsfiles builds client TLS configurations and reads credentials from files at the
// moment they are used, so that a rotated file (a Kubernetes Secret, cert-manager) takes effect
// without a restart. The adapters that reach their registry over TLS share it: ZooKeeper reads
// the files at every connection, Eureka at every new HTTP connection.
package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
)

// MaxFile bounds what is read from a credentials or TLS file.
const MaxFile = 1 << 20

// Files names a client's TLS files and the flags that set them, so that an error says which
// flag to fix.
type Files struct {
	CAFile, CertFile, KeyFile string
	// ServerName is the name the server's certificate must hold; "" means the host dialled.
	ServerName string
	// CAFlag, CertFlag and KeyFlag are the flags' names, e.g. "--zk-tls-ca".
	CAFlag, CertFlag, KeyFlag string
}

// Config reads the files and returns a client configuration for a server dialled as host
// (used when ServerName is empty). Without CAFile the system's roots verify the server.
func (f Files) Config(host string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	if f.ServerName != "" {
		c.ServerName = f.ServerName
	}
	if f.CAFile != "" {
		pem, err := ReadLimited(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.CAFlag, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s: no PEM certificate in it", f.CAFlag, f.CAFile)
		}
		c.RootCAs = pool
	}
	if f.CertFile != "" {
		certPEM, err := ReadLimited(f.CertFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.CertFlag, err)
		}
		keyPEM, err := ReadLimited(f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.KeyFlag, err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%s %s / %s %s: %w", f.CertFlag, f.CertFile, f.KeyFlag, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// ReadSecret reads a small file, trimmed of surrounding white space.
func ReadSecret(path string) (string, error) {
	b, err := ReadLimited(path)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

// ReadLimited reads a file of at most MaxFile bytes.
func ReadLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxFile)
	}
	return b, nil
}
