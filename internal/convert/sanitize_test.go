package convert

import (
	"maps"
	"reflect"
	"strings"
	"testing"
)

func TestSanitizeDNSLabel(t *testing.T) {
	long := strings.Repeat("a", 70)
	cases := []struct{ in, want string }{
		{"payments", "payments"},
		{"PAYMENT-SERVICE", "payment-service"},
		{"my_app", "my-app"},
		{"com.foo.Bar", "com-foo-bar"},
		{"providers:com.foo:1.0:", "providers-com-foo-1-0"},
		{"--x--", "x"},
		{"  spaced name ", "spaced-name"},
		{"Ünïcode", "n-code"},
		{"a日本b", "a--b"}, // one "-" per rune, not per byte
		{"", ""},
		{"___", ""},
		{"*", ""},
		{strings.Repeat("a", 63), strings.Repeat("a", 63)},
		{long, strings.Repeat("a", 52) + "-" + shortHash(long)},
	}
	for _, tc := range cases {
		if got := SanitizeDNSLabel(tc.in); got != tc.want {
			t.Errorf("SanitizeDNSLabel(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Long names that differ only past the cut stay different.
	if a, b := SanitizeDNSLabel(long+"x"), SanitizeDNSLabel(long+"y"); a == b {
		t.Errorf("long labels collide: %q", a)
	}
}

func TestSanitizeHost(t *testing.T) {
	cases := []struct{ in, want string }{
		{"payments.service.consul", "payments.service.consul"},
		{"PAYMENT-SERVICE.eureka", "payment-service.eureka"},
		{"*.example.com", "*.example.com"},
		{"*.*.example.com", "*.example.com"},
		{"*foo.example.com", "foo.example.com"},
		{"a..b.", "a.b"},
		{".leading.dot", "leading.dot"},
		{"providers:com.foo.Bar:1.0:group.zookeeper", "providers-com.foo.bar-1.0-group.zookeeper"},
		{"com.foo.Bar-DEFAULT_GROUP-1.0", "com.foo.bar-default-group-1.0"},
		{" host.example.com ", "host.example.com"},
		{"*", ""},
		{"*.", ""},
		{"...", ""},
		{"", ""},
	}
	for _, tc := range cases {
		if got := SanitizeHost(tc.in); got != tc.want {
			t.Errorf("SanitizeHost(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSanitizeLabels(t *testing.T) {
	long := strings.Repeat("v", 70)
	cases := []struct {
		name string
		in   map[string]string
		want map[string]string
	}{
		{"nil", nil, nil},
		{"valid kept", map[string]string{"app": "x", "app.kubernetes.io/name": "Pay_ments.v1", "empty": ""},
			map[string]string{"app": "x", "app.kubernetes.io/name": "Pay_ments.v1", "empty": ""}},
		{"key characters", map[string]string{"Team Name": "a", "@class": "b"},
			map[string]string{"Team-Name": "a", "class": "b"}},
		{"value characters", map[string]string{"version": "v1 beta", "path": "/api/v1/", "email": "a@b.c"},
			map[string]string{"version": "v1-beta", "path": "api-v1", "email": "a-b.c"}},
		{"prefix lower-cased", map[string]string{"Example.COM/app": "x"}, map[string]string{"example.com/app": "x"}},
		{"empty prefix dropped", map[string]string{"/app": "x"}, map[string]string{"app": "x"}},
		{"second slash repaired", map[string]string{"a.io/b/c": "x"}, map[string]string{"a.io/b-c": "x"}},
		{"unrepairable key dropped", map[string]string{"!!!": "x", "a.io/": "y", "ok": "z"}, map[string]string{"ok": "z"}},
		{"unrepairable value dropped", map[string]string{"k": "!!!", "ok": "z"}, map[string]string{"ok": "z"}},
		{"all dropped", map[string]string{"": "x"}, nil},
		{"long value shortened with hash", map[string]string{"k": long},
			map[string]string{"k": strings.Repeat("v", 52) + "-" + shortHash(long)}},
		{"valid key wins a collision", map[string]string{"a b": "repaired", "a-b": "valid", "a_b": "valid_too"},
			map[string]string{"a-b": "valid", "a_b": "valid_too"}},
		{"smallest repaired key wins a collision", map[string]string{"a!b": "1", "a@b": "2", "a b": "3"},
			map[string]string{"a-b": "3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := SanitizeLabels(tc.in)
			if len(got) != len(tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if g, ok := got[k]; !ok || g != v {
					t.Errorf("got %v, want %v", got, tc.want)
					break
				}
			}
			if errs := validateLabels(got); len(errs) != 0 {
				t.Errorf("sanitised labels are invalid: %v", errs)
			}
		})
	}
}

// The fuzz targets check the sanitisers' promise: whatever the input, the
// output is valid (or empty) and sanitising again changes nothing. Their
// seeds run with every go test.

func FuzzSanitizeDNSLabel(f *testing.F) {
	for _, s := range []string{"", "a", "A_B", "-", strings.Repeat("x-", 40), "ü", "a\xffb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := SanitizeDNSLabel(s)
		if out == "" {
			return
		}
		if !isDNS1123Label(out) || strings.ToLower(out) != out {
			t.Fatalf("SanitizeDNSLabel(%q) = %q, not a lower-case DNS-1123 label", s, out)
		}
		if again := SanitizeDNSLabel(out); again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, out, again)
		}
	})
}

func FuzzSanitizeHost(f *testing.F) {
	for _, s := range []string{"", "*.a.b", "*", "a..b", "A:B.c", strings.Repeat("long.", 60)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if isCanonicalHost(s) && repairHost(s) != s {
			t.Fatalf("isCanonicalHost(%q), but the repair gives %q", s, repairHost(s))
		}
		out := SanitizeHost(s)
		if out == "" || len(out) > maxDomainLen {
			return // an over-long host is validation's to reject
		}
		if err := validateWildcardDomain(out); err != nil && !allDigitsTLD(out) {
			t.Fatalf("SanitizeHost(%q) = %q: %v", s, out, err)
		}
		if strings.Contains(out, "*") && !strings.HasPrefix(out, "*.") {
			t.Fatalf("SanitizeHost(%q) = %q has a partial wildcard", s, out)
		}
		if again := SanitizeHost(out); again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, out, again)
		}
	})
}

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

