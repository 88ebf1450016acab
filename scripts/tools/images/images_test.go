package main

// The images' contract, checked on images this package writes from a tiny static binary (always)
// and on the adapters' images `devtool images` wrote (when GALLEON_IMAGES_DIR names them, as
// `go run ./internal/testing/devtool images test`, part of `make test`, does): non-root user
// 65532, the binary as the entrypoint, no shell or anything else executable, a non-empty CA
// bundle, the OCI labels, a size bound, reproducible digests, and the image names the Helm chart
// uses by default.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.yaml.in/yaml/v3"
)

// Size bounds for one adapter's image (one architecture). Measured 2026-11-23: the largest,
// galleon-consul, stored 7.4 MiB (gzip) and unpacked to 20.6 MiB, nearly all of it the binary;
// the Kubernetes output's client (2026-11-28) added about 5 MiB (deploy/README.md). The
// bounds leave room for growth but catch a base image, a debug build (no -s -w), a second copy
// of the binary or the whole Kubernetes API scheme (client-go's typed clients: 45 MiB) slipping
// in.
const (
	maxStoredBytes   = 16 << 20
	maxUnpackedBytes = 40 << 20
)

// adapterPorts are the ports every adapter image exposes: gRPC (MCP) and HTTP.
func adapterPorts() []string { return []string{"16010/tcp", "16014/tcp"} }

// imageProblems returns what is wrong with img as the image of binary name, exposing ports.
func imageProblems(img v1.Image, name string, ports []string) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }

	if mt, err := img.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		bad("manifest media type %q (%v), want %s", mt, err, types.OCIManifestSchema1)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return append(p, fmt.Sprintf("config: %v", err))
	}
	c := cf.Config
	if c.User != "65532:65532" {
		bad("user %q, want 65532:65532 (nonroot)", c.User)
	}
	if want := []string{"/usr/local/bin/" + name}; !slices.Equal(c.Entrypoint, want) {
		bad("entrypoint %q, want %q", c.Entrypoint, want)
	}
	if len(c.Cmd) > 0 {
		bad("cmd %q, want none (flags are the container's args)", c.Cmd)
	}
	for _, port := range ports {
		if _, ok := c.ExposedPorts[port]; !ok {
			bad("port %s not exposed (exposed: %v)", port, c.ExposedPorts)
		}
	}
	if cf.OS != "linux" || (cf.Architecture != "amd64" && cf.Architecture != "arm64") {
		bad("platform %s/%s, want linux/amd64 or linux/arm64", cf.OS, cf.Architecture)
	}
	for _, k := range []string{labelTitle, labelVersion, labelRevision, labelSource, labelCreated, labelCASource, labelCADigest} {
		if c.Labels[k] == "" {
			bad("label %s missing", k)
		}
	}
	if v := c.Labels[labelTitle]; v != "" && v != name {
		bad("label %s=%q, want %q", labelTitle, v, name)
	}
	if v := c.Labels[labelRevision]; v != "" && !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(v) {
		bad("label %s=%q, want a git commit", labelRevision, v)
	}
	if v := c.Labels[labelSource]; v != "" && !strings.HasPrefix(v, "https://") {
		bad("label %s=%q, want an https URL", labelSource, v)
	}
	created := cf.Created.UTC()
	if created.IsZero() || created.Year() < 2020 {
		bad("config created %v, want the commit's time", created)
	}
	if v := c.Labels[labelCreated]; v != "" && v != created.Format(time.RFC3339) {
		bad("label %s=%q, config created %s", labelCreated, v, created.Format(time.RFC3339))
	}

	files, problems := layerFiles(img, name, created)
	p = append(p, problems...)
	ca, ok := files[caFile]
	switch {
	case !ok:
		bad("no /%s", caFile)
	case len(bytes.TrimSpace(ca)) == 0:
		bad("/%s is empty", caFile)
	case !x509.NewCertPool().AppendCertsFromPEM(ca):
		bad("/%s holds no PEM certificate", caFile)
	default:
		sum := sha256.Sum256(ca)
		if d := "sha256:" + hex.EncodeToString(sum[:]); c.Labels[labelCADigest] != d {
			bad("label %s=%q, the bundle's digest is %s", labelCADigest, c.Labels[labelCADigest], d)
		}
	}
	if !bytes.Contains(files[passwdFile], []byte("\nnonroot:x:65532:65532:")) {
		bad("/%s names no nonroot user 65532", passwdFile)
	}
	if !bytes.Contains(files[groupFile], []byte("\nnonroot:x:65532:")) {
		bad("/%s names no nonroot group 65532", groupFile)
	}
	if bin, ok := files[binDir+"/"+name]; !ok {
		bad("no /%s/%s", binDir, name)
	} else {
		p = append(p, binaryProblems(bin, cf.Architecture)...)
	}

	stored, unpacked, err := imageSize(img)
	switch {
	case err != nil:
		bad("size: %v", err)
	case stored > maxStoredBytes:
		bad("stores %d bytes, more than the bound of %d", stored, maxStoredBytes)
	case unpacked > maxUnpackedBytes:
		bad("unpacks to %d bytes, more than the bound of %d", unpacked, maxUnpackedBytes)
	}
	return p
}

