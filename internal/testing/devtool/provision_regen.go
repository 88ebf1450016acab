package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// runRegen rewrites a generated wrapper module (consul: scripts/tools/consul, kube:
// scripts/tools/kubernetes) from the upstream go.mod, then completes its go.sum. It asks the
// proxy for .info, which a build never does: only for maintainers moving to another version.
func runRegen(ctx context.Context, args []string) error {
	if len(args) != 1 || (args[0] != "consul" && args[0] != "kube") {
		return usageError{msg: "regen consul|kube", exit: 2}
	}
	root, err := toolcache.RepoRoot()
	if err != nil {
		return fmt.Errorf("%v (run it inside the repository)", err)
	}
	tmp, err := os.MkdirTemp("", "galleon-regen.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if args[0] == "consul" {
		return regenConsul(ctx, root, tmp)
	}
	return regenKube(ctx, root, tmp)
}

func regenConsul(ctx context.Context, root, tmp string) error {
	const module = "github.com/hashicorp/consul"
	upstream, err := upstreamGoMod(ctx, tmp, module+"@v"+toolcache.ConsulVersion)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, toolcache.Consul().ModDir)
	if err := writeWrapper(dir, toolcache.ConsulWrapperGoMod(upstream)); err != nil {
		return err
	}
	// The checksum database does not know some of Consul's nested modules.
	env := []string{"GOFLAGS=-mod=mod", "GONOSUMDB=" + module}
	if err := goPassthrough(ctx, dir, env, "build", "-o", filepath.Join(tmp, "consul"), module); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "regen: regenerated %s/go.mod and go.sum for %s\n", toolcache.Consul().ModDir, toolcache.ConsulVersion)
	return nil
}

func regenKube(ctx context.Context, root, tmp string) error {
	apiserver, err := toolcache.KubeTool("kube-apiserver")
	if err != nil {
		return err
	}
	istio := ""
	for _, rel := range toolcache.IstiodReleases() {
		if rel.ModDir == apiserver.ModDir {
			istio = rel.ModuleVersion
		}
	}
	if istio == "" {
		return fmt.Errorf("no istiod release is built from %s: add it to toolcache.IstiodReleases first", apiserver.ModDir)
	}
	upstream, err := upstreamGoMod(ctx, tmp, "k8s.io/kubernetes@v"+toolcache.KubeVersion)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, apiserver.ModDir)
	if err := writeWrapper(dir, toolcache.KubeWrapperGoMod(upstream, istio)); err != nil {
		return err
	}
	// The checksum database answers 404 for github.com/openshift/api (Istio's dependency).
	if err := goPassthrough(ctx, dir, []string{"GOFLAGS=-mod=mod", "GONOSUMDB=github.com/openshift/api"}, "mod", "tidy"); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "regen: regenerated %s/go.mod and go.sum\n", apiserver.ModDir)
	return nil
}

// upstreamGoMod downloads query (module@version) into the module cache from the empty directory
// tmp and returns its go.mod.
func upstreamGoMod(ctx context.Context, tmp, query string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", query)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	var info struct{ GoMod, Error string }
	if jerr := json.Unmarshal(out, &info); err != nil || jerr != nil || info.GoMod == "" {
		return "", fmt.Errorf("could not download %s's go.mod (%v %s): check the version and the module proxy (go env GOPROXY)", query, err, info.Error)
	}
	data, err := os.ReadFile(info.GoMod)
	return string(data), err
}

// writeWrapper replaces dir's go.mod with gomod and removes its go.sum, which the caller's go
// command then writes afresh.
func writeWrapper(dir, gomod string) error {
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, "go.sum")); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
