package zookeeper

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/registry"
)

// Defaults of Config.
const (
	DefaultRoot           = "/services"
	DefaultDubboRoot      = "/dubbo"
	DefaultSessionTimeout = 10 * time.Second
	DefaultNamespace      = "default"
	DefaultHostTemplate   = "{{.Name}}.{{.Namespace}}.zookeeper"
	// DefaultDubboHostTemplate is the host of a Dubbo service: its name (unique per interface,
	// group and version, see dubboName) is one DNS label, so the host cannot collide.
	DefaultDubboHostTemplate = "{{.Name}}.{{.Namespace}}.dubbo"
	DefaultUnreachableAfter  = 2 * time.Second
	DefaultListConcurrency   = 16
	DefaultRelistInterval    = 30 * time.Minute
	// DefaultMaxBuffer is the largest answer the client accepts (go-zookeeper's
	// WithMaxBufferSize; the library itself sets no limit): 16 MiB, so that a server with a
	// raised jute.maxbuffer cannot make the adapter allocate without limit. A node between
	// maxNodeData and it is read and rejected; a larger answer breaks the connection, and the
	// adapter rejects its path and reads it again with a backoff (watch_conn.go).
	DefaultMaxBuffer = 16 << 20
	// DefaultRetireEmptyAfter is how long a service keeps its ServiceEntry with no instance
	// before it is deleted: longer than a rolling restart of its providers and than the core's
	// removal hold, short enough that retired Dubbo (group, version) pairs and dubbo-go's
	// persistent application nodes do not pile up as empty ServiceEntries.
	DefaultRetireEmptyAfter = 10 * time.Minute

	// Layouts (Config.Layout, --zk-layout).
	LayoutCurator = "curator"
	LayoutDubbo   = "dubbo"
	LayoutDubbo3  = "dubbo3"

	// maxNodeData is the largest instance node read: ZooKeeper's own default limit
	// (jute.maxbuffer) is 1 MiB, and a Curator instance is a few hundred bytes.
	maxNodeData = 1 << 20
	// maxNodeName is the longest instance znode name served: a Dubbo provider URL (the name is
	// its content) is a few KB even with every method listed. A longer one is rejected and kept
	// under registry.Cut of its name, never read or parsed, so that a registry of long names
	// costs its answers in passing, not their size for good.
	maxNodeName = 64 << 10
	// minMaxBuffer is the smallest MaxBuffer accepted: the session handshake and every
	// ordinary answer must fit.
	minMaxBuffer = 4 << 10
)

