package consul

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// Defaults of Config. Each is explained where it is used.
const (
	DefaultHostTemplate      = "{{.Name}}.service.consul"
	DefaultNamespace         = "consul"
	DefaultWait              = time.Minute
	DefaultFetchConcurrency  = 8
	DefaultResync            = 5 * time.Minute
	DefaultSweepInterval     = 10 * time.Second
	DefaultDatacenterRefresh = time.Minute
	DefaultRetryMin          = 250 * time.Millisecond
	DefaultRetryMax          = 2 * time.Second

	// AllDatacenters in Config.Datacenters watches every datacenter the
	// agent knows (/v1/catalog/datacenters), followed over time.
	AllDatacenters = "all"

	// ConsulService is the service Consul's servers register themselves
	// as in every datacenter's catalog: left out unless
	// Config.IncludeConsulService, since what it serves (Consul's RPC and
	// Serf ports) is no service a mesh client calls.
	ConsulService = "consul"

	// maxWait is Consul's own cap on a blocking query's wait.
	maxWait = 10 * time.Minute

	// MaxServiceWatches bounds Config.ServiceWatches. Over HTTP/2 an agent
	// takes up to 250 queries on one connection (Go's HTTP/2 server, which
	// Consul uses, allows 250 streams), so 40,000 watches take about 160 of
	// the 200 connections it allows one client by default.
	MaxServiceWatches = 40000
)

// Consistency modes of Consul reads (Config.Consistency).
const (
	ConsistencyDefault    = "default"
	ConsistencyStale      = "stale"
	ConsistencyConsistent = "consistent"
)

// Address sources (Config.AddressSource): which address of an instance
// becomes its endpoint address.
const (
	// AddressService is the service address, or the node address when the
	// service has none (Consul's own rule, and its DNS interface's).
	AddressService = "service"
)

// taggedAddresses returns the names Consul uses for tagged addresses, on
// services and on nodes.
func taggedAddresses() []string {
	return []string{"lan", "wan", "lan_ipv4", "lan_ipv6", "wan_ipv4", "wan_ipv6"}
}

// Config configures a Consul registry. The zero value of every field is
// its default; Validate (called by New) says which setting to fix, by its
// command-line flag name, when a value is wrong.
type Config struct {
	// Address of the agent: "host:port", "http://host:port",
	// "https://host:port" or "unix:///path". Empty: CONSUL_HTTP_ADDR, else
	// 127.0.0.1:8500.
	Address string
	// Token is the ACL token. Empty: CONSUL_HTTP_TOKEN. TokenFile wins.
	Token string
	// TokenFile holds the ACL token; it is read again whenever it changes
	// (size or modification time), so a rotated token is picked up without
	// a restart. Empty: CONSUL_HTTP_TOKEN_FILE.
	TokenFile string
	// CAFile, CertFile, KeyFile and TLSServerName configure TLS to the
	// agent (CertFile and KeyFile: mutual TLS). Empty: CONSUL_CACERT,
	// CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY, CONSUL_TLS_SERVER_NAME. Any of
	// them switches a scheme-less Address to https.
	CAFile, CertFile, KeyFile, TLSServerName string

	// Datacenters to watch. Empty: the agent's own. AllDatacenters ("all")
	// alone: every datacenter the agent knows, followed over time.
	Datacenters []string
	// ConsulNamespace and Partition (Consul Enterprise) are passed on every
	// query when set. Empty: CONSUL_NAMESPACE, CONSUL_PARTITION.
	ConsulNamespace, Partition string
	// Consistency of reads: default, stale or consistent (Consul's modes).
	Consistency string
	// Wait is the longest a signal's blocking query waits for a change
	// (default 1m; at most 10m, Consul's cap). Service watches wait 10m
	// whatever it says (see ServiceWatches).
	Wait time.Duration

	// HostTemplate renders a service's host (Go text/template with
	// {{.Name}}, the service's name, {{.Datacenter}}, {{.Namespace}},
	// {{.Partition}}; {{.Service}}, the name too, is its older spelling).
	// Default "{{.Name}}.service.consul".
	HostTemplate string
	// Namespace of the ServiceEntries (default "consul"), unless
	// NamespaceMetaKey names a service meta key that carries one.
	Namespace        string
	NamespaceMetaKey string
	// ExportTo of every ServiceEntry (empty: everywhere), unless
	// ExportToMetaKey names a service meta key holding a comma-separated
	// list.
	ExportTo        []string
	ExportToMetaKey string
	// AddressSource: "service" (default: the service address, else the
	// node's), or a tagged address name (lan, wan, lan_ipv4, lan_ipv6,
	// wan_ipv4, wan_ipv6) looked up on the service, then on the node, then
	// falling back to "service".
	AddressSource string
	// IncludeWarning serves instances whose checks are at worst warning.
	IncludeWarning bool
	// IncludeConsulService serves the catalog's own ConsulService, the
	// Consul servers' entry, which is left out by default.
	IncludeConsulService bool

	// FetchConcurrency bounds the per-service fetches in flight, over all
	// datacenters (default 8).
	FetchConcurrency int
	// Resync is the period of the safety-net sweep that compares every
	// service's index with the one last fetched (default 5m; see the
	// package documentation).
	Resync time.Duration
	// SweepInterval is the shortest time between two sweeps triggered by
	// catalog changes no signal attributes to a service (default 10s).
	SweepInterval time.Duration
	// ServiceWatches is the most services each followed by a blocking
	// query of its own (/v1/health/service/<name>), which sees every change
	// to the service within milliseconds: port, meta, address and weight
	// edits too, that no signal names and only a sweep finds otherwise
	// (default 0: none). The watches need the agent's HTTPS listener, where
	// they share a few connections over HTTP/2 (about one per 250); over
	// plain HTTP each would take one of the 200 connections the agent
	// allows a client. Services beyond the number are left to the signals
	// and sweeps. At most MaxServiceWatches.
	ServiceWatches int
	// DatacenterRefresh is how often the list of datacenters is read
	// again with Datacenters = all (default 1m).
	DatacenterRefresh time.Duration
	// allDatacenters is --consul-all-datacenters: Datacenters = all.
	allDatacenters bool
	// RetryMin and RetryMax bound the jittered exponential backoff after a
	// failed request (default 250ms and 2s: a returning agent is used within
	// about a second, and a few requests a second to an agent that is down
	// cost it nothing).
	RetryMin, RetryMax time.Duration

	// Logger receives the adapter's logs; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the adapter's metrics; nil keeps them
	// unregistered.
	Registerer prometheus.Registerer
}

