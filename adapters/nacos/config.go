package nacos

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/registry/tlsfiles"
)

// Defaults of Config.
const (
	// DefaultPort is the HTTP port of a server given without one, Nacos's.
	DefaultPort = 8848
	// DefaultGRPCPortOffset is what Nacos's clients add to a server's HTTP port to reach its gRPC
	// port (the Java client's Constants.SDK_GRPC_PORT_DEFAULT_OFFSET, nacos-sdk-go's
	// constant.RpcPortOffset).
	DefaultGRPCPortOffset = 1000
	// DefaultContextPath is the servers' HTTP context path.
	DefaultContextPath = "/nacos"
	// DefaultNamespace is the namespace watched by default: Nacos's default namespace, whose
	// ID the API takes as "" or "public".
	DefaultNamespace = "public"
	// DefaultGroup is Nacos's default group.
	DefaultGroup = "DEFAULT_GROUP"
	// DefaultDiscoveryInterval is how often service lists are read. A change to a service the
	// adapter watches arrives as a push, at once; only a service that did not exist before
	// waits for a listing (up to this long). Each listing costs one request per page per
	// (namespace, group): at 10,000 services and pages of 500, 20 requests every 5 s.
	DefaultDiscoveryInterval = 5 * time.Second
	// DefaultRefreshInterval is how often every subscribed service is read again, the safety
	// net for a push the server never sent or that was lost (watch.go, refresh): one request
	// per service per interval, spread evenly, whether anything changed or not, at most
	// DefaultRefreshMaxRate a second.
	DefaultRefreshInterval = time.Minute
	// DefaultRefreshMaxRate bounds the refresh's requests a second: up to 1,200 services each
	// is read every DefaultRefreshInterval, beyond that less often (10,000 services: every
	// 8 min 20 s), so that the net's cost to the server stays that of Higress's relisting at
	// that size (6.7 requests a second at 10,000), not 167 a second.
	DefaultRefreshMaxRate = 20.0
	// DefaultPageSize is the services per page of a listing.
	DefaultPageSize = 500
	// DefaultTimeout bounds one request and a connection's setup.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxMessage bounds a message (gRPC) or body (HTTP) from a server: Nacos's own
	// clients accept 10 MB (GRPC_MAX_INBOUND_MESSAGE_SIZE); a service of 10,000 instances
	// with some metadata is a few MB.
	DefaultMaxMessage = 16 << 20
	// DefaultMaxServices bounds the services watched.
	DefaultMaxServices = 50000
	// DefaultMaxInstances bounds the instances of one service.
	DefaultMaxInstances = 10000

	// The values of Config.API.
	APIAuto = "auto"
	APIGRPC = "grpc"
	APIHTTP = "http"

	// AllNamespaces, as the only entry of Config.Namespaces, watches every namespace the
	// server lists.
	AllNamespaces = "*"
)

// Bounds of the settings.
const (
	// maxServers bounds --nacos-servers: each is a label value of the adapter's metrics and a
	// part of the registry in Degraded.
	maxServers = 16
	// maxNamespaces and maxGroups bound what is watched (and listed every interval).
	maxNamespaces = 256
	maxGroups     = 256
	// maxNameLen bounds a namespace or group name given on the command line.
	maxNameLen = 128
)

