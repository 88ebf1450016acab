// Package cli implements galleonctl's commands. It is kept out of package
// main so that the commands can be run, and their output checked, from
// tests in the same process.
package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	// Decode the bodies of every Istio config kind an MCP source may
	// serve, not only ServiceEntry/WorkloadEntry.
	_ "istio.io/api/extensions/v1alpha1"
	_ "istio.io/api/mesh/v1alpha1"
	_ "istio.io/api/networking/v1alpha3"
	_ "istio.io/api/networking/v1beta1"
	_ "istio.io/api/security/v1beta1"
	_ "istio.io/api/telemetry/v1alpha1"

	"github.com/galleon-mesh/galleon/registry/tlsfiles"
)

// DefaultAddr is where a Galleon adapter serves MCP over xDS unless told
// otherwise (its --listen default, ":16010").
const DefaultAddr = "localhost:16010"

// maxRecvMsgSize is far above any real response: a diagnostic tool must
// show a response even if it is too big for a sink.
const maxRecvMsgSize = 256 << 20

const mainUsage = `galleonctl shows what an MCP-over-xDS config source serves, as istiod sees it.

It speaks the standard protocol (Envoy ADS carrying istio.mcp.v1alpha1.Resource
payloads), so it works against Galleon, istiod, or any other MCP-over-xDS source.
With --protocol mcp it speaks legacy MCP instead (istio.mcp.v1alpha1.ResourceSource,
what Istio 1.1 - 1.8 sinks use), to Galleon or any other legacy source.

Usage:
  galleonctl <command> [flags]

Commands:
  get     fetch the resources of one or more types once, print them like kubectl
  watch   stream changes until interrupted (SotW like istiod, or --delta)
  help    show the help of a command: galleonctl help <command>

Examples:
  # Every ServiceEntry a local Galleon serves, as a kubectl-style YAML list
  galleonctl get
  # WorkloadEntries from a remote source, one name per line
  galleonctl get --addr galleon.istio-system:16010 --type workloadentries -o names
  # Follow every change, with the full changed objects
  galleonctl watch --addr galleon.istio-system:16010 -o yaml
  # What an Istio 1.8 sink gets over legacy MCP, then its incremental updates
  galleonctl get --protocol mcp --addr galleon.istio-system:16010
  galleonctl watch --protocol mcp --incremental --addr galleon.istio-system:16010

Run 'galleonctl <command> --help' for the flags of a command.
`

// Run runs galleonctl with args (without the program name) and returns the
// exit status: 0 success, 1 failure, 2 bad usage.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return 2
	}
	switch args[0] {
	case "get":
		return runGet(ctx, args[1:], stdout, stderr)
	case "watch":
		return runWatch(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && (args[1] == "get" || args[1] == "watch") {
			return Run(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, mainUsage)
		return 0
	}
	fmt.Fprintf(stderr, "galleonctl: unknown command %q\n\n%s", args[0], mainUsage)
	return 2
}

// options are the flags every command has.
type options struct {
	addr       string
	types      string
	apiVersion string
	nodeID     string
	output     string
	timeout    time.Duration
	protocol   string
	// TLS to the source (off unless one of them is set).
	tlsCA, tlsCert, tlsKey, tlsServerName string
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "addr", DefaultAddr, "`host:port` of the MCP-over-xDS source (an \"xds://\" prefix, as in istiod's configSources, is accepted)")
	fs.StringVar(&o.types, "type", "serviceentries", "what to subscribe to: serviceentries (se), workloadentries (we), or a full type URL such as\nnetworking.istio.io/v1/DestinationRule; several, comma-separated, share one stream like istiod's")
	fs.StringVar(&o.apiVersion, "api-version", "v1", "API version in the type URL of serviceentries/workloadentries: v1 (istiod >= 1.24), v1beta1, or v1alpha3 (istiod <= 1.23)")
	fs.StringVar(&o.nodeID, "node-id", "galleonctl", "node id sent to the source (sources may choose what to serve by node); the SinkNode id with --protocol mcp")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "PEM CA bundle that verifies the source's certificate: turns TLS on (default roots: the system's)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM client certificate for mutual TLS (with --tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&o.tlsServerName, "tls-server-name", "", "name the source's certificate must hold (default: the host of --addr); turns TLS on")
	fs.StringVar(&o.protocol, "protocol", "xds", "xds: MCP over xDS (istiod >= 1.9); mcp: legacy MCP, istio.mcp.v1alpha1.ResourceSource (Istio 1.1 - 1.8 sinks),\nwhere --type serviceentries/workloadentries name the collections istio/networking/v1alpha3/<type>")
}

