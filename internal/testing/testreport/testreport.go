// Package testreport runs `go test -v` in a module and prints what a reader of CI needs (`devtool
// test-report`, make e2e): the result of every per-release sub-test (istiod-<release>,
// adsc-<release>), so the e2e results show per istiod release, then go test's own summary lines
// (ok / FAIL per package). On a failure it prints the whole verbose log, so nothing of the
// failure is hidden.
package testreport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
)

var (
	// releaseResult is a per-release sub-test's result line, indented as go test -v nests it.
	releaseResult = regexp.MustCompile(`^[[:space:]]+--- (PASS|FAIL|SKIP): [^ ]+/(istiod|adsc)-[^ /]+(/[^ ]+)? `)
	// packageLine is go test's summary of a package (ok, FAIL, "?" for no test files) or a
	// top-level test's result; passed and skipped top-level tests are left out.
	packageLine = regexp.MustCompile(`^(ok|FAIL|---|PASS$|\?)[[:space:]]`)
	passOrSkip  = regexp.MustCompile(`^--- (PASS|SKIP)`)
)

// Summary is what Run prints of a passing run's log: the per-release sub-tests' results
// (unindented), then the package lines.
func Summary(log io.Reader) ([]string, error) {
	var releases, packages []string
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 64<<10), 16<<20) // a test may log long lines
	for sc.Scan() {
		line := sc.Text()
		if releaseResult.MatchString(line) {
			releases = append(releases, strings.TrimLeft(line, " \t\v\f\r"))
		}
		if packageLine.MatchString(line) && !passOrSkip.MatchString(line) {
			packages = append(packages, line)
		}
	}
	return append(releases, packages...), sc.Err()
}

// Run runs `goCmd test -v args...` in dir with its output in a temporary file, then prints the
// summary to out; when go test fails it prints the whole log to out instead and returns an error
// saying so.
func Run(ctx context.Context, goCmd, dir string, args []string, out io.Writer) error {
	log, err := os.CreateTemp("", "galleon-test.")
	if err != nil {
		return err
	}
	defer os.Remove(log.Name())
	defer log.Close()
	cmd := exec.CommandContext(ctx, goCmd, append([]string{"test", "-v"}, args...)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	runErr := cmd.Run()
	if _, err := log.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if runErr != nil {
		if _, err := io.Copy(out, log); err != nil {
			return err
		}
		return fmt.Errorf("go test in %s failed (%v): the full verbose log is above", dir, exitText(runErr))
	}
	lines, err := Summary(log)
	if err != nil {
		return fmt.Errorf("reading go test's log: %w", err)
	}
	for _, l := range lines {
		if _, err := fmt.Fprintln(out, l); err != nil {
			return err
		}
	}
	return nil
}

// exitText is "exit N" for a command that ran and failed, else the error.
func exitText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok && ee.Exited() {
		return fmt.Sprintf("exit %d", ee.ExitCode())
	}
	return err.Error()
}
