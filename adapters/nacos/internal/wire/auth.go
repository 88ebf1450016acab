package wire

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultLoginRetry is how long a TokenSource waits after a failed login before it tries again:
// nacos-sdk-go's NacosAuthClient.AutoRefresh waits 5 s after a failure too. Without a pause,
// every request made while the server refuses logins would make a login of its own.
const DefaultLoginRetry = 5 * time.Second

// TokenSource holds the access token of a Nacos username/password login and renews it before it
// expires: at ttl - ttl/10 after the login, the refresh window Nacos's clients use
// (nacos-sdk-go common/security/nacos_auth_client.go, login: tokenRefreshWindow = tokenTtl / 10;
// Java SecurityProxy likewise). It is safe for concurrent use; one login runs at a time, and
// callers holding a token that is still valid do not wait for a renewal in progress.
//
// A failed renewal keeps the old token in use until it expires; after that Token returns the
// failure. Errors never carry the token (nor, from HTTPClient.Login, the password).
type TokenSource struct {
	login func(ctx context.Context) (string, time.Duration, error)
	// now and retry are fields so that tests can drive time; NewTokenSource sets them.
	now   func() time.Time
	retry time.Duration

	mu        sync.Mutex
	token     string
	have      bool
	refreshAt time.Time // renew from here on
	expires   time.Time // the token is no use from here on
	retryAt   time.Time // no login before this (after a failure)
	lastErr   error
	inflight  chan struct{} // non-nil while a login runs; closed when it ends
}

// NewTokenSource returns a TokenSource that logs in with login (typically a closure over
// HTTPClient.Login). ttl is the token's lifetime as the server gave it; ttl <= 0 means unknown:
// the token is used for the request at hand and renewed on the next.
func NewTokenSource(login func(ctx context.Context) (token string, ttl time.Duration, err error)) *TokenSource {
	return &TokenSource{login: login, now: time.Now, retry: DefaultLoginRetry}
}

