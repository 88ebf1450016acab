// Package daemon runs an adapter as a Galleon binary: it parses settings,
// wires registry -> pipeline -> snapshot store -> xDS server, serves metrics
// and health over HTTP, and stops everything it started on SIGINT/SIGTERM.
// A binary's main only describes its adapter in a Spec and calls Main.
package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/galleon-mesh/galleon/internal/convert"
	"github.com/galleon-mesh/galleon/internal/importfilter"
	"github.com/galleon-mesh/galleon/internal/pipeline"
	"github.com/galleon-mesh/galleon/internal/serve"
	"github.com/galleon-mesh/galleon/internal/serve/mcp"
	"github.com/galleon-mesh/galleon/internal/serve/shard"
	"github.com/galleon-mesh/galleon/internal/serve/subset"
	"github.com/galleon-mesh/galleon/internal/serve/xds"
	"github.com/galleon-mesh/galleon/internal/server/rungroup"
	"github.com/galleon-mesh/galleon/internal/server/servertls"
	"github.com/galleon-mesh/galleon/internal/snapshot"
	"github.com/galleon-mesh/galleon/internal/vip"
	"github.com/galleon-mesh/galleon/registry"
	"github.com/galleon-mesh/galleon/registry/tlsfiles"
)

// Default addresses. Istio uses 15000-15090, 8080 and 9876; these clash
// with none of them.
const (
	DefaultListen = ":16010"
	DefaultHTTP   = ":16014"
)

// NewRegistry builds the adapter once settings are parsed. An error is a
// settings problem: the binary prints it and exits with status 2.
type NewRegistry func(env Env) (registry.Registry, error)

// Env is what the daemon hands an adapter it builds.
type Env struct {
	// Logger is the process's logger, already tagged with the registry.
	Logger *slog.Logger
	// Registerer takes the adapter's own metrics; they appear on /metrics
	// beside the core's.
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
	// Flags adds the adapter's flags to fs and returns the constructor that
	// reads them once parsed.
	Flags func(fs *pflag.FlagSet) NewRegistry
}

// options are the settings every binary shares.
type options struct {
	config         string
	listen         string
	http           string
	logFormat      string
	logLevel       string
	output         string
	panicThreshold int
	quiet          time.Duration
	maxDelay       time.Duration
	// The emptiness rule (internal/pipeline/hold.go).
	removalHold      time.Duration
	removalHoldShare int
	shutdownGrace    time.Duration
	debugPprof       bool
	sendTimeout      time.Duration
	subsets          string
	rules            subset.Rules // read from the subsets file at start
	shardListen      []string     // one address per shard (internal/serve/shard)

	// What gRPC clients may hold in total (serve.Budget).
	maxStreams              int
	maxStreamsPerClient     int
	maxConnections          int
	maxConnectionsPerClient int
	maxNames                int
	maxNameBytes            int64

	// Addresses for hosts the registry gives none (internal/vip).
	noEndpointsLabel bool

	vipAllocate bool
	vipRanges   []string
	vipExclude  []string

	// Legacy MCP callout: dial a sink's ResourceSink server.
	calloutAddr       string
	calloutCA         string
	calloutCert       string
	calloutKey        string
	calloutServerName string
	calloutTLS        *tls.Config // built from the files at start

	// TLS on the gRPC listener.
	tlsCert, tlsKey, tlsClientCA string
	tlsClientOptional            bool
	tlsAllowedClients            []string

	// Import filters (internal/importfilter), and what check made of them.
	filters importfilter.Settings
	filter  *importfilter.Filter

	// The Kubernetes output (internal/kubewrite).
	kube kubeOptions
	// name is the binary's name: the default --kubernetes-owner.
	name string
}

