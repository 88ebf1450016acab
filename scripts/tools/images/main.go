// Command images writes Galleon's container images without a container engine: for each
// adapter, an OCI image layout (for `crane push`, `skopeo copy oci:...`) and a docker-archive
// tarball (for `docker load`, `kind load image-archive`). It builds nothing itself: it is given a
// static linux binary per architecture (`devtool images` builds them) and packs it, with the
// host's CA bundle and a passwd/group naming the nonroot user 65532, into one layer on an empty
// base. Same inputs, same digest: every timestamp is the one given (the commit's time).
//
//	images build -name galleon-file -version 0.1.0 -revision SHA -created-unix SECONDS \
//	    -source URL -ca /etc/ssl/certs/ca-certificates.crt -ca-source TEXT \
//	    -binary amd64=PATH [-binary arm64=PATH] [-port 16010/tcp ...] -out DIR [-tar FILE]
//
// It prints one line: name:tag, the digest of the manifest (or of the index when there are
// several architectures), and each image's size.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// listFlag collects a repeated flag's values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// archBinary is a binary built for linux/arch.
type archBinary struct {
	arch string
	path string
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "images: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "build" {
		return fmt.Errorf("usage: images build -name NAME -version V -revision SHA -created-unix SECONDS -source URL -ca FILE -ca-source TEXT -binary ARCH=PATH... -out DIR [-tar FILE] (see internal/testing/imagebuild)")
	}
	fs := flag.NewFlagSet("images build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		s        spec
		created  int64
		caPath   string
		outDir   string
		tarPath  string
		binaries listFlag
		ports    listFlag
	)
	fs.StringVar(&s.Name, "name", "", "binary and image name (galleon-file)")
	fs.StringVar(&s.Version, "version", "", "image tag and org.opencontainers.image.version")
	fs.StringVar(&s.Revision, "revision", "", "git commit (org.opencontainers.image.revision)")
	fs.Int64Var(&created, "created-unix", 0, "creation time, Unix seconds (the commit's time, or SOURCE_DATE_EPOCH)")
	fs.StringVar(&s.Source, "source", "", "repository URL (org.opencontainers.image.source)")
	fs.StringVar(&s.Licenses, "licenses", "", "SPDX license expression, if known")
	fs.StringVar(&s.Description, "description", "", "org.opencontainers.image.description")
	fs.StringVar(&s.GoVersion, "go-version", "", "Go toolchain that built the binary (label)")
	fs.StringVar(&caPath, "ca", "", "PEM CA bundle to copy to /etc/ssl/certs/ca-certificates.crt")
	fs.StringVar(&s.CASource, "ca-source", "", "where the CA bundle came from (label)")
	fs.Var(&binaries, "binary", "ARCH=PATH, a static linux binary for GOARCH ARCH (repeat for more architectures; the first one goes into -tar)")
	fs.Var(&ports, "port", "exposed port, NUMBER/tcp (repeatable)")
	fs.StringVar(&outDir, "out", "", "directory that gets the OCI layout, as DIR/NAME")
	fs.StringVar(&tarPath, "tar", "", "docker-archive tarball to write (optional)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if outDir == "" || caPath == "" || created <= 0 || len(binaries) == 0 {
		return fmt.Errorf("-out, -ca, -created-unix and -binary are required")
	}
	s.Created = time.Unix(created, 0).UTC()
	s.Ports = ports
	ca, err := os.ReadFile(caPath)
	if err != nil {
		return err
	}
	s.CABundle = ca
	var bins []archBinary
	seen := map[string]bool{}
	for _, b := range binaries {
		arch, path, ok := strings.Cut(b, "=")
		if !ok || arch == "" || path == "" {
			return fmt.Errorf("-binary %q: want ARCH=PATH", b)
		}
		if seen[arch] {
			return fmt.Errorf("-binary: %s given twice", arch)
		}
		seen[arch] = true
		bins = append(bins, archBinary{arch: arch, path: path})
	}
	line, err := build(s, bins, outDir, tarPath)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, line)
	return nil
}
