package wire

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable time for TokenSource.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// scriptedLogin answers logins with tokens "t1", "t2", ... or with fail's error while set.
type scriptedLogin struct {
	calls atomic.Int32
	ttl   time.Duration
	mu    sync.Mutex
	fail  error
}

func (s *scriptedLogin) login(context.Context) (string, time.Duration, error) {
	n := s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return "", 0, s.fail
	}
	return "t" + string(rune('0'+n)), s.ttl, nil
}

func (s *scriptedLogin) setFail(err error) { s.mu.Lock(); s.fail = err; s.mu.Unlock() }

func newTestTokens(l *scriptedLogin, clock *fakeClock) *TokenSource {
	ts := NewTokenSource(l.login)
	ts.now = clock.now
	return ts
}

func mustToken(t *testing.T, ts *TokenSource, want string) {
	t.Helper()
	got, err := ts.Token(context.Background())
	if err != nil || got != want {
		t.Fatalf("Token = %q, %v; want %q", got, err, want)
	}
}

func TestTokenSourceRefreshesAtNinetyPercentOfTTL(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := &scriptedLogin{ttl: 100 * time.Second}
	ts := newTestTokens(l, clock)
	mustToken(t, ts, "t1")
	clock.add(89 * time.Second)
	mustToken(t, ts, "t1") // cached: before ttl - ttl/10
	if n := l.calls.Load(); n != 1 {
		t.Fatalf("%d logins before the refresh point, want 1", n)
	}
	clock.add(time.Second) // at 90 s: due
	mustToken(t, ts, "t2")
	if n := l.calls.Load(); n != 2 {
		t.Fatalf("%d logins, want 2", n)
	}
}

func TestTokenSourceFailedRefreshKeepsTokenUntilExpiry(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := &scriptedLogin{ttl: 100 * time.Second}
	ts := newTestTokens(l, clock)
	mustToken(t, ts, "t1")
	boom := errors.New("login refused")
	l.setFail(boom)
	clock.add(95 * time.Second)
	mustToken(t, ts, "t1") // refresh failed, old token still valid
	if n := l.calls.Load(); n != 2 {
		t.Fatalf("%d logins, want 2 (one failed refresh)", n)
	}
	clock.add(2 * time.Second)
	mustToken(t, ts, "t1") // within the retry pause: no new login
	if n := l.calls.Load(); n != 2 {
		t.Fatalf("%d logins within the retry pause, want 2", n)
	}
	clock.add(4 * time.Second) // 101 s: expired, and the pause is over
	if _, err := ts.Token(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Token after expiry = %v, want the login's error", err)
	}
	// Within the pause after that failure, the error is repeated without a login.
	calls := l.calls.Load()
	if _, err := ts.Token(context.Background()); !errors.Is(err, boom) || l.calls.Load() != calls {
		t.Fatalf("Token in the pause = %v with %d new logins; want the error and none", err, l.calls.Load()-calls)
	}
	l.setFail(nil)
	clock.add(DefaultLoginRetry)
	mustToken(t, ts, "t"+string(rune('0'+calls+1)))
}

func TestTokenSourceConcurrentCallersShareOneLogin(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	ts := NewTokenSource(func(context.Context) (string, time.Duration, error) {
		calls.Add(1)
		<-release
		return "tok", time.Hour, nil
	})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			tok, err := ts.Token(context.Background())
			if err == nil && tok != "tok" {
				err = errors.New("got " + tok)
			}
			errs <- err
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d logins for 20 concurrent callers, want 1", n)
	}
}

