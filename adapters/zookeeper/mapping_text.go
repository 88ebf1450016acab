package zookeeper

import (
	"bytes"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// What a rejection or a log line may quote of a registry's text. Node names and data are written
// by whoever can write to ZooKeeper: a rejection quotes a short, cut piece of what is wrong,
// never a whole URL (Dubbo URLs carry token= and password= parameters), and the core keeps and
// logs the text of every rejection.

// redacted replaces the value of a sensitive parameter.
const redacted = "REDACTED"

// sensitiveWords are the parameter names (lower case, without '-', '_' and '.') whose values are
// redacted wherever they contain one of them: Dubbo's token and the credentials registries and
// protocols put in URLs (password, accessKey, secretKey, ...). Redacting too much costs nothing.
var sensitiveWords = []string{"token", "password", "passwd", "pwd", "secret", "accesskey", "apikey",
	"credential", "auth", "signature", "privatekey", "sessionkey"}

// sensitiveKey reports whether URL parameter k holds a secret. It is asked of every parameter of
// every provider node read (a record's name is redacted even when nothing is wrong with it), so
// an ASCII name, the usual case, is folded without allocating.
func sensitiveKey(k string) bool {
	if dec, err := url.QueryUnescape(k); err == nil {
		k = dec
	}
	var buf [64]byte
	folded := buf[:0]
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= utf8.RuneSelf {
			// Unicode case folding can make ASCII of what is not (the Kelvin sign is a k).
			folded = []byte(strings.ToLower(k))
			folded = slices.DeleteFunc(folded, func(c byte) bool { return c == '-' || c == '_' || c == '.' })
			break
		}
		switch {
		case c == '-' || c == '_' || c == '.':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		folded = append(folded, c)
	}
	for _, w := range sensitiveWords {
		if bytes.Contains(folded, []byte(w)) {
			return true
		}
	}
	return false
}

// redactURL returns s, a URL or a znode name holding one URL-encoded (a Dubbo provider or
// override node), with the value of every sensitive query parameter (sensitiveKey) replaced by
// REDACTED. It works on the text as it is, malformed or not, so that what it returns is a
// function of s alone (a record name stays the same from one read to the next): the query
// starts at the first '?' (or "%3F"), its parameters are separated by '&' or ';' (or "%26",
// "%3B"), a name from its value by '=' (or "%3D"), in any case of the hex digits.
func redactURL(s string) string {
	q, n := indexSep(s, 0, "?")
	if q < 0 {
		return s
	}
	var b strings.Builder
	start := q + n
	for start <= len(s) {
		end, sep := indexSep(s, start, "&;")
		if end < 0 {
			end = len(s)
		}
		param := s[start:end]
		if eq, m := indexSep(param, 0, "="); eq >= 0 && eq+m < len(param) && sensitiveKey(param[:eq]) {
			if b.Len() == 0 {
				// The first secret: copy what came before it. Nothing is copied for a URL
				// without one.
				b.Grow(len(s))
				b.WriteString(s[:start])
			}
			b.WriteString(param[:eq+m])
			b.WriteString(redacted)
		} else if b.Len() > 0 {
			b.WriteString(param)
		}
		if end == len(s) {
			break
		}
		if b.Len() > 0 {
			b.WriteString(s[end : end+sep])
		}
		start = end + sep
	}
	if b.Len() == 0 {
		return s
	}
	return b.String()
}

// indexSep finds in s, from from on, the first of the bytes in seps or their percent-encoding,
// and returns its index and length (-1, 0 when there is none).
func indexSep(s string, from int, seps string) (int, int) {
	for i := from; i < len(s); i++ {
		c := s[i]
		if strings.IndexByte(seps, c) >= 0 {
			return i, 1
		}
		if c == '%' && i+2 < len(s) {
			hi, okHi := unhex(s[i+1])
			lo, okLo := unhex(s[i+2])
			if okHi && okLo && strings.IndexByte(seps, hi<<4|lo) >= 0 {
				return i, 3
			}
		}
	}
	return -1, 0
}

// unhex is the value of hexadecimal digit c, in either case.
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// redactRecord is the record name of znode path p with the secrets in its last element (a
// Dubbo provider or override URL) redacted: what the adapter reports, logs and shows in
// /debug/status for the node. Two nodes whose names differ only in a secret share it.
func redactRecord(p string) string {
	i := strings.LastIndexByte(p, '/')
	last := redactURL(p[i+1:])
	if last == p[i+1:] {
		return p // nothing redacted: no copy
	}
	return p[:i+1] + last
}
