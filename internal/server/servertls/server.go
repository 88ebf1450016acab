package servertls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/registry/tlsfiles"
)

// ServerFiles configure a TLS listener from files that are reloaded when they change (a
// cert-manager or Istio rotation), without dropping the connections made before: a handshake
// uses what the files hold then.
type ServerFiles struct {
	CertFile, KeyFile string
	// ClientCAFile turns client certificates on: they are verified against it.
	ClientCAFile string
	// OptionalClientCert accepts clients that present no certificate (istiod, which dials
	// config sources in SIMPLE TLS mode only) while verifying those that do.
	OptionalClientCert bool
	// AllowedClients, when not empty, are the identities a client certificate must hold one of:
	// a URI SAN (spiffe://cluster.local/ns/istio-system/sa/istiod) or a DNS SAN, compared
	// exactly. A trailing "*" matches any suffix ("spiffe://cluster.local/ns/istio-system/*").
	AllowedClients []string
	// Flag names for errors: "--tls-cert" and so on.
	CertFlag, KeyFlag, ClientCAFlag string
}

// Reasons a client is refused (the label of galleon_tls_refused_total).
const (
	RefusedNoCertificate = "no_certificate" // a client certificate is required and none came
	RefusedUntrusted     = "untrusted"      // it does not chain to the client CA
	RefusedNotAllowed    = "not_allowed"    // it does, but holds no allowed identity
)

// checkFilesEvery bounds how often a handshake looks at the files' modification times.
const checkFilesEvery = time.Second

// Server hands out the TLS configuration of a listener.
type Server struct {
	files ServerFiles
	log   *slog.Logger

	refused   *prometheus.CounterVec
	reloads   *prometheus.CounterVec
	notAfter  prometheus.Gauge
	handshake prometheus.Counter

	mu        sync.Mutex
	loaded    *loadedFiles
	checked   time.Time // when the files' times were last looked at
	lastLog   map[string]time.Time
	suppress  map[string]int
	lastError string
}

// loadedFiles is what the files held when they were last read, and their times.
type loadedFiles struct {
	cert    *tls.Certificate
	clients *x509.CertPool
	stamps  []time.Time
}

// NewServer reads the files (an error names the flag to fix) and returns the listener's TLS
// configuration source. Its metrics go to reg (nil: unregistered).
func NewServer(files ServerFiles, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{
		files:    files,
		log:      log,
		lastLog:  map[string]time.Time{},
		suppress: map[string]int{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_tls_refused_total",
			Help: "TLS clients of the gRPC listener refused, by reason (no_certificate, untrusted, not_allowed: no identity of --tls-allowed-clients).",
		}, []string{"reason"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "galleon_tls_reloads_total",
			Help: "Reloads of the listener's TLS files after they changed, by result (ok, error: the last good files stay in use).",
		}, []string{"result"}),
		notAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "galleon_tls_certificate_expiry_timestamp_seconds",
			Help: "When the listener's certificate in use expires (Unix time).",
		}),
		handshake: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "galleon_tls_handshakes_total",
			Help: "TLS clients of the gRPC listener admitted (past the client checks, when --tls-client-ca is set).",
		}),
	}
	l, err := s.load()
	if err != nil {
		return nil, err
	}
	s.loaded, s.checked = l, time.Now()
	s.notAfter.Set(float64(l.cert.Leaf.NotAfter.Unix()))
	if reg != nil {
		reg.MustRegister(s.refused, s.reloads, s.notAfter, s.handshake)
	}
	return s, nil
}

// Config is the listener's configuration: each handshake takes the files' current content.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l := s.current()
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   []string{"h2"},
				Certificates: []tls.Certificate{*l.cert},
			}
			if l.clients == nil {
				c.VerifyConnection = func(tls.ConnectionState) error { s.handshake.Inc(); return nil }
				return c, nil
			}
			// Asked for, and verified (or required) here rather than by crypto/tls, so that
			// every refusal is counted and logged with its reason.
			c.ClientAuth = tls.RequestClientCert
			c.VerifyConnection = func(cs tls.ConnectionState) error { return s.verifyClient(l.clients, cs) }
			return c, nil
		},
	}
}

