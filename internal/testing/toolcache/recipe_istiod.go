package toolcache

import (
	"context"
	"fmt"
	"strings"
)

// DefaultIstiodRelease is the istiod release the tests and the demo run unless told otherwise;
// GALLEON_PILOT_DISCOVERY replaces its binary (and only its).
const DefaultIstiodRelease = "1.29.2"

// IstiodRelease is one Istio control plane (pilot-discovery) the tests run, built from a Go
// module committed in this repository whose go.mod pins istio.io/istio and whose go.sum is
// committed: `go build` then needs only the .mod and .zip of each module, never .info, which the
// proxy refuses for istio.io/istio's pseudo-versions on some days (docs/istiod-releases.md).
type IstiodRelease struct {
	Name          string   // "1.29.2": the cache name pilot-discovery-<Name>, and sub-test names
	ModDir        string   // the module it is built from, relative to the repository root
	ModuleVersion string   // the istio.io/istio version pinned there
	GitRev        string   // the commit, stamped into the binary
	Spellings     []string // other spellings of the same commit, tried in order when the pin is refused
}

// IstiodReleases are the releases this repository knows, the default first.
func IstiodReleases() []IstiodRelease {
	return []IstiodRelease{
		// Built from test/ (test/go.mod: `tool istio.io/istio/pilot/cmd/pilot-discovery`), the
		// module whose pkg/adsc the conformance tests compile.
		{Name: "1.29.2", ModDir: "test", ModuleVersion: "v0.0.0-20260409200358-0c774325b938", GitRev: "0c774325b938", Spellings: []string{"1.29.2"}},
		// The 1.31 development line: it cannot start without a Kubernetes API server, which the
		// e2e harness then starts for it (test/istiod Release.NeedsKubernetes, test/kube). Built
		// with the Kubernetes tools (KubeTool), one build list.
		{Name: "1.31-dev", ModDir: "scripts/tools/kubernetes", ModuleVersion: "v0.0.0-20260827124520-eed52ebb66ad", GitRev: "eed52ebb66ad"},
		// Istio 1.30 as the proxy serves it: commit b01690e6db7d on master, 10 days after
		// release-1.30 branched, whose pilot/pkg/serviceregistry/serviceentry,
		// pilot/pkg/xds/discovery.go, pilot/pkg/model/push_context.go and pilot/pkg/bootstrap are
		// the 1.30.0 tag's, byte for byte (the 1.30.x release commits answer 403;
		// docs/istiod-releases.md). Needs a Kubernetes API server, like 1.31-dev. No other
		// spelling: the commit has no tag.
		{Name: "1.30-b01690e", ModDir: "scripts/tools/istiod-1.30", ModuleVersion: "v0.0.0-20260423205519-b01690e6db7d", GitRev: "b01690e6db7d"},
	}
}

// LookupIstiodRelease returns the release named name; the error lists the known ones.
func LookupIstiodRelease(name string) (IstiodRelease, error) {
	var known []string
	for _, rel := range IstiodReleases() {
		if rel.Name == name {
			return rel, nil
		}
		known = append(known, rel.Name)
	}
	return IstiodRelease{}, fmt.Errorf("unknown istiod release %s; known: %s (add one: docs/istiod-releases.md)", name, strings.Join(known, " "))
}

// IstiodRecipe is the recipe of pilot-discovery at release. A build the proxy refuses is tried
// again from the release's other spellings of the same commit.
func IstiodRecipe(release string) (Recipe, error) {
	rel, err := LookupIstiodRelease(release)
	if err != nil {
		return Recipe{}, err
	}
	r := Recipe{
		Name: "pilot-discovery", Version: rel.Name, Make: "istiod", ModDir: rel.ModDir,
		Module: "istio.io/istio", ModuleVersion: rel.ModuleVersion,
		PinFix: "fix IstiodReleases in internal/testing/toolcache/recipe_istiod.go or the go.mod",
		about:  "first time, ~2-10 min",
		build:  rel.build,
	}
	if rel.Name == DefaultIstiodRelease {
		r.EnvVar = "GALLEON_PILOT_DISCOVERY"
	}
	return r, nil
}

func (rel IstiodRelease) build(ctx context.Context, b buildRun) error {
	const pkg, v = "istio.io/istio/pilot/cmd/pilot-discovery", "istio.io/istio/pkg/version"
	ldflags := fmt.Sprintf("%s -X %s.buildVersion=%s -X %s.buildGitRevision=%s -X %s.buildTag=%s -X %s.buildStatus=Clean",
		ToolLDFlags, v, rel.Name, v, rel.GitRev, v, rel.Name, v)
	tried := "go build from the committed go.sum (istio.io/istio@" + rel.ModuleVersion + ")"
	if GoBuild(ctx, b.log, b.modDir, b.out, pkg, "-ldflags", ldflags) == nil {
		return nil
	}
	// Refused by the proxy: another spelling of the same commit may be served today. What it
	// resolves to lands in the module cache under the pinned version, and the build goes on from
	// there (go.sum still verifies the content).
	if RefusedModule(b.log) != "" {
		for _, s := range rel.Spellings {
			tried += ", then istio.io/istio@" + s
			fmt.Fprintf(b.progress, "the proxy refused the pinned version; trying istio.io/istio@%s ...\n", s)
			if GoDownload(ctx, b.log, b.modDir, "istio.io/istio@"+s) == nil &&
				GoBuild(ctx, b.log, b.modDir, b.out, pkg, "-ldflags", ldflags) == nil {
				return nil
			}
		}
	}
	// GALLEON_PILOT_DISCOVERY replaces the default release only; another release's binary is
	// given to the tests in GALLEON_ISTIOD_RELEASES (test/istiod/releases.go).
	instead := "set GALLEON_PILOT_DISCOVERY to a pilot-discovery " + rel.Name + " binary"
	if rel.Name != DefaultIstiodRelease {
		instead = "give the tests a pilot-discovery " + rel.Name + " binary: GALLEON_ISTIOD_RELEASES=" + rel.Name + "=/path/to/pilot-discovery"
	}
	return Failure(b.name, b.log, tried, "retry later, or "+instead)
}
