package registry

import (
	"strings"
	"testing"
)

func TestShortenQuoteShown(t *testing.T) {
	if got := Shorten(strings.Repeat("é", 100), 5); got != "éé... (200 bytes)" {
		t.Errorf("Shorten = %q", got)
	}
	if got := Shorten("short", 5); got != "short" {
		t.Errorf("Shorten of a short text = %q", got)
	}
	if got := Quote("7"); got != `"7"` {
		t.Errorf("Quote = %s", got)
	}
	if got := Quote(strings.Repeat("a", 100)); got != `"`+strings.Repeat("a", MaxQuoted)+`... (100 bytes)"` {
		t.Errorf("Quote of a long text = %s", got)
	}
	for in, want := range map[string]string{"8080": "8080", "a b": `"a b"`, "\x00": `"\x00"`, strings.Repeat("x", MaxQuoted+1): Quote(strings.Repeat("x", MaxQuoted+1))} {
		if got := Shown(in); got != want {
			t.Errorf("Shown(%q) = %s, want %s", in, got, want)
		}
	}
}
