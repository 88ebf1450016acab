package eureka

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"text/template"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/adapters/eureka/internal/wire"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry/tlsfiles"
)

// Defaults of Config.
const (
	// DefaultPollInterval is how often the adapter asks for /apps/delta. Netflix's client asks
	// every 30 s (registryFetchIntervalSeconds), and a stock Eureka server refreshes the answer
	// it serves every 30 s too (responseCacheUpdateIntervalMs), so a change reaches a client
	// 0-30 s after it happened plus the client's own interval. 10 s keeps that second part
	// small for a mesh, where a stale endpoint costs requests, while each poll stays a delta
	// (a few KB at rest: what changed in the server's delta window, see docs/benchmarks.md).
	DefaultPollInterval = 10 * time.Second
	// DefaultDeltaWindow is how long a server keeps changes for /apps/delta: Netflix's
	// retentionTimeInMSInDeltaQueue, 3 minutes. After an outage at least this long a delta
	// cannot say what was missed, so the adapter fetches the full listing.
	DefaultDeltaWindow = 3 * time.Minute
	// DefaultRelistInterval is how often the full listing is fetched anyway, as a safety net:
	// apps__hashcode only counts instances by status, so a missed change that keeps the counts
	// (new metadata, a moved port) is only repaired by a full fetch.
	DefaultRelistInterval = 30 * time.Minute
	// DefaultTimeout bounds one request, body included.
	DefaultTimeout = 30 * time.Second
	// DefaultNamespace is the namespace of the ServiceEntries.
	DefaultNamespace = "default"
	// DefaultHostTemplate is the host of an application: its name, lower case, under .eureka.
	DefaultHostTemplate = "{{.Name}}.eureka"
	// DefaultProtocolKey is the metadata key that names the protocol of an instance's port, as
	// Istio's own Eureka registry read it (before 1.0). Not "protocol": Polaris overwrites that
	// key with HTTP on every registration.
	DefaultProtocolKey = "istio.protocol"
	// DefaultZoneKey is the metadata key Spring Cloud Netflix keeps an instance's zone under
	// (eureka.instance.metadata-map.zone).
	DefaultZoneKey = "zone"
	// DefaultRegionKey is the metadata key an instance's region is read from (what Polaris
	// lists, and what Spring users set beside zone).
	DefaultRegionKey = "region"

	// DefaultMaxBody bounds a listing's size, decompressed (see wire.DefaultMaxBody).
	DefaultMaxBody = wire.DefaultMaxBody
	// DefaultMaxInstances and DefaultMaxApps bound what one listing may hold (see
	// wire.DefaultMaxInstances).
	DefaultMaxInstances = wire.DefaultMaxInstances
	DefaultMaxApps      = wire.DefaultMaxApps

	// AddressIP and AddressHostName are the values of Config.Address.
	AddressIP       = "ip"
	AddressHostName = "hostname"
)

