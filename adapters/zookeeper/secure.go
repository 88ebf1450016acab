package zookeeper

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// Credentials and TLS to ZooKeeper. Both are read from files when they are used, so that a
// rotated file (a Kubernetes Secret, cert-manager) takes effect without a restart: the TLS files
// at every connection, the digest file every authPollInterval.

// authPollInterval is how often AuthFile is read again for a new password.
const authPollInterval = 5 * time.Second

// maxSecretFile bounds what is read from a credentials or TLS file.
const maxSecretFile = 1 << 20

// checkDigest accepts "user:password" with a non-empty user and password.
func checkDigest(s string) error {
	user, pass, ok := strings.Cut(s, ":")
	if !ok || user == "" || pass == "" {
		return errors.New("want user:password (the identity of ZooKeeper's digest scheme, as in addauth digest user:password)")
	}
	return nil
}

// readSecret reads a small file, trimmed of surrounding white space.
func readSecret(path string) (string, error) {
	b, err := readFileLimited(path)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

func readFileLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSecretFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxSecretFile)
	}
	return b, nil
}

// digest returns the credentials to present: Auth, else AuthFile's content.
func (cfg *Config) digest() (string, error) {
	if cfg.Auth != "" || cfg.AuthFile == "" {
		return cfg.Auth, nil
	}
	s, err := readSecret(cfg.AuthFile)
	if err != nil {
		return "", fmt.Errorf("--zk-auth-file: %w", err)
	}
	if err := checkDigest(s); err != nil {
		return "", fmt.Errorf("--zk-auth-file %s: %w", cfg.AuthFile, err)
	}
	return s, nil
}

// tlsEnabled: the client talks TLS to ZooKeeper's secure client port.
func (cfg *Config) tlsEnabled() bool {
	return cfg.TLS || cfg.TLSCAFile != "" || cfg.TLSCertFile != ""
}

// tlsConfig reads the TLS files now (they may have been rotated since the last connection).
func (cfg *Config) tlsConfig(serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if cfg.TLSServerName != "" {
		c.ServerName = cfg.TLSServerName
	}
	if cfg.TLSCAFile != "" {
		pem, err := readFileLimited(cfg.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("--zk-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--zk-tls-ca %s: no PEM certificate in it", cfg.TLSCAFile)
		}
		c.RootCAs = pool
	}
	if cfg.TLSCertFile != "" {
		certPEM, err := readFileLimited(cfg.TLSCertFile)
		if err != nil {
			return nil, fmt.Errorf("--zk-tls-cert: %w", err)
		}
		keyPEM, err := readFileLimited(cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--zk-tls-key: %w", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("--zk-tls-cert %s / --zk-tls-key %s: %w", cfg.TLSCertFile, cfg.TLSKeyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// dialer returns how the client connects: plain TCP, or TLS over it.
func (cfg *Config) dialer() func(network, address string, timeout time.Duration) (net.Conn, error) {
	dial := cfg.dial
	if dial == nil {
		dial = net.DialTimeout
	}
	if !cfg.tlsEnabled() {
		return dial
	}
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			host = address
		}
		tc, err := cfg.tlsConfig(host)
		if err != nil {
			return nil, err
		}
		raw, err := dial(network, address, timeout)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, tc)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := conn.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("TLS handshake with ZooKeeper %s (is it its secure client port?): %w", address, err)
		}
		return conn, nil
	}
}
