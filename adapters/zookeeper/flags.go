package zookeeper

import (
	"github.com/spf13/pflag"
)

// The names of the adapter's command-line flags (AddFlags). Error messages quote a setting by
// its flag, "--" and one of these.
const (
	flagServers          = "zk-servers"
	flagLayout           = "zk-layout"
	flagRoot             = "zk-root"
	flagSessionTimeout   = "zk-session-timeout"
	flagUnreachableAfter = "zk-unreachable-after"
	flagHostTemplate     = "zk-host-template"
	flagDubboProtocol    = "zk-dubbo-protocol"
	flagRelistInterval   = "zk-relist-interval"
	flagMaxBuffer        = "zk-max-buffer"
	flagRetireEmptyAfter = "zk-retire-empty-after"
	flagListConcurrency  = "zk-list-concurrency"
	flagAuth             = "zk-auth"
	flagAuthFile         = "zk-auth-file"
	flagTLS              = "zk-tls"
	flagTLSCA            = "zk-tls-ca"
	flagTLSCert          = "zk-tls-cert"
	flagTLSKey           = "zk-tls-key"
	flagTLSServerName    = "zk-tls-server-name"
	flagNamespace        = "namespace"
)

// AddFlags defines the adapter's flags on fs, each setting a field of c, with the command's
// defaults.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&c.Servers, flagServers, nil, "ZooKeeper servers, host:port,... (required; a host alone means port 2181)")
	fs.StringVar(&c.Layout, flagLayout, LayoutCurator, "how services are kept, one layout or a list served side by side: curator (<root>/<name>/<id> JSON, Spring Cloud Zookeeper), dubbo (<root>/<interface>/providers/<URL>, Dubbo 2 interface level), dubbo3 (<root>/<application>/<ip:port>, Dubbo 3 application level), e.g. curator,dubbo,dubbo3, or all (the three); of two services of one name, the one of the layout listed first is served")
	fs.StringVar(&c.Root, flagRoot, "", "znode whose children are the services (Curator base path, Spring Cloud Zookeeper discovery root, Dubbo registry root): one path for every layout, or layout=path,... (e.g. curator=/services,dubbo=/dubbo); a layout not named takes its default, "+DefaultRoot+" (curator, dubbo3: they may share it, their nodes told apart one by one) or "+DefaultDubboRoot+" (dubbo, which needs a root of its own)")
	fs.DurationVar(&c.SessionTimeout, flagSessionTimeout, DefaultSessionTimeout, "ZooKeeper session timeout (the server clamps it to 2-20 ticks); an expiry makes the adapter relist everything")
	fs.DurationVar(&c.UnreachableAfter, flagUnreachableAfter, DefaultUnreachableAfter, "how long the client may be without a session before the registry is reported unreachable; shorter than --"+flagSessionTimeout)
	fs.StringVar(&c.HostTemplate, flagHostTemplate, "", "host of a service, for every layout: Go template with {{.Name}}, {{.Namespace}} (and {{.Interface}}, {{.Group}}, {{.Version}} for dubbo); default, per layout, "+DefaultHostTemplate+" (curator) or "+DefaultDubboHostTemplate+" (dubbo, dubbo3)")
	fs.StringToStringVar(&c.DubboProtocols, flagDubboProtocol, nil, "protocol of a Dubbo URL scheme, scheme=PROTOCOL,... overriding dubbo=TCP, tri=GRPC, grpc=GRPC, rest=HTTP, http=HTTP, https=HTTPS (others: TCP)")
	fs.DurationVar(&c.RelistInterval, flagRelistInterval, DefaultRelistInterval, "read every service again this often, a few hundred at a time, as a safety net against a missed watch (0: off)")
	fs.IntVar(&c.MaxBuffer, flagMaxBuffer, DefaultMaxBuffer, "largest ZooKeeper answer the client accepts, in bytes; set it to the servers' jute.maxbuffer (which bounds a node, not a getChildren answer). A larger answer breaks the connection: its path is rejected, what was read of it stays served, and it is read again with a backoff (10s to 5m)")
	fs.DurationVar(&c.RetireEmptyAfter, flagRetireEmptyAfter, DefaultRetireEmptyAfter, "delete a service that has had no instance this long while its znode stays (a Dubbo group and version no provider registers any more, a persistent application node such as dubbo-go's); until then it keeps its empty ServiceEntry (negative: never)")
	fs.IntVar(&c.ListConcurrency, flagListConcurrency, DefaultListConcurrency, "reads in flight while listing (at start, after a session expiry)")
	fs.StringVar(&c.Auth, flagAuth, "", "digest credentials user:password presented to ZooKeeper (prefer GALLEON_ZK_AUTH or --"+flagAuthFile+": a flag shows in the process list)")
	fs.StringVar(&c.AuthFile, flagAuthFile, "", "file holding digest credentials user:password, read again every 5s: a new password is presented without a restart")
	fs.BoolVar(&c.TLS, flagTLS, false, "connect with TLS to ZooKeeper's secure client port (implied by --"+flagTLSCA+" or --"+flagTLSCert+")")
	fs.StringVar(&c.TLSCAFile, flagTLSCA, "", "PEM CA bundle that verifies the ZooKeeper servers (default: the system's roots); read at every connection")
	fs.StringVar(&c.TLSCertFile, flagTLSCert, "", "PEM client certificate for mutual TLS (with --"+flagTLSKey+"); read at every connection")
	fs.StringVar(&c.TLSKeyFile, flagTLSKey, "", "PEM private key of --"+flagTLSCert)
	fs.StringVar(&c.TLSServerName, flagTLSServerName, "", "name the servers' certificates must hold (default: the host of each --"+flagServers+" entry)")
	fs.StringVar(&c.Namespace, flagNamespace, DefaultNamespace, "namespace of the ServiceEntries")
}
