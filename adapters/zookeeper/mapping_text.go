package zookeeper

import (
	"net/url"
	"strconv"
	"strings"
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

// sensitiveKey reports whether URL parameter k holds a secret.
func sensitiveKey(k string) bool {
	if dec, err := url.QueryUnescape(k); err == nil {
		k = dec
	}
	k = strings.ToLower(k)
	k = strings.NewReplacer("-", "", "_", "", ".", "").Replace(k)
	for _, w := range sensitiveWords {
		if strings.Contains(k, w) {
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
	b.WriteString(s[:start])
	for start <= len(s) {
		end, sep := indexSep(s, start, "&;")
		if end < 0 {
			end = len(s)
		}
		param := s[start:end]
		if eq, m := indexSep(param, 0, "="); eq >= 0 && eq+m < len(param) && sensitiveKey(param[:eq]) {
			param = param[:eq+m] + redacted
		}
		b.WriteString(param)
		if end == len(s) {
			break
		}
		b.WriteString(s[end : end+sep])
		start = end + sep
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
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil && strings.IndexByte(seps, byte(v)) >= 0 {
				return i, 3
			}
		}
	}
	return -1, 0
}

// redactRecord is the record name of znode path p with the secrets in its last element (a
// Dubbo provider or override URL) redacted: what the adapter reports, logs and shows in
// /debug/status for the node. Two nodes whose names differ only in a secret share it.
func redactRecord(p string) string {
	i := strings.LastIndexByte(p, '/')
	return p[:i+1] + redactURL(p[i+1:])
}
