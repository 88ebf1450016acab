// Package daemon runs an adapter as a Galleon binary. A binary's main describes its adapter in a
// Spec and calls Main; the daemon parses the settings every binary shares (listen addresses,
// debounce, the emptiness rule, TLS, limits), builds the adapter, wires it to the core
// (pipeline, snapshots, the xDS and legacy MCP servers), serves metrics and health over HTTP,
// and stops everything it started on SIGINT or SIGTERM.
//
// The body lives in internal/server; this package is the part a partner's binary calls, and it
// does not change shape when the body does.
package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/internal/server"
	"github.com/galleon-mesh/galleon/registry"
)

// Default addresses. Istio uses 15000-15090, 8080 and 9876; these clash with none of them.
const (
	DefaultListen = ":16010"
	DefaultHTTP   = ":16014"
)

// NewRegistry builds the adapter once settings are parsed. An error is a settings problem: the
// binary prints it and exits with status 2.
type NewRegistry func(env Env) (registry.Registry, error)

// Env is what the daemon hands an adapter it builds.
type Env struct {
	// Logger is the process's logger, already tagged with the registry.
	Logger *slog.Logger
	// Registerer takes the adapter's own metrics; they appear on /metrics beside the core's.
	Registerer prometheus.Registerer
}

// Spec describes one adapter binary.
type Spec struct {
	// Name is the binary's name, as in usage text.
	Name string
	// Registry names the registry kind in logs and metrics ("file").
	Registry string
	// Summary is one line for --help.
	Summary string
	// Flags adds the adapter's flags to fs and returns the constructor that reads them once
	// parsed. It must not define a flag DaemonFlags lists.
	Flags func(fs *pflag.FlagSet) NewRegistry
}

// Main runs the binary described by spec with the process's arguments and returns its exit
// code: 0 after a clean stop, 1 on a runtime failure, 2 on bad settings.
func Main(spec Spec) int {
	return Run(context.Background(), spec, os.Args[1:], os.Stderr)
}

// Run is Main with explicit arguments and output, for tests.
func Run(ctx context.Context, spec Spec, args []string, stderr io.Writer) int {
	return server.Run(ctx, spec.server(), args, stderr)
}

// DaemonFlags returns the names of the flags the daemon defines for every binary, sorted: an
// adapter's Spec.Flags must not define them.
func DaemonFlags() []string { return server.DaemonFlags() }

// EnvName returns the environment variable that sets a flag: --debounce-quiet is
// GALLEON_DEBOUNCE_QUIET.
func EnvName(flag string) string { return server.EnvName(flag) }

func (spec Spec) server() server.Spec {
	s := server.Spec{Name: spec.Name, Registry: spec.Registry, Summary: spec.Summary}
	if spec.Flags != nil {
		s.Flags = func(fs *pflag.FlagSet) server.NewRegistry {
			newRegistry := spec.Flags(fs)
			if newRegistry == nil {
				return nil
			}
			return func(env server.Env) (registry.Registry, error) {
				return newRegistry(Env{Logger: env.Logger, Registerer: env.Registerer})
			}
		}
	}
	return s
}

// DeprecatedFlag adds old to fs as a second name of the flag current (already defined), so a
// renamed setting keeps working under its old name on the command line, in the environment
// (GALLEON_<OLD>) and in the config file. Using it prints pflag's deprecation line and logs a
// warning naming the new flag; the old name is left out of --help. When both names are given,
// the command line wins over the environment and file, and the current name over the old.
func DeprecatedFlag(fs *pflag.FlagSet, old, current string) {
	f := fs.Lookup(current)
	if f == nil {
		panic("daemon.DeprecatedFlag: no flag --" + current + " to alias")
	}
	fs.AddFlag(&pflag.Flag{
		Name: old, Usage: f.Usage, Value: f.Value, DefValue: f.DefValue, NoOptDefVal: f.NoOptDefVal,
		Annotations: map[string][]string{server.AliasAnnotation: {current}},
	})
	_ = fs.MarkDeprecated(old, "use --"+current) // the flag was just added: cannot fail
}

// FleetSpec describes a binary that runs several registries side by side from a registry list
// (galleon-fleet): one gRPC port, one snapshot in which no host is served twice, one set of
// metrics with a registry label. Kinds are the adapters its list may name, each by its
// Spec.Registry, built from an entry's settings exactly as its own binary builds it from flags.
type FleetSpec struct {
	Name    string
	Summary string
	Kinds   []Spec
}

// FleetMain runs the fleet binary described by spec with the process's arguments and returns
// its exit code, as Main does.
func FleetMain(spec FleetSpec) int {
	return RunFleet(context.Background(), spec, os.Args[1:], os.Stderr)
}

// RunFleet is FleetMain with explicit arguments and output, for tests.
func RunFleet(ctx context.Context, spec FleetSpec, args []string, stderr io.Writer) int {
	s := server.FleetSpec{Name: spec.Name, Summary: spec.Summary}
	for _, k := range spec.Kinds {
		s.Kinds = append(s.Kinds, k.server())
	}
	return server.RunFleet(ctx, s, args, stderr)
}