func TestTokenSourceWaiterHonoursContext(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	ts := NewTokenSource(func(context.Context) (string, time.Duration, error) {
		<-release
		return "tok", time.Hour, nil
	})
	go func() { _, _ = ts.Token(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := ts.Token(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Token while a login hangs = %v, want the deadline", err)
	}
}

func TestTokenSourceInvalidate(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := &scriptedLogin{ttl: time.Hour}
	ts := newTestTokens(l, clock)
	mustToken(t, ts, "t1")
	ts.Invalidate("other")
	mustToken(t, ts, "t1")
	ts.Invalidate("t1")
	mustToken(t, ts, "t2")
}

func TestTokenSourceUnknownTTLNotCached(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := &scriptedLogin{ttl: 0}
	ts := newTestTokens(l, clock)
	mustToken(t, ts, "t1")
	mustToken(t, ts, "t2")
}

func TestSignHeaders(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	// Expected signatures computed independently (Python hmac/sha1/base64).
	for _, tc := range []struct {
		ref       Ref
		data, sig string
	}{
		{Ref{Group: "DEFAULT_GROUP", Service: "svc"}, "1700000000123@@DEFAULT_GROUP@@svc", "7l6YclCljQkuX4NtPwYg8Hgaej4="},
		{Ref{}, "1700000000123", "9aZlvgr5tsWnvSlj3nftfgr2h54="},
		{Ref{Service: "svc"}, "1700000000123@@svc", "bH47fTal00GYBSioT1B1Eg+B/oo="},
	} {
		h := SignHeaders("ak-1", "sk-secret", tc.ref, now)
		if h["ak"] != "ak-1" || h["data"] != tc.data || h["signature"] != tc.sig || len(h) != 3 {
			t.Errorf("SignHeaders(%+v) = %v, want ak ak-1, data %s, signature %s", tc.ref, h, tc.data, tc.sig)
		}
	}
	if h := SignHeaders("", "sk", Ref{}, now); h != nil {
		t.Errorf("SignHeaders without an access key = %v, want nil", h)
	}
	if h := SignHeaders("ak", "", Ref{}, now); h != nil {
		t.Errorf("SignHeaders without a secret key = %v, want nil", h)
	}
}

// TestSignHeadersMatchesOfficialClient: vectors made by Nacos's official Go client
// (nacos-sdk-go v2.3.2: common/security/ram_auth_client.go GetSecurityInfo over
// resource_injector.go NamingResourceInjector, with security.Sign of
// common/security/signature_util.go), run with access key "LTAI-test-access-key" and secret key
// "test-secret-key-0123456789"; the data carries the time the SDK read, 1795766052033.
func TestSignHeadersMatchesOfficialClient(t *testing.T) {
	now := time.UnixMilli(1795766052033)
	for _, tc := range []struct {
		ref       Ref
		data, sig string
	}{
		{Ref{Namespace: "public", Group: "DEFAULT_GROUP", Service: "orders"}, "1795766052033@@DEFAULT_GROUP@@orders", "JdRh4i33rJEyqFThSursYePsOoY="},
		{Ref{Namespace: "shop", Group: "PAY", Service: "payments"}, "1795766052033@@PAY@@payments", "7oSnMxh6jyaJ6TVLu4RvYv0B6y4="},
		{Ref{}, "1795766052033", "WknJGiT7D+tDmKQ3uDyh2XMe9R0="},
		{Ref{Namespace: "public", Group: "G1"}, "1795766052033@@G1@@", "7FK+hHDEPCNrp73ENhQi8RsFVTE="},
		{Ref{Namespace: "public", Group: "DEFAULT_GROUP", Service: "PAY@@payments"}, "1795766052033@@PAY@@payments", "7oSnMxh6jyaJ6TVLu4RvYv0B6y4="},
		{Ref{Namespace: "public", Service: "orders"}, "1795766052033@@orders", "T5ylnzzGpzfxWXsdrCf8WShxRio="},
	} {
		h := SignHeaders("LTAI-test-access-key", "test-secret-key-0123456789", tc.ref, now)
		if h["ak"] != "LTAI-test-access-key" || h["data"] != tc.data || h["signature"] != tc.sig {
			t.Errorf("SignHeaders(%+v) = data %q signature %q, want %q %q (the official client's)", tc.ref, h["data"], h["signature"], tc.data, tc.sig)
		}
	}
}

func TestLogin(t *testing.T) {
	var gotPath, gotForm, gotCT string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotCT = r.URL.Path, r.Header.Get("Content-Type")
		_ = r.ParseForm()
		gotForm = r.PostForm.Encode()
		if r.URL.RawQuery != "" {
			t.Errorf("login sent a query %q: credentials belong in the body", r.URL.RawQuery)
		}
		_, _ = w.Write([]byte(`{"accessToken":"eyJ.tok","tokenTtl":18000,"globalAdmin":true}`))
	}))
	defer srv.Close()
	c := NewHTTPClient(HTTPConfig{BaseURL: srv.URL})
	tok, ttl, err := c.Login(context.Background(), "nacos", "p@ss word")
	if err != nil {
		t.Fatal(err)
	}
	if tok != "eyJ.tok" || ttl != 18000*time.Second {
		t.Fatalf("Login = %q, %v", tok, ttl)
	}
	if gotPath != "/nacos/v1/auth/users/login" || gotForm != "password=p%40ss+word&username=nacos" ||
		!strings.HasPrefix(gotCT, "application/x-www-form-urlencoded") {
		t.Fatalf("login request: path %s, form %s, content type %s", gotPath, gotForm, gotCT)
	}
}