// subscriptions turns --type (and --api-version, for xds) into what to
// subscribe to: type URLs, or legacy MCP collections with --protocol mcp.
func (o *options) subscriptions() ([]string, error) {
	switch o.protocol {
	case "xds":
		return typeURLs(o.types, o.apiVersion)
	case "mcp":
		return legacyCollections(o.types)
	}
	return nil, fmt.Errorf("--protocol %q: use xds or mcp", o.protocol)
}

// parse parses args into fs and handles --help and usage errors; it
// returns -1 to go on, or the exit status.
func parse(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) int {
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below, on stdout for --help
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		var flags bytes.Buffer
		fs.SetOutput(&flags)
		fs.PrintDefaults()
		fmt.Fprintf(stdout, "%s\nFlags:\n%s", usage, flags.String())
		return 0
	}
	if err != nil { // the flag package printed what is wrong
		fmt.Fprintf(stderr, "Run 'galleonctl %s --help' for usage.\n", fs.Name())
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "galleonctl %s: unexpected argument %q (flags come before nothing else)\nRun 'galleonctl %s --help' for usage.\n",
			fs.Name(), fs.Arg(0), fs.Name())
		return 2
	}
	return -1
}

// dial creates the gRPC client, over TLS when a --tls-* flag is set. It
// does not connect: the first stream does, and fails fast if the source
// cannot be reached.
func (o *options) dial() (*grpc.ClientConn, error) {
	addr := strings.TrimPrefix(o.addr, "xds://")
	creds := insecure.NewCredentials()
	if o.tlsCA != "" || o.tlsCert != "" || o.tlsKey != "" || o.tlsServerName != "" {
		if (o.tlsCert == "") != (o.tlsKey == "") {
			return nil, errors.New("--tls-cert and --tls-key go together: give both for mutual TLS, or neither")
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg, err := tlsfiles.Files{
			CAFile: o.tlsCA, CertFile: o.tlsCert, KeyFile: o.tlsKey, ServerName: o.tlsServerName,
			CAFlag: "--tls-ca", CertFlag: "--tls-cert", KeyFlag: "--tls-key",
		}.Config(host)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent("galleonctl"),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsgSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("--addr %q: %w", o.addr, err)
	}
	return conn, nil
}

// explain turns a stream error into a message an operator can act on.
func explain(err error, addr string, delta bool) string {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Sprintf("%s: %v", addr, err)
	}
	switch st.Code() {
	case codes.Unavailable:
		hint := ""
		if strings.Contains(st.Message(), "HTTP/1.1") {
			hint = " (an HTTP/1.1 server answered: is this the source's HTTP port instead of its gRPC one?)"
		}
		return fmt.Sprintf("cannot reach %s: %s%s", addr, st.Message(), hint)
	case codes.Unimplemented:
		if delta {
			return fmt.Sprintf("%s does not serve Delta ADS (%s); istiod only uses SotW: try without --delta", addr, st.Message())
		}
		return fmt.Sprintf("%s does not serve ADS (envoy.service.discovery.v3.AggregatedDiscoveryService): %s", addr, st.Message())
	}
	return fmt.Sprintf("%s ended the stream: %s: %s", addr, st.Code(), st.Message())
}

// explainLegacy is explain for a legacy MCP stream.
func explainLegacy(err error, addr string) string {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented {
		return fmt.Sprintf("%s does not serve legacy MCP (istio.mcp.v1alpha1.ResourceSource): %s; istiod >= 1.9 only serves MCP over xDS: try --protocol xds",
			addr, st.Message())
	}
	return explain(err, addr, false)
}

// timestamp formats arrival times: RFC 3339 with milliseconds.
func timestamp(t time.Time) string { return t.Format("2006-01-02T15:04:05.000Z07:00") }
