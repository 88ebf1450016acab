package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What every image holds, and where. Paths in the layer carry no leading slash.
const (
	binDir     = "usr/local/bin"
	caFile     = "etc/ssl/certs/ca-certificates.crt"
	passwdFile = "etc/passwd"
	groupFile  = "etc/group"
	// The user the image runs as: uid and gid 65532, "nonroot", as in distroless images.
	nonrootID   = 65532
	nonrootName = "nonroot"
	nonrootHome = "home/nonroot"

	// OCI label keys (github.com/opencontainers/image-spec annotations.md).
	labelTitle       = "org.opencontainers.image.title"
	labelDescription = "org.opencontainers.image.description"
	labelVersion     = "org.opencontainers.image.version"
	labelRevision    = "org.opencontainers.image.revision"
	labelSource      = "org.opencontainers.image.source"
	labelLicenses    = "org.opencontainers.image.licenses"
	labelCreated     = "org.opencontainers.image.created"
	// Galleon's own: where the CA bundle came from, its digest, and the Go toolchain.
	labelCASource  = "com.github.galleon-mesh.galleon.ca-bundle.source"
	labelCADigest  = "com.github.galleon-mesh.galleon.ca-bundle.digest"
	labelGoVersion = "com.github.galleon-mesh.galleon.go-version"

	// Annotations on the image's descriptor in the layout's index.json: the tag (read by
	// `skopeo copy oci:DIR:TAG`) and the full name containerd gives it on import.
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
)

// spec is what one image is made of, besides the binary.
type spec struct {
	Name        string    // the binary's and the image's name: galleon-file
	Version     string    // the image's tag and org.opencontainers.image.version
	Revision    string    // git commit
	Source      string    // repository URL
	Licenses    string    // SPDX expression, or empty when unknown
	Description string    // org.opencontainers.image.description, optional
	GoVersion   string    // toolchain that built the binary, optional
	Created     time.Time // every timestamp in the image (config, history, tar headers)
	CABundle    []byte    // PEM, copied to /etc/ssl/certs/ca-certificates.crt
	CASource    string    // where CABundle came from (label)
	Ports       []string  // exposed ports, "16010/tcp"
}

// ref is the image's name as the chart spells it by default: <adapter.name>:<appVersion>.
func (s spec) ref() string { return s.Name + ":" + s.Version }

// entrypoint is the binary's absolute path in the image.
func (s spec) entrypoint() string { return "/" + binDir + "/" + s.Name }

func (s spec) validate() error {
	switch {
	case s.Name == "" || strings.ContainsAny(s.Name, "/: "):
		return fmt.Errorf("image name %q: want a binary name such as galleon-file", s.Name)
	case s.Version == "":
		return fmt.Errorf("no version")
	case s.Revision == "":
		return fmt.Errorf("no revision")
	case s.Source == "":
		return fmt.Errorf("no source URL")
	case s.Created.IsZero():
		return fmt.Errorf("no creation time")
	case len(bytes.TrimSpace(s.CABundle)) == 0:
		return fmt.Errorf("the CA bundle is empty")
	case s.CASource == "":
		return fmt.Errorf("no CA bundle source")
	}
	if _, err := name.NewTag(s.ref()); err != nil {
		return fmt.Errorf("image reference %s: %w", s.ref(), err)
	}
	for _, p := range s.Ports {
		if !strings.HasSuffix(p, "/tcp") && !strings.HasSuffix(p, "/udp") {
			return fmt.Errorf("port %q: want NUMBER/tcp or NUMBER/udp", p)
		}
	}
	return nil
}