// layerFiles reads every layer of img in order (a later layer's file replaces an earlier one's)
// and returns the regular files' contents by path, and what is wrong with the entries: a shell,
// a package manager or anything else executable besides /usr/local/bin/NAME, a directory of
// programs (bin/, sbin/, usr/bin/, usr/sbin/, lib/), a link, or a timestamp that is not the
// image's creation time (the build would not be reproducible).
func layerFiles(img v1.Image, name string, created time.Time) (map[string][]byte, []string) {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	layers, err := img.Layers()
	if err != nil {
		return nil, []string{fmt.Sprintf("layers: %v", err)}
	}
	if len(layers) == 0 {
		bad("no layer")
	}
	forbiddenNames := []string{"sh", "bash", "ash", "dash", "zsh", "busybox", "apk", "apt", "apt-get", "dpkg", "rpm", "yum", "microdnf"}
	forbiddenDirs := []string{"bin/", "sbin/", "usr/bin/", "usr/sbin/", "lib/", "lib64/", "usr/lib/"}
	entrypoint := binDir + "/" + name
	files := map[string][]byte{}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			bad("layer %d: %v", i, err)
			continue
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				bad("layer %d: %v", i, err)
				break
			}
			clean := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
			if h.Typeflag == tar.TypeDir {
				clean += "/"
			}
			if slices.Contains(forbiddenNames, path.Base(clean)) {
				bad("layer %d has /%s", i, clean)
			}
			for _, d := range forbiddenDirs {
				if strings.HasPrefix(clean, d) || clean+"/" == d {
					bad("layer %d has /%s", i, clean)
				}
			}
			if !h.ModTime.Equal(created) {
				bad("layer %d: /%s dated %v, not the image's time %v", i, clean, h.ModTime.UTC(), created)
			}
			switch h.Typeflag {
			case tar.TypeDir:
			case tar.TypeReg:
				if h.Mode&0o111 != 0 && clean != entrypoint {
					bad("layer %d: /%s is executable; only /%s may be", i, clean, entrypoint)
				}
				if clean == entrypoint && (h.Mode&0o777 != 0o755 || h.Uid != 0) {
					bad("layer %d: /%s has mode %o owner %d, want 755 root", i, clean, h.Mode, h.Uid)
				}
				b, err := io.ReadAll(tr)
				if err != nil {
					bad("layer %d: /%s: %v", i, clean, err)
				}
				files[clean] = b
			default:
				bad("layer %d: /%s is of tar type %q: only files and directories are expected", i, clean, h.Typeflag)
			}
		}
		rc.Close()
	}
	return files, p
}

// binaryProblems: the entrypoint must be a static ELF executable for the image's architecture.
func binaryProblems(bin []byte, arch string) []string {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return []string{fmt.Sprintf("the binary is not ELF: %v", err)}
	}
	defer f.Close()
	var p []string
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != want {
		p = append(p, fmt.Sprintf("the binary is for %v, the image for %s", f.Machine, arch))
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			p = append(p, "the binary is dynamically linked (it has an ELF interpreter): build it with CGO_ENABLED=0")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		p = append(p, fmt.Sprintf("the binary needs shared libraries %v", libs))
	}
	return p
}

