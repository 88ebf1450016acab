// The sanitisers live in package model, for adapters to call; they are tested here, against
// the validation the core applies to what they produce.
package convert

import (
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/model"
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
		{long, strings.Repeat("a", 52) + "-" + model.ShortHash(long)},
	}
	for _, tc := range cases {
		if got := model.DNSLabel(tc.in); got != tc.want {
			t.Errorf("model.DNSLabel(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Long names that differ only past the cut stay different.
	if a, b := model.DNSLabel(long+"x"), model.DNSLabel(long+"y"); a == b {
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
		if got := model.HostName(tc.in); got != tc.want {
			t.Errorf("model.HostName(%q) = %q, want %q", tc.in, got, tc.want)
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
			map[string]string{"k": strings.Repeat("v", 52) + "-" + model.ShortHash(long)}},
		{"valid key wins a collision", map[string]string{"a b": "repaired", "a-b": "valid", "a_b": "valid_too"},
			map[string]string{"a-b": "valid", "a_b": "valid_too"}},
		{"smallest repaired key wins a collision", map[string]string{"a!b": "1", "a@b": "2", "a b": "3"},
			map[string]string{"a-b": "3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := model.Labels(tc.in)
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
		out := model.DNSLabel(s)
		if out == "" {
			return
		}
		if !model.IsDNSLabel(out) || strings.ToLower(out) != out {
			t.Fatalf("model.DNSLabel(%q) = %q, not a lower-case DNS-1123 label", s, out)
		}
		if again := model.DNSLabel(out); again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, out, again)
		}
	})
}

func FuzzSanitizeHost(f *testing.F) {
	for _, s := range []string{"", "*.a.b", "*", "a..b", "A:B.c", strings.Repeat("long.", 60)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := model.HostName(s)
		if out == "" || len(out) > maxDomainLen {
			return // an over-long host is validation's to reject
		}
		if err := validateWildcardDomain(out); err != nil && !allDigitsTLD(out) {
			t.Fatalf("model.HostName(%q) = %q: %v", s, out, err)
		}
		if strings.Contains(out, "*") && !strings.HasPrefix(out, "*.") {
			t.Fatalf("model.HostName(%q) = %q has a partial wildcard", s, out)
		}
		if again := model.HostName(out); again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, out, again)
		}
	})
}

// allDigitsTLD reports hosts like "10.0.0.1" that sanitising cannot make
// valid without changing their meaning.
func allDigitsTLD(h string) bool {
	tld := h[strings.LastIndex(h, ".")+1:]
	return strings.Trim(tld, "0123456789") == "" && strings.Contains(h, ".")
}

func FuzzSanitizeLabels(f *testing.F) {
	f.Add("app", "v1", "a b/c/d", "x y")
	f.Add("Example.COM/app", "", "/", "\xff")
	f.Add(strings.Repeat("p.", 130)+"/n", "v", "k", strings.Repeat("v", 80))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		in := map[string]string{k1: v1, k2: v2}
		out := model.Labels(in)
		if errs := validateLabels(out); len(errs) != 0 {
			t.Fatalf("model.Labels(%q=%q, %q=%q) = %v: %v", k1, v1, k2, v2, out, errs)
		}
		for k := range out {
			if prefix, _, ok := strings.Cut(k, "/"); ok && strings.ToLower(prefix) != prefix {
				t.Fatalf("key %q has an upper-case prefix", k)
			}
		}
		again := model.Labels(out)
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
