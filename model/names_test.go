package model

import (
	"maps"
	"reflect"
	"strings"
	"testing"
)

// The sanitisers' outputs are checked against the core's validation in internal/convert
// (names_test.go); these tests hold their fast paths to the repairs they skip.

// TestCanonicalHostAgreesWithTheRepair: the fast path says "unchanged" exactly where the repair
// leaves a host as it is, around every rule's edge.
func TestCanonicalHostAgreesWithTheRepair(t *testing.T) {
	l63, l64 := strings.Repeat("a", 63), strings.Repeat("a", 64)
	for _, h := range []string{"a", "a.b", "orders.eureka", "*.a.b", "a-b.c", "0.1", l63 + ".x", l64 + ".x",
		"-a.b", "a-.b", "a.-b", "a..b", ".a", "a.", "A.b", "a_b.c", "a b", " a", "*", "*.", "*.*.a", "a.*.b", "é.a", ""} {
		canonical, repaired := isCanonicalHost(h), repairHost(h)
		if canonical && repaired != h {
			t.Errorf("isCanonicalHost(%q) but the repair gives %q", h, repaired)
		}
		if !canonical && repaired == h && h != "" {
			t.Errorf("isCanonicalHost(%q) = false, but the repair leaves it as it is (a missed fast path)", h)
		}
	}
}

// Labels returns a map that needs no repair as it is, and agrees with the repair
// on every key and value that is one byte away from needing it.
func TestSanitizeLabelsNoCopy(t *testing.T) {
	valid := map[string]string{"app": "payments", "version": "v1.2_3", "example.com/team": "", "a.b-c.d/Zone-1": "Eu.West"}
	got := Labels(valid)
	if reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(valid).UnsafePointer() {
		t.Errorf("Labels(%v) made a copy of a map that needs no repair", valid)
	}
	name63, name64 := strings.Repeat("n", 63), strings.Repeat("n", 64)
	keys := []string{"app", "App", "/app", "Example.com/app", "example..com/app", "-x.com/app", "x.com-/app",
		"x.com/", "x.com/a/b", "a_b", "_a", "a_", name63, name64, "x.com/" + name63, "x.com/" + name64,
		strings.Repeat("p.", 126) + "p/n", strings.Repeat("p.", 127) + "p/n", "é", "a b"}
	values := []string{"", "v1", "V1", "v1 ", " v1", "v-", "-v", "v.1", "v/1", name63, name64, "é"}
	for _, k := range keys {
		for _, v := range values {
			in := map[string]string{k: v, "app": "x"}
			if got, want := Labels(in), sanitizeLabelsCopy(in); !maps.Equal(got, want) {
				t.Errorf("Labels(%q=%q) = %v, the repair gives %v", k, v, got, want)
			}
		}
	}
}

func FuzzHostNameFastPath(f *testing.F) {
	for _, s := range []string{"", "*.a.b", "*", "a..b", "A:B.c", strings.Repeat("long.", 60)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if isCanonicalHost(s) && repairHost(s) != s {
			t.Fatalf("isCanonicalHost(%q), but the repair gives %q", s, repairHost(s))
		}
	})
}

func FuzzLabelsFastPath(f *testing.F) {
	f.Add("app", "v1", "a b/c/d", "x y")
	f.Add("Example.COM/app", "", "/", "\xff")
	f.Add(strings.Repeat("p.", 130)+"/n", "v", "k", strings.Repeat("v", 80))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		in := map[string]string{k1: v1, k2: v2}
		if out, want := Labels(in), sanitizeLabelsCopy(in); !maps.Equal(out, want) {
			t.Fatalf("Labels(%q=%q, %q=%q) = %v, the repair gives %v", k1, v1, k2, v2, out, want)
		}
	})
}
