package imagebuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// labels is what every image of one run is labelled with, and where its parts come from.
type labels struct {
	version, revision, created, source, goVersion, licenses string
	ca, caSource                                            string
	archs                                                   []string
}

// Build writes every adapter's image for version into out: binaries, then images. Only the
// adapters' entries in out are replaced, never the rest of out.
func (b Builder) Build(ctx context.Context, out, version string) error {
	l, err := b.labels(version)
	if err != nil {
		return err
	}
	tool, err := b.Tool(ctx)
	if err != nil {
		return err
	}
	names, err := Adapters(b.Root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	unlock, err := b.lockImages(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	stage, err := os.MkdirTemp(out, ".stage.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	bins, err := os.MkdirTemp("", "galleon-images.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bins)
	for _, arch := range l.archs {
		if err := b.buildBinaries(ctx, filepath.Join(bins, arch), arch, names); err != nil {
			return err
		}
	}
	return b.writeImages(ctx, tool, l, names, bins, stage, out)
}

// labels reads the environment and the checkout for what the images are labelled with.
func (b Builder) labels(version string) (labels, error) {
	l := labels{version: version, licenses: os.Getenv("GALLEON_IMAGE_LICENSES"), archs: strings.Fields(os.Getenv("GALLEON_IMAGE_ARCHS"))}
	if len(l.archs) == 0 {
		l.archs = []string{"amd64"}
	}
	l.ca = os.Getenv("GALLEON_CA_BUNDLE")
	if l.ca == "" {
		l.ca = defaultCA
	}
	if st, err := os.Stat(l.ca); err != nil || st.Size() == 0 {
		return l, fmt.Errorf("no CA bundle at %s; do: apt-get install ca-certificates, or set GALLEON_CA_BUNDLE to a PEM bundle", l.ca)
	}
	l.caSource = caSource(l.ca)
	var err error
	if l.revision, err = b.git("rev-parse", "HEAD"); err != nil {
		return l, fmt.Errorf("%s is not a git checkout: the images' revision label needs its commit; do: run it in a clone", b.Root)
	}
	if l.created = os.Getenv("SOURCE_DATE_EPOCH"); l.created == "" {
		if l.created, err = b.git("log", "-1", "--format=%ct"); err != nil {
			return l, fmt.Errorf("reading HEAD's commit time for the images' timestamps: %v; do: set SOURCE_DATE_EPOCH", err)
		}
	}
	if l.source, err = b.moduleURL(); err != nil {
		return l, err
	}
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return l, fmt.Errorf("go env GOVERSION: %v", err)
	}
	l.goVersion = strings.TrimSpace(string(goVersion))
	b.warnUncommitted(l.revision)
	return l, nil
}

// caSource is the label text saying where the CA bundle ca came from.
func caSource(ca string) string {
	if ca != defaultCA {
		return ca + " on the build host"
	}
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return ca + " on the build host"
	}
	v, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "ca-certificates").Output()
	if err != nil {
		v = []byte("(version unknown)")
	}
	return ca + " from Debian's ca-certificates " + string(v)
}

func (b Builder) git(args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", b.Root}, args...)...).Output()
	return strings.TrimSpace(string(out)), err
}

var moduleLine = regexp.MustCompile(`(?m)^module[[:space:]]+([^[:space:]]+)`)

// moduleURL is https://<the main module's path>, the images' source label.
func (b Builder) moduleURL() (string, error) {
	gomod, err := os.ReadFile(filepath.Join(b.Root, "go.mod"))
	if err != nil {
		return "", err
	}
	m := moduleLine.FindSubmatch(gomod)
	if m == nil {
		return "", fmt.Errorf("no module line in %s/go.mod", b.Root)
	}
	return "https://" + string(m[1]), nil
}

// warnUncommitted says so when what goes into the binaries differs from the commit their
// revision label names.
func (b Builder) warnUncommitted(revision string) {
	status, _ := b.git("status", "--porcelain", "--", "cmd", "adapters", "daemon", "model", "registry", "internal", "proto", "go.mod", "go.sum")
	if status != "" {
		b.logf("uncommitted changes under cmd/, adapters/, daemon/, model/, registry/, internal/ or proto/ go into the binaries; the revision label says %s", revision)
	}
}

