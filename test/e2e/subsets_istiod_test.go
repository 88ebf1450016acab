package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/test/istiod"
)

// TestSubsetsToTwoIstiods serves one registry to two real istiods with a
// config subset: the istiod running revision "canary" (istiod states it in
// its node metadata, ISTIO_REVISION) receives only the services of
// namespace team-a; the other, which no subset selects, receives all. A
// change moves a service into team-a and it appears in the canary istiod.
func TestSubsetsToTwoIstiods(t *testing.T) { istiod.ForEachRelease(t, testSubsetsToTwoIstiods) }

func testSubsetsToTwoIstiods(t *testing.T, rel istiod.Release) {
	bin := galleonBinary(t, "galleon-file")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	dir := t.TempDir()
	svc := func(ns, name, addr string) fileService {
		return fileService{Name: name, Namespace: ns, Hosts: []string{name + "." + ns + ".internal"},
			Ports:     []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}},
			Instances: []fileInstance{{ID: name + "-1", Address: addr}}}
	}
	reg := fileRegistry{Services: []fileService{
		svc("team-a", "orders", "10.9.0.1"),
		svc("team-a", "billing", "10.9.0.2"),
		svc("team-b", "search", "10.9.0.3"),
	}}
	regDir := filepath.Join(dir, "registry")
	if err := os.Mkdir(regDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRegistryFile(t, regDir, "services.yaml", reg)
	rules := filepath.Join(dir, "subsets.yaml")
	if err := os.WriteFile(rules, []byte(`subsets:
- name: canary
  sinks:
    metadata: {ISTIO_REVISION: canary}
  services:
    namespaces: [team-a]
`), 0o644); err != nil {
		t.Fatal(err)
	}

	g := startGalleon(t, bin, "--file-dir", regDir, "--subsets", rules)
	// Both revisions on one API server when the release needs one, as in a canary upgrade.
	kubeconfig := istiod.KubeconfigFor(t, rel)
	canary := istiod.Start(t, istiod.Options{Release: rel, Kubeconfig: kubeconfig, ConfigSources: []string{g.Addr}, Env: []string{"REVISION=canary"}})
	stable := istiod.Start(t, istiod.Options{Release: rel, Kubeconfig: kubeconfig, ConfigSources: []string{g.Addr}})

	exactly := func(want ...string) func(map[string]serviceEntry) string {
		return func(ses map[string]serviceEntry) string {
			var got []string
			for k := range ses {
				if strings.HasPrefix(k, "team-") {
					got = append(got, k)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				return fmt.Sprintf("holds %v, want %v", got, want)
			}
			return ""
		}
	}
	waitForServiceEntries(t, ctx, canary, "canary istiod: team-a only", exactly("team-a/billing", "team-a/orders"))
	waitForServiceEntries(t, ctx, stable, "stable istiod: everything", exactly("team-a/billing", "team-a/orders", "team-b/search"))

	// search moves to team-a: it leaves nothing behind and joins the canary's subset.
	reg.Services[2].Namespace = "team-a"
	writeRegistryFile(t, regDir, "services.yaml", reg)
	waitForServiceEntries(t, ctx, canary, "canary istiod after the move", exactly("team-a/billing", "team-a/orders", "team-a/search"))
	waitForServiceEntries(t, ctx, stable, "stable istiod after the move", exactly("team-a/billing", "team-a/orders", "team-a/search"))
}