// Polaris serves the login outside the context path.
func TestLoginFallsBackToRootPath(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		if r.URL.Path != "/v1/auth/users/login" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"accessToken":"","tokenTtl":120,"globalAdmin":false,"username":"u"}`))
	}))
	defer srv.Close()
	tok, ttl, err := NewHTTPClient(HTTPConfig{BaseURL: srv.URL}).Login(context.Background(), "u", "p")
	if err != nil || tok != "" || ttl != 120*time.Second {
		t.Fatalf("Login = %q, %v, %v", tok, ttl, err)
	}
	if strings.Join(paths, " ") != "/nacos/v1/auth/users/login /v1/auth/users/login" {
		t.Fatalf("paths tried: %v", paths)
	}
}

// No error of a login holds the password or the token, whatever the server answers.
func TestLoginErrorsHoldNoSecret(t *testing.T) {
	const password, token = "S3cret-pass", "tok-ABCDEF-123456"
	answers := []struct {
		status int
		body   string
	}{
		{403, "unknown user! password " + password + " is wrong"},
		{500, strings.Repeat("x", 300) + password},
		{200, `{"accessToken":"` + token + `","tokenTtl":-5}`},
		{200, `{"accessToken":"` + token + `","tokenTtl":"soon"}`},
		{200, `{"accessToken":"` + token + `"` + strings.Repeat(" ", 10)},
		{200, `{"accessToken":"` + token + `"} trailing ` + password},
		{200, `{"tokenTtl":5}`},
	}
	for i, a := range answers {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(a.status)
			_, _ = w.Write([]byte(a.body))
		}))
		_, _, err := NewHTTPClient(HTTPConfig{BaseURL: srv.URL}).Login(context.Background(), "user", password)
		srv.Close()
		if err == nil {
			t.Errorf("answer %d: no error", i)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, password) || strings.Contains(msg, token) {
			t.Errorf("answer %d: error holds a secret: %s", i, msg)
		}
	}
	// Unreachable server.
	c := NewHTTPClient(HTTPConfig{BaseURL: "http://127.0.0.1:1", Timeout: time.Second})
	if _, _, err := c.Login(context.Background(), "user", password); err == nil || strings.Contains(err.Error(), password) {
		t.Errorf("unreachable: %v", err)
	}
}

// A login abandoned by its caller does not make the next caller wait out the retry pause.
func TestTokenSourceCancelledLoginDoesNotPause(t *testing.T) {
	var calls atomic.Int32
	ts := NewTokenSource(func(ctx context.Context) (string, time.Duration, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done()
			return "", 0, ctx.Err()
		}
		return "tok", time.Hour, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := ts.Token(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first Token = %v", err)
	}
	mustToken(t, ts, "tok")
}
