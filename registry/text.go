package registry

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// MaxRecordLen bounds a record name as the core logs and keeps it, and as
// the Reconciler keeps it: a registry chooses its names, and long ones once
// made hundreds of MB of log (docs/reliability.md). Longer names are Cut.
const MaxRecordLen = 256

// Cut returns s, or when it is longer than n bytes its first bytes (cut at a
// rune boundary), the number of bytes left out and a hash of the whole, so
// that two long texts that share their beginning stay apart and the same
// text is always cut the same way. For what a registry controls that ends
// up in a log line, a metric or a map: names, error texts.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	keep := max(n-40, 0)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return fmt.Sprintf("%s…(+%d bytes, %016x)", s[:keep], len(s)-keep, xxhash.Sum64String(s))
}

// MaxQuoted bounds the bytes of registry text one error quotes (before escaping): metadata and
// URLs are written by whoever registers, and the core keeps and logs the text of every
// rejection.
const MaxQuoted = 64

// Quote is registry text as an error shows it: s shortened to MaxQuoted bytes (Shorten) and
// quoted with %q's escapes, so that control bytes and invalid UTF-8 show as escapes.
func Quote(s string) string { return strconv.Quote(Shorten(s, MaxQuoted)) }

// Shown is s as it is when it is short printable ASCII (a JSON number, a protocol name), else
// Quote(s): the common value reads plainly, the odd one safely.
func Shown(s string) string {
	if len(s) > MaxQuoted {
		return Quote(s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return Quote(s)
		}
	}
	return s
}

// Shorten is s cut to at most n bytes at a character boundary, with "... (<len> bytes)" added
// when it was longer: a piece of text inside an error, such as a parser's message. Cut, which
// adds a hash, is for names and keys that must stay apart.
func Shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "... (" + strconv.Itoa(len(s)) + " bytes)"
}