func (s spec) labels() map[string]string {
	sum := sha256.Sum256(s.CABundle)
	l := map[string]string{
		labelTitle:    s.Name,
		labelVersion:  s.Version,
		labelRevision: s.Revision,
		labelSource:   s.Source,
		labelCreated:  s.Created.UTC().Format(time.RFC3339),
		labelCASource: s.CASource,
		labelCADigest: "sha256:" + hex.EncodeToString(sum[:]),
	}
	for k, v := range map[string]string{labelLicenses: s.Licenses, labelDescription: s.Description, labelGoVersion: s.GoVersion} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

// file is one entry of the image's only layer.
type file struct {
	path string // no leading slash; a trailing slash makes it a directory
	mode int64
	uid  int
	body []byte
}

// rootFS returns the image's file system as an uncompressed tar: the binary, the CA bundle,
// passwd, group and nsswitch.conf, and the directories holding them, plus /tmp and the
// nonroot user's home. Nothing else: no shell, no package manager, no libc. Every header has
// the same fixed time, owner names and format, and entries come in a fixed order, so the same
// inputs give the same bytes.
func rootFS(s spec, binary []byte) ([]byte, error) {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		fmt.Sprintf("%s:x:%d:%d:%s:/%s:/sbin/nologin\n", nonrootName, nonrootID, nonrootID, nonrootName, nonrootHome)
	group := "root:x:0:\nnobody:x:65534:\n" + fmt.Sprintf("%s:x:%d:\n", nonrootName, nonrootID)
	files := []file{
		{path: "etc/", mode: 0o755},
		{path: groupFile, mode: 0o644, body: []byte(group)},
		// Go's resolver reads it: /etc/hosts first, then DNS, as glibc would.
		{path: "etc/nsswitch.conf", mode: 0o644, body: []byte("passwd: files\ngroup: files\nhosts: files dns\n")},
		{path: passwdFile, mode: 0o644, body: []byte(passwd)},
		{path: "etc/ssl/", mode: 0o755},
		{path: "etc/ssl/certs/", mode: 0o755},
		{path: caFile, mode: 0o644, body: s.CABundle},
		{path: "home/", mode: 0o755},
		{path: nonrootHome + "/", mode: 0o700, uid: nonrootID},
		{path: "tmp/", mode: 0o1777},
		{path: "usr/", mode: 0o755},
		{path: "usr/local/", mode: 0o755},
		{path: binDir + "/", mode: 0o755},
		{path: binDir + "/" + s.Name, mode: 0o755, body: binary},
	}
	if !sort.SliceIsSorted(files, func(i, j int) bool { return files[i].path < files[j].path }) {
		return nil, fmt.Errorf("internal error: layer entries out of order")
	}
	mtime := s.Created.UTC().Truncate(time.Second)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    f.path,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.uid,
			Uname:   ownerName(f.uid),
			Gname:   ownerName(f.uid),
			ModTime: mtime,
			Format:  tar.FormatUSTAR,
		}
		if strings.HasSuffix(f.path, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.path, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func ownerName(uid int) string {
	if uid == nonrootID {
		return nonrootName
	}
	return "root"
}

// platformOf returns the platform of a linux binary for GOARCH arch.
func platformOf(arch string) (v1.Platform, error) {
	switch arch {
	case "amd64":
		return v1.Platform{OS: "linux", Architecture: "amd64"}, nil
	case "arm64":
		return v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, nil
	}
	return v1.Platform{}, fmt.Errorf("architecture %q: want amd64 or arm64", arch)
}

// buildImage returns the image for one architecture: an empty base plus one layer (rootFS), OCI
// media types, and a config that runs the binary as nonroot.
func buildImage(s spec, arch string, binary []byte) (v1.Image, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if len(binary) == 0 {
		return nil, fmt.Errorf("%s: the binary is empty", s.Name)
	}
	plat, err := platformOf(arch)
	if err != nil {
		return nil, err
	}
	fs, err := rootFS(s, binary)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(fs)), nil },
		tarball.WithMediaType(types.OCILayer),
		tarball.WithCompressionLevel(gzip.DefaultCompression),
		tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: s.Created.UTC().Truncate(time.Second)}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   created,
			CreatedBy: fmt.Sprintf("devtool images: %s, %s, passwd and group (%s %d)", s.entrypoint(), "/"+caFile, nonrootName, nonrootID),
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
	cf.Author = ""
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", nonrootID, nonrootID),
		Entrypoint: []string{s.entrypoint()},
		Env:        []string{"PATH=/" + binDir, "SSL_CERT_FILE=/" + caFile},
		WorkingDir: "/",
		Labels:     s.labels(),
	}
	if len(s.Ports) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range s.Ports {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	return img, nil
}