func (o *options) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.config, "config", "", "YAML file of settings; keys are flag names (flags and GALLEON_* variables override it)")
	fs.StringVar(&o.listen, "listen", DefaultListen, "gRPC address serving MCP over xDS (istiod's configSources: xds://<this address>) and legacy MCP (istio.mcp.v1alpha1 ResourceSource)")
	fs.StringVar(&o.http, "http", DefaultHTTP, "HTTP address for /metrics, /healthz, /readyz and /debug/status")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.output, "output", "serviceentry", "resources to serve: serviceentry (endpoints inline) or workloadentry (one WorkloadEntry per instance)")
	fs.IntVar(&o.panicThreshold, "panic-threshold", 0, "percent: when fewer instances of a service are healthy, serve all but draining ones (0 disables)")
	fs.DurationVar(&o.quiet, "debounce-quiet", pipeline.DefaultQuiet, "registry changes are served once none came for this long (the first full listing at once)")
	fs.DurationVar(&o.maxDelay, "debounce-max", pipeline.DefaultMaxDelay, "longest a stream of registry changes may hold serving back")
	fs.DurationVar(&o.removalHold, "removal-hold", pipeline.DefaultRemovalHold, "an answer of the registry that would remove every served service, or more than --removal-hold-share percent of them, is held (the services stay served, /readyz and /debug/status say so) until it has stood this long with the registry reachable; 0 applies such answers at once (for registries that really empty, e.g. tests)")
	fs.IntVar(&o.removalHoldShare, "removal-hold-share", pipeline.DefaultRemovalHoldShare, "percent of the served services an answer may remove without a hold, in registries of 10 services or more (removing every service is always held); 100: hold only answers that remove everything")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace", 5*time.Second, "how long streams may drain on SIGTERM")
	fs.DurationVar(&o.sendTimeout, "send-timeout", serve.DefaultSendTimeout, "a sink that leaves a response unread this long has its stream closed (ResourceExhausted), releasing what it pinned")
	fs.IntVar(&o.maxStreams, "max-streams", serve.DefaultMaxStreams, "config streams (xDS SotW and Delta, legacy MCP) all clients may hold open at once; one more is refused with ResourceExhausted. An istiod holds one per config source, a tool one while it runs: the default serves hundreds while bounding what clients cost together (0: no limit)")
	fs.IntVar(&o.maxStreamsPerClient, "max-streams-per-client", serve.DefaultMaxStreamsPerClient, "config streams one client may hold open at once (a client is the identity of its certificate under mutual TLS, else its IP address; node ids are the client's choice); the default leaves room for many istiods behind one address while no one address takes more than a tenth of --max-streams. Also the streams one HTTP/2 connection may carry (0: no limit)")
	fs.IntVar(&o.maxConnections, "max-connections", serve.DefaultMaxConnections, "gRPC connections open at once; one more is closed as soon as it is accepted (the client retries with its backoff). An istiod keeps one (0: no limit)")
	fs.IntVar(&o.maxConnectionsPerClient, "max-connections-per-client", serve.DefaultMaxConnectionsPerClient, "gRPC connections open at once from one IP address, so that one address cannot take every connection, e.g. with idle ones (0: no limit)")
	fs.IntVar(&o.maxNames, "max-names", serve.DefaultMaxNames, "resource names all streams may hold together, as Delta subscriptions and resume versions (initial_resource_versions, xDS and legacy MCP); a request that would pass it is refused with ResourceExhausted and its stream closed, as one over the per-stream bound of 200,000. Wildcard subscribers such as istiod hold none; an istiod resuming 10,000 services x 10 WorkloadEntries holds 110,000, so the default lets nine resume at once (0: no limit)")
	fs.Int64Var(&o.maxNameBytes, "max-name-bytes", serve.DefaultMaxNameBytes, "bytes of the resource names (and resume versions) all streams may hold together, refused as --max-names is; the default is 1,000,000 names of 64 bytes, a typical namespace/name and version, and bounds what made-up names of the longest allowed length (512 bytes) can take (0: no limit)")
	fs.BoolVar(&o.debugPprof, "debug-pprof", false, "serve Go profiles on /debug/pprof/ of --http (off by default: anyone who reaches the port could profile the process); the command line is never served")
	fs.StringVar(&o.subsets, "subsets", "", "YAML file of config subsets: which sinks (by node id, xDS node metadata or MCP SinkNode annotations) receive which services (by namespace, registry, host or label); sinks no subset selects receive everything (docs/configuration.md#config-subsets)")
	fs.BoolVar(&o.noEndpointsLabel, "no-endpoints-label", true, "label a STATIC ServiceEntry that has no endpoint galleon.io/endpoints=none, so that istiod 1.29 and older drop its last endpoint (one full push when a service loses its last endpoint, one when it gets one back); false when every istiod reading this source is 1.30 or later, which clear it themselves (docs/istiod-releases.md)")
	fs.StringSliceVar(&o.shardListen, "shard-listen", nil, "serve the registry as shards as well, one gRPC address per shard (e.g. :16020,:16021,:16022,:16023): each serves a stable part of the ServiceEntries (by name), so that a change re-sends one shard to istiod, not the whole registry; list every shard address in istiod's configSources and not --listen (docs/configuration.md#shards)")
	fs.BoolVar(&o.vipAllocate, "vip-allocate", true, "give every served host that has no address from the registry one from --vip-ranges, the same in every replica and across restarts, so that its TCP ports get a listener of their own in each sidecar and DNS capture answers it (docs/vips.md); false: serve only the registry's addresses")
	fs.StringSliceVar(&o.vipRanges, "vip-ranges", vip.DefaultRanges, "CIDR blocks allocated addresses come from: one IPv4 and, for dual-stack meshes, one IPv6; must not overlap any real network of the mesh")
	fs.StringSliceVar(&o.vipExclude, "vip-exclude", vip.DefaultExclude, "CIDR blocks never allocated: istiod's own auto-allocation prefixes (PILOT_IP_AUTOALLOCATE_IPV4_PREFIX, _IPV6_PREFIX) by default; change it with them")
	fs.StringVar(&o.calloutAddr, "mcp-callout", "", "legacy MCP callout: host:port of a sink's istio.mcp.v1alpha1 ResourceSink server to dial and serve (for sinks that cannot reach this process); empty: off")
	fs.StringVar(&o.calloutCA, "mcp-callout-ca", "", "PEM CA bundle that verifies the callout sink's certificate; turns TLS on (default roots: the system's)")
	fs.StringVar(&o.calloutCert, "mcp-callout-cert", "", "PEM client certificate for mutual TLS to the callout sink (with --mcp-callout-key)")
	fs.StringVar(&o.calloutKey, "mcp-callout-key", "", "PEM private key of --mcp-callout-cert")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate of the gRPC listener: turns TLS on (with --tls-key); reloaded when the file changes")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert; reloaded when the file changes")
	fs.StringVar(&o.tlsClientCA, "tls-client-ca", "", "PEM CA bundle that verifies client certificates of the gRPC listener: turns mutual TLS on (with --tls-cert); reloaded when the file changes")
	fs.BoolVar(&o.tlsClientOptional, "tls-client-cert-optional", false, "with --tls-client-ca, also accept clients without a certificate (istiod dials config sources in SIMPLE TLS mode only), verifying those that present one")
	fs.StringSliceVar(&o.tlsAllowedClients, "tls-allowed-clients", nil, "with --tls-client-ca, the identities a client certificate must hold one of: URI SANs (spiffe://cluster.local/ns/istio-system/sa/istiod) or DNS SANs; a trailing * matches any suffix")
	fs.StringVar(&o.calloutServerName, "mcp-callout-server-name", "", "name the callout sink's certificate must carry (default: the host of --mcp-callout); turns TLS on")
	o.registerFilters(fs)
	o.kube.register(fs)
}

