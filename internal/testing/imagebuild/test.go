package imagebuild

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// TestDir is where Test writes the images it checks: <cache>/images-test.
func TestDir() string { return filepath.Join(toolcache.Dir(), "images-test") }

// Test writes the images into TestDir (tagged with the chart's appVersion, whatever
// GALLEON_IMAGE_VERSION says), then runs go vet and the tests of scripts/tools/images on them
// (GALLEON_IMAGES_DIR names them). It prints go test's result lines and the built images' sub-tests;
// on a failure the whole output.
func (b Builder) Test(ctx context.Context) error {
	start := time.Now()
	out := TestDir()
	version, err := ChartVersion(b.Root)
	if err != nil {
		return err
	}
	if err := b.Build(ctx, out, version); err != nil {
		return err
	}
	if err := b.Deps(ctx); err != nil {
		return err
	}
	log, err := os.CreateTemp("", "galleon-images-test.")
	if err != nil {
		return err
	}
	defer os.Remove(log.Name())
	defer log.Close()
	if err := b.vetAndTest(ctx, out, log); err != nil {
		if _, err := log.Seek(0, io.SeekStart); err == nil {
			io.Copy(b.Out, log)
		}
		return fmt.Errorf("the images' tests failed (go test -v in scripts/tools/images, output above); images in %s", out)
	}
	if err := printResults(log, b.Out); err != nil {
		return err
	}
	b.logf("images built and checked in %d s", secondsSince(start))
	return nil
}

// vetAndTest runs go vet, then go test -v, in scripts/tools/images, output to log.
func (b Builder) vetAndTest(ctx context.Context, imagesDir string, log io.Writer) error {
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "-v", "./..."}} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = b.toolsDir()
		cmd.Env = append(os.Environ(), "GOWORK=off", "GALLEON_IMAGES_DIR="+imagesDir)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return err
		}
	}
	return nil
}

// resultLine is a line of the images' go test -v output worth printing when it passed: the
// top-level results, the package line, and each built image's sub-tests.
var resultLine = regexp.MustCompile(`^(--- |ok |FAIL)|^    --- (FAIL|PASS|SKIP): TestBuiltImages(Run)?/`)

func printResults(log *os.File, out io.Writer) error {
	if _, err := log.Seek(0, io.SeekStart); err != nil {
		return err
	}
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if resultLine.MatchString(sc.Text()) {
			fmt.Fprintln(out, sc.Text())
		}
	}
	return sc.Err()
}
