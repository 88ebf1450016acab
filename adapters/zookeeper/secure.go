package zookeeper

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/registry/tlsfiles"
)

// Credentials and TLS to ZooKeeper. Both are read from files when they are used, so that a
// rotated file (a Kubernetes Secret, cert-manager) takes effect without a restart: the TLS files
// at every connection, the digest file every authPollInterval.

// authPollInterval is how often AuthFile is read again for a new password.
const authPollInterval = 5 * time.Second

// checkDigest accepts "user:password" with a non-empty user and password.
func checkDigest(s string) error {
	user, pass, ok := strings.Cut(s, ":")
	if !ok || user == "" || pass == "" {
		return errors.New("want user:password (the identity of ZooKeeper's digest scheme, as in addauth digest user:password)")
	}
	return nil
}

// digest returns the credentials to present: Auth, else AuthFile's content.
func (cfg *Config) digest() (string, error) {
	if cfg.Auth != "" || cfg.AuthFile == "" {
		return cfg.Auth, nil
	}
	s, err := tlsfiles.ReadSecret(cfg.AuthFile)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flagAuthFile, err)
	}
	if err := checkDigest(s); err != nil {
		return "", fmt.Errorf("--%s %s: %w", flagAuthFile, cfg.AuthFile, err)
	}
	return s, nil
}

// tlsEnabled: the client talks TLS to ZooKeeper's secure client port.
func (cfg *Config) tlsEnabled() bool {
	return cfg.TLS || cfg.TLSCAFile != "" || cfg.TLSCertFile != ""
}

// tlsConfig reads the TLS files now (they may have been rotated since the last connection).
func (cfg *Config) tlsConfig(serverName string) (*tls.Config, error) {
	return tlsfiles.Files{
		CAFile: cfg.TLSCAFile, CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, ServerName: cfg.TLSServerName,
		CAFlag: "--" + flagTLSCA, CertFlag: "--" + flagTLSCert, KeyFlag: "--" + flagTLSKey,
	}.Config(serverName)
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