// Config configures a Nacos registry. The zero value of every field but Servers is its
// default; New says which setting to fix, by its command-line flag name, when a value is
// wrong.
type Config struct {
	// Servers are the Nacos servers, "host:port" with the HTTP port as Nacos clients are given
	// them (serverAddr), or "http://host:port", "https://host:port". The port defaults to
	// DefaultPort. One is read at a time; the next when it fails. Required.
	Servers []string
	// GRPCPortOffset is added to a server's HTTP port to reach its gRPC port. 0 means
	// DefaultGRPCPortOffset (the two ports are never one); any other value, negative included,
	// is taken as it is, for servers (or proxies before them) that listen elsewhere.
	GRPCPortOffset int
	// API is APIAuto (the default), APIGRPC or APIHTTP.
	API string
	// ContextPath is the HTTP API's context path. Default DefaultContextPath.
	ContextPath string
	// Namespaces are the namespace IDs watched; "public" (or "") is the default namespace.
	// [AllNamespaces] watches every namespace the server lists. Default [DefaultNamespace].
	Namespaces []string
	// Groups are the groups watched. Empty: every group, when the server can list the services
	// of every group at once; otherwise DefaultGroup.
	Groups []string
	// DiscoveryInterval is how often the service lists are read. Default
	// DefaultDiscoveryInterval.
	DiscoveryInterval time.Duration
	// RefreshInterval is how often each subscribed service is read again over gRPC, whatever
	// its pushes said (a push can be lost, and polaris-server 1.18.1 sends none for a service
	// outside DEFAULT_GROUP). Default DefaultRefreshInterval; negative: never.
	RefreshInterval time.Duration
	// RefreshMaxRate bounds the refresh's requests a second: with more services than
	// RefreshInterval x RefreshMaxRate, each is read every services / RefreshMaxRate seconds.
	// Default DefaultRefreshMaxRate.
	RefreshMaxRate float64
	// PageSize is the services per page of a listing. Default DefaultPageSize.
	PageSize int
	// Timeout bounds one request and a connection's setup. Default DefaultTimeout.
	Timeout time.Duration
	// MaxMessage bounds a message or body from a server, in bytes. Default DefaultMaxMessage.
	MaxMessage int
	// MaxServices bounds the services watched; MaxInstances the instances of one service.
	// Defaults DefaultMaxServices and DefaultMaxInstances.
	MaxServices, MaxInstances int
	// UDPPort is the port the HTTP API's push (Nacos 1.x) is received on: 0 picks one, -1
	// turns it off.
	UDPPort int
	// Username and PasswordFile log in (Nacos auth); the file is read at every login.
	Username, PasswordFile string
	// AccessKey and SecretKeyFile sign requests (Nacos AK/SK); the file is read at every
	// connection.
	AccessKey, SecretKeyFile string
	// TLS reaches the servers over TLS; implied by a TLS file or an https:// server. The CA
	// bundle verifies the servers (default: the system's roots); the certificate and key are
	// for mutual TLS; TLSServerName is the name the servers' certificates must hold (default:
	// each server's host). Read at every connection.
	TLS                                               bool
	TLSCAFile, TLSCertFile, TLSKeyFile, TLSServerName string
	// Naming is how services are mapped (naming.go).
	Naming Naming
	// Logger receives the adapter's own logs; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the adapter's metrics (galleon_nacos_*); nil keeps them unregistered.
	Registerer prometheus.Registerer
}

// server is one configured Nacos server.
type server struct {
	host     string // host name or IP, the TLS server name by default
	httpPort int
	grpcPort int
	tls      bool
	// name identifies it in logs, metrics and Degraded: host:port (the HTTP port), as given.
	name string
}

func (s server) httpAddr() string { return net.JoinHostPort(s.host, strconv.Itoa(s.httpPort)) }
func (s server) grpcAddr() string { return net.JoinHostPort(s.host, strconv.Itoa(s.grpcPort)) }

// baseURL is the server's HTTP base URL, without the context path.
func (s server) baseURL() string {
	scheme := "http"
	if s.tls {
		scheme = "https"
	}
	return scheme + "://" + s.httpAddr()
}

// scope is what is watched: namespaces (nil: every one the server lists) and groups (nil:
// every group).
type scope struct {
	namespaces []string // namespace IDs as the API takes them: "" for public
	groups     []string
}

// validate sets the defaults of cfg, checks it, and returns the servers, the scope and the
// mapper. Its error lists every setting to fix, each by its flag.
func (cfg *Config) validate() ([]server, scope, *mapper, error) {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	servers := cfg.checkServers(add)
	sc := cfg.checkScope(add)
	cfg.checkLimits(add)
	cfg.checkAccess(add)
	m, merrs := cfg.Naming.compile()
	errs = append(errs, merrs...)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(errs) > 0 {
		return nil, scope{}, nil, fmt.Errorf("nacos: %w", errors.Join(errs...))
	}
	return servers, sc, m, nil
}

