package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// provisionCommands are the devtool's commands defined in this file: the third-party tools the
// tests, the demo and the benchmarks run, built from the Go module proxy through committed
// go.sums and cached outside the repository (internal/testing/toolcache has the recipes). Each
// prints its answer (paths) on stdout, last, and its progress on stderr.
func provisionCommands() []command {
	return []command{
		{
			name:  "build",
			usage: "TOOL [VERSION|RELEASE]...  build TOOL into the tool cache unless cached, print its path (" + strings.Join(buildable(), ", ") + ")",
			run:   runBuild,
		},
		{
			name:  "path",
			usage: "TOOL [RELEASE]  print TOOL's cached path ($GALLEON_*_BIN if set); fail if it has not been built",
			run:   runPath,
		},
		{
			name:  "crds",
			usage: "download the Prometheus Operator's module (pinned in scripts/tools/crds) and print its ServiceMonitor CRD's path",
			run:   noArgs("crds", func(ctx context.Context) error { return printPath(toolcache.ServiceMonitorCRD(ctx)) }),
		},
		{
			name:  "releases",
			usage: "list the istiod releases: RELEASE MODULE-DIR ISTIO-VERSION",
			run: noArgs("releases", func(context.Context) error {
				for _, rel := range toolcache.IstiodReleases() {
					fmt.Printf("%s %s %s\n", rel.Name, rel.ModDir, rel.ModuleVersion)
				}
				return nil
			}),
		},
		{
			name:  "kube-versions",
			usage: `print "TOOL VERSION" for each Kubernetes-side tool`,
			run: noArgs("kube-versions", func(context.Context) error {
				for _, name := range toolcache.KubeToolNames() {
					r, err := toolcache.KubeTool(name)
					if err != nil {
						return err
					}
					fmt.Printf("%s %s\n", r.Name, r.Version)
				}
				return nil
			}),
		},
		{
			name:  "zookeeper",
			usage: "classpath|java  print the Java classpath that runs ZooKeeper (installing the Debian package if missing), or the java binary",
			run:   runZooKeeper,
		},
		{
			name:  "lint",
			usage: "MODULE...  staticcheck (pinned in scripts/tools/lint, built once) on each module directory, checks from staticcheck.conf",
			run:   runLint,
		},
		{
			name:  "proto",
			usage: "generate|check|tools  regenerate proto/**/*.pb.go, or fail if they are stale, or print protoc and the plugins",
			run:   runProto,
		},
		{
			name:  "regen",
			usage: "consul|kube  rewrite scripts/tools/consul or scripts/tools/kubernetes (go.mod + go.sum) from the upstream go.mod (maintainers, on a version bump)",
			run:   runRegen,
		},
		{
			name:  "tidy",
			usage: "polaris-server | pilot-discovery [RELEASE]  go mod tidy in the tool's wrapper module (maintainers: asks the proxy for more than a build does)",
			run:   runTidy,
		},
	}
}

// buildable are the names build takes: the tools, and the groups istiod and kube.
func buildable() []string {
	return append([]string{"consul", "polaris-server", "pilot-discovery", "istiod"}, append(toolcache.KubeToolNames(), "kube", "staticcheck")...)
}

func noArgs(name string, run func(ctx context.Context) error) func(ctx context.Context, args []string) error {
	return func(ctx context.Context, args []string) error {
		if len(args) != 0 {
			return usageError{msg: name + " takes no arguments", exit: 2}
		}
		return run(ctx)
	}
}

func printPath(path string, err error) error {
	if err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}

// recipe is the recipe of tool at version ("" for the one it pins; for pilot-discovery a
// release, default toolcache.DefaultIstiodRelease).
func recipe(tool, version string) (toolcache.Recipe, error) {
	var r toolcache.Recipe
	var err error
	switch tool {
	case "consul":
		r = toolcache.Consul()
	case "polaris-server":
		r = toolcache.Polaris()
	case "staticcheck":
		r = toolcache.Staticcheck()
	case "pilot-discovery":
		if version == "" {
			version = toolcache.DefaultIstiodRelease
		}
		r, err = toolcache.IstiodRecipe(version)
	default:
		if r, err = toolcache.KubeTool(tool); err != nil {
			return r, usageError{msg: fmt.Sprintf("unknown tool %s; known: %s", tool, strings.Join(buildable(), " ")), exit: 2}
		}
	}
	if err != nil {
		return r, usageError{msg: err.Error(), exit: 2}
	}
	if version != "" && version != r.Version {
		return r, usageError{msg: fmt.Sprintf("%s %s is not pinned here; this repository builds %s %s", tool, version, tool, r.Version), exit: 2}
	}
	return r, nil
}

