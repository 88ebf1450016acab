package model

import (
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
)

// Registries allow names that Kubernetes and Envoy do not: Eureka upper-cases
// application names, Dubbo groups carry '_' and ':', Consul metadata keys and
// values are free text. The sanitisers below repair such strings instead of
// rejecting them, so that one odd record does not hide a whole service.
//
// Every sanitiser is a pure function of its input, so the same registry data
// always gives the same names. When a string has to be shortened, a hash of
// the whole original is appended so that long names differing only in their
// tail stay distinct.

const (
	// MaxDNSLabel is the DNS-1123 label limit (RFC 1123, Kubernetes names,
	// port names, label name parts).
	MaxDNSLabel = 63
	// MaxDNSSubdomain is the DNS-1123 subdomain limit (Kubernetes object
	// names, label key prefixes).
	MaxDNSSubdomain = 253
	// MaxLabelValue is Kubernetes' label value limit.
	MaxLabelValue = 63
	// hashLen is the number of hex digits of the stable hash appended to
	// shortened or colliding names: 40 bits, so an accidental clash between
	// two names of one service is negligible.
	hashLen = 10
)

// ShortHash returns a short stable hash of s, the one the sanitisers append
// to a shortened name: the first 10 hex digits of its 64-bit FNV-1a digest.
// The digits are [0-9a-f], valid in every syntax used here.
func ShortHash(s string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s)) // hash.Hash.Write never fails
	return hex.EncodeToString(h.Sum(nil))[:hashLen]
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
func isAlnum(c byte) bool      { return isLowerAlnum(c) || c >= 'A' && c <= 'Z' }

// trimNonAlnum removes leading and trailing bytes that are not ASCII letters
// or digits: every syntax here must start and end alphanumeric.
func trimNonAlnum(s string) string {
	i, j := 0, len(s)
	for i < j && !isAlnum(s[i]) {
		i++
	}
	for j > i && !isAlnum(s[j-1]) {
		j--
	}
	return s[i:j]
}

// replaceInvalid maps s rune by rune: lower-cases ASCII letters when lower is
// set, keeps bytes for which keep is true and turns everything else
// (including each non-ASCII rune, whatever its width) into '-'.
func replaceInvalid(s string, lower bool, keep func(byte) bool) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r >= 0x80 {
			b.WriteByte('-')
			continue
		}
		c := byte(r)
		if lower && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if keep(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

// shorten cuts the already sanitised s to at most limit bytes. When it has
// to cut, it keeps a prefix and appends "-" plus the hash of original, so
// that different originals sharing a long prefix still differ.
func shorten(s, original string, limit int) string {
	if len(s) <= limit {
		return s
	}
	head := trimNonAlnum(s[:limit-hashLen-1])
	if head == "" {
		return ShortHash(original)
	}
	return head + "-" + ShortHash(original)
}

// DNSLabel turns s into a DNS-1123 label: lower case, only [a-z0-9-],
// at most 63 bytes, starting and ending with a letter or digit. Other
// characters become '-'; leading and trailing '-' are dropped; a longer
// result is cut and given a hash suffix. It returns "" when nothing is left.
//
// Examples: "MY_APP" -> "my-app", "providers:com.foo.Bar::" -> "providers-com-foo-bar".
func DNSLabel(s string) string {
	out := trimNonAlnum(replaceInvalid(s, true, func(c byte) bool { return isLowerAlnum(c) || c == '-' }))
	return shorten(out, s, MaxDNSLabel)
}

// HostName sanitises a host name label by label with DNSLabel,
// dropping labels that end up empty (so "a..b." becomes "a.b"). A leading
// "*." wildcard is kept; any other '*' is not valid in a ServiceEntry host
// and is removed. It returns "" when no label is left.
//
// The total length is not limited here: a host cannot be shortened without
// changing what it names, so an over-long host is left for validation to
// reject.
func HostName(s string) string {
	if isCanonicalHost(s) {
		return s // what repairHost returns for it, without its allocations
	}
	return repairHost(s)
}

func repairHost(s string) string {
	s = strings.TrimSpace(s)
	wildcard := strings.HasPrefix(s, "*.")
	if wildcard {
		s = s[2:]
	}
	parts := strings.Split(s, ".")
	labels := parts[:0]
	for _, p := range parts {
		if l := DNSLabel(p); l != "" {
			labels = append(labels, l)
		}
	}
	if len(labels) == 0 {
		return ""
	}
	host := strings.Join(labels, ".")
	if wildcard {
		return "*." + host
	}
	return host
}

// isCanonicalHost reports whether repairHost would return s unchanged
// because it is valid already: an optional leading "*.", then labels of 1
// to 63 lower-case letters, digits and '-', alphanumeric at both ends.
// Most registries' hosts are, and the pipeline sanitises every host of a
// listing.
func isCanonicalHost(s string) bool {
	s, _ = strings.CutPrefix(s, "*.")
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			if c := s[i]; !isLowerAlnum(c) && c != '-' {
				return false
			}
			continue
		}
		if n := i - start; n == 0 || n > MaxDNSLabel || !isLowerAlnum(s[start]) || !isLowerAlnum(s[i-1]) {
			return false
		}
		start = i + 1
	}
	return true
}