// staticBinary builds a do-nothing static linux/amd64 program, as `devtool images` builds the
// adapters (no dependencies, so nothing is fetched).
func staticBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOFLAGS=-mod=mod")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build a static test binary: %v\n%s", err, b)
	}
	return out
}

// testCA is the CA bundle of the fixture: the host's, which `devtool images` copies too.
func testCA(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Skipf("no host CA bundle to copy (%v); install Debian's ca-certificates", err)
	}
	return b
}

func fixtureSpec(ca []byte) spec {
	return spec{
		Name:     "galleon-test",
		Version:  "0.0.1",
		Revision: strings.Repeat("ab", 20),
		Source:   "https://example.com/galleon",
		Created:  time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC),
		CABundle: ca,
		CASource: "/etc/ssl/certs/ca-certificates.crt of the test host",
		Ports:    adapterPorts(),
	}
}

// writeFixture writes the fixture's layout under dir and its docker archive, and returns the
// digest line and the layout's single image.
func writeFixture(t *testing.T, s spec, bin, dir string) (string, v1.Image) {
	t.Helper()
	line, err := build(s, []archBinary{{arch: "amd64", path: bin}}, dir, filepath.Join(dir, s.Name+".tar"))
	if err != nil {
		t.Fatal(err)
	}
	img, _ := singleImage(t, filepath.Join(dir, s.Name))
	return line, img
}

// singleImage returns the layout's only image and its descriptor in index.json.
func singleImage(t *testing.T, dir string) (v1.Image, v1.Descriptor) {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("%s: index.json lists %d manifests, want 1", dir, len(m.Manifests))
	}
	d := m.Manifests[0]
	if d.MediaType.IsIndex() {
		return nil, d
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img, d
}

func TestFixtureImage(t *testing.T) {
	ca := testCA(t)
	bin := staticBinary(t)
	s := fixtureSpec(ca)
	_, img := writeFixture(t, s, bin, t.TempDir())
	for _, p := range imageProblems(img, s.Name, adapterPorts()) {
		t.Error(p)
	}
}

func TestReproducible(t *testing.T) {
	ca := testCA(t)
	bin := staticBinary(t)
	s := fixtureSpec(ca)
	a, _ := writeFixture(t, s, bin, t.TempDir())
	b, _ := writeFixture(t, s, bin, t.TempDir())
	if a != b {
		t.Errorf("same inputs, different images:\n%s\n%s", a, b)
	}
	// Every file written is the same, byte for byte (layout and docker archive).
	da, db := t.TempDir(), t.TempDir()
	writeFixture(t, s, bin, da)
	writeFixture(t, s, bin, db)
	if ha, hb := treeDigest(t, da), treeDigest(t, db); ha != hb {
		t.Errorf("same inputs, different files: %s vs %s", ha, hb)
	}
	s.Revision = strings.Repeat("cd", 20)
	if c, _ := writeFixture(t, s, bin, t.TempDir()); c == a {
		t.Errorf("another revision, same digest: %s", c)
	}
}

// treeDigest hashes every file's path and content under dir.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestProblemsFound: each way an image can be wrong is reported.
func TestProblemsFound(t *testing.T) {
	ca := testCA(t)
	bin := staticBinary(t)
	s := fixtureSpec(ca)
	_, good := writeFixture(t, s, bin, t.TempDir())

	withConfig := func(edit func(*v1.ConfigFile)) v1.Image {
		cf, err := good.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		edit(cf)
		img, err := mutate.ConfigFile(good, cf)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	withFile := func(name string, mode int64, body []byte) v1.Image {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), ModTime: s.Created, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
		tw.Close()
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
		if err != nil {
			t.Fatal(err)
		}
		img, err := mutate.AppendLayers(good, l)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	for _, tc := range []struct {
		name string
		img  v1.Image
		want string
	}{
		{"root user", withConfig(func(c *v1.ConfigFile) { c.Config.User = "0:0" }), "user"},
		{"no user", withConfig(func(c *v1.ConfigFile) { c.Config.User = "" }), "user"},
		{"shell entrypoint", withConfig(func(c *v1.ConfigFile) { c.Config.Entrypoint = []string{"/bin/sh", "-c"} }), "entrypoint"},
		{"label missing", withConfig(func(c *v1.ConfigFile) { delete(c.Config.Labels, labelRevision) }), labelRevision},
		{"port missing", withConfig(func(c *v1.ConfigFile) { delete(c.Config.ExposedPorts, "16014/tcp") }), "16014/tcp"},
		{"arch", withConfig(func(c *v1.ConfigFile) { c.Architecture = "arm64" }), "the binary is for"},
		{"shell", withFile("bin/sh", 0o755, []byte("#!")), "/bin/sh"},
		{"busybox", withFile("opt/busybox", 0o755, []byte("x")), "busybox"},
		{"empty CA bundle", withFile(caFile, 0o644, nil), "is empty"},
		{"no nonroot user", withFile(passwdFile, 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\n")), "nonroot"},
		{"dynamic binary", withFile(binDir+"/"+s.Name, 0o755, []byte("#!/bin/sh\n")), "not ELF"},
		{"too big", withFile("var/big", 0o644, bytes.Repeat([]byte{0}, maxUnpackedBytes)), "bound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := imageProblems(tc.img, s.Name, adapterPorts())
			if !strings.Contains(strings.Join(p, "\n"), tc.want) {
				t.Errorf("want a problem mentioning %q, got %q", tc.want, p)
			}
		})
	}
}

// repoRoot is the repository this module sits in, three levels up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(b), "module github.com/galleon-mesh/galleon\n") {
		t.Fatalf("%s is not Galleon's repository (go.mod: %v)", root, err)
	}
	return root
}

