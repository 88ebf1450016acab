package eureka

import (
	"regexp"
	"strings"
	"unicode"
)

// What a server sends is not logged or kept as received: a server (or a proxy before it) that
// echoes the request in its error page would put the adapter's credentials in the log, and a
// hostile one can make any text as long as it likes. Server text (an error body, a value in a
// decoder's error) is cut to maxServerText bytes, with anything that looks like a credential
// replaced.

// maxServerText bounds text from a server in an error or a log line.
const maxServerText = 160

var (
	// authHeaderRE: an Authorization or Proxy-Authorization header, or a cookie, with its value.
	authHeaderRE = regexp.MustCompile(`(?i)\b((?:proxy-)?authorization|cookie|set-cookie)(["']?\s*[:=]\s*)("[^"]*"|'[^']*'|(?:(?:basic|bearer|digest|negotiate)\s+)?[^\s,;"'&]+)`)
	// schemeRE: an HTTP authentication scheme and its credentials, anywhere.
	schemeRE = regexp.MustCompile(`(?i)\b(basic|bearer|digest|negotiate)(\s+)[A-Za-z0-9._~+/=:-]+`)
	// secretRE: key=value or "key": "value" where the key names a secret.
	secretRE = regexp.MustCompile(`(?i)([A-Za-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|credentials?|session)[A-Za-z0-9_.-]*)(["']?\s*[:=]\s*["']?)[^\s"'&,;]+`)
	// userinfoRE: user:password@ in a URL.
	userinfoRE = regexp.MustCompile(`(?i)(://)[^/\s@]+@`)
)

// redactSecrets replaces what looks like a credential in s.
func redactSecrets(s string) string {
	s = authHeaderRE.ReplaceAllString(s, "${1}${2}[redacted]")
	s = schemeRE.ReplaceAllString(s, "${1}${2}[redacted]")
	s = secretRE.ReplaceAllString(s, "${1}${2}[redacted]")
	s = userinfoRE.ReplaceAllString(s, "${1}[redacted]@")
	return s
}

// serverText makes text a server sent fit for an error or a log line: valid UTF-8 on one
// line, credentials redacted, at most maxServerText bytes (a cut marked "...").
func serverText(b []byte) string {
	// Look at a little more than is kept, so that a credential cut at the end is still seen
	// whole by the patterns.
	if len(b) > 4*maxServerText {
		b = b[:4*maxServerText]
	}
	s := strings.ToValidUTF8(string(b), "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	return cut(redactSecrets(s))
}

// cut shortens s to maxServerText bytes, on a rune boundary, marking the cut.
func cut(s string) string {
	if len(s) <= maxServerText {
		return s
	}
	i := maxServerText
	for i > 0 && !isRuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// textError is an error whose text was made safe (serverText) and which still unwraps to the
// original, so that errors.Is and errors.As see through it.
type textError struct {
	msg string
	err error
}

func (e *textError) Error() string { return e.msg }
func (e *textError) Unwrap() error { return e.err }

// safeError is err with its text made safe: a decoder's error can quote the listing (an XML
// element's name, a JSON string).
func safeError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	safe := serverText([]byte(msg))
	if safe == msg {
		return err
	}
	return &textError{msg: safe, err: err}
}
