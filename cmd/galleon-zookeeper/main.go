// Command galleon-zookeeper serves the services registered in Apache ZooKeeper (the Curator /
// Spring Cloud Zookeeper layout, <root>/<name>/<id>; the Dubbo 2 interface-level layout,
// <root>/<interface>/providers/<provider URL>; or the Dubbo 3 application-level layout,
// <root>/<application>/<ip:port>) to istiod as ServiceEntries.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/zookeeper"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

func main() {
	os.Exit(daemon.Main(daemon.Spec{
		Name:     "galleon-zookeeper",
		Registry: "zookeeper",
		Summary:  "serves the services registered in ZooKeeper (Curator / Spring Cloud Zookeeper, Dubbo 2 or Dubbo 3 layout) to istiod",
		Flags:    flags,
	}))
}

func flags(fs *pflag.FlagSet) daemon.NewRegistry {
	var cfg zookeeper.Config
	fs.StringSliceVar(&cfg.Servers, "zk-servers", nil, "ZooKeeper servers, host:port,... (required; a host alone means port 2181)")
	fs.StringVar(&cfg.Layout, "zk-layout", zookeeper.LayoutCurator, "how services are kept: curator (<root>/<name>/<id> JSON, Spring Cloud Zookeeper), dubbo (<root>/<interface>/providers/<URL>, Dubbo 2 interface level) or dubbo3 (<root>/<application>/<ip:port>, Dubbo 3 application level)")
	fs.StringVar(&cfg.Root, "zk-root", "", "znode whose children are the services (Curator base path, Spring Cloud Zookeeper discovery root, Dubbo registry root); default "+zookeeper.DefaultRoot+" (curator, dubbo3) or "+zookeeper.DefaultDubboRoot+" (dubbo)")
	fs.DurationVar(&cfg.SessionTimeout, "zk-session-timeout", zookeeper.DefaultSessionTimeout, "ZooKeeper session timeout (the server clamps it to 2-20 ticks); an expiry makes the adapter relist everything")
	fs.DurationVar(&cfg.UnreachableAfter, "zk-unreachable-after", zookeeper.DefaultUnreachableAfter, "how long the client may be without a session before the registry is reported unreachable; shorter than --zk-session-timeout")
	fs.StringVar(&cfg.HostTemplate, "zk-host-template", "", "host of a service: Go template with {{.Name}}, {{.Namespace}} (and {{.Interface}}, {{.Group}}, {{.Version}} for dubbo); default "+zookeeper.DefaultHostTemplate+" (curator) or "+zookeeper.DefaultDubboHostTemplate+" (dubbo)")
	fs.StringToStringVar(&cfg.DubboProtocols, "zk-dubbo-protocol", nil, "protocol of a Dubbo URL scheme, scheme=PROTOCOL,... overriding dubbo=TCP, tri=GRPC, grpc=GRPC, rest=HTTP, http=HTTP, https=HTTPS (others: TCP)")
	fs.DurationVar(&cfg.RelistInterval, "zk-relist-interval", zookeeper.DefaultRelistInterval, "read every service again this often, a few hundred at a time, as a safety net against a missed watch (0: off)")
	fs.IntVar(&cfg.MaxBuffer, "zk-max-buffer", zookeeper.DefaultMaxBuffer, "largest ZooKeeper answer the client accepts, in bytes; set it to the servers' jute.maxbuffer (which bounds a node, not a getChildren answer). A larger answer breaks the connection: its path is rejected, what was read of it stays served, and it is read again with a backoff (10s to 5m)")
	fs.DurationVar(&cfg.RetireEmptyAfter, "zk-retire-empty-after", zookeeper.DefaultRetireEmptyAfter, "delete a service that has had no instance this long while its znode stays (a Dubbo group and version no provider registers any more, a persistent application node such as dubbo-go's); until then it keeps its empty ServiceEntry (negative: never)")
	fs.IntVar(&cfg.ListConcurrency, "zk-list-concurrency", zookeeper.DefaultListConcurrency, "reads in flight while listing (at start, after a session expiry)")
	fs.StringVar(&cfg.Auth, "zk-auth", "", "digest credentials user:password presented to ZooKeeper (prefer GALLEON_ZK_AUTH or --zk-auth-file: a flag shows in the process list)")
	fs.StringVar(&cfg.AuthFile, "zk-auth-file", "", "file holding digest credentials user:password, read again every 5s: a new password is presented without a restart")
	fs.BoolVar(&cfg.TLS, "zk-tls", false, "connect with TLS to ZooKeeper's secure client port (implied by --zk-tls-ca or --zk-tls-cert)")
	fs.StringVar(&cfg.TLSCAFile, "zk-tls-ca", "", "PEM CA bundle that verifies the ZooKeeper servers (default: the system's roots); read at every connection")
	fs.StringVar(&cfg.TLSCertFile, "zk-tls-cert", "", "PEM client certificate for mutual TLS (with --zk-tls-key); read at every connection")
	fs.StringVar(&cfg.TLSKeyFile, "zk-tls-key", "", "PEM private key of --zk-tls-cert")
	fs.StringVar(&cfg.TLSServerName, "zk-tls-server-name", "", "name the servers' certificates must hold (default: the host of each --zk-servers entry)")
	fs.StringVar(&cfg.Namespace, "namespace", zookeeper.DefaultNamespace, "namespace of the ServiceEntries")
	return func(env daemon.Env) (registry.Registry, error) {
		cfg.Logger = env.Logger
		cfg.Registerer = env.Registerer
		return zookeeper.New(cfg)
	}
}