func runBuild(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{msg: "build TOOL [VERSION|RELEASE]...: name a tool (" + strings.Join(buildable(), ", ") + ")", exit: 2}
	}
	tool, versions := args[0], args[1:]
	var recipes []toolcache.Recipe
	switch tool {
	case "istiod":
		if len(versions) != 0 {
			return usageError{msg: "build istiod builds every release; build pilot-discovery RELEASE... builds some", exit: 2}
		}
		for _, rel := range toolcache.IstiodReleases() {
			versions = append(versions, rel.Name)
		}
		tool = "pilot-discovery"
	case "kube":
		if len(versions) != 0 {
			return usageError{msg: "build kube takes no version: it builds the four Kubernetes-side tools at their pins", exit: 2}
		}
		for _, name := range toolcache.KubeToolNames() {
			r, err := toolcache.KubeTool(name)
			if err != nil {
				return err
			}
			recipes = append(recipes, r)
		}
	}
	if len(recipes) == 0 {
		if len(versions) == 0 {
			versions = []string{""}
		}
		for _, v := range versions {
			r, err := recipe(tool, v)
			if err != nil {
				return err
			}
			recipes = append(recipes, r)
		}
	}
	for _, r := range recipes {
		if err := printPath(r.Build(ctx, os.Stderr)); err != nil {
			return err
		}
	}
	if tool == "kube" {
		return printPath(toolcache.ServiceMonitorCRD(ctx))
	}
	return nil
}

func runPath(ctx context.Context, args []string) error {
	if len(args) < 1 || len(args) > 2 {
		return usageError{msg: "path TOOL [RELEASE]", exit: 2}
	}
	version := ""
	if len(args) == 2 {
		version = args[1]
	}
	r, err := recipe(args[0], version)
	if err != nil {
		return err
	}
	return printPath(r.Path())
}

func runZooKeeper(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return usageError{msg: "zookeeper classpath|java", exit: 2}
	}
	switch args[0] {
	case "classpath":
		return printPath(toolcache.ZooKeeperClasspath(ctx))
	case "java":
		return printPath(toolcache.Java())
	}
	return usageError{msg: "zookeeper classpath|java: unknown " + args[0], exit: 2}
}

// runTidy refreshes a wrapper module's go.mod and go.sum with go mod tidy, for maintainers: it
// asks the proxy for .info, which a build never does.
func runTidy(ctx context.Context, args []string) error {
	if len(args) < 1 || len(args) > 2 || (args[0] != "polaris-server" && args[0] != "pilot-discovery") {
		return usageError{msg: "tidy polaris-server | pilot-discovery [RELEASE]", exit: 2}
	}
	version := ""
	if len(args) == 2 {
		version = args[1]
	}
	r, err := recipe(args[0], version)
	if err != nil {
		return err
	}
	root, err := toolcache.RepoRoot()
	if err != nil {
		return fmt.Errorf("%v (run it inside the repository)", err)
	}
	env := []string{"GOFLAGS=-mod=mod"}
	if r.Name == "pilot-discovery" {
		// The checksum database answers 404 for github.com/openshift/api, and for the 1.30
		// line's pins of github.com/agentgateway/agentgateway/api and
		// github.com/envoyproxy/go-control-plane/contrib (2026-11-26); builds need no checksum
		// database, go.sum is committed.
		env = append(env, "GONOSUMDB=github.com/openshift/api,github.com/agentgateway/agentgateway/api,github.com/envoyproxy/go-control-plane/contrib")
	}
	if err := goPassthrough(ctx, filepath.Join(root, r.ModDir), env, "mod", "tidy"); err != nil {
		return err
	}
	return r.CheckPin(root)
}