// Config configures a ZooKeeper registry. The zero value of every field but Servers is its
// default; New says which setting to fix, by its command-line flag name, when a value is wrong.
type Config struct {
	// Servers of the ensemble, "host:port" (a host alone means port 2181). Required.
	Servers []string
	// Layout is how services are kept in ZooKeeper, one layout or a comma-separated list of
	// them served side by side: LayoutCurator (the default: Curator / Spring Cloud Zookeeper,
	// <root>/<name>/<id> JSON nodes), LayoutDubbo (Dubbo 2 interface level,
	// <root>/<interface>/providers/<URL-encoded provider URL>) and LayoutDubbo3 (Dubbo 3
	// application level, <root>/<application>/<ip:port> Curator JSON with Dubbo's metadata);
	// LayoutAll is the three. The order is the rank of the layouts when two services of one name
	// collide (the first listed is served, the other rejected).
	Layout string
	// Root is the znode whose children are the services (Curator's base path; Spring Cloud
	// Zookeeper's spring.cloud.zookeeper.discovery.root; Dubbo's registry root): one path for
	// every layout of Layout, or layout=path entries separated by commas
	// ("curator=/services,dubbo=/dubbo"). A layout without one takes its default: /dubbo for the
	// Dubbo 2 layout, /services for the others. Curator and Dubbo 3 may share a root (their nodes
	// are told apart one by one); Dubbo 2 needs one of its own, and roots may not lie inside
	// one another.
	Root string
	// SessionTimeout is the session timeout asked of the server (which clamps it to 2-20 ticks).
	// Default 10s.
	SessionTimeout time.Duration
	// Namespace of the ServiceEntries. Default "default".
	Namespace string
	// HostTemplate renders a service's host: a Go text/template with {{.Name}} (the service's
	// name: the service znode's name in the Curator layout, see dubboName in the Dubbo layout)
	// and {{.Namespace}}; the Dubbo layout adds {{.Interface}}, {{.Group}} and {{.Version}} as
	// registered. Set, it is every layout's. Default, per layout:
	// "{{.Name}}.{{.Namespace}}.zookeeper" (Curator), "{{.Name}}.{{.Namespace}}.dubbo" (Dubbo 2
	// and 3).
	HostTemplate string
	// DubboProtocols overrides the protocol of a Dubbo URL scheme or protocol name (both
	// Dubbo layouts), e.g.
	// {"hessian": "HTTP"}; see dubboProtocols for the defaults.
	DubboProtocols map[string]string
	// UnreachableAfter is how long the client may be disconnected before the registry is
	// reported unreachable: a reconnection within it (a server restart, a failover to another
	// member) keeps the session and its watches and is not reported. Default 2s; it must be
	// shorter than SessionTimeout.
	UnreachableAfter time.Duration
	// ListConcurrency is how many reads the adapter keeps in flight when it lists (at start,
	// after a session expiry). Default 16.
	ListConcurrency int
	// RelistInterval is how often every known path is read again as a safety net against a
	// missed watch (watches are exact within a session, and a session expiry relists anyway).
	// The relisting goes relistChunk services at a time between the watches' own reads, so it
	// never holds a change back for longer than one chunk. Unlike the other fields, 0 turns it
	// off; negative means DefaultRelistInterval, the command's default.
	RelistInterval time.Duration
	// MaxBuffer is the largest answer, in bytes, the client accepts (go-zookeeper's
	// WithMaxBufferSize). A larger one breaks the connection: the adapter finds the path read,
	// rejects it, keeps what it read of it before and reads it again with a backoff, while the
	// rest of the tree is watched. It should match the servers' jute.maxbuffer (ZooKeeper's
	// default 1 MiB - 1), which bounds a node but not a getChildren answer. Default
	// DefaultMaxBuffer (16 MiB).
	MaxBuffer int
	// RetireEmptyAfter is how long a service with no instance keeps its (empty) ServiceEntry
	// before it is deleted while its znode stays: a Dubbo (group, version) no provider
	// registers any more, an application whose persistent node dubbo-go leaves behind. A
	// provider that comes back within it finds its ServiceEntry; one that comes later, a new
	// one. Default DefaultRetireEmptyAfter; negative: never.
	RetireEmptyAfter time.Duration
	// Auth is "user:password" for ZooKeeper's digest scheme (addauth digest user:password),
	// presented on every connection. Prefer AuthFile (or the GALLEON_ZK_AUTH variable): a
	// flag's value shows in the process list.
	Auth string
	// AuthFile holds "user:password"; it is read at start and every 5s after, and a new
	// password is added to the session (ZooKeeper keeps a session's identities until it ends,
	// so nodes whose ACL still names the old password stay readable). One of Auth, AuthFile.
	AuthFile string
	// TLS connects to ZooKeeper's secure client port (secureClientPort) with TLS, verifying the
	// server against TLSCAFile (else the system's roots) and TLSServerName (else the host of
	// each --zk-servers entry). Implied by TLSCAFile or TLSCertFile.
	TLS                                bool
	TLSCAFile, TLSCertFile, TLSKeyFile string
	TLSServerName                      string
	// Logger receives the adapter's own logs; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the adapter's metrics (galleon_zookeeper_*); nil keeps them
	// unregistered.
	Registerer prometheus.Registerer

	// dial replaces net.DialTimeout (tests: zktest.Sessions.Dial).
	dial func(network, address string, timeout time.Duration) (net.Conn, error)

	// Set by validate: the layouts in Layout's order, and the roots with their layouts.
	kinds []layoutKind
	trees []treeConf
}