// Config configures a Eureka registry. The zero value of every field but URLs is its default;
// New says which setting to fix, by its command-line flag name, when a value is wrong.
type Config struct {
	// URLs are the base URLs of the Eureka servers, each as a client would be given it
	// (eureka.client.serviceUrl.defaultZone): "http://eureka-1:8761/eureka",
	// "https://user:password@eureka:8443/eureka/v2". The adapter reads one server at a time
	// and moves to the next when it fails. Required.
	URLs []string
	// PollInterval is how often /apps/delta is fetched. Default DefaultPollInterval.
	PollInterval time.Duration
	// DeltaWindow is how long the servers keep changes for /apps/delta (Netflix's
	// eureka.server.retentionTimeInMSInDeltaQueue; Polaris's deltaExpireInterval, 60 s).
	// After an outage this long the adapter fetches the full listing rather than a delta.
	// Default DefaultDeltaWindow.
	DeltaWindow time.Duration
	// RelistInterval is how often the full listing is fetched even when every delta
	// reconciled. 0 means DefaultRelistInterval; negative turns it off.
	RelistInterval time.Duration
	// Timeout bounds one request, connection and body included. Default DefaultTimeout.
	Timeout time.Duration
	// MaxBody bounds a listing's size (decompressed). Default DefaultMaxBody.
	MaxBody int64
	// MaxInstances and MaxApps bound the instances (servable or not) and applications one
	// listing, or the local copy a delta is applied to, may hold: a listing over either is
	// refused as it is decoded, before it is held whole, and the last state stays served.
	// Defaults DefaultMaxInstances and DefaultMaxApps.
	MaxInstances, MaxApps int
	// AuthFile holds "user:password" for HTTP basic auth, read again before every request, so a
	// rotated password needs no restart. It applies to every URL without credentials of its own.
	AuthFile string
	// TLS: a CA bundle that verifies the servers (default: the system's roots), a client
	// certificate and key for mutual TLS, and the name the servers' certificates must hold
	// (default: each URL's host). Read at every new connection.
	TLSCAFile, TLSCertFile, TLSKeyFile, TLSServerName string
	// Namespace of the ServiceEntries. Default DefaultNamespace.
	Namespace string
	// HostTemplate renders an application's host: a Go text/template with {{.Name}} (the
	// application's name, lower case), {{.App}} (as listed), {{.Namespace}}, {{.VIPAddress}},
	// {{.SecureVIPAddress}} and {{.Metadata}} (of the instance with the smallest id, e.g.
	// {{index .Metadata "mesh-host"}}). A result that is empty after sanitising falls back to
	// DefaultHostTemplate. Default DefaultHostTemplate.
	HostTemplate string
	// Address is which of an instance's addresses becomes its endpoint: AddressIP (ipAddr; the
	// default) or AddressHostName (hostName). Either falls back to the other when empty.
	Address string
	// ProtocolKey is the metadata key naming the protocol of an instance's non-secure port
	// (http, http2, grpc, tcp, ...). Default DefaultProtocolKey; the secure port is HTTPS.
	ProtocolKey string
	// ZoneKey is the metadata key holding an instance's zone when its dataCenterInfo has no
	// availability-zone (Amazon's). Default DefaultZoneKey.
	ZoneKey string
	// RegionKey is the metadata key holding an instance's region. Default DefaultRegionKey.
	RegionKey string
	// Region is the region of the instances whose own record gives none: no metadata region
	// (RegionKey) and a zone that is no cloud zone name holding its region (Spring's "zone-a"),
	// or no zone at all. Eureka clients call it eureka.client.region. "" (the default) leaves
	// such instances without a locality: istiod's locality load balancing needs a region, and
	// a zone without one would match no proxy. See docs/adapters/eureka.md.
	Region string
	// MaxLeaseAge, when positive, leaves out of the endpoints an instance whose last renewal
	// is older: what a server in self-preservation keeps listed as UP. Only full listings carry
	// renewal times (a renewal is no delta), so with it on the full listing is fetched at least
	// every MaxLeaseAge/2. A renewal time of 0 (unknown; Polaris lists 0) keeps the instance.
	MaxLeaseAge time.Duration
	// Logger receives the adapter's own logs; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the adapter's metrics (galleon_eureka_*); nil keeps them
	// unregistered.
	Registerer prometheus.Registerer
}

// hostData is what HostTemplate is executed with.
type hostData struct {
	Name, App, Namespace         string
	VIPAddress, SecureVIPAddress string
	Metadata                     map[string]string
}

// server is one configured Eureka server.
type server struct {
	base string // the base URL without credentials or a trailing '/'
	// user and password come from the URL; when user is "", AuthFile's apply.
	user, password string
	host           string // host of the URL, the TLS server name by default
	// name identifies it in logs and metrics: scheme://host:port/path, never credentials.
	name string
}

// validate sets the defaults of cfg, checks it, and returns the parsed host template and the
// servers. Its error lists every setting to fix, each by its flag.
func (cfg *Config) validate() (*template.Template, []server, error) {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	servers := cfg.checkURLs(add)
	cfg.checkPolling(add)
	cfg.checkLimits(add)
	cfg.checkAccess(add)
	host := cfg.checkMapping(add)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("eureka: %w", errors.Join(errs...))
	}
	return host, servers, nil
}

// addFunc collects one configuration error.
type addFunc func(format string, args ...any)

// checkURLs parses --eureka-urls.
func (cfg *Config) checkURLs(add addFunc) []server {
	var servers []server
	if len(cfg.URLs) == 0 {
		add("--%s is empty: give the base URL of at least one Eureka server, e.g. http://127.0.0.1:8761/eureka", flagURLs)
	}
	seen := map[string]bool{}
	for _, raw := range cfg.URLs {
		s, err := parseServerURL(strings.TrimSpace(raw))
		if err != nil {
			add("--%s %q: %v", flagURLs, redact(raw), err)
			continue
		}
		if seen[s.base] {
			add("--%s lists %s twice", flagURLs, s.name)
			continue
		}
		seen[s.base] = true
		servers = append(servers, s)
	}
	if len(servers) > maxServers {
		add("--%s lists %d servers: at most %d (a Eureka cluster has a handful)", flagURLs, len(servers), maxServers)
	}
	return servers
}

