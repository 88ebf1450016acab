package nacos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/registry/registrytest"
)

// Sentinels: secrets that must appear in no log line and no report.
const (
	passwordSentinel  = "PASSWORD-SENTINEL-5f1c"
	secretKeySentinel = "SECRETKEY-SENTINEL-9a2e"
	tokenSentinel     = "TOKEN-SENTINEL-77d0"
)

// TestNoSecretInLogsOrReports runs the adapter against a server that logs everyone in and
// then answers every request with an error quoting the whole request: its URL (accessToken),
// its headers (the AK/SK signature) and its body (the password). No secret reaches a log line
// or the Sink (whose errors /debug/status shows).
func TestNoSecretInLogsOrReports(t *testing.T) {
	var mu sync.Mutex
	var signatures []string
	var loginBody []byte // echoed in every error: a server that logs the login it saw
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		// Nacos 1 HTTP clients sign in the query, Nacos 2 gRPC clients in headers.
		for _, s := range []string{r.Header.Get("signature"), r.URL.Query().Get("signature")} {
			if s != "" {
				signatures = append(signatures, s)
			}
		}
		mu.Unlock()
		if strings.Contains(r.URL.Path, "/auth/") && bytes.Contains(body, []byte(passwordSentinel)) {
			mu.Lock()
			loginBody = body
			mu.Unlock()
			fmt.Fprintf(w, `{"accessToken":%q,"tokenTtl":18000,"globalAdmin":true}`, tokenSentinel)
			return
		}
		mu.Lock()
		lb := loginBody
		mu.Unlock()
		var dump bytes.Buffer
		// The password first: an error's text is cut to a bound, the rest may not survive.
		fmt.Fprintf(&dump, "pw %s; bad request %s %s headers %v body %s; logged in with %s",
			bytes.TrimPrefix(lb, []byte("username=nacos&password=")), r.Method, r.URL.String(), r.Header, body, lb)
		http.Error(w, dump.String(), http.StatusForbidden)
	}))
	defer srv.Close()

	dir := t.TempDir()
	pw, sk := filepath.Join(dir, "password"), filepath.Join(dir, "secret-key")
	for path, v := range map[string]string{pw: passwordSentinel + "\n", sk: secretKeySentinel} {
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	r, err := New(Config{
		Servers:  []string{srv.Listener.Addr().String()},
		API:      APIHTTP,
		Username: "nacos", PasswordFile: pw,
		AccessKey: "ak", SecretKeyFile: sk,
		Timeout: time.Second,
		Logger:  slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := registrytest.NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, rec) }()
	rec.WaitForEvents(t, 10*time.Second, func(events []registrytest.Event) bool {
		for _, e := range events {
			if e.Op == registrytest.OpUnreachable && e.Err != nil {
				return true
			}
		}
		return false
	})
	// Let it retry a few times: every path that logs gets its chance.
	time.Sleep(1500 * time.Millisecond)
	cancel()
	<-done
	rec.Close()

	mu.Lock()
	secrets := append([]string{passwordSentinel, secretKeySentinel, tokenSentinel}, signatures...)
	mu.Unlock()
	if len(secrets) == 3 {
		t.Fatal("no request was signed: the AK/SK path was not exercised")
	}
	logMu.Lock()
	text := logs.String() + "\n" + rec.Dump()
	logMu.Unlock()
	for _, e := range rec.Events() {
		if e.Err != nil {
			text += "\n" + e.Err.Error()
		}
	}
	if !strings.Contains(text, "403") {
		t.Fatalf("the server's error was not reported at all, so nothing was checked:\n%s", text)
	}
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("secret %q appears in the logs or reports:\n%s", s, text)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestRedactor: the secrets read are replaced wherever they appear, and credential-shaped
// text too; the error still unwraps to the original.
func TestRedactor(t *testing.T) {
	var r redactor
	r.learn("hunter22")
	r.learn("abc") // too short to scrub by value
	base := fmt.Errorf("login: 403 body user=nacos hunter22 accessToken=tok123 signature: c2ln Authorization: Bearer eyJx http://u:pw@h/ x=abc")
	err := r.error(base)
	for _, s := range []string{"hunter22", "tok123", "c2ln", "eyJx", "u:pw"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("%q left in %q", s, err)
		}
	}
	if !strings.Contains(err.Error(), "x=abc") {
		t.Errorf("a short secret mangled ordinary text: %q", err)
	}
	if !errors.Is(err, base) {
		t.Error("the redacted error does not unwrap to the original")
	}
	if got := r.error(errors.New(strings.Repeat("x", 2*maxErrorText))); len(got.Error()) > maxErrorText+8 {
		t.Errorf("an error of %d bytes, want it cut to about %d", len(got.Error()), maxErrorText)
	}
}

// TestRedactorKeepsProse: "key: value" is scrubbed when the value looks like a credential, not
// when the word after a credential's name in a sentence is ordinary (HARNESS saw "access token:
// [redacted] in to ..." for "access token: logging in to ..."); key=value and quoted forms
// always are.
func TestRedactorKeepsProse(t *testing.T) {
	var r redactor
	for _, tt := range []struct{ in, want string }{
		// Prose: kept.
		{"nacos: access token: logging in to 127.0.0.1:8848 as polaris (--nacos-username, --nacos-password-file): 500 invalid token",
			"nacos: access token: logging in to 127.0.0.1:8848 as polaris (--nacos-username, --nacos-password-file): 500 invalid token"},
		{"the session: lost.", "the session: lost."},
		{"password: required", "password: required"},
		// Credential-shaped values: scrubbed, the key kept.
		{"accessToken: eyJhbGciOiJIUzI1NiJ9.e30.sig", "accessToken: [redacted]"},
		{"headers map[Accesstoken:[tok-123] Signature:[c2lnbmF0dXJl]]", "headers map[Accesstoken:[redacted] Signature:[redacted]"},
		{"signature: c2ln", "signature: [redacted]"},
		{"token: abcdefghijklmnopq", "token: [redacted]"},
		{`token: "plain"`, `token: "[redacted]"`},
		{"GET /v1/ns/instance/list?accessToken=plain&x=1", "GET /v1/ns/instance/list?accessToken=[redacted]&x=1"},
		{`{"accessToken":"plain","tokenTtl":18000}`, `{"accessToken":"[redacted]","tokenTtl":[redacted]}`},
		{`{"password": "word"}`, `{"password": "[redacted]"}`},
	} {
		if got := r.text(tt.in); got != tt.want {
			t.Errorf("text(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
	// A token the adapter logged in with is scrubbed by value, whatever its shape.
	r.learn("plainword")
	if got := r.text("server said plainword"); strings.Contains(got, "plainword") {
		t.Errorf("a learned token left in %q", got)
	}
}

// TestRedactorKeepsThePassword: secrets learned again move to the back, so a password read at
// every login is not evicted by the tokens of many servers.
func TestRedactorKeepsThePassword(t *testing.T) {
	var r redactor
	r.learn("the-password")
	for i := range 3 * maxKnownSecrets {
		r.learn(fmt.Sprintf("token-%04d", i))
		if i%10 == 0 {
			r.learn("the-password")
		}
	}
	if got := r.text("echo the-password"); strings.Contains(got, "the-password") {
		t.Errorf("the password was evicted: %q", got)
	}
	if len(r.known) > maxKnownSecrets {
		t.Errorf("%d secrets held, want at most %d", len(r.known), maxKnownSecrets)
	}
}