// hostData is what HostTemplate is executed with.
type hostData struct {
	Name      string
	Namespace string
	// Dubbo layout only: the provider URLs' interface, group and version parameters.
	Interface, Group, Version string
}

// validate fills in the defaults and says what to fix, by flag name. It returns the host
// template of each layout (nil for a layout not served or when the template is wrong).
func (cfg *Config) validate() ([nKinds]*template.Template, error) {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	cfg.checkServers(add)
	cfg.checkTree(add)
	cfg.checkTiming(add)
	host := cfg.checkNaming(add)
	cfg.checkLimits(add)
	cfg.checkAuth(add)
	cfg.checkTLS(add)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(errs) > 0 {
		return host, fmt.Errorf("zookeeper: %w", errors.Join(errs...))
	}
	return host, nil
}

// checkServers checks Servers.
func (cfg *Config) checkServers(add func(format string, args ...any)) {
	if len(cfg.Servers) == 0 {
		add("--%s is empty: give the ensemble's servers, e.g. --%[1]s zk1:2181,zk2:2181,zk3:2181", flagServers)
	}
	for _, s := range cfg.Servers {
		s = strings.TrimSpace(s)
		if s == "" {
			add("--%s has an empty entry: give host:port pairs separated by commas", flagServers)
			continue
		}
		if strings.Contains(s, "/") {
			add("--%s %q: a chroot suffix is not supported; give host:port and put the path in --%s", flagServers, s, flagRoot)
			continue
		}
		if !strings.Contains(s, ":") {
			continue // port 2181
		}
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" {
			add("--%s %q: want host:port, e.g. zk1:2181 ([::1]:2181 for IPv6)", flagServers, s)
			continue
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			add("--%s %q: port %q is not a number from 1 to 65535", flagServers, s, port)
		}
	}
}

// checkTree checks and defaults Layout and Root, and groups the layouts by root (layouts.go).
func (cfg *Config) checkTree(add func(format string, args ...any)) {
	cfg.kinds = parseLayouts(cfg.Layout, add)
	roots := parseRoots(cfg.Root, cfg.kinds, add)
	cfg.trees = buildTrees(cfg.kinds, roots, add)
	names := make([]string, len(cfg.kinds))
	for i, k := range cfg.kinds {
		names[i] = k.String()
	}
	cfg.Layout = strings.Join(names, ",")
	if len(cfg.kinds) == 1 {
		cfg.Root = roots[cfg.kinds[0]]
	}
}

// checkTiming checks and defaults the durations.
func (cfg *Config) checkTiming(add func(format string, args ...any)) {
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.SessionTimeout < 100*time.Millisecond {
		add("--%s %v: want a duration of at least 100ms, e.g. 10s (the server clamps it to 2-20 ticks)", flagSessionTimeout, cfg.SessionTimeout)
	}
	if cfg.UnreachableAfter == 0 {
		cfg.UnreachableAfter = min(DefaultUnreachableAfter, cfg.SessionTimeout/2)
	}
	if cfg.UnreachableAfter < 0 || cfg.UnreachableAfter >= cfg.SessionTimeout {
		add("--%s %v: want a positive duration shorter than --%s (%v)", flagUnreachableAfter, cfg.UnreachableAfter, flagSessionTimeout, cfg.SessionTimeout)
	}
	if cfg.RelistInterval < 0 {
		cfg.RelistInterval = DefaultRelistInterval
	}
	if cfg.RelistInterval > 0 && cfg.RelistInterval < time.Minute {
		add("--%s %v: want 0 (off) or at least 1m: each relisting reads every service again", flagRelistInterval, cfg.RelistInterval)
	}
	if cfg.RetireEmptyAfter == 0 {
		cfg.RetireEmptyAfter = DefaultRetireEmptyAfter
	}
}