// registerFilters declares the import filters: what of the registry is served at all
// (docs/configuration.md#import-filters). Left out is counted, not rejected.
func (o *options) registerFilters(fs *pflag.FlagSet) {
	f := &o.filters
	fs.StringSliceVar(&f.IncludeServices, importfilter.IncludeServices, nil, "import filter: serve only the services whose name (the ServiceEntry's, as the adapter names it) matches one of these glob patterns (path.Match: orders-*, team-?); empty: every service")
	fs.StringSliceVar(&f.ExcludeServices, importfilter.ExcludeServices, nil, "import filter: leave out the services whose name matches one of these glob patterns; wins over --"+importfilter.IncludeServices)
	fs.StringSliceVar(&f.IncludeNamespaces, importfilter.IncludeNamespaces, nil, "import filter: serve only the services whose namespace (the ServiceEntry's) matches one of these glob patterns; empty: every namespace")
	fs.StringSliceVar(&f.ExcludeNamespaces, importfilter.ExcludeNamespaces, nil, "import filter: leave out the services whose namespace matches one of these glob patterns; wins over --"+importfilter.IncludeNamespaces)
	fs.StringSliceVar(&f.IncludeLabels, importfilter.IncludeLabels, nil, "import filter: serve only the instances whose labels (over their service's) match one of these selectors, key=value or key alone for any value (a Consul tag canary is the label canary); a service left with no instance is left out")
	fs.StringSliceVar(&f.ExcludeLabels, importfilter.ExcludeLabels, nil, "import filter: leave out the instances whose labels (over their service's) match one of these selectors, key=value or key; wins over --"+importfilter.IncludeLabels+"; a service left with no instance is left out")
	fs.StringSliceVar(&f.IncludeInstanceCIDRs, importfilter.IncludeInstanceCIDRs, nil, "import filter: serve only the instances whose IP address is in one of these CIDR blocks (host-name addresses are kept); a service left with no instance is left out")
	fs.StringSliceVar(&f.ExcludeInstanceCIDRs, importfilter.ExcludeInstanceCIDRs, nil, "import filter: leave out the instances whose IP address is in one of these CIDR blocks; wins over --"+importfilter.IncludeInstanceCIDRs)
}

func (o *options) check() error {
	var errs []error
	errs = append(errs, checkAddress("listen", o.listen), checkAddress("http", o.http),
		oneOf("log-format", o.logFormat, "text", "json"),
		oneOf("log-level", o.logLevel, "debug", "info", "warn", "error"),
		oneOf("output", o.output, "serviceentry", "workloadentry"))
	if o.subsets != "" {
		rules, err := subset.Load(o.subsets)
		if err != nil {
			errs = append(errs, fmt.Errorf("--subsets: %w", err))
		}
		o.rules = rules
	}
	errs = append(errs, o.checkShards())
	if o.sendTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--send-timeout %v: want a positive duration, e.g. 1m", o.sendTimeout))
	}
	for _, l := range []struct {
		flag string
		v    int64
	}{
		{"max-streams", int64(o.maxStreams)}, {"max-streams-per-client", int64(o.maxStreamsPerClient)},
		{"max-connections", int64(o.maxConnections)}, {"max-connections-per-client", int64(o.maxConnectionsPerClient)},
		{"max-names", int64(o.maxNames)}, {"max-name-bytes", o.maxNameBytes},
	} {
		if l.v < 0 {
			errs = append(errs, fmt.Errorf("--%s %d: want 0 (no limit) or a positive number", l.flag, l.v))
		}
	}
	if o.maxStreamsPerClient > 1<<32-1 { // grpc.MaxConcurrentStreams takes a uint32
		errs = append(errs, fmt.Errorf("--max-streams-per-client %d: want at most %d", o.maxStreamsPerClient, 1<<32-1))
	}
	if o.panicThreshold < 0 || o.panicThreshold > 100 {
		errs = append(errs, fmt.Errorf("--panic-threshold %d: want a percentage from 0 to 100", o.panicThreshold))
	}
	if o.removalHold < 0 {
		errs = append(errs, fmt.Errorf("--removal-hold %v: want 0 (off) or a positive duration, e.g. 2m", o.removalHold))
	}
	if o.removalHoldShare < 1 || o.removalHoldShare > 100 {
		errs = append(errs, fmt.Errorf("--removal-hold-share %d: want a percentage from 1 to 100", o.removalHoldShare))
	}
	if o.quiet <= 0 || o.maxDelay <= 0 {
		errs = append(errs, fmt.Errorf("--debounce-quiet and --debounce-max must be positive durations such as 100ms"))
	}
	_, err := o.addresses()
	errs = append(errs, err, o.checkCallout(), o.checkListenerTLS())
	o.filter, err = importfilter.New(o.filters, "--")
	errs = append(errs, err, o.kube.check())
	return errors.Join(errs...)
}

