package toolcache

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Versions of the servers the tests run, as cached: Bin(name, version).
const (
	ConsulVersion  = "1.22.6"
	PolarisVersion = "1.18.1"
)

// Consul is HashiCorp Consul for the Consul adapter's tests and the demo. No Debian package ships
// it and `go install github.com/hashicorp/consul@v1.22.6` refuses it (its go.mod has replace
// directives), so it is built from the wrapper module scripts/tools/consul: `require
// github.com/hashicorp/consul v1.22.6` plus Consul's own require and exclude blocks, without its
// replace directives (they point at nested modules, ./api, ./sdk, ..., that are not in the module
// zip; the published versions its require block pins are used). Cold build on 2 cores: about
// 5 min idle, 9 min on a busy machine (~1.7 GB module source, ~1.5 GB build cache, 171 MiB).
func Consul() Recipe {
	const module = "github.com/hashicorp/consul"
	return Recipe{
		Name: "consul", Version: ConsulVersion, EnvVar: "GALLEON_CONSUL_BIN", Make: "consul",
		ModDir: "scripts/tools/consul", Module: module, ModuleVersion: "v" + ConsulVersion,
		PinFix: "run `go run ./internal/testing/devtool regen consul`",
		about:  "first time, ~5-10 min",
		build: func(ctx context.Context, b buildRun) error {
			// The version itself comes from the embedded version/VERSION file; only the commit is unset.
			ldflags := "-X " + module + "/version.GitCommit=v" + ConsulVersion
			err := goBuild(module, ldflags, "go build "+module+"@v"+ConsulVersion+" from scripts/tools/consul/go.sum",
				"retry later, or set GALLEON_CONSUL_BIN to a consul "+ConsulVersion+" binary")(ctx, b)
			if err == nil {
				printVersion(ctx, b.out, b.progress)
			}
			return err
		},
	}
}

// polarisPatches are the fixes applied to a copy of Polaris's module before it is built (patch
// -p1), each a unified diff in scripts/tools/polaris: Polaris's bolt store never hands a deleted
// instance to its cache, so a cancelled instance (DELETE /eureka/apps/{app}/{id}) stayed in
// /eureka/apps until its lease ran out, where Eureka drops it at once.
func polarisPatches() []string { return []string{"boltdb-deleted-instances.patch"} }

// Polaris is PolarisMesh's server, an implementation of the Eureka REST API, for the Eureka
// adapter's tests (adapters/eureka/eurekatest says why this server). It is built from the wrapper
// module scripts/tools/polaris (`tool github.com/polarismesh/polaris` plus Polaris's own `replace
// gopkg.in/yaml.v2`) with polarisPatches applied to a copy of the module that the build is pointed
// at with `go build -modfile` (`go build -overlay` refuses files in the module cache). Cold build
// on 2 cores: about 2.5 min idle, downloads included (~330 MB module source, 53 MiB binary).
func Polaris() Recipe {
	const module = "github.com/polarismesh/polaris"
	return Recipe{
		Name: "polaris-server", Version: PolarisVersion, EnvVar: "GALLEON_POLARIS_BIN", Make: "eureka",
		ModDir: "scripts/tools/polaris", Module: module, ModuleVersion: "v" + PolarisVersion,
		PinFix: "fix the go.mod, then run `go run ./internal/testing/devtool tidy polaris-server`",
		inputs: polarisPatches(),
		about:  "first time, ~2.5 min, more on a busy machine",
		build:  buildPolaris,
	}
}

func buildPolaris(ctx context.Context, b buildRun) error {
	const module = "github.com/polarismesh/polaris"
	work, err := os.MkdirTemp("", "galleon-polaris.")
	if err != nil {
		return fmt.Errorf("polaris-server: a temporary directory: %v", err)
	}
	defer os.RemoveAll(work)
	failed := func() error {
		return Failure(b.name, b.log, "go build "+module+"@v"+PolarisVersion+" from scripts/tools/polaris/go.sum",
			"retry later, or set GALLEON_POLARIS_BIN to a polaris-server "+PolarisVersion+" binary built with scripts/tools/polaris/*.patch")
	}
	buildMod, err := patchedPolaris(ctx, b, work)
	if err != nil {
		return err
	}
	if buildMod == "" {
		return failed()
	}
	ldflags := ToolLDFlags + " -X " + module + "/common/version.Version=v" + PolarisVersion
	if err := GoBuild(ctx, b.log, b.modDir, b.out, module, "-modfile="+buildMod, "-ldflags", ldflags); err != nil {
		return failed()
	}
	printVersion(ctx, b.out, b.progress)
	return nil
}

