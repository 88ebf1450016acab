package benchrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Run is one benchmark run: its name in messages, its output, the step it is at, its work
// directory and the processes it started (stopped by Finish, last started first).
type Run struct {
	Prog string    // prefix of the failure line, e.g. "bench-peer"
	Out  io.Writer // results and progress (stdout)
	Err  io.Writer // the failure line (stderr)

	// Dir is the run's work directory (WorkDirs), removed by Finish; empty when the run keeps
	// its files elsewhere (LogDir set by the caller, as bench-scale's OUT_DIR).
	Dir    string
	LogDir string
	BinDir string
	// Bulky are directories under Dir removed even after a failure (Dir/bin always is): a
	// server's data, the generated registry. The logs stay for the failure line to point at.
	Bulky []string

	step  string
	procs []*Proc
	ports map[int]bool
}

// New returns a Run printing to out and err.
func New(prog string, out, err io.Writer) *Run {
	return &Run{Prog: prog, Out: out, Err: err, step: "start", ports: map[int]bool{}}
}

// WorkDirs makes the run's directory, $TMPDIR/galleon-<name>.XXXXXX, with logs/ and bin/ in it.
func (r *Run) WorkDirs(name string) error {
	dir, err := os.MkdirTemp("", "galleon-"+name+".")
	if err != nil {
		return fmt.Errorf("cannot make a work directory: %w", err)
	}
	r.Dir, r.LogDir, r.BinDir = dir, filepath.Join(dir, "logs"), filepath.Join(dir, "bin")
	for _, d := range []string{r.LogDir, r.BinDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cannot make %s: %w", d, err)
		}
	}
	return nil
}

// Step starts a step: its name is printed ("\n== name") and named by the failure line of an
// interruption.
func (r *Run) Step(name string) {
	r.step = name
	fmt.Fprintf(r.Out, "\n== %s\n", name)
}

// CurrentStep is the step Step last set ("start" before the first).
func (r *Run) CurrentStep() string { return r.step }

// Say prints one line to Out.
func (r *Run) Say(format string, args ...any) {
	fmt.Fprintf(r.Out, format+"\n", args...)
}

// Reported is the error Finish returns for a failed run once it has printed why: the command
// exits with Code and prints nothing more.
type Reported struct{ Code int }

func (e Reported) Error() string { return fmt.Sprintf("failed (exit %d), reported above", e.Code) }

// ExitCode is the exit status for err: 0 for nil, Reported's code, 1 otherwise.
func ExitCode(err error) int {
	var rep Reported
	switch {
	case err == nil:
		return 0
	case errors.As(err, &rep):
		return rep.Code
	}
	return 1
}

// Finish ends the run with err, the run's outcome: it stops every process still running, and
//   - nil: removes Dir and returns nil;
//   - ctx cancelled (Ctrl-C, SIGTERM): prints `PROG: FAILED: interrupted during "STEP"`, removes
//     Dir and returns Reported{130};
//   - otherwise: prints `PROG: FAILED: err (logs kept in LOGDIR)`, removes Dir's bin/ and Bulky
//     and returns Reported{1}.
func (r *Run) Finish(ctx context.Context, err error) error {
	for i := len(r.procs) - 1; i >= 0; i-- {
		r.procs[i].Stop()
	}
	interrupted := err != nil && ctx.Err() != nil
	switch {
	case err == nil:
	case interrupted:
		fmt.Fprintf(r.Err, "%s: FAILED: interrupted during %q\n", r.Prog, r.step)
	case r.LogDir != "":
		fmt.Fprintf(r.Err, "%s: FAILED: %v (logs kept in %s)\n", r.Prog, err, r.LogDir)
	default:
		fmt.Fprintf(r.Err, "%s: FAILED: %v\n", r.Prog, err)
	}
	if r.Dir != "" {
		if err == nil || interrupted {
			_ = os.RemoveAll(r.Dir)
		} else {
			for _, d := range append([]string{r.BinDir}, r.Bulky...) {
				if d != "" {
					_ = os.RemoveAll(d)
				}
			}
		}
	}
	switch {
	case err == nil:
		return nil
	case interrupted:
		return Reported{Code: 130}
	}
	return Reported{Code: 1}
}
