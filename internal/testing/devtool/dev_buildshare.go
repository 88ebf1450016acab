package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

func buildSharingCommand() command {
	return command{
		name:  "build-sharing",
		usage: "print how much Go source each large build of make test compiles that no earlier build has (scripts/tools/buildshare; docs/benchmarks.md has the last table)",
		run:   runBuildSharing,
	}
}

// sharedBuilds are the large builds of `make test`, in the order it builds them (Makefile: vet,
// lint, unit, e2e), as scripts/tools/buildshare takes them: LABEL=DIR=[test:]PKG. The labels
// carry no versions: the pins live in internal/testing/toolcache's recipes. polaris-server is
// left out: it is built with a patched copy of its module (-modfile), which go list here would
// not see.
func sharedBuilds(root string) []string {
	kube := filepath.Join(root, "scripts", "tools", "kubernetes")
	return []string{
		"galleon (unit tests)=" + root + "=test:./...",
		"consul=" + filepath.Join(root, "scripts", "tools", "consul") + "=github.com/hashicorp/consul",
		"pilot-discovery (test/go.mod)=" + filepath.Join(root, "test") + "=istio.io/istio/pilot/cmd/pilot-discovery",
		"pilot-discovery (scripts/tools/istiod-1.30)=" + filepath.Join(root, "scripts", "tools", "istiod-1.30") + "=istio.io/istio/pilot/cmd/pilot-discovery",
		"test module (e2e)=" + filepath.Join(root, "test") + "=test:./...",
		"pilot-discovery (scripts/tools/kubernetes)=" + kube + "=istio.io/istio/pilot/cmd/pilot-discovery",
		"kube-apiserver=" + kube + "=k8s.io/kubernetes/cmd/kube-apiserver",
		"kubectl=" + kube + "=k8s.io/kubernetes/cmd/kubectl",
		"etcd=" + kube + "=./etcd",
		"helm=" + kube + "=helm.sh/helm/v3/cmd/helm",
	}
}

// runBuildSharing runs the model on the builds of make test. It asks the module proxy for
// modules not yet in the module cache (go list reads their source).
func runBuildSharing(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usageError{msg: "usage: build-sharing (no arguments)", exit: 2}
	}
	root, err := toolcache.RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"run", "."}, sharedBuilds(root)...)...)
	cmd.Dir = filepath.Join(root, "scripts", "tools", "buildshare")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}