// vipRangesLog says where allocated addresses come from, for the start
// log line.
func vipRangesLog(a *vip.Allocator) string {
	if a == nil {
		return "off"
	}
	var out []string
	for _, p := range a.Pools() {
		out = append(out, p.Prefix().String())
	}
	return strings.Join(out, ",")
}

// addresses returns a new allocator for --vip-ranges, nil with
// --vip-allocate=false.
func (o *options) addresses() (*vip.Allocator, error) {
	if !o.vipAllocate {
		return nil, nil
	}
	ranges, err := vip.ParsePrefixes(o.vipRanges)
	if err != nil {
		return nil, fmt.Errorf("--vip-ranges: %w", err)
	}
	exclude, err := vip.ParsePrefixes(o.vipExclude)
	if err != nil {
		return nil, fmt.Errorf("--vip-exclude: %w", err)
	}
	a, err := vip.New(ranges, exclude)
	if err != nil {
		return nil, fmt.Errorf("--vip-ranges: %w (or --vip-allocate=false)", err)
	}
	return a, nil
}

// checkCallout checks the callout flags and reads their files, so that a
// bad file stops the binary at start rather than failing every dial.
func (o *options) checkCallout() error {
	tlsFlags := o.calloutCA != "" || o.calloutCert != "" || o.calloutKey != "" || o.calloutServerName != ""
	if o.calloutAddr == "" {
		if tlsFlags {
			return fmt.Errorf("--mcp-callout-ca, --mcp-callout-cert, --mcp-callout-key and --mcp-callout-server-name need --mcp-callout (the sink's address)")
		}
		return nil
	}
	if err := checkAddress("mcp-callout", o.calloutAddr); err != nil {
		return err
	}
	if (o.calloutCert == "") != (o.calloutKey == "") {
		return fmt.Errorf("--mcp-callout-cert and --mcp-callout-key go together: give both for mutual TLS, or neither")
	}
	if !tlsFlags {
		return nil // plaintext
	}
	host, _, _ := net.SplitHostPort(o.calloutAddr)
	cfg, err := tlsfiles.Files{
		CAFile: o.calloutCA, CertFile: o.calloutCert, KeyFile: o.calloutKey, ServerName: o.calloutServerName,
		CAFlag: "--mcp-callout-ca", CertFlag: "--mcp-callout-cert", KeyFlag: "--mcp-callout-key",
	}.Config(host)
	if err != nil {
		return err
	}
	o.calloutTLS = cfg
	return nil
}

// checkShards checks the shard listeners' addresses: valid, distinct, at
// most shard.Max, and not beside config subsets (a shard serves part of
// every sink's services, which no subset rule would say).
func (o *options) checkShards() error {
	if len(o.shardListen) == 0 {
		return nil
	}
	if len(o.shardListen) > shard.Max {
		return fmt.Errorf("--shard-listen: %d addresses; give at most %d shards", len(o.shardListen), shard.Max)
	}
	if o.subsets != "" {
		return fmt.Errorf("--shard-listen and --subsets do not go together: a shard serves part of every service, whatever subset its sink is in; use one or the other")
	}
	seen := map[string]bool{}
	var errs []error
	for _, a := range o.shardListen {
		if err := checkAddress("shard-listen", a); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[a] || a == o.listen {
			errs = append(errs, fmt.Errorf("--shard-listen %s: given twice (or it is --listen); each shard needs an address of its own", a))
		}
		seen[a] = true
	}
	return errors.Join(errs...)
}

// checkListenerTLS checks that the listener's TLS flags go together; NewServer reads the files.
func (o *options) checkListenerTLS() error {
	var errs []error
	if (o.tlsCert == "") != (o.tlsKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together: give both to serve TLS, or neither for plaintext"))
	}
	if o.tlsClientCA != "" && o.tlsCert == "" {
		errs = append(errs, errors.New("--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS first"))
	}
	if o.tlsClientCA == "" && (o.tlsClientOptional || len(o.tlsAllowedClients) > 0) {
		errs = append(errs, errors.New("--tls-client-cert-optional and --tls-allowed-clients need --tls-client-ca (the CA that verifies client certificates)"))
	}
	for _, id := range o.tlsAllowedClients {
		if strings.TrimSpace(id) == "" || strings.Contains(strings.TrimSuffix(id, "*"), "*") {
			errs = append(errs, fmt.Errorf("--tls-allowed-clients %q: want a URI or DNS SAN, with at most a trailing *", id))
		}
	}
	return errors.Join(errs...)
}

// listenerTLS returns the gRPC listener's TLS source, nil for plaintext.
func (o *options) listenerTLS(log *slog.Logger, reg prometheus.Registerer) (*servertls.Server, error) {
	if o.tlsCert == "" {
		return nil, nil
	}
	return servertls.NewServer(servertls.ServerFiles{
		CertFile: o.tlsCert, KeyFile: o.tlsKey, ClientCAFile: o.tlsClientCA,
		OptionalClientCert: o.tlsClientOptional, AllowedClients: o.tlsAllowedClients,
		CertFlag: "--tls-cert", KeyFlag: "--tls-key", ClientCAFlag: "--tls-client-ca",
	}, log, reg)
}

