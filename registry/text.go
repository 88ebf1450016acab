package registry

import (
	"fmt"
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
