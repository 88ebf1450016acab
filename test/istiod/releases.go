package istiod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// EnvReleases lists the istiod releases the e2e tests run against, comma-separated. Each entry is a
// release name ("1.29.2"), whose binary is the tool cache's
// (<cache>/bin/pilot-discovery-<release>), or "name=/path/to/pilot-discovery". Default: Version.
const EnvReleases = "GALLEON_ISTIOD_RELEASES"

// Release is one istiod build the tests run: its name, used in sub-test names and logs, and the
// pilot-discovery binary.
type Release struct {
	Name   string
	Binary string
}

// NeedsKubernetes reports whether this istiod cannot start without a Kubernetes API server:
// releases from 1.30 on (named "1.30...", "1.31-dev", ...) panic at start without one (a nil
// config cluster in serviceentry.newController; ../shared/reference/real-servers.md). Start
// then runs one for it (test/kube). A name that is not a version says no.
func (r Release) NeedsKubernetes() bool { return r.minor() >= 30 }

// PushContextEveryPush reports whether this istiod builds a push context for every push, EDS-only
// ones included, so that pilot_pushcontext_init_seconds no longer counts full pushes: the 1.31
// development line dropped PushRequest.Full (istio commit 3dcae099a42, "Remove concept of full
// push", master 2026-05-04, after release-1.30 branched; in 1.31-dev's pilot/pkg/xds/discovery.go
// Push builds one unconditionally, PushContext InitContext updating the old context incrementally
// from ConfigsUpdated). FullPushes then counts what istiod logs for every push request that
// carries anything but endpoints (see FullPushes). The 1.30 line keeps PushRequest.Full: its
// pilot/pkg/xds/discovery.go:289-294 (1.30.0, 1.30.3 and 1.30-b01690e alike) returns from Push
// before initPushContext when !req.Full, so pilot_pushcontext_init_seconds counts full pushes
// there, as on 1.29. Hence from 1.31 on.
func (r Release) PushContextEveryPush() bool { return r.minor() >= 31 }

// ClearsLastEndpoint reports whether this istiod applies an update that leaves a STATIC
// ServiceEntry without endpoints as an EDS update to none, so that Galleon's last-endpoint label
// (--no-endpoints-label) only costs it full pushes: from 1.30 the serviceentry controller is krt
// based and pushServiceEndpointUpdates sends each host's whole endpoint list, an empty one
// included (pilot/pkg/serviceregistry/serviceentry/controller.go at 1.30-b01690e and 1.31-dev;
// 1.30.0's file is the same). 1.29 updates only the hosts of the new endpoints, of which there
// are none, and keeps the last endpoint.
func (r Release) ClearsLastEndpoint() bool { return r.minor() >= 30 }

// minor is the minor version in the release's name ("1.31-dev" -> 31), or -1 when the name is
// not "1.<minor>...".
func (r Release) minor() int {
	major, rest, ok := strings.Cut(r.Name, ".")
	if !ok || major != "1" {
		return -1
	}
	digits := rest
	for i, c := range rest {
		if c < '0' || c > '9' {
			digits = rest[:i]
			break
		}
	}
	minor, err := strconv.Atoi(digits)
	if err != nil {
		return -1
	}
	return minor
}

// CompiledRelease names the Istio release whose code (pkg/adsc, the client istiod uses for xds://
// config sources) the tests of this module compile: the istio.io/istio version the module's go.mod
// pins, mapped to its release name. Test binaries carry no module versions in their build
// information, so go.mod is read instead; tests run in their package directory, below it.
func CompiledRelease() string {
	dir, err := os.Getwd()
	if err != nil {
		return "unknown"
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			return releaseOf(pinnedVersion(string(data), "istio.io/istio"))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "unknown"
		}
		dir = parent
	}
}

// pinnedVersion returns the version a go.mod requires of module ("" if none), from its require
// lines ("module version" in a block, or "require module version").
func pinnedVersion(gomod, module string) string {
	for _, line := range strings.Split(gomod, "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	return ""
}

func releaseOf(moduleVersion string) string {
	// istio.io/istio has no semver tags, so its pseudo-versions do not say which release they
	// are: the releases this repository pins do.
	for _, rel := range toolcache.IstiodReleases() {
		if rel.ModuleVersion == moduleVersion {
			return rel.Name
		}
	}
	if moduleVersion == "" {
		return "unknown"
	}
	return moduleVersion
}

// Releases resolves the releases to run from the environment: $GALLEON_ISTIOD_RELEASES, or
// Version alone; $GALLEON_PILOT_DISCOVERY replaces Version's binary. Every binary must exist and
// be executable; the error says which one is wrong and what to do about it.
func Releases() ([]Release, error) {
	return resolveReleases(os.Getenv(EnvReleases), os.Getenv(EnvBinary), toolcache.Bin)
}

// cacheHow says a binary came from the tool cache, where the devtool builds istiod.
const cacheHow = "the tool cache"

func resolveReleases(list, override string, cached func(name, version string) string) ([]Release, error) {
	if strings.TrimSpace(list) == "" {
		list = Version
	}
	var out []Release
	seen := map[string]bool{}
	for _, entry := range strings.Split(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, path, explicit := strings.Cut(entry, "=")
		name = strings.TrimSpace(name)
		if name == "" || strings.ContainsAny(name, "/ \t") {
			return nil, fmt.Errorf("%s=%q: %q is not a release name (want e.g. %s or %s=/path/to/pilot-discovery)", EnvReleases, list, entry, Version, Version)
		}
		if seen[name] {
			return nil, fmt.Errorf("%s=%q names release %s twice", EnvReleases, list, name)
		}
		seen[name] = true
		how := ""
		switch {
		case explicit:
			how = fmt.Sprintf("given in %s", EnvReleases)
		case name == Version && override != "":
			path, how = override, "given in "+EnvBinary
		default:
			path = cached("pilot-discovery", name)
			how = cacheHow
		}
		if err := checkBinary(path); err != nil {
			fix := fmt.Sprintf("run `go run ./internal/testing/devtool build pilot-discovery %s` (make istiod), or set %s", name, EnvBinary)
			if how != cacheHow {
				fix = "point it at a pilot-discovery " + name + " binary, or unset it to use the tool cache's"
			}
			return nil, fmt.Errorf("istiod %s: %s (%s) %v: %s", name, path, how, err, fix)
		}
		out = append(out, Release{Name: name, Binary: path})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s=%q names no release", EnvReleases, list)
	}
	return out, nil
}

func checkBinary(path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errors.New("does not exist")
	case err != nil:
		return err
	case st.IsDir():
		return errors.New("is a directory")
	case st.Mode()&0o111 == 0:
		return errors.New("is not executable")
	}
	return nil
}

// ForEachRelease runs fn once per release (Releases) as a sub-test named "istiod-<release>", so a
// failure names the release. A release that cannot be resolved fails the test with one line that
// says what to do; it never skips.
func ForEachRelease(t *testing.T, fn func(t *testing.T, rel Release)) {
	t.Helper()
	rels, err := Releases()
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range rels {
		t.Run("istiod-"+rel.Name, func(t *testing.T) { fn(t, rel) })
	}
}