// Main runs the binary described by spec with the process's arguments and
// returns its exit code: 0 after a clean stop, 1 on a runtime failure, 2 on
// bad settings.
func Main(spec Spec) int {
	return Run(context.Background(), spec, os.Args[1:], os.Stderr)
}

// DaemonFlags returns the names of the flags the daemon defines for every
// binary, sorted: an adapter's Spec.Flags must not define them.
func DaemonFlags() []string {
	fs := pflag.NewFlagSet("daemon", pflag.ContinueOnError)
	var o options
	o.register(fs)
	var names []string
	fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	slices.Sort(names)
	return names
}

// adapterFlags lets spec define its flags on a set of their own and adds
// them to fs, refusing a name the daemon uses (pflag would panic).
func adapterFlags(spec Spec, fs *pflag.FlagSet) (NewRegistry, error) {
	own := pflag.NewFlagSet(spec.Name, pflag.ContinueOnError)
	newRegistry := spec.Flags(own)
	var clash []string
	own.VisitAll(func(f *pflag.Flag) {
		if fs.Lookup(f.Name) != nil {
			clash = append(clash, "--"+f.Name)
		}
	})
	if len(clash) > 0 {
		return nil, fmt.Errorf("the adapter defines %s, which every Galleon binary defines already: rename it (daemon.DaemonFlags lists them)",
			strings.Join(clash, ", "))
	}
	fs.AddFlagSet(own)
	return newRegistry, nil
}

// Run is Main with explicit arguments and output, for tests.
func Run(ctx context.Context, spec Spec, args []string, stderr io.Writer) int {
	fs := pflag.NewFlagSet(spec.Name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s: %s\n\nUsage: %s [flags]\n\nEvery flag can also be set as GALLEON_<FLAG> in the environment\n(--debounce-quiet is GALLEON_DEBOUNCE_QUIET) or as a key in the --config file.\nFlags win over the environment, which wins over the file.\n\nFlags:\n%s",
			spec.Name, spec.Summary, spec.Name, fs.FlagUsages())
	}
	o := options{name: spec.Name}
	o.register(fs)
	newRegistry, err := adapterFlags(spec, fs)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", spec.Name, err)
		return 2
	}
	if code, ok := parseSettings(fs, spec.Name, args, &o, stderr, o.check); !ok {
		return code
	}
	log := newLogger(stderr, o.logFormat, o.logLevel).With("registry", spec.Registry)
	for _, f := range deprecatedInUse(fs) {
		log.Warn("a deprecated flag is set; it still works, rename it", "flag", "--"+f.Name, "use", "--"+AliasOf(f))
	}
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	listenerTLS, err := o.listenerTLS(log, metrics)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", spec.Name, err)
		return 2
	}
	reg, err := newRegistry(Env{Logger: log, Registerer: metrics})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", spec.Name, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runServers(ctx, spec, &o, reg, listenerTLS, log, metrics); err != nil {
		log.Error("stopped", "error", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

// parseSettings parses args, then the environment and the --config file, and checks the result
// with check. ok false: the binary exits with code (0 after --help, 2 on bad settings, said on
// stderr).
func parseSettings(fs *pflag.FlagSet, name string, args []string, o *options, stderr io.Writer, check func() error) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0, false
		}
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for the flags.\n", name, err, name)
		return 2, false
	}
	if err := loadSettings(fs, o.config); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2, false
	}
	if err := check(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2, false
	}
	return 0, true
}

func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level)) // checked in options.check
	ho := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// runServers runs everything until ctx is cancelled or a part fails.
func runServers(ctx context.Context, spec Spec, o *options, reg registry.Registry, listenerTLS *servertls.Server, log *slog.Logger, metrics *prometheus.Registry) error {
	c, err := newCore(o, metrics)
	if err != nil {
		return err
	}
	cfg := o.pipelineConfig(c, log, metrics)
	cfg.Registry = spec.Registry
	pipe := pipeline.New(c.store, cfg)
	return c.serve(ctx, o, listenerTLS, log, metrics, func(served servedViews) http.Handler {
		return httpHandler(spec, pipe, c.store, served, metrics, o.debugPprof)
	}, func(parts *rungroup.Group, ctx context.Context) {
		parts.Go("registry", func() error { return reg.Run(ctx, pipe) })
		parts.Go("pipeline", func() error { return pipe.Run(ctx) })
	})
}

// core is what every binary serves from: the snapshot store its pipeline
// writes and the servers read, what measures change -> every sink ACKed,
// and the address allocator.
type core struct {
	store      *snapshot.Store
	changeAcks *serve.ChangeAcks
	vips       *vip.Allocator
}

func newCore(o *options, metrics prometheus.Registerer) (*core, error) {
	vips, err := o.addresses() // checked at start
	if err != nil {
		return nil, err
	}
	// Change -> every sink ACKed: the pipeline says when each snapshot's
	// changes were reported, the servers what each stream has answered.
	return &core{
		store:      snapshot.NewStore(),
		changeAcks: serve.NewChangeAcks(metrics, append(xds.Protocols(), mcp.Protocol)),
		vips:       vips,
	}, nil
}

