package eureka

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/adapters/eureka/internal/wire"
)

// The HTTP side: one request for a listing, from one server. Which server, and when, is the
// poller's business (poller.go).

// fetchKind is what is fetched: the full listing or a delta. It is a metric label.
type fetchKind string

const (
	kindFull  fetchKind = "full"
	kindDelta fetchKind = "delta"
)

func (k fetchKind) path() string {
	if k == kindDelta {
		return "/apps/delta"
	}
	return "/apps"
}

// fetched is one listing and what it cost.
type fetched struct {
	apps *wire.Applications
	// wire is the bytes of the body as sent (compressed when the server gzips); body the
	// bytes decoded.
	wire, body int64
	took       time.Duration
}

// Results of a request (the label of galleon_eureka_requests_total).
const (
	resultOK          = "ok"
	resultUnreachable = "unreachable" // no answer: connection refused, timeout, TLS
	resultStatus      = "status"      // an answer other than 200
	resultMalformed   = "malformed"   // a 200 whose body is no listing, or too large
)

// fetchError is a failed request and how it failed.
type fetchError struct {
	result string
	err    error
}

func (e *fetchError) Error() string { return e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

func resultOf(err error) string {
	var fe *fetchError
	if errors.As(err, &fe) {
		return fe.result
	}
	return resultUnreachable
}

// newHTTPClient returns the client the adapter fetches with. Compression is handled by fetch,
// so that the bytes on the wire can be counted; TLS files are read at every new connection, so
// a rotated certificate needs no restart.
func newHTTPClient(cfg *Config) *http.Client {
	dialer := &net.Dialer{Timeout: min(cfg.Timeout, 10*time.Second), KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
	}
	files := cfg.tlsFiles()
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		tc, err := files.Config(host)
		if err != nil {
			return nil, err
		}
		raw, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, tc)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
	return &http.Client{Transport: tr, Timeout: cfg.Timeout}
}

// fetch gets one listing from s: JSON, gzipped when the server will.
func (r *Registry) fetch(ctx context.Context, hc *http.Client, s *server, kind fetchKind) (*fetched, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+kind.path(), nil)
	if err != nil {
		return nil, &fetchError{resultUnreachable, err}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Accept-Encoding", "gzip")
	user, password := s.user, s.password
	if user == "" {
		if user, password, err = r.cfg.basicAuth(); err != nil {
			return nil, &fetchError{resultUnreachable, err}
		}
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &fetchError{resultUnreachable, fmt.Errorf("GET %s%s: %w", s.name, kind.path(), unwrapURLError(err))}
	}
	defer resp.Body.Close()
	onWire := &wire.CountingReader{R: resp.Body}
	if resp.StatusCode != http.StatusOK {
		// The body is the server's: never quoted as received (it may echo the request's
		// Authorization header), only cut and redacted.
		snippet, _ := io.ReadAll(io.LimitReader(onWire, 4*maxServerText))
		msg := serverText(snippet)
		if msg != "" {
			msg = ": " + msg
		}
		return nil, &fetchError{resultStatus, fmt.Errorf("GET %s%s: %s%s", s.name, kind.path(), resp.Status, msg)}
	}
	var body io.Reader = onWire
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(onWire)
		if err != nil {
			return nil, &fetchError{resultMalformed, fmt.Errorf("GET %s%s: gzip: %w", s.name, kind.path(), err)}
		}
		defer zr.Close()
		body = zr
	}
	decoded := &wire.CountingReader{R: body}
	apps, err := wire.DecodeLimits(decoded, resp.Header.Get("Content-Type"), r.cfg.limits())
	if err != nil {
		result := resultMalformed
		if ctx.Err() != nil || isTransport(err) {
			result = resultUnreachable
		}
		err = safeError(err) // a decoder's error can quote the listing
		if le, ok := errors.AsType[*wire.LimitError](err); ok {
			// Refused as it was decoded, never held whole; say which flag raises the bound.
			err = fmt.Errorf("%w (raise %s if the registry really is this large)", err, limitFlag(le.What))
		}
		return nil, &fetchError{result, fmt.Errorf("GET %s%s: %w", s.name, kind.path(), err)}
	}
	// Drain what the decoder left (white space) so the connection is reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(onWire, 4<<10))
	return &fetched{apps: apps, wire: onWire.N, body: decoded.N, took: time.Since(start)}, nil
}

// isTransport: err is the connection failing while the body was read, not the body being
// wrong.
func isTransport(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, wire.ErrTooLarge)
}

// unwrapURLError drops net/http's `Get "URL": ` prefix, which would repeat the URL (and could
// hold credentials).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