// addFunc collects one configuration error.
type addFunc func(format string, args ...any)

// checkServers parses --nacos-servers and the ports and API that go with them.
func (cfg *Config) checkServers(add addFunc) []server {
	switch cfg.API {
	case "":
		cfg.API = APIAuto
	case APIAuto, APIGRPC, APIHTTP:
	default:
		add("--%s %q: want auto, grpc or http", flagAPI, cfg.API)
	}
	if cfg.GRPCPortOffset == 0 {
		cfg.GRPCPortOffset = DefaultGRPCPortOffset
	}
	if len(cfg.Servers) == 0 {
		add("--%s is empty: give at least one Nacos server, e.g. 127.0.0.1:8848", flagServers)
	}
	var servers []server
	seen := map[string]bool{}
	for _, raw := range cfg.Servers {
		s, err := parseServer(strings.TrimSpace(raw), cfg.TLS || cfg.TLSCAFile != "" || cfg.TLSCertFile != "")
		if err != nil {
			add("--%s %q: %v", flagServers, cutText(raw), err)
			continue
		}
		if seen[s.name] {
			add("--%s lists %s twice", flagServers, s.name)
			continue
		}
		seen[s.name] = true
		s.grpcPort = s.httpPort + cfg.GRPCPortOffset
		if cfg.API != APIHTTP && (s.grpcPort < 1 || s.grpcPort > 65535) {
			add("--%s %d: server %s's gRPC port would be %d, want 1 to 65535", flagGRPCPortOffset, cfg.GRPCPortOffset, s.name, s.grpcPort)
		}
		servers = append(servers, s)
	}
	if len(servers) > maxServers {
		add("--%s lists %d servers: at most %d (a Nacos cluster has a handful)", flagServers, len(servers), maxServers)
	}
	if cfg.ContextPath == "" {
		cfg.ContextPath = DefaultContextPath
	}
	if !strings.HasPrefix(cfg.ContextPath, "/") || strings.ContainsAny(cfg.ContextPath, "?# \t\n") || len(cfg.ContextPath) > maxNameLen {
		add("--%s %q: want a path such as /nacos", flagContextPath, cutText(cfg.ContextPath))
	}
	cfg.ContextPath = strings.TrimRight(cfg.ContextPath, "/")
	if cfg.UDPPort < -1 || cfg.UDPPort > 65535 {
		add("--%s %d: want 0 (any free port), a port, or -1 (no push)", flagUDPPort, cfg.UDPPort)
	}
	return servers
}

// parseServer reads one --nacos-servers entry: host, host:port or http(s)://host:port.
func parseServer(raw string, useTLS bool) (server, error) {
	hostport := raw
	if scheme, rest, ok := strings.Cut(raw, "://"); ok {
		switch scheme {
		case "http":
		case "https":
			useTLS = true
		default:
			return server{}, fmt.Errorf("scheme %q: want host:port, http://host:port or https://host:port", scheme)
		}
		u, err := url.Parse(raw)
		if err != nil || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return server{}, errors.New("want the server only, http(s)://host:port, without a path, credentials or query (see --" + flagContextPath + ")")
		}
		hostport = rest
		hostport = strings.TrimSuffix(hostport, "/")
	}
	host, portText, err := net.SplitHostPort(hostport)
	if err != nil {
		// No port: the whole is the host (an IPv6 address needs brackets and a port).
		host, portText = hostport, strconv.Itoa(DefaultPort)
	}
	if host == "" || strings.ContainsAny(host, "/@?# \t") {
		return server{}, errors.New("want host:port, e.g. 127.0.0.1:8848")
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return server{}, fmt.Errorf("port %q: want 1 to 65535", portText)
	}
	s := server{host: host, httpPort: port, tls: useTLS}
	s.name = s.httpAddr()
	return s, nil
}