// Token returns a token valid now, logging in first when there is none or it is due for renewal.
func (t *TokenSource) Token(ctx context.Context) (string, error) {
	for {
		t.mu.Lock()
		now := t.now()
		valid := t.have && now.Before(t.expires)
		if valid && now.Before(t.refreshAt) {
			tok := t.token
			t.mu.Unlock()
			return tok, nil
		}
		if t.inflight != nil {
			wait := t.inflight
			tok := t.token
			t.mu.Unlock()
			if valid {
				// A renewal is under way and the held token still works: use it.
				return tok, nil
			}
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		if now.Before(t.retryAt) {
			// The last login failed a moment ago: keep the old token while it lasts, else
			// report that failure rather than log in again at once.
			tok, err := t.token, t.lastErr
			t.mu.Unlock()
			if valid {
				return tok, nil
			}
			return "", err
		}
		done := make(chan struct{})
		t.inflight = done
		t.mu.Unlock()

		tok, ttl, err := t.login(ctx)

		t.mu.Lock()
		now = t.now()
		t.inflight = nil
		close(done)
		if err != nil {
			// A login cut short by its caller's context says nothing about the server: it
			// must not hold the other callers off.
			if ctx.Err() == nil {
				t.lastErr = err
				t.retryAt = now.Add(t.retry)
			}
			held, stillValid := t.token, t.have && now.Before(t.expires)
			t.mu.Unlock()
			if stillValid {
				return held, nil
			}
			return "", err
		}
		t.token, t.have, t.lastErr, t.retryAt = tok, true, nil, time.Time{}
		if ttl <= 0 {
			// Unknown lifetime: good for this request only.
			t.expires, t.refreshAt = now, now
		} else {
			t.expires = now.Add(ttl)
			t.refreshAt = now.Add(ttl - ttl/10)
		}
		t.mu.Unlock()
		return tok, nil
	}
}

// Invalidate drops token if it is the one held, so that the next Token logs in again: for a
// server that refused it (HTTP 403) before its time, e.g. after its secret changed.
func (t *TokenSource) Invalidate(token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.have && t.token == token {
		t.have = false
		t.token = ""
		t.retryAt = time.Time{}
	}
}

// SignHeaders returns the AK/SK fields that sign a Nacos naming request, as Nacos's clients
// compute them: data is the time in milliseconds, followed by "@@group@@service" when the request
// is about one service (ref.Service != ""), and signature is base64(HMAC-SHA1(secretKey, data)).
// The keys are "ak", "data" and "signature" (Java NamingProxy.injectSecurityInfo and
// SignUtil.sign; nacos-sdk-go common/security/resource_injector.go, NamingResourceInjector:
// NAMING_AK_FILED "ak", getSignData, and signature_util.go Sign). Nacos 1 HTTP clients send them
// as query parameters, Nacos 2 gRPC clients as request headers. It returns nil when either key
// is empty.
func SignHeaders(accessKey, secretKey string, ref Ref, now time.Time) map[string]string {
	if accessKey == "" || secretKey == "" {
		return nil
	}
	data := strconv.FormatInt(now.UnixMilli(), 10)
	if g := signedName(ref); g != "" {
		data += groupSeparator + g
	}
	mac := hmac.New(sha1.New, []byte(secretKey))
	mac.Write([]byte(data))
	return map[string]string{
		"ak":        accessKey,
		"data":      data,
		"signature": base64.StdEncoding.EncodeToString(mac.Sum(nil)),
	}
}

// groupSeparator joins a group and a service name into Nacos's grouped name
// (NamingUtils.getGroupedName; Constants.SERVICE_INFO_SPLITER).
const groupSeparator = "@@"

// signedName is the resource name a naming signature covers, as nacos-sdk-go's
// NamingResourceInjector builds it (common/security/resource_injector.go getGroupedServiceName):
// the service as it is when it already holds a group ("G@@svc") or no group is given, else
// "group@@service" — also with no service, so a service listing of group G signs "<ms>@@G@@".
// The namespace is not signed.
func signedName(ref Ref) string {
	if ref.Group == "" || strings.Contains(ref.Service, groupSeparator) {
		return ref.Service
	}
	return ref.Group + groupSeparator + ref.Service
}

// groupedName is "group@@service" ("service" alone when the group is empty, as nacos-sdk-go's
// getGroupedServiceName does).
func groupedName(ref Ref) string {
	if ref.Group == "" {
		return ref.Service
	}
	return ref.Group + groupSeparator + ref.Service
}

// loginPath is where Nacos's clients log in (Java SecurityProxy LOGIN_URL; nacos-sdk-go
// NacosAuthClient.login): under the context path. Alibaba's server also maps /v1/auth/login.
const loginPath = "/v1/auth/users/login"

// Login logs in with username and password (POST /v1/auth/users/login, a form body, as
// nacos-sdk-go sends it) and returns the access token and its lifetime (tokenTtl, seconds).
//
// Polaris serves the login outside the context path (apiserver/nacosserver/v1/auth.go,
// GetAuthServer: /v1/auth/login and /v1/auth/users/login at the root), so a 404 under the
// context path is retried at the root. Neither the password nor the token is ever part of an
// error.
func (c *HTTPClient) Login(ctx context.Context, username, password string) (token string, ttl time.Duration, err error) {
	form := url.Values{"username": {username}, "password": {password}}
	body, status, err := c.do(ctx, http.MethodPost, c.base+loginPath, url.Values{}, form, "LoginAnswer")
	if err == nil && status == http.StatusNotFound && strings.Trim(c.cfg.ContextPath, "/") != "" {
		root := strings.TrimRight(c.cfg.BaseURL, "/")
		body, status, err = c.do(ctx, http.MethodPost, root+loginPath, url.Values{}, form, "LoginAnswer")
	}
	if err != nil {
		return "", 0, err
	}
	if status < 200 || status > 299 {
		return "", 0, NewServerError(status, redact(string(body), password))
	}
	token, ttl, err = decodeLogin(body, c.cfg.Limits)
	if err != nil {
		return "", 0, err
	}
	return token, ttl, nil
}

// maxTokenBytes bounds an access token (a JWT of Nacos's is a few hundred bytes).
const maxTokenBytes = 8 << 10

// decodeLogin decodes {"accessToken": t, "tokenTtl": seconds, "globalAdmin": b}. A decoding
// error never quotes the answer: it holds the token.
func decodeLogin(body []byte, lim Limits) (string, time.Duration, error) {
	const what = "LoginAnswer"
	d := newJSONDecoder(body, what, lim)
	var token string
	var ttl int64
	haveToken := false
	err := d.object(func(key string) error {
		switch key {
		case "accessToken":
			haveToken = true
			var err error
			token, err = d.str("accessToken", maxTokenBytes)
			return err
		case "tokenTtl":
			return d.scalar("tokenTtl", &ttl)
		}
		return d.skip()
	})
	if err == nil {
		err = d.end()
	}
	if err != nil {
		return "", 0, err
	}
	if !haveToken {
		return "", 0, decodeErr(what, nil, "no accessToken")
	}
	if ttl < 0 || ttl > maxTokenTTLSeconds {
		return "", 0, decodeErr(what, nil, "tokenTtl %d out of range", ttl)
	}
	return token, time.Duration(ttl) * time.Second, nil
}

// maxTokenTTLSeconds bounds tokenTtl to a year: Nacos's default is 18000 (5 h), Polaris's 120.
const maxTokenTTLSeconds = 366 * 24 * 3600