// lockImages serialises runs that write images (two would share the image writer's output
// directories). It waits, saying so once, until ctx ends.
func (b Builder) lockImages(ctx context.Context) (unlock func(), err error) {
	dir := filepath.Join(toolcache.Dir(), "locks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create the tool cache's %s: %v (set GALLEON_CACHE to a writable directory)", dir, err)
	}
	path := filepath.Join(dir, "images.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for told := false; ; told = true {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("cannot lock %s: %v", path, err)
		}
		if !told {
			b.logf("another devtool images is writing images, waiting for it...")
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("gave up waiting for the run holding %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// buildBinaries builds the adapters names for linux/arch into dir.
func (b Builder) buildBinaries(ctx context.Context, dir, arch string, names []string) error {
	log := toolcache.LogPath("images-binaries-" + arch)
	start := time.Now()
	b.logf("go build %s for linux/%s (CGO_ENABLED=0 -trimpath -ldflags '-s -w')...", strings.Join(names, " "), arch)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := []string{"build", "-trimpath", "-buildvcs=true", "-ldflags", "-s -w", "-o", dir + "/"}
	for _, n := range names {
		args = append(args, "./cmd/"+n)
	}
	env := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch}
	if err := offlineOrWatched(ctx, log, b.Root, env, args...); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return toolcache.Failure("", log, "go build ./cmd/... for linux/"+arch, "fix the build error, or retry later if a module download failed")
	}
	os.Remove(log)
	b.logf("binaries for linux/%s built in %d s", arch, secondsSince(start))
	return nil
}

// writeImages runs the image writer for each adapter into stage, prints the table, and moves
// the images into out.
func (b Builder) writeImages(ctx context.Context, tool string, l labels, names []string, bins, stage, out string) error {
	start := time.Now()
	fmt.Fprintf(b.Out, "%-28s %-72s %s\n", "IMAGE", "DIGEST", "SIZE")
	for _, name := range names {
		f, err := b.writeImage(ctx, tool, l, name, bins, stage)
		if err != nil {
			return err
		}
		fmt.Fprintf(b.Out, "%-28s %-72s %s\n", f[0], f[1], f[2])
	}
	// Replace only what this run wrote, never the rest of out.
	for _, name := range names {
		for _, entry := range []string{name, name + ".tar"} {
			if err := os.RemoveAll(filepath.Join(out, entry)); err != nil {
				return err
			}
			if err := os.Rename(filepath.Join(stage, entry), filepath.Join(out, entry)); err != nil {
				return err
			}
		}
	}
	b.logf("images written in %d s to %s (NAME/: OCI layout, NAME.tar: docker archive); deploy/README.md says how to push or load them", secondsSince(start), out)
	return nil
}

// writeImage runs the image writer for one adapter and returns the fields of the line it
// printed: name:tag, digest, size.
func (b Builder) writeImage(ctx context.Context, tool string, l labels, name, bins, stage string) ([]string, error) {
	args := []string{"build", "-name", name, "-version", l.version, "-revision", l.revision, "-created-unix", l.created,
		"-source", l.source, "-ca", l.ca, "-ca-source", l.caSource, "-go-version", l.goVersion,
		"-description", "Galleon adapter " + name + ": serves Istio ServiceEntries to istiod over MCP-over-xDS",
		"-port", "16010/tcp", "-port", "16014/tcp", "-out", stage, "-tar", filepath.Join(stage, name+".tar")}
	if l.licenses != "" {
		args = append(args, "-licenses", l.licenses)
	}
	for _, arch := range l.archs {
		args = append(args, "-binary", arch+"="+filepath.Join(bins, arch, name))
	}
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Stderr = b.Progress
	line, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("writing the image of %s failed (the line above says why); do: fix that and run it again", name)
	}
	f := strings.Split(string(bytes.TrimSpace(line)), "\t")
	if len(f) < 3 {
		return nil, fmt.Errorf("the image writer printed %q for %s, not name, digest and size: rebuild it (delete %s)", line, name, tool)
	}
	return f, nil
}
