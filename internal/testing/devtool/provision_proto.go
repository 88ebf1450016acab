package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// protoTools is what generating Galleon's Go code from proto/**/*.proto (the legacy MCP
// services) needs: protoc and its well-known types (toolcache.Protoc installs them), the plugins
// at the versions scripts/tools/protoc-gen pins, and istio.io/api from the module cache at the
// version go.mod requires (mcp/v1alpha1/resource.proto, and google/rpc/status.proto from its
// common-protos/).
type protoTools struct {
	root, protoc, include, gen, grpc, istioAPI string
	genVersion, grpcVersion                    string
}

func runProto(ctx context.Context, args []string) error {
	if len(args) != 1 || (args[0] != "generate" && args[0] != "check" && args[0] != "tools") {
		return usageError{msg: "proto generate|check|tools", exit: 2}
	}
	tools, err := ensureProtoTools(ctx)
	if err != nil {
		return err
	}
	switch args[0] {
	case "generate":
		return tools.generateInPlace(ctx)
	case "check":
		return tools.check(ctx)
	}
	fmt.Printf("%s\n%s\n%s\n", tools.protoc, tools.gen, tools.grpc)
	return nil
}

func ensureProtoTools(ctx context.Context) (protoTools, error) {
	t := protoTools{}
	var err error
	if t.root, err = toolcache.RepoRoot(); err != nil {
		return t, fmt.Errorf("%v (run it inside the repository)", err)
	}
	gen, grpc, err := toolcache.ProtocPlugins(t.root)
	if err != nil {
		return t, err
	}
	if t.protoc, t.include, err = toolcache.Protoc(ctx); err != nil {
		return t, err
	}
	if t.gen, err = gen.Build(ctx, os.Stderr); err != nil {
		return t, err
	}
	if t.grpc, err = grpc.Build(ctx, os.Stderr); err != nil {
		return t, err
	}
	t.genVersion, t.grpcVersion = gen.Version, grpc.Version
	// Listing one of istio.io/api's packages downloads only its .mod and .zip (go mod download
	// would also ask for .info).
	cmd := exec.CommandContext(ctx, "go", "list", "-f", "{{.Module.Dir}}", "istio.io/api/mcp/v1alpha1")
	cmd.Dir = t.root
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=readonly"))
	out, err := cmd.Output()
	t.istioAPI = strings.TrimSpace(string(out))
	if err != nil || !exists(filepath.Join(t.istioAPI, "mcp/v1alpha1/resource.proto")) || !exists(filepath.Join(t.istioAPI, "common-protos/google/rpc/status.proto")) {
		return t, fmt.Errorf("istio.io/api in the module cache (%s) lacks mcp/v1alpha1/resource.proto or common-protos/google/rpc/status.proto (go list: %v): run make deps", t.istioAPI, err)
	}
	return t, nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// generate writes the generated files for every proto/**/*.proto under out, with paths relative
// to proto/ (proto/mcp/v1alpha1/mcp.proto -> out/mcp/v1alpha1/mcp.pb.go).
func (t protoTools) generate(ctx context.Context, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	protoDir := filepath.Join(t.root, "proto")
	files, err := filesUnder(protoDir, ".proto")
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no .proto files under %s", protoDir)
	}
	// Include order: our protos, then the well-known types of protoc's own version, then
	// istio/api (mcp/...), then istio/api's common-protos for google/rpc/status.proto only (its
	// google/protobuf copies are shadowed by the well-known include before it).
	args := []string{"-I", ".", "-I", t.include, "-I", t.istioAPI, "-I", filepath.Join(t.istioAPI, "common-protos"),
		"--plugin=protoc-gen-go=" + t.gen, "--plugin=protoc-gen-go-grpc=" + t.grpc,
		"--go_out=" + out, "--go_opt=paths=source_relative",
		"--go-grpc_out=" + out, "--go-grpc_opt=paths=source_relative"}
	cmd := exec.CommandContext(ctx, t.protoc, append(args, files...)...)
	cmd.Dir = protoDir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("protoc failed (%v; its output is above)", err)
	}
	return nil
}

// filesUnder lists the files under dir whose name ends in suffix, relative to dir, sorted.
func filesUnder(dir, suffix string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, suffix) {
			rel, err := filepath.Rel(dir, p)
			files = append(files, rel)
			return err
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// generateInPlace regenerates the committed files: those whose .proto is gone are removed.
func (t protoTools) generateInPlace(ctx context.Context) error {
	tmp, err := os.MkdirTemp("", "galleon-proto.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := t.generate(ctx, tmp); err != nil {
		return err
	}
	protoDir := filepath.Join(t.root, "proto")
	old, err := filesUnder(protoDir, ".pb.go")
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(filepath.Join(protoDir, f)); err != nil {
			return err
		}
	}
	generated, err := filesUnder(tmp, ".pb.go")
	if err != nil {
		return err
	}
	for _, f := range generated {
		data, err := os.ReadFile(filepath.Join(tmp, f))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(protoDir, f)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(protoDir, f), data, 0o644); err != nil {
			return err
		}
	}
	version, _ := exec.CommandContext(ctx, t.protoc, "--version").Output()
	fmt.Fprintf(os.Stderr, "proto: generated: %s (%s, protoc-gen-go %s, protoc-gen-go-grpc %s)\n",
		strings.Join(generated, " "), strings.TrimSpace(string(version)), t.genVersion, t.grpcVersion)
	return nil
}

// protocVersionLine is the header line naming protoc's version, which check ignores so that
// another protoc on a developer machine does not fail it; everything else must match byte for
// byte.
func protocVersionLine() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^//[ \t]+(-[ \t]+)?protoc[ \t]+(v|\(unknown\)).*\n?`)
}

// check regenerates into a temporary directory and fails if the committed files differ.
func (t protoTools) check(ctx context.Context) error {
	tmp, err := os.MkdirTemp("", "galleon-proto.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := t.generate(ctx, filepath.Join(tmp, "new")); err != nil {
		return err
	}
	a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	if err := normalizedCopy(filepath.Join(t.root, "proto"), a); err != nil {
		return err
	}
	if err := normalizedCopy(filepath.Join(tmp, "new"), b); err != nil {
		return err
	}
	diff := exec.CommandContext(ctx, "diff", "-ruN", "a", "b")
	diff.Dir = tmp
	out, err := diff.Output()
	if err == nil {
		fmt.Fprintln(os.Stderr, "proto: generated code is up to date")
		return nil
	}
	if len(out) == 0 {
		return fmt.Errorf("diff -ruN failed: %v", err)
	}
	lines := bytes.SplitAfter(out, []byte("\n"))
	if len(lines) > 60 {
		lines = lines[:60]
	}
	os.Stderr.Write(bytes.Join(lines, nil))
	return fmt.Errorf("generated code is stale: run make proto")
}

// normalizedCopy copies every .pb.go under src to dst without the protoc version line.
func normalizedCopy(src, dst string) error {
	files, err := filesUnder(src, ".pb.go")
	if err != nil {
		return err
	}
	versionLine := protocVersionLine()
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return err
		}
		target := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, versionLine.ReplaceAll(data, nil), 0o644); err != nil {
			return err
		}
	}
	return os.MkdirAll(dst, 0o755)
}