func (s *Server) verifyClient(pool *x509.CertPool, cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		if s.files.OptionalClientCert {
			s.handshake.Inc()
			return nil
		}
		return s.refuse(RefusedNoCertificate, errors.New("no client certificate"))
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return s.refuse(RefusedUntrusted, fmt.Errorf("client certificate %q: %w", leaf.Subject.CommonName, err))
	}
	if len(s.files.AllowedClients) > 0 {
		ids := identities(leaf)
		if !slices.ContainsFunc(ids, s.allowed) {
			return s.refuse(RefusedNotAllowed, fmt.Errorf("client certificate with identities %s: none is in --tls-allowed-clients", strings.Join(bounded(ids, 4), ", ")))
		}
	}
	s.handshake.Inc()
	return nil
}

// identities are a certificate's URI and DNS SANs.
func identities(c *x509.Certificate) []string {
	out := make([]string, 0, len(c.URIs)+len(c.DNSNames))
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return append(out, c.DNSNames...)
}

func (s *Server) allowed(id string) bool {
	for _, a := range s.files.AllowedClients {
		if prefix, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(id, prefix) || id == a {
			return true
		}
	}
	return false
}

// bounded keeps a client-controlled list short enough for a log line.
func bounded(ids []string, n int) []string {
	if len(ids) <= n {
		return ids
	}
	return append(slices.Clone(ids[:n]), fmt.Sprintf("(%d more)", len(ids)-n))
}

// refuse counts and logs a refusal: at most one line per reason every 10 s, with the number
// left unlogged since, so a client retrying in a loop cannot flood the log.
func (s *Server) refuse(reason string, err error) error {
	s.refused.WithLabelValues(reason).Inc()
	s.mu.Lock()
	now := time.Now()
	if now.Sub(s.lastLog[reason]) >= 10*time.Second {
		s.log.Warn("refused a TLS client of the gRPC listener", "reason", reason, "err", err, "unlogged_before", s.suppress[reason])
		s.lastLog[reason], s.suppress[reason] = now, 0
	} else {
		s.suppress[reason]++
	}
	s.mu.Unlock()
	return err
}

// current returns the files' content, reading them again when their times changed (looked at
// at most every checkFilesEvery). Files that fail to load keep the last good ones in use.
func (s *Server) current() *loadedFiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.checked) < checkFilesEvery {
		return s.loaded
	}
	s.checked = time.Now()
	if slices.Equal(s.stamps(), s.loaded.stamps) {
		return s.loaded
	}
	l, err := s.load()
	if err != nil {
		s.reloads.WithLabelValues("error").Inc()
		if err.Error() != s.lastError {
			s.log.Error("TLS files changed but do not load: the last good ones stay in use", "err", err)
			s.lastError = err.Error()
		}
		return s.loaded
	}
	s.lastError = ""
	s.loaded = l
	s.reloads.WithLabelValues("ok").Inc()
	s.notAfter.Set(float64(l.cert.Leaf.NotAfter.Unix()))
	s.log.Info("reloaded the TLS files of the gRPC listener", "not_after", l.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return l
}

func (s *Server) paths() []string {
	p := []string{s.files.CertFile, s.files.KeyFile}
	if s.files.ClientCAFile != "" {
		p = append(p, s.files.ClientCAFile)
	}
	return p
}

// stamps are the files' modification times (zero for one that cannot be read). A Kubernetes
// Secret volume swaps a symlink, which changes the time stat follows to.
func (s *Server) stamps() []time.Time {
	var out []time.Time
	for _, p := range s.paths() {
		var t time.Time
		if fi, err := os.Stat(p); err == nil {
			t = fi.ModTime()
		}
		out = append(out, t)
	}
	return out
}

func (s *Server) load() (*loadedFiles, error) {
	stamps := s.stamps()
	certPEM, err := tlsfiles.ReadLimited(s.files.CertFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.files.CertFlag, err)
	}
	keyPEM, err := tlsfiles.ReadLimited(s.files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.files.KeyFlag, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s %s / %s %s: %w", s.files.CertFlag, s.files.CertFile, s.files.KeyFlag, s.files.KeyFile, err)
	}
	l := &loadedFiles{cert: &cert, stamps: stamps}
	if s.files.ClientCAFile != "" {
		pem, err := tlsfiles.ReadLimited(s.files.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.files.ClientCAFlag, err)
		}
		l.clients = x509.NewCertPool()
		if !l.clients.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s: no PEM certificate in it", s.files.ClientCAFlag, s.files.ClientCAFile)
		}
	}
	return l, nil
}
