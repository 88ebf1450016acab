package istiod

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNeedsKubernetes(t *testing.T) {
	for name, want := range map[string]bool{
		"1.29.2": false, "1.29-mine": false, "1.30.0": true, "1.31-dev": true, "1.31": true,
		"2.0": false, "mine": false, "1.": false, "1.x": false,
	} {
		if got := (Release{Name: name}).NeedsKubernetes(); got != want {
			t.Errorf("Release{%q}.NeedsKubernetes() = %v, want %v", name, got, want)
		}
	}
}

// PushContextEveryPush is keyed on 1.31: the 1.30 line still has PushRequest.Full (releases.go).
func TestPushContextEveryPush(t *testing.T) {
	for name, want := range map[string]bool{
		"1.29.2": false, "1.30.0": false, "1.30-b01690e": false, "1.31-dev": true, "1.31": true,
		"mine": false,
	} {
		if got := (Release{Name: name}).PushContextEveryPush(); got != want {
			t.Errorf("Release{%q}.PushContextEveryPush() = %v, want %v", name, got, want)
		}
	}
	if got := moduleVersionOf("1.30-b01690e"); got != "v0.0.0-20260423205519-b01690e6db7d" {
		t.Errorf("moduleVersionOf(1.30-b01690e) = %q", got)
	}
}

func TestResolveReleases(t *testing.T) {
	dir := t.TempDir()
	exe := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cachedOK := exe("pilot-discovery-" + Version)
	other := exe("pilot-discovery-other")
	plain := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := func(name, version string) string { return filepath.Join(dir, name+"-"+version) }

	tests := []struct {
		name, list, override string
		want                 []Release
		wantErr              []string // substrings of the one-line error
	}{
		{name: "default is the cached default release", want: []Release{{Version, cachedOK}}},
		{name: "override replaces the default release's binary", override: other, want: []Release{{Version, other}}},
		{name: "explicit path", list: "1.31-dev=" + other, want: []Release{{"1.31-dev", other}}},
		{name: "two releases in order", list: Version + ", 1.31-dev=" + other,
			want: []Release{{Version, cachedOK}, {"1.31-dev", other}}},
		{name: "override path missing", override: filepath.Join(dir, "nope"),
			wantErr: []string{"istiod " + Version, "does not exist", EnvBinary, "point it at a pilot-discovery " + Version + " binary"}},
		{name: "override not executable", override: plain,
			wantErr: []string{"is not executable", "unset it"}},
		{name: "override is a directory", override: dir, wantErr: []string{"is a directory"}},
		{name: "release not built", list: "1.30.0",
			wantErr: []string{"istiod 1.30.0", "pilot-discovery-1.30.0", "does not exist", "run `go run ./internal/testing/devtool build pilot-discovery 1.30.0`"}},
		{name: "bad release name", list: "/usr/bin/pilot-discovery", wantErr: []string{"is not a release name"}},
		{name: "release twice", list: Version + "," + Version, wantErr: []string{"twice"}},
		{name: "only commas", list: ",,", wantErr: []string{"names no release"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveReleases(tc.list, tc.override, cache)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("resolveReleases(%q, %q) = %v, want an error", tc.list, tc.override, got)
				}
				msg := err.Error()
				if strings.Contains(msg, "\n") {
					t.Errorf("error is not one line: %q", msg)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(msg, w) {
						t.Errorf("error %q does not say %q", msg, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("release %d: got %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// The conformance tests name their sub-tests after the compiled release; it must be the release
// name, not a pseudo-version, for the module this repository pins.
func TestCompiledRelease(t *testing.T) {
	if got := CompiledRelease(); got != Version {
		t.Errorf("CompiledRelease() = %q, want %q (update toolcache.IstiodReleases with test/go.mod)", got, Version)
	}
	gomod := "module x\n\nrequire (\n\tistio.io/api v1.29.2\n\tistio.io/istio v0.0.0-20260409200358-0c774325b938 // indirect\n)\nrequire istio.io/other v1.0.0\n"
	if got := releaseOf(pinnedVersion(gomod, "istio.io/istio")); got != "1.29.2" {
		t.Errorf("from a require block: %q", got)
	}
	if got := pinnedVersion(gomod, "istio.io/other"); got != "v1.0.0" {
		t.Errorf("from a require line: %q", got)
	}
	if got := releaseOf(pinnedVersion(gomod, "istio.io/none")); got != "unknown" {
		t.Errorf("absent: %q", got)
	}
}