// Subdomain turns s into a DNS-1123 subdomain (dot-separated
// labels, lower case), without any length limit: callers decide how to fit
// it. It returns "" when nothing is left.
func Subdomain(s string) string {
	s = replaceInvalid(s, true, func(c byte) bool { return isLowerAlnum(c) || c == '-' || c == '.' })
	parts := strings.Split(s, ".")
	labels := parts[:0]
	for _, p := range parts {
		if l := trimNonAlnum(p); l != "" {
			labels = append(labels, l)
		}
	}
	return strings.Join(labels, ".")
}

// sanitizeQualifiedName repairs a Kubernetes "qualified name" (a label name
// part or a label value): [A-Za-z0-9._-], alphanumeric at both ends, at most
// 63 bytes. Case is kept: Kubernetes allows upper case here and registries
// use it meaningfully (versions, zones).
func sanitizeQualifiedName(s string) string {
	out := trimNonAlnum(replaceInvalid(s, false, func(c byte) bool {
		return isAlnum(c) || c == '-' || c == '_' || c == '.'
	}))
	return shorten(out, s, MaxLabelValue)
}

// sanitizeLabelKey repairs a Kubernetes label key: an optional DNS subdomain
// prefix (at most 253 bytes, lower case) and "/", then a qualified name. The
// prefix ends at the first '/'; any later '/' is repaired inside the name. A
// prefix that sanitises to nothing is dropped ("/app" -> "app"). It returns
// "" when the name part is empty.
func sanitizeLabelKey(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		prefix, name = "", k
	}
	name = sanitizeQualifiedName(name)
	if name == "" {
		return ""
	}
	prefix = shortenLabels(Subdomain(prefix))
	if len(prefix) > MaxDNSSubdomain {
		prefix = shorten(prefix, k, MaxDNSSubdomain)
	}
	if prefix == "" {
		return name
	}
	return prefix + "/" + name
}

// shortenLabels cuts each label of the DNS subdomain s to at most 63 bytes: istiod checks a
// label key's prefix label by label (a Kubernetes subdomain alone limits only its length).
func shortenLabels(s string) string {
	for l := range strings.SplitSeq(s, ".") {
		if len(l) > MaxDNSLabel {
			labels := strings.Split(s, ".")
			for i, l := range labels {
				labels[i] = shorten(l, l, MaxDNSLabel)
			}
			return strings.Join(labels, ".")
		}
	}
	return s
}