// adapters are the binaries in cmd/ that run an adapter (their main calls daemon.Main) or several
// (daemon.FleetMain), the
// ones `devtool images` makes an image of.
func adapters(t *testing.T, root string) []string {
	t.Helper()
	mains, err := filepath.Glob(filepath.Join(root, "cmd", "*", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range mains {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("daemon.Main(")) || bytes.Contains(b, []byte("daemon.FleetMain(")) {
			names = append(names, filepath.Base(filepath.Dir(m)))
		}
	}
	if len(names) == 0 {
		t.Fatal("no adapter found in cmd/")
	}
	return names
}

// chart is what the Helm chart names an adapter's image by default.
type chart struct {
	defaultAdapter string // values.yaml adapter.name
	repository     string // values.yaml image.repository ("" = adapter.name)
	tag            string // values.yaml image.tag ("" = appVersion)
	appVersion     string // Chart.yaml
}

// imageRef is the chart's "galleon.image" for adapter.name=adapter and the other values at
// their defaults.
func (c chart) imageRef(adapter string) string {
	repo, tag := c.repository, c.tag
	if repo == "" {
		repo = adapter
	}
	if tag == "" {
		tag = c.appVersion
	}
	return repo + ":" + tag
}

// readChart reads deploy/helm/galleon, and fails if its image helper no longer names images the
// way imageRef assumes.
func readChart(t *testing.T, root string) chart {
	t.Helper()
	dir := filepath.Join(root, "deploy", "helm", "galleon")
	var values struct {
		Adapter struct {
			Name string `yaml:"name"`
		} `yaml:"adapter"`
		Image struct {
			Repository string `yaml:"repository"`
			Tag        string `yaml:"tag"`
		} `yaml:"image"`
	}
	var meta struct {
		AppVersion string `yaml:"appVersion"`
	}
	for f, v := range map[string]any{"values.yaml": &values, "Chart.yaml": &meta} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	helpers, err := os.ReadFile(filepath.Join(dir, "templates", "_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`$repo := default .Values.adapter.name .Values.image.repository`,
		`$tag := default .Chart.AppVersion .Values.image.tag`,
		`printf "%s:%s" $repo $tag`,
	} {
		if !bytes.Contains(helpers, []byte(want)) {
			t.Errorf("templates/_helpers.tpl: galleon.image no longer has %q: update readChart and imageRef to how the chart names images now", want)
		}
	}
	deployment, err := os.ReadFile(filepath.Join(dir, "templates", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(deployment, []byte(`image: {{ include "galleon.image" . | quote }}`)) {
		t.Errorf("templates/deployment.yaml does not take its image from galleon.image")
	}
	if meta.AppVersion == "" || values.Adapter.Name == "" {
		t.Fatalf("Chart.yaml appVersion %q, values.yaml adapter.name %q: want both set", meta.AppVersion, values.Adapter.Name)
	}
	return chart{defaultAdapter: values.Adapter.Name, repository: values.Image.Repository, tag: values.Image.Tag, appVersion: meta.AppVersion}
}

// TestChartDefaults: the chart's defaults name the images `devtool images` writes (by default
// <adapter>:<appVersion>): no repository or tag is set, and the default adapter is one of cmd/.
func TestChartDefaults(t *testing.T) {
	root := repoRoot(t)
	c := readChart(t, root)
	if c.repository != "" || c.tag != "" {
		t.Errorf("values.yaml sets image.repository %q, image.tag %q: leave both empty, so that the default is <adapter.name>:<appVersion>, the name devtool images gives", c.repository, c.tag)
	}
	if !slices.Contains(adapters(t, root), c.defaultAdapter) {
		t.Errorf("values.yaml adapter.name %q is not an adapter in cmd/ (%v)", c.defaultAdapter, adapters(t, root))
	}
	if got, want := c.imageRef("galleon-consul"), "galleon-consul:"+c.appVersion; got != want {
		t.Errorf("imageRef: %s, want %s", got, want)
	}
}

// TestBuiltImages checks the adapters' images `devtool images` wrote to GALLEON_IMAGES_DIR.
func TestBuiltImages(t *testing.T) {
	dir := os.Getenv("GALLEON_IMAGES_DIR")
	if dir == "" {
		t.Skip("GALLEON_IMAGES_DIR is unset: `go run ./internal/testing/devtool images test` (make images-test, part of make test) writes the images and sets it")
	}
	root := repoRoot(t)
	c := readChart(t, root)
	head := ""
	if out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		head = strings.TrimSpace(string(out))
	}
	for _, name := range adapters(t, root) {
		t.Run(name, func(t *testing.T) {
			ref := c.imageRef(name)
			wantTag := ref[strings.LastIndex(ref, ":")+1:]
			lay := filepath.Join(dir, name)
			img, desc := singleImage(t, lay)
			if got := desc.Annotations[annotationRefName]; got != wantTag {
				t.Errorf("%s: index.json tags it %q, the chart asks for %s", lay, got, ref)
			}
			if got, want := desc.Annotations[annotationContainerdName], dockerName(ref); got != want {
				t.Errorf("%s: index.json names it %q for containerd, want %s", lay, got, want)
			}
			var imgs []v1.Image
			if img != nil {
				imgs = append(imgs, img)
			} else {
				idx, err := layout.ImageIndexFromPath(lay)
				if err != nil {
					t.Fatal(err)
				}
				child, err := idx.ImageIndex(desc.Digest)
				if err != nil {
					t.Fatal(err)
				}
				m, err := child.IndexManifest()
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range m.Manifests {
					ci, err := child.Image(d.Digest)
					if err != nil {
						t.Fatal(err)
					}
					imgs = append(imgs, ci)
				}
			}
			for _, img := range imgs {
				for _, p := range imageProblems(img, name, adapterPorts()) {
					t.Error(p)
				}
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				if v := cf.Config.Labels[labelVersion]; v != wantTag {
					t.Errorf("label %s=%q, the chart's tag is %q", labelVersion, v, wantTag)
				}
				if v := cf.Config.Labels[labelRevision]; head != "" && v != head {
					t.Errorf("label %s=%q, HEAD is %s", labelRevision, v, head)
				}
			}

			// The docker archive: tagged with the chart's name, the first architecture's image.
			tarPath := filepath.Join(dir, name+".tar")
			m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(tarPath) })
			if err != nil {
				t.Fatal(err)
			}
			if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{ref}) {
				t.Errorf("%s: tags %v, want [%s]", tarPath, m, ref)
			}
			ti, err := tarball.ImageFromPath(tarPath, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ti.ConfigName()
			if err != nil {
				t.Fatal(err)
			}
			want, err := imgs[0].ConfigName()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s holds config %s, the layout's image %s", tarPath, got, want)
			}
		})
	}
}