// checkScope checks the namespaces, groups and discovery settings.
func (cfg *Config) checkScope(add addFunc) scope {
	var sc scope
	if len(cfg.Namespaces) == 0 {
		cfg.Namespaces = []string{DefaultNamespace}
	}
	if slices.Contains(cfg.Namespaces, AllNamespaces) {
		if len(cfg.Namespaces) > 1 {
			add("--%s %q: \"*\" (every namespace) goes alone", flagNamespaces, strings.Join(cfg.Namespaces, ","))
		}
	} else {
		seen := map[string]bool{}
		for _, ns := range cfg.Namespaces {
			ns = strings.TrimSpace(ns)
			if err := checkName(ns); err != nil {
				add("--%s %q: %v", flagNamespaces, cutText(ns), err)
				continue
			}
			id := namespaceID(ns)
			if seen[id] {
				add("--%s lists %q twice (\"public\" is the default namespace, ID \"\")", flagNamespaces, ns)
				continue
			}
			seen[id] = true
			sc.namespaces = append(sc.namespaces, id)
		}
		if len(sc.namespaces) > maxNamespaces {
			add("--%s lists %d namespaces: at most %d", flagNamespaces, len(sc.namespaces), maxNamespaces)
		}
		slices.Sort(sc.namespaces)
	}
	seen := map[string]bool{}
	for _, g := range cfg.Groups {
		g = strings.TrimSpace(g)
		if err := checkName(g); err != nil || g == "" {
			if err == nil {
				err = errors.New("empty group name")
			}
			add("--%s %q: %v", flagGroups, cutText(g), err)
			continue
		}
		if seen[g] {
			add("--%s lists %q twice", flagGroups, g)
			continue
		}
		seen[g] = true
		sc.groups = append(sc.groups, g)
	}
	if len(sc.groups) > maxGroups {
		add("--%s lists %d groups: at most %d", flagGroups, len(sc.groups), maxGroups)
	}
	slices.Sort(sc.groups)
	if cfg.DiscoveryInterval == 0 {
		cfg.DiscoveryInterval = DefaultDiscoveryInterval
	}
	if cfg.DiscoveryInterval < 100*time.Millisecond || cfg.DiscoveryInterval > time.Hour {
		add("--%s %v: want 100ms to 1h, e.g. 5s", flagDiscoveryInterval, cfg.DiscoveryInterval)
	}
	cfg.checkRefresh(add)
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.PageSize < 1 || cfg.PageSize > 10000 {
		add("--%s %d: want 1 to 10000, e.g. %d", flagPageSize, cfg.PageSize, DefaultPageSize)
	}
	return sc
}

// checkRefresh checks the refresh net's settings, filling in the defaults.
func (cfg *Config) checkRefresh(add addFunc) {
	switch {
	case cfg.RefreshInterval == 0:
		cfg.RefreshInterval = DefaultRefreshInterval
	case cfg.RefreshInterval < 0:
		cfg.RefreshInterval = -1 // off
	case cfg.RefreshInterval < time.Second || cfg.RefreshInterval > 24*time.Hour:
		// Refreshes are started on the watch's one-second tick: a shorter interval could not
		// be kept.
		add("--%s %v: want 1s to 24h, or 0 to turn the refresh off, e.g. %v", flagRefreshInterval, cfg.RefreshInterval, DefaultRefreshInterval)
	}
	switch {
	case cfg.RefreshMaxRate == 0:
		cfg.RefreshMaxRate = DefaultRefreshMaxRate
	case cfg.RefreshMaxRate < 0.01 || cfg.RefreshMaxRate > 10000 || math.IsNaN(cfg.RefreshMaxRate):
		add("--%s %g: want 0.01 to 10000 requests a second, e.g. %g", flagRefreshMaxRate, cfg.RefreshMaxRate, DefaultRefreshMaxRate)
	}
}