// checkNaming checks and defaults Namespace, HostTemplate and DubboProtocols, and returns the
// host template of each layout, parsed (nil when it is wrong).
func (cfg *Config) checkNaming(add func(format string, args ...any)) [nKinds]*template.Template {
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if err := model.CheckNamespace(cfg.Namespace); err != nil {
		add("--%s %w", flagNamespace, err)
	}
	if cfg.HostTemplate == "" && len(cfg.kinds) == 1 {
		cfg.HostTemplate = defaultHostTemplate(cfg.kinds[0])
	}
	for scheme, proto := range cfg.DubboProtocols {
		if _, err := protocolOf(proto); err != nil || scheme == "" {
			add("--%s %s=%s: want scheme=protocol, protocol one of %s", flagDubboProtocol, scheme, proto, strings.Join(knownProtocols, ", "))
		}
	}
	var hosts [nKinds]*template.Template
	for _, k := range cfg.kinds {
		text := cmp.Or(cfg.HostTemplate, defaultHostTemplate(k))
		host, err := registry.ParseHostTemplate(text, hostData{Name: "orders", Namespace: "default", Interface: "org.apache.demo.DemoService", Group: "g1", Version: "1.0.0"})
		if err != nil {
			add("--%s: %v", flagHostTemplate, err)
			break // the same template for every layout: one error
		}
		hosts[k] = host
	}
	return hosts
}

// checkLimits checks and defaults MaxBuffer and ListConcurrency.
func (cfg *Config) checkLimits(add func(format string, args ...any)) {
	if cfg.MaxBuffer == 0 {
		cfg.MaxBuffer = DefaultMaxBuffer
	}
	if cfg.MaxBuffer < minMaxBuffer || cfg.MaxBuffer > 1<<30 {
		add("--%s %d: want %d bytes to 1 GiB, matching the servers' jute.maxbuffer, e.g. %d", flagMaxBuffer, cfg.MaxBuffer, minMaxBuffer, DefaultMaxBuffer)
	}
	if cfg.ListConcurrency == 0 {
		cfg.ListConcurrency = DefaultListConcurrency
	}
	if cfg.ListConcurrency < 1 || cfg.ListConcurrency > 1024 {
		add("--%s %d: want 1 to 1024", flagListConcurrency, cfg.ListConcurrency)
	}
}

// checkAuth checks Auth and AuthFile.
func (cfg *Config) checkAuth(add func(format string, args ...any)) {
	switch {
	case cfg.Auth != "" && cfg.AuthFile != "":
		add("--%s and --%s are both set: give one", flagAuth, flagAuthFile)
	case cfg.Auth != "":
		if err := checkDigest(cfg.Auth); err != nil {
			add("--%s: %v", flagAuth, err)
		}
	case cfg.AuthFile != "":
		if _, err := cfg.digest(); err != nil {
			add("%v", err)
		}
	}
}

// checkTLS checks the TLS settings, and that the files they name make a client configuration.
func (cfg *Config) checkTLS(add func(format string, args ...any)) {
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		add("--%s and --%s go together: give both (a client certificate for mutual TLS) or neither", flagTLSCert, flagTLSKey)
	}
	if cfg.TLSServerName != "" && !cfg.tlsEnabled() {
		add("--%s is set but TLS is off: add --%s (and --%s)", flagTLSServerName, flagTLS, flagTLSCA)
	}
	if cfg.tlsEnabled() {
		if _, err := cfg.tlsConfig("check"); err != nil {
			add("%v", err)
		}
	}
}

// checkRoot accepts an absolute znode path other than "/" without a trailing slash.
func checkRoot(root string) error {
	switch {
	case !strings.HasPrefix(root, "/"):
		return errors.New("want an absolute znode path, e.g. /services")
	case root == "/":
		return errors.New("want the parent of the service znodes, e.g. /services, not / itself")
	case strings.HasSuffix(root, "/"):
		return errors.New("remove the trailing /")
	case strings.Contains(root, "//"):
		return errors.New("empty path segment (//)")
	}
	for _, seg := range strings.Split(root[1:], "/") {
		if seg == "." || seg == ".." {
			return errors.New(". and .. are not valid znode names")
		}
	}
	return nil
}