// extractRootFS writes img's file system under dir, with the owners and modes of its layer.
func extractRootFS(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var dirs []*tar.Header
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Name)))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, h)
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, h.FileInfo().Mode()); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: tar type %q", h.Name, h.Typeflag)
		}
	}
	for _, h := range dirs { // after their contents: a 0700 directory would stop nothing (root), but keep the order anyway
		p := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Name)))
		if err := os.Chmod(p, h.FileInfo().Mode()); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBuiltImagesRun runs each adapter's binary from its image's file system alone, as the
// image's user (chroot --userspec 65532:65532, needs root): every adapter prints its usage, and
// galleon-file serves the sample registry until /readyz says ready. A container runtime would do
// more (namespaces, a read-only root); deploy/README.md says what was run with one here.
func TestBuiltImagesRun(t *testing.T) {
	dir := os.Getenv("GALLEON_IMAGES_DIR")
	if dir == "" {
		t.Skip("GALLEON_IMAGES_DIR is unset: `go run ./internal/testing/devtool images test` writes the images and sets it")
	}
	chroot, err := exec.LookPath("chroot")
	if err != nil || os.Geteuid() != 0 {
		t.Skipf("needs root and chroot (euid %d, %v)", os.Geteuid(), err)
	}
	root := repoRoot(t)
	for _, name := range adapters(t, root) {
		t.Run(name, func(t *testing.T) {
			img, _ := singleImage(t, filepath.Join(dir, name))
			if img == nil {
				t.Skip("a multi-platform index: run checks the single-platform images only")
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.Architecture != runtime.GOARCH {
				t.Skipf("a %s image on a %s machine", cf.Architecture, runtime.GOARCH)
			}
			fs := t.TempDir()
			extractRootFS(t, img, fs)
			userspec := "--userspec=" + cf.Config.User
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			usage := exec.CommandContext(ctx, chroot, append([]string{userspec, fs}, append(cf.Config.Entrypoint, "--help")...)...)
			usage.Env = cf.Config.Env
			out, err := usage.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "Usage: "+name) {
				t.Fatalf("%s --help in the image's file system as %s: %v\n%s", name, cf.Config.User, err, out)
			}
			if name != "galleon-file" {
				return
			}

			// galleon-file serves the sample registry (examples/file), copied into the image's /tmp.
			reg := filepath.Join(fs, "tmp", "registry")
			if err := os.Mkdir(reg, 0o755); err != nil {
				t.Fatal(err)
			}
			samples, _ := filepath.Glob(filepath.Join(root, "examples", "file", "*.yaml"))
			for _, f := range samples {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(reg, filepath.Base(f)), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args := append([]string{userspec, fs}, cf.Config.Entrypoint...)
			args = append(args, "--file-dir=/tmp/registry", "--listen=127.0.0.1:0", "--http=127.0.0.1:0", "--log-format=json")
			cmd := exec.CommandContext(ctx, chroot, args...)
			cmd.Env = cf.Config.Env
			logs, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout = cmd.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cmd.Process.Signal(syscall.SIGTERM)
				cmd.Wait()
			}()
			httpAddr, ready := "", false
			sc := bufio.NewScanner(logs)
			var seen []string
			for !ready && sc.Scan() {
				seen = append(seen, sc.Text())
				var line struct {
					Msg  string `json:"msg"`
					HTTP string `json:"http"`
				}
				if json.Unmarshal(sc.Bytes(), &line) != nil {
					continue
				}
				if line.Msg == "serving" {
					httpAddr = line.HTTP
				}
				ready = strings.HasPrefix(line.Msg, "ready")
			}
			if !ready || httpAddr == "" {
				t.Fatalf("galleon-file did not get ready in the image's file system; it logged:\n%s", strings.Join(seen, "\n"))
			}
			go io.Copy(io.Discard, logs)
			resp, err := http.Get("http://" + httpAddr + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("/readyz: %s %s", resp.Status, body)
			}
		})
	}
}

// TestDockerName: the name containerd gives an imported image is the one the kubelet asks for.
func TestDockerName(t *testing.T) {
	for in, want := range map[string]string{
		"galleon-file:0.1.0":                      "docker.io/library/galleon-file:0.1.0",
		"galleon/galleon-file:0.1.0":              "docker.io/galleon/galleon-file:0.1.0",
		"registry.example.com/g/galleon-file:0.1": "registry.example.com/g/galleon-file:0.1",
		"localhost:5000/galleon-file:0.1":         "localhost:5000/galleon-file:0.1",
	} {
		if got := dockerName(in); got != want {
			t.Errorf("dockerName(%s) = %s, want %s", in, got, want)
		}
	}
}