// checkPolling sets and checks the intervals: polls, the delta window, relists, timeouts and
// the lease age.
func (cfg *Config) checkPolling(add addFunc) {
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.PollInterval < 100*time.Millisecond || cfg.PollInterval > 10*time.Minute {
		add("--%s %v: want 100ms to 10m, e.g. 10s", flagPollInterval, cfg.PollInterval)
	}
	if cfg.DeltaWindow == 0 {
		cfg.DeltaWindow = DefaultDeltaWindow
	}
	if cfg.DeltaWindow < time.Second {
		add("--%s %v: want at least 1s, the servers' delta retention (Netflix: 3m)", flagDeltaWindow, cfg.DeltaWindow)
	}
	if cfg.RelistInterval == 0 {
		cfg.RelistInterval = DefaultRelistInterval
	}
	if cfg.RelistInterval > 0 && cfg.RelistInterval < cfg.PollInterval {
		add("--%s %v: want a negative value (off) or at least --%s (%v)", flagRelistInterval, cfg.RelistInterval, flagPollInterval, cfg.PollInterval)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Timeout < 100*time.Millisecond {
		add("--%s %v: want at least 100ms, e.g. 30s", flagTimeout, cfg.Timeout)
	}
	if cfg.MaxLeaseAge < 0 {
		add("--%s %v: want 0 (off) or a duration longer than the instances' lease, e.g. 5m", flagMaxLeaseAge, cfg.MaxLeaseAge)
	}
	if cfg.MaxLeaseAge > 0 && cfg.MaxLeaseAge < 2*cfg.PollInterval {
		add("--%s %v: want 0 (off) or at least twice --%s (%v)", flagMaxLeaseAge, cfg.MaxLeaseAge, flagPollInterval, cfg.PollInterval)
	}
}

// checkLimits sets and checks the bounds of a listing.
func (cfg *Config) checkLimits(add addFunc) {
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxBody < 1<<10 {
		add("--%s %d: want at least 1024 bytes", flagMaxBody, cfg.MaxBody)
	}
	if cfg.MaxInstances == 0 {
		cfg.MaxInstances = DefaultMaxInstances
	}
	if cfg.MaxInstances < 1 {
		add("--%s %d: want at least 1, e.g. %d", flagMaxInstances, cfg.MaxInstances, DefaultMaxInstances)
	}
	if cfg.MaxApps == 0 {
		cfg.MaxApps = DefaultMaxApps
	}
	if cfg.MaxApps < 1 {
		add("--%s %d: want at least 1, e.g. %d", flagMaxApps, cfg.MaxApps, DefaultMaxApps)
	}
}

// checkAccess checks the credentials and TLS files by reading them once.
func (cfg *Config) checkAccess(add addFunc) {
	if cfg.AuthFile != "" {
		if _, _, err := cfg.basicAuth(); err != nil {
			add("%v", err)
		}
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		add("--%s and --%s go together: give both (a client certificate for mutual TLS) or neither", flagTLSCert, flagTLSKey)
	}
	if cfg.TLSCAFile != "" || cfg.TLSCertFile != "" {
		if _, err := cfg.tlsFiles().Config("check"); err != nil {
			add("%v", err)
		}
	}
}

// checkMapping sets and checks how applications are mapped, and returns the host template
// (nil when it does not parse).
func (cfg *Config) checkMapping(add addFunc) *template.Template {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if err := model.CheckNamespace(cfg.Namespace); err != nil {
		add("--%s %v", flagNamespace, err)
	}
	if cfg.HostTemplate == "" {
		cfg.HostTemplate = DefaultHostTemplate
	}
	host, err := parseHostTemplate(cfg.HostTemplate, cfg.Namespace)
	if err != nil {
		add("--%s %v", flagHostTemplate, err)
	}
	switch cfg.Address {
	case "":
		cfg.Address = AddressIP
	case AddressIP, AddressHostName:
	default:
		add("--%s %q: want %s (ipAddr) or %s (hostName)", flagAddress, cfg.Address, AddressIP, AddressHostName)
	}
	cfg.ProtocolKey = cmp.Or(cfg.ProtocolKey, DefaultProtocolKey)
	cfg.ZoneKey = cmp.Or(cfg.ZoneKey, DefaultZoneKey)
	cfg.RegionKey = cmp.Or(cfg.RegionKey, DefaultRegionKey)
	cfg.Region = strings.TrimSpace(cfg.Region)
	if strings.ContainsAny(cfg.Region, "/ \t\n") || len(cfg.Region) > 253 {
		add("--%s %q: want a region name without '/' or spaces, e.g. us-east-1", flagRegion, cfg.Region)
	}
	return host
}

// parseHostTemplate parses --eureka-host-template and renders it once on a sample application.
// Not registry.ParseHostTemplate: that one refuses a missing map key and a template that
// renders no host for its sample, and Eureka's reads free-form metadata, where an absent key is
// empty (missingkey=zero) and an empty host falls back to DefaultHostTemplate
// ({{index .Metadata "mesh-host"}} is the documented example).
func parseHostTemplate(text, namespace string) (*template.Template, error) {
	host, err := template.New("host").Option("missingkey=zero").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", text, err)
	}
	var b strings.Builder
	err = host.Execute(&b, hostData{Name: "app", App: "APP", Namespace: namespace, VIPAddress: "app", SecureVIPAddress: "app", Metadata: map[string]string{}})
	if err != nil {
		return nil, fmt.Errorf("%q: %w (fields: .Name, .App, .Namespace, .VIPAddress, .SecureVIPAddress, .Metadata)", text, err)
	}
	return host, nil
}