// dockerName is ref as Docker and containerd spell it in full, and as the kubelet asks for the
// image "galleon-file:0.1.0": docker.io/library/galleon-file:0.1.0. A ref whose first component
// names a registry (has a dot or a port, or is localhost) is kept.
func dockerName(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return ref
	}
	if !found {
		return "docker.io/library/" + ref
	}
	return "docker.io/" + ref
}

// archImage is one architecture's image.
type archImage struct {
	platform v1.Platform
	image    v1.Image
}

// writeLayout writes an OCI image layout at dir (which must not exist yet) holding the image, or
// an index of the images when there are several architectures, tagged s.Version. It returns the
// digest of what it wrote: the manifest's, or the index's.
func writeLayout(dir string, s spec, imgs []archImage) (v1.Hash, error) {
	if len(imgs) == 0 {
		return v1.Hash{}, fmt.Errorf("no image to write")
	}
	if _, err := os.Stat(dir); err == nil {
		return v1.Hash{}, fmt.Errorf("%s exists already", dir)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	ann := layout.WithAnnotations(map[string]string{
		annotationRefName:        s.Version,
		annotationContainerdName: dockerName(s.ref()),
	})
	if len(imgs) == 1 {
		if err := p.AppendImage(imgs[0].image, ann, layout.WithPlatform(imgs[0].platform)); err != nil {
			return v1.Hash{}, err
		}
		return imgs[0].image.Digest()
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, ai := range imgs {
		plat := ai.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: ai.image, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	if err := p.AppendIndex(idx, ann); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}

// writeDockerArchive writes img as a docker-archive tarball (`docker load -i`, `kind load
// image-archive`) tagged with the chart's default name; the tar's entries are in a fixed order.
func writeDockerArchive(path string, s spec, img v1.Image) error {
	tag, err := name.NewTag(s.ref())
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// imageSize is what a registry stores for img: manifest, config and compressed layers; and the
// uncompressed size of its layers.
func imageSize(img v1.Image) (stored, unpacked int64, err error) {
	raw, err := img.RawManifest()
	if err != nil {
		return 0, 0, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return 0, 0, err
	}
	stored = int64(len(raw) + len(cfg))
	layers, err := img.Layers()
	if err != nil {
		return 0, 0, err
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return 0, 0, err
		}
		stored += n
		rc, err := l.Uncompressed()
		if err != nil {
			return 0, 0, err
		}
		u, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return 0, 0, err
		}
		unpacked += u
	}
	return stored, unpacked, nil
}

// build writes the layout at outDir/<name> and, when tarPath is not empty, a docker archive of
// the first architecture's image there; it returns one summary line.
func build(s spec, binaries []archBinary, outDir, tarPath string) (string, error) {
	var imgs []archImage
	for _, b := range binaries {
		bin, err := os.ReadFile(b.path)
		if err != nil {
			return "", err
		}
		img, err := buildImage(s, b.arch, bin)
		if err != nil {
			return "", fmt.Errorf("%s (%s): %w", s.Name, b.arch, err)
		}
		plat, err := platformOf(b.arch)
		if err != nil {
			return "", err
		}
		imgs = append(imgs, archImage{platform: plat, image: img})
	}
	dir := filepath.Join(outDir, s.Name)
	digest, err := writeLayout(dir, s, imgs)
	if err != nil {
		return "", err
	}
	if tarPath != "" {
		if err := writeDockerArchive(tarPath, s, imgs[0].image); err != nil {
			return "", err
		}
	}
	var sizes []string
	for _, ai := range imgs {
		stored, unpacked, err := imageSize(ai.image)
		if err != nil {
			return "", err
		}
		sizes = append(sizes, fmt.Sprintf("%s %.1f MiB (%.1f MiB unpacked)", ai.platform.String(), mib(stored), mib(unpacked)))
	}
	return fmt.Sprintf("%s\t%s\t%s", s.ref(), digest, strings.Join(sizes, ", ")), nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