// pipelineConfig is the configuration of the pipeline that writes c.store,
// from the settings; the caller names the registry.
func (o *options) pipelineConfig(c *core, log *slog.Logger, metrics prometheus.Registerer) pipeline.Config {
	mode := convert.ModeServiceEntry
	if o.output == "workloadentry" {
		mode = convert.ModeWorkloadEntry
	}
	return pipeline.Config{
		VIPs:     c.vips,
		Convert:  convert.Options{Mode: mode, PanicThresholdPercent: o.panicThreshold, OmitNoEndpointsLabel: !o.noEndpointsLabel},
		Quiet:    o.quiet,
		MaxDelay: o.maxDelay,

		RemovalHold:      o.removalHold,
		RemovalHoldShare: o.removalHoldShare,

		Logger:     log,
		Registerer: metrics,
		Applied:    c.changeAcks.Changed,
		Filter:     o.filter,
	}
}

// serve runs the gRPC and HTTP servers on c.store, and the parts run
// adds, until ctx is cancelled or a part fails. handler builds the HTTP
// handler once the config subsets and shards are known. One gRPC server
// serves --listen and every shard listener: the router tells a shard's
// streams apart by the port they arrived on, and the servers, their
// metrics and the client budget stay one.
func (c *core) serve(ctx context.Context, o *options, listenerTLS *servertls.Server, log *slog.Logger, metrics prometheus.Registerer,
	handler func(served servedViews) http.Handler, run func(parts *rungroup.Group, ctx context.Context)) error {
	store := c.store
	grpcLis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	httpLis, err := net.Listen("tcp", o.http)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("--http: %w", err)
	}
	served := servedViews{} // for /debug/status
	routes := snapshot.Everyone(store)
	if len(o.rules.Subsets) > 0 {
		if served.subsets, err = subset.NewRouter(store, o.rules); err != nil {
			grpcLis.Close()
			httpLis.Close()
			return fmt.Errorf("--subsets: %w", err)
		}
		routes = served.subsets
		log.Info("config subsets", "file", o.subsets, "subsets", len(o.rules.Subsets))
	}
	shardLis, err := listenShards(o.shardListen)
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	if len(shardLis) > 0 {
		ports := make([]int, len(shardLis))
		for i, l := range shardLis {
			ports[i] = l.Addr().(*net.TCPAddr).Port
			served.shardAddrs = append(served.shardAddrs, l.Addr().String())
			if ports[i] == grpcLis.Addr().(*net.TCPAddr).Port {
				// Streams are told apart by the port they arrive on.
				err = fmt.Errorf("shard %d (%s) has --listen's port %d: give each shard a port of its own", i, l.Addr(), ports[i])
			}
		}
		if err == nil {
			served.shards, err = shard.NewRouter(store, ports, routes)
		}
		if err != nil {
			closeAll(append(shardLis, grpcLis, httpLis))
			return fmt.Errorf("--shard-listen: %w", err)
		}
		routes = served.shards
		if err := registerShardMetrics(metrics, served.shards); err != nil {
			closeAll(append(shardLis, grpcLis, httpLis))
			return err
		}
		log.Info("shards", "listen", served.shardAddrs)
	}
	// What clients hold in total, xDS and legacy MCP together: streams
	// and names (the servers), connections (the listener), and streams per
	// connection (gRPC), which bounds the health and reflection streams too.
	budget := serve.NewBudget(serve.BudgetLimits{
		Streams: o.maxStreams, StreamsPerClient: o.maxStreamsPerClient,
		Connections: o.maxConnections, ConnectionsPerClient: o.maxConnectionsPerClient,
		Names: o.maxNames, NameBytes: o.maxNameBytes,
	}, metrics, log, append(xds.Protocols(), mcp.Protocol))
	grpcLis = budget.Listener(grpcLis)
	for i := range shardLis {
		shardLis[i] = budget.Listener(shardLis[i])
	}
	grpcOpts := xds.GRPCServerOptions()
	if o.maxStreamsPerClient > 0 {
		grpcOpts = append(grpcOpts, grpc.MaxConcurrentStreams(uint32(o.maxStreamsPerClient)))
	}
	if listenerTLS != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(listenerTLS.Config())))
	}
	g := grpc.NewServer(grpcOpts...)
	xdsSrv := xds.NewServer(routes, xds.Options{Logger: log, Registerer: metrics, SendTimeout: o.sendTimeout, ChangeAcks: c.changeAcks, Budget: budget})
	xdsSrv.Register(g)
	mcpSrv := mcp.NewServer(routes, mcp.Options{Logger: log, Registerer: metrics, SendTimeout: o.sendTimeout, ChangeAcks: c.changeAcks, Budget: budget})
	mcpSrv.Register(g)
	healthSrv := health.NewServer()
	healthSrv.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(g, healthSrv)
	reflection.Register(g)
	httpSrv := &http.Server{Handler: handler(served), ReadHeaderTimeout: 10 * time.Second}

	log.Info("serving", "listen", grpcLis.Addr().String(), "tls", listenerTLS != nil, "mtls", o.tlsClientCA != "", "http", httpLis.Addr().String(),
		"output", o.output, "debounce_quiet", o.quiet, "debounce_max", o.maxDelay, "vip_ranges", vipRangesLog(c.vips),
		"client_limits", budget.Limits().String())

	var kube func(ctx context.Context) error
	if o.kube.enabled {
		if kube, err = o.kube.output(store, o.name, log, metrics); err != nil {
			closeAll(append(shardLis, grpcLis, httpLis))
			return err
		}
	}

	parts, ctx := rungroup.WithContext(ctx)
	run(parts, ctx)
	if kube != nil {
		parts.Go("kubernetes", func() error { return kube(ctx) })
	}
	parts.Go("grpc", func() error { return g.Serve(grpcLis) })
	for i, l := range shardLis {
		parts.Go(shard.Name(i), func() error { return g.Serve(l) })
	}
	parts.Go("http", func() error {
		if err := httpSrv.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	parts.Go("health", func() error { return followReadiness(ctx, store, healthSrv, log) })
	if o.calloutAddr != "" {
		log.Info("legacy MCP callout", "sink", o.calloutAddr, "tls", o.calloutTLS != nil,
			"mtls", o.calloutTLS != nil && len(o.calloutTLS.Certificates) > 0)
		parts.Go("mcp-callout", func() error {
			return mcpSrv.RunCallout(ctx, mcp.CalloutConfig{Address: o.calloutAddr, TLS: o.calloutTLS, Logger: log})
		})
	}

	<-ctx.Done()
	log.Info("stopping", "grace", o.shutdownGrace)
	// Config streams never end by themselves: end them with Unavailable so
	// that clients reconnect at once and the graceful stop needs only the
	// time to finish what is being written, not the whole grace.
	xdsSrv.Drain()
	mcpSrv.Drain()
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(o.shutdownGrace):
		g.Stop() // streams to sinks never end by themselves
	}
	shutdownCtx, done := context.WithTimeout(context.Background(), o.shutdownGrace)
	defer done()
	_ = httpSrv.Shutdown(shutdownCtx)
	return parts.Wait() // nil when every part stopped cleanly
}

