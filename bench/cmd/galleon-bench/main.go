// Command galleon-bench runs the benchmarks of docs/benchmarks.md that need more than `go test
// -bench`: it builds the binaries under test, starts them on free loopback ports, drives them
// with galleon-load and prints markdown ready to paste into docs/benchmarks.md.
//
//	cd bench && go run ./cmd/galleon-bench <command> [flags]
//	cd bench && go run ./cmd/galleon-bench help
//
// Every command takes its settings from environment variables (SERVICES=200 SINKS=2 ...) or
// from the flags of the same names in lower case (--services 200); a flag wins. `<command> -h`
// says what it measures and how.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/galleon-mesh/galleon/bench/internal/benchrun"
)

// command is one benchmark: run gets the arguments after its name.
type command struct {
	name  string
	usage string // one line: what it measures
	run   func(ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"peer", "galleon-file against a go-control-plane peer, one markdown table", runPeer},
		{"start", "galleon-file's start → ready and VmHWM, RUNS times (BASE=<rev> alternates with a build of rev)", runStart},
		{"sync-floor", "the initial sync of N sinks against a null source in its own process", runSyncFloor},
		{"scale", "the core's BenchmarkInstanceChange at several scales: markdown, TSV and the PNG", runScale},
		{"eureka", "galleon-eureka's polling against a real Eureka server (polaris-server): bytes, latency, server CPU", runEureka},
		{"nacos", "galleon-nacos against a real Nacos API server (polaris-server): start, pushes per change, latency, memory", runNacos},
		{"zookeeper", "galleon-zookeeper against a real ZooKeeper 3.8: listing, changes, watches, a session expiry", runZooKeeper},
		{"fleet", "one galleon-fleet serving several file registries against one galleon-file each: start, memory, CPU per change", runFleet},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	all := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr, all)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range all {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:])
		var rep benchrun.Reported
		var ue usageError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &rep):
			return rep.Code
		case errors.As(err, &ue):
			if ue.msg != "" {
				fmt.Fprintf(stderr, "galleon-bench %s: %s\n", c.name, ue.msg)
			}
			return 2
		}
		fmt.Fprintf(stderr, "galleon-bench %s: %v\n", c.name, err)
		return 1
	}
	fmt.Fprintf(stderr, "galleon-bench: unknown command %q; `go run ./cmd/galleon-bench help` lists them\n", args[0])
	return 2
}

// usageError is a wrong invocation, or a request for help: exit status 2, as the scripts'.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usage(w io.Writer, all []command) {
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	var b strings.Builder
	b.WriteString("usage: cd bench && go run ./cmd/galleon-bench <command> [flags]\n\ncommands:\n")
	for _, c := range all {
		fmt.Fprintf(&b, "  %-11s %s\n", c.name, c.usage)
	}
	b.WriteString("\n`<command> -h` lists its settings: environment variables, or flags of the same names in lower case.\n")
	fmt.Fprint(w, b.String())
}

// parseFlags parses a command's flags and up to positional arguments after them; -h prints help
// (what the command measures) and its flags to stderr, and is a usageError, as any other mistake.
func parseFlags(fs *flag.FlagSet, help string, args []string, positional int) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(os.Stderr)
		fmt.Fprint(os.Stderr, help)
		fmt.Fprintln(os.Stderr, "\nflags (each defaults to its environment variable):")
		fs.PrintDefaults()
		return usageError{}
	case err != nil:
		return usageError{msg: err.Error() + " (-h for help)"}
	case fs.NArg() > positional:
		return usageError{msg: fmt.Sprintf("unexpected argument %q: settings are flags or environment variables (-h for help)", fs.Arg(positional))}
	}
	return nil
}

// wholeSetting is a setting that must be a whole number >= 1: its name, its value as given and
// where the number goes.
type wholeSetting struct {
	name, value string
	to          *int
}

// parseWholes parses settings in order and fails at the first that is not a whole number >= 1.
func parseWholes(settings ...wholeSetting) error {
	for _, s := range settings {
		n, err := benchrun.Whole(s.name, s.value)
		if err != nil {
			return err
		}
		*s.to = n
	}
	return nil
}

// settingsError returns a usageError as it is, and reports a bad setting as a failure of run r.
func settingsError(ctx context.Context, r *benchrun.Run, err error) error {
	var ue usageError
	if errors.As(err, &ue) {
		return err
	}
	return r.Finish(ctx, err)
}