// maxServers bounds --eureka-urls: each server is a label value of the adapter's metrics.
const maxServers = 16

// parseServerURL reads one --eureka-urls entry. The path is kept as given (/eureka,
// /eureka/v2, or none); credentials move out of it.
func parseServerURL(raw string) (server, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return server{}, errors.New("not a URL: want http(s)://host:port/eureka")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return server{}, fmt.Errorf("scheme %q: want http or https, e.g. http://host:8761/eureka", u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return server{}, errors.New("no host: want http(s)://host:port/eureka")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return server{}, errors.New("has a query or fragment: give the base URL only, e.g. http://host:8761/eureka")
	}
	s := server{host: u.Hostname()}
	if u.User != nil {
		s.user = u.User.Username()
		s.password, _ = u.User.Password()
		if s.user == "" {
			return server{}, errors.New("credentials without a user name: want user:password@")
		}
		u.User = nil
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	s.base = u.String()
	s.name = s.base
	return s, nil
}

// redact hides the password of a URL that may not parse, for error messages.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if at := strings.LastIndex(raw, "@"); at >= 0 {
		if i := strings.Index(raw, "://"); i >= 0 && i < at {
			return raw[:i+3] + "xxxxx" + raw[at:]
		}
	}
	return raw
}

// basicAuth reads AuthFile: user and password, or "" when there is no file.
func (cfg *Config) basicAuth() (user, password string, err error) {
	if cfg.AuthFile == "" {
		return "", "", nil
	}
	s, err := tlsfiles.ReadSecret(cfg.AuthFile)
	if err != nil {
		return "", "", fmt.Errorf("--%s: %w", flagAuthFile, err)
	}
	user, password, ok := strings.Cut(s, ":")
	if !ok || user == "" || strings.ContainsAny(s, "\n\r") {
		return "", "", fmt.Errorf("--%s %s: want one line user:password (HTTP basic auth)", flagAuthFile, cfg.AuthFile)
	}
	return user, password, nil
}

// limits are the bounds of one listing.
func (cfg *Config) limits() wire.Limits {
	return wire.Limits{MaxBody: cfg.MaxBody, MaxApps: cfg.MaxApps, MaxInstances: cfg.MaxInstances}
}

// limitFlag names the flag that raises a limit, for errors.
func limitFlag(what string) string {
	switch what {
	case wire.LimitApplications:
		return "--" + flagMaxApps
	case wire.LimitInstances:
		return "--" + flagMaxInstances
	}
	return "--" + flagMaxBody
}

func (cfg *Config) tlsFiles() tlsfiles.Files {
	return tlsfiles.Files{
		CAFile: cfg.TLSCAFile, CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, ServerName: cfg.TLSServerName,
		CAFlag: "--" + flagTLSCA, CertFlag: "--" + flagTLSCert, KeyFlag: "--" + flagTLSKey,
	}
}