// servedViews are the parts of the store served on their own, for
// /debug/status: config subsets and shards (nil when not configured).
type servedViews struct {
	subsets    *subset.Router
	shards     *shard.Router
	shardAddrs []string // shard i's listener address
}

// registerShardMetrics adds galleon_shard_services: how the registry spreads over the shards.
func registerShardMetrics(reg prometheus.Registerer, shards *shard.Router) error {
	for i := range shards.Len() {
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "galleon_shard_services",
			Help:        "ServiceEntries each shard (--shard-listen) serves.",
			ConstLabels: prometheus.Labels{"shard": strconv.Itoa(i)},
		}, func() float64 { return float64(shards.Current(i).Collection(snapshot.ServiceEntry).Len()) })
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}

// listenShards opens one listener per --shard-listen address, in order.
func listenShards(addrs []string) ([]net.Listener, error) {
	var out []net.Listener
	for i, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("--shard-listen (shard %d): %w", i, err)
		}
		out = append(out, l)
	}
	return out, nil
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

// followReadiness sets the gRPC health status to SERVING once the first
// registry listing is in the snapshot.
func followReadiness(ctx context.Context, store *snapshot.Store, h *health.Server, log *slog.Logger) error {
	changed, cancel := store.Subscribe()
	defer cancel()
	for !store.Current().Ready {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	log.Info("ready: serving the registry's services")
	<-ctx.Done()
	h.Shutdown()
	return ctx.Err()
}

// statusReport is the body of /debug/status.
type statusReport struct {
	Registry    string                     `json:"registry"`
	Synced      bool                       `json:"synced"`
	Stale       bool                       `json:"stale"`
	Unreachable string                     `json:"unreachable,omitempty"`
	Services    int                        `json:"services"`
	Seq         uint64                     `json:"seq"`
	LastFlush   *time.Time                 `json:"lastFlush,omitempty"`
	Collections map[string]collectionState `json:"collections"`
	// Rejected lists the registry records malformed now (the first
	// statusRejections by name); RejectedCount is how many there are.
	Rejected []pipeline.Rejection `json:"rejected,omitempty"`
	// Degraded are the parts of the registry unreachable now, with their
	// errors.
	Degraded map[string]string `json:"degraded,omitempty"`
	// Held is the removal the emptiness rule holds now.
	Held          *pipeline.Hold `json:"held,omitempty"`
	RejectedCount int            `json:"rejectedCount,omitempty"`
	// Filtered is what the import filters leave out now; absent without
	// filters.
	Filtered *filteredReport `json:"filtered,omitempty"`
	// Subsets are the config subsets' views, by subset name.
	Subsets map[string]map[string]collectionState `json:"subsets,omitempty"`
	// Shards are the shards' views, in shard order.
	Shards []shardState `json:"shards,omitempty"`
}

// shardState is what one shard serves, and where.
type shardState struct {
	Listen      string                     `json:"listen"`
	Collections map[string]collectionState `json:"collections"`
}

// filteredReport is what a registry's import filters leave out now, and the filters.
type filteredReport struct {
	Services  int                   `json:"services"`
	Instances int                   `json:"instances"`
	Filters   importfilter.Settings `json:"filters"`
}

// filteredOf reports the import filters of pipe, nil when it has none.
func filteredOf(pipe *pipeline.Pipeline, st pipeline.Status) *filteredReport {
	f := pipe.Filter()
	if f == nil && st.FilteredServices == 0 && st.FilteredInstances == 0 {
		return nil
	}
	return &filteredReport{Services: st.FilteredServices, Instances: st.FilteredInstances, Filters: f.Settings()}
}

// statusRejections bounds the rejected records /debug/status lists.
const statusRejections = 100

type collectionState struct {
	Version   string `json:"version"`
	Resources int    `json:"resources"`
}

func collectionStates(snap *snapshot.Snapshot) map[string]collectionState {
	out := map[string]collectionState{}
	for _, k := range snapshot.Kinds() {
		c := snap.Collection(k)
		out[k.String()] = collectionState{Version: c.Version, Resources: c.Len()}
	}
	return out
}

func httpHandler(spec Spec, pipe *pipeline.Pipeline, store *snapshot.Store, served servedViews, metrics *prometheus.Registry, profiles bool) http.Handler {
	readyz := func(w http.ResponseWriter, _ *http.Request) {
		st := pipe.Status()
		switch {
		case !st.Synced && st.Unreachable != nil:
			http.Error(w, "not ready: the registry has not been listed yet: "+pipeline.Cut(st.Unreachable.Error(), pipeline.MaxErrorLen), http.StatusServiceUnavailable)
		case !st.Synced:
			http.Error(w, "not ready: waiting for the first full listing of the registry", http.StatusServiceUnavailable)
		case st.Held != nil:
			// Ready: what is served is the last state the registry
			// confirmed, which beats an empty mesh. The hold is news for
			// the operator, not a reason to take the replica out.
			fmt.Fprintf(w, "ready (holding a removal: the registry's answer would remove %d of %d services; served until it stands at %s, --removal-hold)\n",
				st.Held.Services, st.Held.Of, st.Held.ApplyAt.UTC().Format(time.RFC3339))
		case st.Unreachable != nil:
			// Still ready: the last good state is served, which beats
			// taking this replica out of rotation. /debug/status and the
			// galleon_registry_unreachable metric say it is stale.
			fmt.Fprintf(w, "ready (stale: registry unreachable: %s)\n", pipeline.Cut(st.Unreachable.Error(), pipeline.MaxErrorLen))
		default:
			if parts := pipe.DegradedParts(); len(parts) > 0 {
				// Ready for the same reason: only what came from those
				// parts is stale.
				fmt.Fprintf(w, "ready (degraded: %d parts of the registry unreachable: %s)\n", len(parts), strings.Join(slices.Sorted(maps.Keys(parts)), ", "))
				return
			}
			fmt.Fprintln(w, "ready")
		}
	}
	status := func(w http.ResponseWriter, _ *http.Request) {
		st := pipe.Status()
		snap := store.Current()
		rep := statusReport{Registry: spec.Registry, Synced: st.Synced, Stale: st.Unreachable != nil,
			Services: st.Services, Seq: snap.Seq}
		if st.Unreachable != nil {
			rep.Unreachable = pipeline.Cut(st.Unreachable.Error(), pipeline.MaxErrorLen)
		}
		rep.Held = st.Held
		if !st.LastFlush.IsZero() {
			rep.LastFlush = &st.LastFlush
		}
		rep.Collections = collectionStates(snap)
		rep.Rejected, rep.RejectedCount = pipe.Rejections(statusRejections)
		rep.Degraded = pipe.DegradedParts()
		rep.Filtered = filteredOf(pipe, st)
		rep.Subsets = subsetStates(served.subsets)
		rep.Shards = served.shardStates()
		writeJSON(w, rep)
	}
	return serveMux(spec.Name, metrics, profiles, "ready once the registry was listed", readyz, status)
}

// subsetStates are the config subsets' views, by subset name; nil without subsets.
func subsetStates(subsets *subset.Router) map[string]map[string]collectionState {
	var out map[string]map[string]collectionState
	for name, view := range subsets.Views() {
		if out == nil {
			out = map[string]map[string]collectionState{}
		}
		out[name] = collectionStates(view)
	}
	return out
}

// shardStates are the shards' views, in shard order; nil without shards.
func (v servedViews) shardStates() []shardState {
	if v.shards == nil {
		return nil
	}
	out := make([]shardState, v.shards.Len())
	for i := range out {
		out[i] = shardState{Listen: v.shardAddrs[i], Collections: collectionStates(v.shards.Current(i))}
	}
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// serveMux serves what every binary serves over HTTP: metrics from g, liveness, readiness and
// status by the binary's own handlers, Go profiles when asked for, and an index.
func serveMux(name string, g prometheus.Gatherer, profiles bool, ready string, readyz, status http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", readyz)
	mux.HandleFunc("/debug/status", status)
	index := []string{
		"/metrics       Prometheus metrics",
		"/healthz       liveness",
		"/readyz        readiness (" + ready + ")",
		"/debug/status  what is served, as JSON",
	}
	if profiles {
		// On this mux rather than http.DefaultServeMux, and only when asked
		// for: anyone who reaches the port could profile the process. The
		// command line (pprof.Cmdline) is never served: it may hold a
		// registry token given as a flag.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		index = append(index, "/debug/pprof/  Go profiles (--debug-pprof)")
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "%s\n\n%s\n", name, strings.Join(index, "\n"))
	})
	return mux
}