// checkName checks a namespace or group name from the command line.
func checkName(s string) error {
	if len(s) > maxNameLen {
		return fmt.Errorf("longer than %d bytes", maxNameLen)
	}
	if strings.ContainsAny(s, "@ \t\r\n/") {
		return errors.New("holds '@', '/' or a space")
	}
	return nil
}

// namespaceID is the ID the API takes for a namespace given on the command line: "" for the
// default namespace.
func namespaceID(ns string) string {
	if ns == DefaultNamespace {
		return ""
	}
	return ns
}

// checkLimits sets and checks the bounds.
func (cfg *Config) checkLimits(add addFunc) {
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Timeout < 100*time.Millisecond || cfg.Timeout > 10*time.Minute {
		add("--%s %v: want 100ms to 10m, e.g. 10s", flagTimeout, cfg.Timeout)
	}
	if cfg.MaxMessage == 0 {
		cfg.MaxMessage = DefaultMaxMessage
	}
	if cfg.MaxMessage < 64<<10 || cfg.MaxMessage > 1<<30 {
		add("--%s %d: want 65536 to 1073741824 bytes, e.g. %d", flagMaxMessage, cfg.MaxMessage, DefaultMaxMessage)
	}
	if cfg.MaxServices == 0 {
		cfg.MaxServices = DefaultMaxServices
	}
	if cfg.MaxServices < 1 {
		add("--%s %d: want at least 1, e.g. %d", flagMaxServices, cfg.MaxServices, DefaultMaxServices)
	}
	if cfg.MaxInstances == 0 {
		cfg.MaxInstances = DefaultMaxInstances
	}
	if cfg.MaxInstances < 1 {
		add("--%s %d: want at least 1, e.g. %d", flagMaxInstances, cfg.MaxInstances, DefaultMaxInstances)
	}
}

// checkAccess checks the credentials and TLS files by reading them once.
func (cfg *Config) checkAccess(add addFunc) {
	if (cfg.Username == "") != (cfg.PasswordFile == "") {
		add("--%s and --%s go together: give both (Nacos auth) or neither", flagUsername, flagPasswordFile)
	}
	if cfg.PasswordFile != "" {
		if _, err := cfg.password(); err != nil {
			add("%v", err)
		}
	}
	if (cfg.AccessKey == "") != (cfg.SecretKeyFile == "") {
		add("--%s and --%s go together: give both (AK/SK signing) or neither", flagAccessKey, flagSecretKeyFile)
	}
	if cfg.SecretKeyFile != "" {
		if _, err := cfg.secretKey(); err != nil {
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

// password reads PasswordFile.
func (cfg *Config) password() (string, error) {
	return readSecretFile(cfg.PasswordFile, flagPasswordFile)
}

// secretKey reads SecretKeyFile.
func (cfg *Config) secretKey() (string, error) {
	return readSecretFile(cfg.SecretKeyFile, flagSecretKeyFile)
}

// readSecretFile reads a one-line secret; its errors name the flag and the file, never the
// content.
func readSecretFile(path, flag string) (string, error) {
	if path == "" {
		return "", nil
	}
	s, err := tlsfiles.ReadSecret(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flag, err)
	}
	if s == "" || strings.ContainsAny(s, "\n\r") {
		return "", fmt.Errorf("--%s %s: want one non-empty line", flag, path)
	}
	return s, nil
}

func (cfg *Config) tlsFiles() tlsfiles.Files {
	return tlsfiles.Files{
		CAFile: cfg.TLSCAFile, CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, ServerName: cfg.TLSServerName,
		CAFlag: "--" + flagTLSCA, CertFlag: "--" + flagTLSCert, KeyFlag: "--" + flagTLSKey,
	}
}

// tlsConfig is the TLS configuration for server s, the files read now; nil for plaintext.
func (cfg *Config) tlsConfig(s server) (*tls.Config, error) {
	if !s.tls {
		return nil, nil
	}
	return cfg.tlsFiles().Config(s.host)
}
