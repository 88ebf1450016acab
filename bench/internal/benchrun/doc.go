// Package benchrun is what the benchmark subcommands of galleon-bench share (bench/cmd/galleon-bench):
// the Go form of scripts/bench-lib.sh and scripts/proc-lib.sh.
//
// A subcommand makes a Run, gives it a work directory, builds the binaries it measures into it,
// starts them as Procs (each with its own log, in its own session, optionally under taskset), waits
// for a log line or a URL, reads their memory and CPU time from /proc and prints markdown rows.
// Finish stops what is still running, prints the one failure line and removes the work directory:
//
//	r := benchrun.New("bench-peer", os.Stdout, os.Stderr)
//	err := measure(ctx, r) // r.WorkDirs, r.Step, benchrun.GoBuild, r.Start, p.WaitLine, benchrun.ProcKB, ...
//	return r.Finish(ctx, err)
//
// The API by concern:
//   - the run: New, Run.WorkDirs (Dir, LogDir, BinDir), Run.Step, Run.Say, Run.Finish, Reported
//     (the error Finish returns once it has printed the failure: the exit code to use), ExitCode;
//   - settings: Setting (a flag defaulting to its environment variable), Env (${NAME:-default}),
//     Whole, Instances, OneOf, Words, EnvWords, NeedTools;
//   - processes: Run.Start(Spec) -> *Proc (Alive, Stop, Pid, Log, LogLine, Tail, WaitLine,
//     Why, Signal, ExitErr, Started), WaitFor (ErrExited), Run.FreeAddr, HTTPOK, HTTPGet,
//     MetricSum, PinSides (Pinning, Prefix), FirstMatch and FirstOrLast (of a log file);
//   - /proc: ProcKB (VmRSS, VmHWM), CPUTicks, MachineTicks, ClockTicks, LoadAvg, NProc, CheckProc,
//     and the parsers of their text (StatusKB, StatTicks, StatMachineTicks, LoadAvgOf);
//   - numbers: DurSeconds (a Go duration, µs included), Ms, Secs, MiB, Thousands, Median,
//     AwkNumber (a number as awk's print writes it), Ratio;
//   - markdown: Row, Rows;
//   - builds, commands and the tree: RepoRoot, Run.BuildBinaries (galleon-file, galleon-load...
//     into BinDir), GoBuild, GoTestBinary, RunTo (a command in the
//     foreground, its output to a log), GitArchive, Revision, CommitOf,
//     GoVersion, GoModVersion, Stamp.
//
// Processes are signalled by the pid the Run started, never by name; a Proc's exit is collected by
// a goroutine the Proc owns, which ends when the process does (Stop and Finish wait for it).
package benchrun