// allDigitsTLD reports hosts like "10.0.0.1" that sanitising cannot make
// valid without changing their meaning.
func allDigitsTLD(h string) bool {
	tld := h[strings.LastIndex(h, ".")+1:]
	return strings.Trim(tld, "0123456789") == "" && strings.Contains(h, ".")
}

// SanitizeLabels returns a map that needs no repair as it is, and agrees with the repair
// on every key and value that is one byte away from needing it.
func TestSanitizeLabelsNoCopy(t *testing.T) {
	valid := map[string]string{"app": "payments", "version": "v1.2_3", "example.com/team": "", "a.b-c.d/Zone-1": "Eu.West"}
	got := SanitizeLabels(valid)
	if reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(valid).UnsafePointer() {
		t.Errorf("SanitizeLabels(%v) made a copy of a map that needs no repair", valid)
	}
	name63, name64 := strings.Repeat("n", 63), strings.Repeat("n", 64)
	keys := []string{"app", "App", "/app", "Example.com/app", "example..com/app", "-x.com/app", "x.com-/app",
		"x.com/", "x.com/a/b", "a_b", "_a", "a_", name63, name64, "x.com/" + name63, "x.com/" + name64,
		strings.Repeat("p.", 126) + "p/n", strings.Repeat("p.", 127) + "p/n", "é", "a b"}
	values := []string{"", "v1", "V1", "v1 ", " v1", "v-", "-v", "v.1", "v/1", name63, name64, "é"}
	for _, k := range keys {
		for _, v := range values {
			in := map[string]string{k: v, "app": "x"}
			if got, want := SanitizeLabels(in), sanitizeLabelsCopy(in); !maps.Equal(got, want) {
				t.Errorf("SanitizeLabels(%q=%q) = %v, the repair gives %v", k, v, got, want)
			}
		}
	}
}

func FuzzSanitizeLabels(f *testing.F) {
	f.Add("app", "v1", "a b/c/d", "x y")
	f.Add("Example.COM/app", "", "/", "\xff")
	f.Add(strings.Repeat("p.", 130)+"/n", "v", "k", strings.Repeat("v", 80))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		in := map[string]string{k1: v1, k2: v2}
		out := SanitizeLabels(in)
		// The no-copy path must agree with the repairing one.
		if want := sanitizeLabelsCopy(in); !maps.Equal(out, want) {
			t.Fatalf("SanitizeLabels(%q=%q, %q=%q) = %v, the repair gives %v", k1, v1, k2, v2, out, want)
		}
		if errs := validateLabels(out); len(errs) != 0 {
			t.Fatalf("SanitizeLabels(%q=%q, %q=%q) = %v: %v", k1, v1, k2, v2, out, errs)
		}
		for k := range out {
			if prefix, _, ok := strings.Cut(k, "/"); ok && strings.ToLower(prefix) != prefix {
				t.Fatalf("key %q has an upper-case prefix", k)
			}
		}
		again := SanitizeLabels(out)
		if len(again) != len(out) {
			t.Fatalf("not idempotent: %v -> %v", out, again)
		}
		for k, v := range out {
			if again[k] != v {
				t.Fatalf("not idempotent: %v -> %v", out, again)
			}
		}
	})
}
