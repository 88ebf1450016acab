// Package imagebuild writes one container image per adapter without a container engine (`devtool
// images`, make images and make images-test).
//
// For each adapter in cmd/ (a main that calls daemon.Main) it builds a static binary
// (CGO_ENABLED=0, -trimpath, -ldflags '-s -w'; the commit is stamped by -buildvcs) and hands it to
// the image writer, scripts/tools/images, a Go program on github.com/google/go-containerregistry
// built from its committed go.sum (only .mod and .zip files are fetched, toolcache.GoBuild) and
// cached as <cache>/bin/galleon-images-<hash of its source>. It writes into DIR:
//
//	NAME/       an OCI image layout, tagged with the version (skopeo copy oci:DIR/NAME ..., crane push DIR/NAME ...)
//	NAME.tar    a docker-archive tarball of the same image, tagged NAME:VERSION (docker load -i, kind load image-archive)
//
// Each image: an empty base (no shell, no package manager, no libc) and one layer holding
// /usr/local/bin/NAME (the entrypoint), /etc/ssl/certs/ca-certificates.crt (this host's bundle,
// named in a label), /etc/passwd and /etc/group with the nonroot user 65532 it runs as, /tmp and
// the user's home; ports 16010/tcp and 16014/tcp; OCI labels (title, version, revision, source,
// created). Every timestamp is HEAD's commit time, so the same commit, Go toolchain and CA bundle
// give the same digests. The name, NAME:VERSION, is what the Helm chart uses by default.
//
// Environment:
//
//	GALLEON_IMAGE_VERSION   the tag (default: appVersion of deploy/helm/galleon/Chart.yaml; test ignores it)
//	GALLEON_IMAGE_ARCHS     GOARCHes, default "amd64"; "amd64 arm64" writes a two-platform index (the .tar gets the first)
//	GALLEON_CA_BUNDLE       the PEM bundle to copy (default /etc/ssl/certs/ca-certificates.crt, Debian's ca-certificates)
//	GALLEON_IMAGE_LICENSES  an SPDX expression for org.opencontainers.image.licenses (default: none, the repository has no licence file)
//	SOURCE_DATE_EPOCH       the image's time, Unix seconds (default: HEAD's commit time)
package imagebuild

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// defaultCA is Debian's ca-certificates bundle, what the images carry unless GALLEON_CA_BUNDLE
// names another.
const defaultCA = "/etc/ssl/certs/ca-certificates.crt"

// Builder builds the images of the repository at Root. Progress and the one-line reasons of a
// failure's context go to Progress (stderr); the table of images to Out (stdout).
type Builder struct {
	Root     string
	Out      io.Writer
	Progress io.Writer
}

func (b Builder) toolsDir() string { return filepath.Join(b.Root, "scripts", "tools", "images") }

func (b Builder) logf(format string, args ...any) {
	fmt.Fprintf(b.Progress, "images: "+format+"\n", args...)
}

// ToolVersion is the image writer's cache key: a hash of its source, go.mod and go.sum and of the
// Go toolchain, so an edit or a new Go builds it again.
func ToolVersion(toolsDir string) (string, error) {
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %v", err)
	}
	h := sha256.New()
	h.Write(goVersion)
	sources, err := filepath.Glob(filepath.Join(toolsDir, "*.go"))
	if err != nil {
		return "", err
	}
	files := []string{filepath.Join(toolsDir, "go.mod"), filepath.Join(toolsDir, "go.sum")}
	for _, f := range sources {
		if !strings.HasSuffix(f, "_test.go") {
			files = append(files, f)
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("hashing the image writer's source: %v", err)
		}
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// Tool builds the image writer unless it is cached, and returns its path.
func (b Builder) Tool(ctx context.Context) (string, error) {
	version, err := ToolVersion(b.toolsDir())
	if err != nil {
		return "", err
	}
	return toolcache.BuildCached(ctx, "galleon-images", version, b.Progress, b.buildTool)
}

func (b Builder) buildTool(ctx context.Context, out string) error {
	log := toolcache.LogPath("images-tool")
	fmt.Fprintf(b.Progress, "building the image writer from scripts/tools/images (first time: downloads go-containerregistry; log %s)...\n", log)
	if err := toolcache.GoBuild(ctx, log, b.toolsDir(), out, ".", "-trimpath"); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pin, _ := toolcache.GoModRequire(b.toolsDir(), "github.com/google/go-containerregistry")
		return toolcache.Failure("", log, "go build scripts/tools/images from its committed go.sum",
			"retry later (what was downloaded stays in the module cache), or check that "+pin+" of github.com/google/go-containerregistry is still served")
	}
	os.Remove(log)
	return nil
}

// Deps downloads every module scripts/tools/images needs to build and test, under the stall
// watchdog (the lint step runs it first).
func (b Builder) Deps(ctx context.Context) error {
	log := toolcache.LogPath("images-deps")
	if err := offlineOrWatched(ctx, log, b.toolsDir(), nil, "list", "-deps", "-test", "./..."); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return toolcache.Failure("", log, "go list -deps -test ./... in scripts/tools/images (committed go.sum)", "retry later (make test resumes where the downloads stopped)")
	}
	os.Remove(log)
	return nil
}

// offlineOrWatched runs `go args...` in dir with the module cache alone first (quick, and nothing
// to watch when everything is there: the usual case after the first run), then, if that failed,
// with fetching under toolcache.RunGo's stall watchdog. env is added to the environment of both;
// -mod=readonly is added to GOFLAGS.
func offlineOrWatched(ctx context.Context, log, dir string, env []string, args ...string) error {
	flags := "GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=readonly")
	offline := exec.CommandContext(ctx, "go", args...)
	offline.Dir = dir
	offline.Env = append(append(os.Environ(), env...), "GOWORK=off", "GOPROXY=off", flags)
	if offline.Run() == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return toolcache.RunGo(ctx, log, dir, append(env, flags), args...)
}

// appVersion is the appVersion line of a Chart.yaml, quoted or not.
var appVersion = regexp.MustCompile(`^appVersion:[[:space:]]*"?([^"[:space:]]+)"?[[:space:]]*$`)

// ChartVersion is the chart's appVersion, the tag its image names default to.
func ChartVersion(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "deploy", "helm", "galleon", "Chart.yaml"))
	if err != nil {
		return "", fmt.Errorf("reading the chart for its appVersion: %v; set GALLEON_IMAGE_VERSION", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if m := appVersion.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], nil
		}
	}
	return "", fmt.Errorf("no appVersion in deploy/helm/galleon/Chart.yaml; set it, or set GALLEON_IMAGE_VERSION")
}

// Adapters is the binaries in cmd/ whose main runs an adapter (daemon.Main) or several
// (daemon.FleetMain), as images_test.go
// finds them, in name order.
func Adapters(root string) ([]string, error) {
	mains, err := filepath.Glob(filepath.Join(root, "cmd", "*", "main.go"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, m := range mains {
		src, err := os.ReadFile(m)
		if err != nil {
			return nil, err
		}
		if bytes.Contains(src, []byte("daemon.Main(")) || bytes.Contains(src, []byte("daemon.FleetMain(")) {
			names = append(names, filepath.Base(filepath.Dir(m)))
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no adapter in %s/cmd (a main.go that calls daemon.Main)", root)
	}
	return names, nil
}

// secondsSince is the whole seconds since start, as the scripts' $((SECONDS - start)).
func secondsSince(start time.Time) int { return int(time.Since(start).Seconds()) }
