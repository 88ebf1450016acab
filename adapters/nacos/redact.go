package nacos

import (
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/galleon-mesh/galleon/registry"
)

// No password, token, secret key or signature reaches a log line, an error the Sink keeps
// (/debug/status) or a metric. The wire package never puts them in its errors; this is the
// second line: every error the adapter logs or reports passes through redactor.error, which
// replaces the secrets it knows (the password and secret key as read, so a server or proxy that
// echoes a request cannot leak them) and anything shaped like a credential (accessToken=...,
// "signature": ..., Authorization: ...), and cuts what is left to maxErrorText bytes.

// maxErrorText bounds an error's text in a log line or a report.
const maxErrorText = 512

// credentialKey is a key that names a credential (Nacos's accessToken query parameter and
// header, the AK/SK headers' signature, ...).
const credentialKey = `([A-Za-z0-9_.-]*(?:password|passwd|pwd|secret|token|signature|api[_-]?key|access[_-]?key|credentials?|session)[A-Za-z0-9_.-]*)`

var (
	// assignRE: a credential assigned, key=value or "key": value (a query string, a form, a
	// JSON body): the value is a secret whatever it looks like.
	assignRE = regexp.MustCompile(`(?i)` + credentialKey + `(["']?\s*=\s*["']?|["']\s*:\s*["']?|:["'])[^\s"'&,;}]+`)
	// headerRE: key: value, as a header or a gRPC metadata entry is written, and as prose is
	// too ("access token: logging in to ... failed"): the value is scrubbed only when it
	// looks like one (secretShaped), so the word after "token:" in a sentence stays.
	headerRE = regexp.MustCompile(`(?i)` + credentialKey + `(\s*:\s*)(["']?)([^\s"'&,;}]+)`)
	// authSchemeRE: an HTTP authentication scheme and its credentials.
	authSchemeRE = regexp.MustCompile(`(?i)\b(basic|bearer|digest)(\s+)[A-Za-z0-9._~+/=:-]+`)
	// userinfoRE: user:password@ in a URL.
	userinfoRE = regexp.MustCompile(`(://)[^/\s@]+@`)
)

// secretShaped says whether the value of a "key: value" looks like a credential rather than a
// word of a sentence: quoted, or with a digit or a character of base64, a JWT or a hex or
// URL-safe encoding in it, or long. Nacos's tokens (JWTs), Polaris's (base64) and the AK/SK
// signature (base64 of an HMAC-SHA1) all are; a plain word of fewer than 16 letters is prose.
// The secrets the adapter read (password, secret key, tokens) are scrubbed by value anyway.
func secretShaped(quoted bool, v string) bool {
	v = strings.TrimRight(v, ".:)!?")
	if quoted || len(v) >= 16 {
		return true
	}
	return strings.ContainsFunc(v, func(r rune) bool {
		return r >= '0' && r <= '9' || strings.ContainsRune("+/=_-.~", r)
	})
}

// redactHeaders scrubs the secret-shaped values of "key: value" in s.
func redactHeaders(s string) string {
	return headerRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := headerRE.FindStringSubmatch(m)
		if !secretShaped(sub[3] != "", sub[4]) {
			return m
		}
		return sub[1] + sub[2] + sub[3] + "[redacted]"
	})
}

// redactor scrubs secrets from text. Safe for concurrent use: wire's goroutines log through it.
type redactor struct {
	mu sync.Mutex
	// known are the secret values read so far (every password and secret key the files held,
	// every token a login returned): a rotated one stays known, since an old one may still be
	// echoed.
	known []string
}

// maxKnownSecrets bounds the secrets remembered: the password and secret key, and the tokens
// of up to maxServers servers, with their rotations over a process's life.
const maxKnownSecrets = 64

// learn adds a secret value to those scrubbed.
func (r *redactor) learn(secret string) {
	if len(secret) < 4 {
		// Too short to scrub without mangling ordinary text; the patterns still apply.
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.Index(r.known, secret); i >= 0 {
		// The most recent last: the eviction below takes the oldest, not one still in use.
		r.known = append(slices.Delete(r.known, i, i+1), secret)
		return
	}
	if len(r.known) == maxKnownSecrets {
		r.known = r.known[1:]
	}
	r.known = append(r.known, secret)
}

// text returns s with every secret replaced, cut to maxErrorText bytes.
func (r *redactor) text(s string) string {
	r.mu.Lock()
	for _, k := range r.known {
		s = strings.ReplaceAll(s, k, "[redacted]")
	}
	r.mu.Unlock()
	s = assignRE.ReplaceAllString(s, "${1}${2}[redacted]")
	s = redactHeaders(s)
	s = authSchemeRE.ReplaceAllString(s, "${1}${2}[redacted]")
	s = userinfoRE.ReplaceAllString(s, "${1}[redacted]@")
	return registry.Cut(s, maxErrorText)
}

// error returns err with its text made safe; it still unwraps to err, so errors.Is and
// errors.As (and registry.ReasonOf) see through it.
func (r *redactor) error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	safe := r.text(msg)
	if safe == msg {
		return err
	}
	return &safeError{msg: safe, err: err}
}

// safeError is an error whose text was made safe.
type safeError struct {
	msg string
	err error
}

func (e *safeError) Error() string { return e.msg }
func (e *safeError) Unwrap() error { return e.err }

// cutText bounds text from the command line quoted in a configuration error.
func cutText(s string) string { return registry.Cut(s, maxNameLen) }