// Labels returns labels equal to in repaired to follow Kubernetes label syntax:
// keys are an optional DNS subdomain prefix plus "/" plus a name of at most
// 63 bytes, values at most 63 bytes of [A-Za-z0-9._-] with a letter or digit
// at both ends (or empty). Invalid characters become '-', other repairs
// follow the sanitisers above. Pairs that cannot be repaired are dropped: a
// key with an empty name, or a non-empty value that sanitises to nothing.
//
// When two keys become equal after repair, a key that was valid as given
// wins over a repaired one; among repaired keys the smallest original key
// wins. The result therefore does not depend on map iteration order. It
// returns nil when nothing is left.
//
// When every pair already follows the syntax, which is what registries almost always hold,
// the result is in itself: no copy is made, so the caller must not modify the result. A
// copy per instance was the largest allocation of galleon-file's start (docs/benchmarks.md,
// BenchmarkFirstListing).
func Labels(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	for k, v := range in {
		if !labelKeyKept(k) || !labelValueKept(v) {
			return sanitizeLabelsCopy(in)
		}
	}
	return in
}

// labelKeyKept says whether sanitizeLabelKey returns k unchanged: a qualified name of at
// most 63 bytes, after a non-empty lower-case DNS subdomain and "/" if k has a "/".
func labelKeyKept(k string) bool {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name = k
	}
	if len(name) > MaxLabelValue || !IsQualifiedName(name) {
		return false
	}
	return !hasPrefix || IsDNSSubdomain(prefix) && shortenLabels(prefix) == prefix
}

// labelValueKept says whether sanitizeQualifiedName returns v unchanged (or v is empty).
func labelValueKept(v string) bool {
	return v == "" || len(v) <= MaxLabelValue && IsQualifiedName(v)
}

// sanitizeLabelsCopy is Labels for a map with at least one pair to repair or drop.
func sanitizeLabelsCopy(in map[string]string) map[string]string {
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	out := make(map[string]string, len(in))
	// exact records which output keys came from an unrepaired original key,
	// so that such a pair can displace a repaired one whatever the order.
	exact := make(map[string]bool, len(in))
	for _, k := range keys {
		key := sanitizeLabelKey(k)
		if key == "" {
			continue
		}
		v := in[k]
		value := sanitizeQualifiedName(v)
		if value == "" && v != "" {
			continue
		}
		if _, taken := out[key]; taken && (exact[key] || key != k) {
			continue
		}
		out[key] = value
		exact[key] = key == k
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// IsDNSLabel matches istiod's [a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?
// with at most 63 bytes. Note that istiod accepts upper case here.
func IsDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > MaxDNSLabel || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if !isAlnum(s[i]) && s[i] != '-' {
			return false
		}
	}
	return true
}

// IsDNSSubdomain is Kubernetes' object name rule: lower-case labels
// joined by '.', at most 253 bytes in all. Unlike DNS, Kubernetes puts no
// limit on the length of each label here.
func IsDNSSubdomain(s string) bool {
	if len(s) == 0 || len(s) > MaxDNSSubdomain {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if len(l) == 0 || !isLowerAlnum(l[0]) || !isLowerAlnum(l[len(l)-1]) {
			return false
		}
		for i := 1; i < len(l)-1; i++ {
			if !isLowerAlnum(l[i]) && l[i] != '-' {
				return false
			}
		}
	}
	return true
}

// IsQualifiedName matches Kubernetes' (?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]
// without a length limit (callers apply theirs).
func IsQualifiedName(s string) bool {
	if len(s) == 0 || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// CheckNamespace checks a Kubernetes namespace an adapter is configured with: nil when ns is a
// DNS-1123 label as given, else an error that suggests the repaired form. Unlike a registry's
// names, which the core repairs, a setting is the operator's to fix.
func CheckNamespace(ns string) error {
	if DNSLabel(ns) == ns && ns != "" {
		return nil
	}
	if repaired := DNSLabel(ns); repaired != "" {
		return fmt.Errorf("%q is not a DNS-1123 label (lower-case letters, digits and '-'), e.g. %q", ns, repaired)
	}
	return fmt.Errorf("%q is not a DNS-1123 label (lower-case letters, digits and '-')", ns)
}