// withDefaults returns cfg with every zero field set to its default.
func (cfg Config) withDefaults() Config {
	if cfg.allDatacenters {
		cfg.Datacenters = []string{AllDatacenters}
	}
	if cfg.Consistency == "" {
		cfg.Consistency = ConsistencyDefault
	}
	if cfg.Wait == 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.HostTemplate == "" {
		cfg.HostTemplate = DefaultHostTemplate
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.AddressSource == "" {
		cfg.AddressSource = AddressService
	}
	if cfg.FetchConcurrency == 0 {
		cfg.FetchConcurrency = DefaultFetchConcurrency
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.DatacenterRefresh == 0 {
		cfg.DatacenterRefresh = DefaultDatacenterRefresh
	}
	if cfg.RetryMin == 0 {
		cfg.RetryMin = DefaultRetryMin
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = DefaultRetryMax
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// Validate checks the configuration (after defaults) and names the flag to
// fix in each error. It reads the TLS files, so that a missing certificate
// stops the binary at start rather than failing every request.
func (cfg Config) Validate() error {
	cfg = cfg.withDefaults()
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch cfg.Consistency {
	case ConsistencyDefault, ConsistencyStale, ConsistencyConsistent:
	default:
		add("--%s %q: want default, stale or consistent", flagConsistency, cfg.Consistency)
	}
	if cfg.Wait < time.Second || cfg.Wait > maxWait {
		add("--%s %v: want a duration from 1s to 10m (Consul caps blocking queries at 10m)", flagWait, cfg.Wait)
	}
	if _, err := parseHostTemplate(cfg.HostTemplate); err != nil {
		add("--%s: %v", flagHostTemplate, err)
	}
	if err := model.CheckNamespace(cfg.Namespace); err != nil {
		add("--%s %v", flagNamespace, err)
	}
	if cfg.AddressSource != AddressService && !slices.Contains(taggedAddresses(), cfg.AddressSource) {
		add("--%s %q: want service or a tagged address (%s)", flagAddressSource, cfg.AddressSource, strings.Join(taggedAddresses(), ", "))
	}
	if cfg.FetchConcurrency < 1 || cfg.FetchConcurrency > 64 {
		add("--%s %d: want 1 to 64 (each is an HTTP connection; Consul allows 200 per client by default)", flagFetchConcurrency, cfg.FetchConcurrency)
	}
	if cfg.Resync < time.Second {
		add("--%s %v: want at least 1s", flagRelistInterval, cfg.Resync)
	}
	if cfg.SweepInterval < 0 {
		add("--%s %v: want a positive duration", flagSweepInterval, cfg.SweepInterval)
	}
	if cfg.ServiceWatches < 0 || cfg.ServiceWatches > MaxServiceWatches {
		add("--%s %d: want 0 (none) to %d (each 250 take one of the 200 connections the agent allows a client)", flagServiceWatches, cfg.ServiceWatches, MaxServiceWatches)
	} else if cfg.ServiceWatches > 0 {
		if ac, err := apiConfig(cfg); err == nil && !usesHTTPS(ac) {
			add("--%s %d: needs the agent's HTTPS listener, where the watches share connections over HTTP/2 (give --%s https://HOST:8501 and --%s); over plain HTTP each would take one of the 200 connections the agent allows a client", flagServiceWatches, cfg.ServiceWatches, flagAddress, flagTLSCA)
		}
	}
	if cfg.DatacenterRefresh < time.Second {
		add("--%s %v: want at least 1s", flagDatacenterRefresh, cfg.DatacenterRefresh)
	}
	if cfg.RetryMin <= 0 || cfg.RetryMax < cfg.RetryMin {
		add("retry backoff %v..%v: want 0 < min <= max", cfg.RetryMin, cfg.RetryMax)
	}
	for _, dc := range cfg.Datacenters {
		switch {
		case dc == AllDatacenters && len(cfg.Datacenters) > 1:
			add("--%s: %q must stand alone (it means every datacenter)", flagDatacenters, AllDatacenters)
		case dc == "" || strings.ContainsAny(dc, " /?&#"):
			add("--%s: %q is not a datacenter name", flagDatacenters, dc)
		}
	}
	for _, e := range cfg.ExportTo {
		if e != "." && e != "*" && model.DNSLabel(e) != e {
			add("--%s %q: want \".\", \"*\" or a namespace name", flagExportTo, e)
		}
	}
	if cfg.TokenFile != "" {
		if _, err := os.ReadFile(cfg.TokenFile); err != nil {
			add("--%s: %v", flagTokenFile, err)
		}
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		add("--%s and --%s go together: give both for mutual TLS, or neither", flagTLSCert, flagTLSKey)
	}
	for _, f := range []struct{ flag, path string }{{flagTLSCA, cfg.CAFile}, {flagTLSCert, cfg.CertFile}, {flagTLSKey, cfg.KeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.ReadFile(f.path); err != nil {
			add("--%s: %v", f.flag, err)
		}
	}
	return errors.Join(errs...)
}

// hostData is what HostTemplate is executed with.
type hostData struct {
	// Name is the Consul service's name; Service is the same, under the
	// name templates used before issue 28 (see usesServiceField).
	Name       string
	Service    string
	Datacenter string
	Namespace  string
	Partition  string
}

func newHostData(name, dc, ns, partition string) hostData {
	return hostData{Name: name, Service: name, Datacenter: dc, Namespace: ns, Partition: partition}
}

// parseHostTemplate parses HostTemplate and renders a sample, so that a
// template referring to an unknown field fails at start, not on the first
// service.
func parseHostTemplate(text string) (*template.Template, error) {
	return registry.ParseHostTemplate(text, newHostData("web", "dc1", "default", "default"))
}

// usesServiceField reports whether the template reads {{.Service}}, the
// old name of {{.Name}}: New warns once, so that operators move on.
func usesServiceField(t *template.Template) bool {
	for _, tt := range t.Templates() {
		if tt.Tree != nil && mentionsField(tt.Tree.Root, "Service") {
			return true
		}
	}
	return false
}

// mentionsField walks a template's parse tree for a field (.Field, or
// $x.Field) named field.
func mentionsField(n parse.Node, field string) bool {
	switch n := n.(type) {
	case *parse.FieldNode:
		return slices.Contains(n.Ident, field)
	case *parse.VariableNode:
		return slices.Contains(n.Ident[1:], field)
	case *parse.ChainNode:
		return slices.Contains(n.Field, field) || mentionsField(n.Node, field)
	case *parse.ListNode:
		return n != nil && slices.ContainsFunc(n.Nodes, func(c parse.Node) bool { return mentionsField(c, field) })
	case *parse.ActionNode:
		return mentionsField(n.Pipe, field)
	case *parse.PipeNode:
		return n != nil && slices.ContainsFunc(n.Cmds, func(c *parse.CommandNode) bool { return mentionsField(c, field) })
	case *parse.CommandNode:
		return slices.ContainsFunc(n.Args, func(c parse.Node) bool { return mentionsField(c, field) })
	case *parse.IfNode:
		return branchMentions(&n.BranchNode, field)
	case *parse.RangeNode:
		return branchMentions(&n.BranchNode, field)
	case *parse.WithNode:
		return branchMentions(&n.BranchNode, field)
	case *parse.TemplateNode:
		return mentionsField(n.Pipe, field)
	}
	return false
}

func branchMentions(b *parse.BranchNode, field string) bool {
	return mentionsField(b.Pipe, field) || mentionsField(b.List, field) || mentionsField(b.ElseList, field)
}

// perDatacenterHosts reports whether the template gives different hosts in
// different datacenters: then a service is one ServiceEntry per
// datacenter rather than one merged over all of them.
func perDatacenterHosts(t *template.Template) bool {
	render := func(dc string) string {
		var b bytes.Buffer
		_ = t.Execute(&b, newHostData("web", dc, "default", "default"))
		return b.String()
	}
	return render("dc-a") != render("dc-b")
}
