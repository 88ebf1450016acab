// Command devtool is Galleon's developer tool: it provisions the third-party servers the tests,
// the demo and the benchmarks run (built from the Go module proxy through committed go.sums and
// cached outside the repository), and runs the steps of `make test` that are more than one go
// command. The Makefile calls it; nothing in the product imports it.
//
//	go run ./internal/testing/devtool <command> [flags] [args]
//	go run ./internal/testing/devtool help
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand: run gets the arguments after its name and returns an error whose
// text is the one line printed (prefixed by the command's name) when it fails.
type command struct {
	name   string
	usage  string // one line: arguments, then what it does
	run    func(ctx context.Context, args []string) error
	hidden bool
}

func commands() []command {
	var all []command
	all = append(all, coreCommands()...)
	all = append(all, provisionCommands()...)
	all = append(all, devCommands()...)
	return all
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	all := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(all)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range all {
		if c.name == args[0] {
			if err := c.run(ctx, args[1:]); err != nil {
				fmt.Fprintf(os.Stderr, "devtool %s: %v\n", c.name, err)
				if ue, ok := err.(usageError); ok && ue.exit != 0 {
					return ue.exit
				}
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(os.Stderr, "devtool: unknown command %q; `go run ./internal/testing/devtool help` lists them\n", args[0])
	return 2
}

// usageError is a wrong invocation: exit status 2, as flag's.
type usageError struct {
	msg  string
	exit int
}

func (e usageError) Error() string { return e.msg }

func usage(all []command) {
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	var b strings.Builder
	b.WriteString("usage: go run ./internal/testing/devtool <command> [args]\n\ncommands:\n")
	for _, c := range all {
		if !c.hidden {
			fmt.Fprintf(&b, "  %-16s %s\n", c.name, c.usage)
		}
	}
	fmt.Fprint(os.Stderr, b.String())
}