// patchedPolaris copies Polaris's module out of the module cache into work/polaris, applies
// polarisPatches there and writes work/build.mod + build.sum: the committed go.mod and go.sum plus
// `replace github.com/polarismesh/polaris => work/polaris`, for `go build -modfile`. It returns
// build.mod's path, or "" when go could not get the module (the log says why), or an error when a
// patch does not apply.
func patchedPolaris(ctx context.Context, b buildRun, work string) (string, error) {
	const module = "github.com/polarismesh/polaris"
	// -find: locate the package without loading its imports (fetches Polaris's own .mod and .zip only).
	if err := RunGo(ctx, b.log, b.modDir, nil, "list", "-mod=readonly", "-find", "-f", "{{.Dir}}", module); err != nil {
		return "", nil
	}
	dir, err := goOutput(ctx, b.modDir, []string{"GOFLAGS=-mod=readonly"}, "list", "-find", "-f", "{{.Dir}}", module)
	if err != nil {
		return "", nil
	}
	src := filepath.Join(work, "polaris")
	if err := copyWritable(dir, src); err != nil {
		return "", fmt.Errorf("polaris-server: copying %s: %v", dir, err)
	}
	log, err := os.OpenFile(b.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", fmt.Errorf("polaris-server: the build log: %v", err)
	}
	defer log.Close()
	for _, p := range polarisPatches() {
		patch, err := os.Open(filepath.Join(b.modDir, p))
		if err != nil {
			return "", fmt.Errorf("polaris-server: %v", err)
		}
		cmd := exec.CommandContext(ctx, "patch", "-s", "-p1", "-d", src)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = patch, log, log
		err = cmd.Run()
		patch.Close()
		if err != nil {
			return "", fmt.Errorf("scripts/tools/polaris/%s does not apply to %s@v%s; do: update the patch for this version (patch's output: %s)", p, module, PolarisVersion, b.log)
		}
	}
	buildMod := filepath.Join(work, "build.mod")
	for from, to := range map[string]string{"go.mod": buildMod, "go.sum": filepath.Join(work, "build.sum")} {
		data, err := os.ReadFile(filepath.Join(b.modDir, from))
		if err == nil {
			err = os.WriteFile(to, data, 0o644)
		}
		if err != nil {
			return "", fmt.Errorf("polaris-server: %v", err)
		}
	}
	if _, err := goOutput(ctx, b.modDir, nil, "mod", "edit", "-modfile="+buildMod, "-replace="+module+"="+src); err != nil {
		return "", fmt.Errorf("polaris-server: go mod edit -replace: %v", err)
	}
	return buildMod, nil
}

// goOutput runs go args in dir (GOWORK=off, env added) and returns its stdout, trimmed; for
// commands that need no network. The error quotes go's stderr, on one line.
func goOutput(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %v%s", strings.Join(args, " "), err, quoted(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// copyWritable copies the tree src to dst, every file writable by its owner (the module cache's
// are read-only, and patch rewrites them).
func copyWritable(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case !info.Mode().IsRegular():
			return nil // the module cache holds regular files only
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, info.Mode().Perm()|0o600)
	})
}

// Staticcheck is the linter `make lint` runs, at the version scripts/tools/lint/go.mod pins.
func Staticcheck() Recipe {
	const module, version = "honnef.co/go/tools", "v0.8.2"
	return Recipe{
		Name: "staticcheck", Version: version, EnvVar: "GALLEON_STATICCHECK", Make: "lint",
		ModDir: "scripts/tools/lint", Module: module, ModuleVersion: version,
		PinFix: "change Staticcheck in internal/testing/toolcache/recipe_servers.go with it",
		build: goBuild("honnef.co/go/tools/cmd/staticcheck", "", "go build staticcheck from scripts/tools/lint/go.sum",
			"retry later, or set GALLEON_STATICCHECK to a staticcheck binary of the same version"),
	}
}
