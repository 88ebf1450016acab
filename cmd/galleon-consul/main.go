// Command galleon-consul serves the services of HashiCorp Consul (one or
// more datacenters, through an agent) to istiod over MCP. See
// docs/adapters/consul.md.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/consul"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

func main() {
	os.Exit(daemon.Main(daemon.Spec{
		Name:     "galleon-consul",
		Registry: "consul",
		Summary:  "serves the services of a Consul catalog to istiod",
		Flags:    flags,
	}))
}

// flags declares the adapter's flags; every default is the Config's, so
// that an unset flag leaves the CONSUL_* environment in charge.
func flags(fs *pflag.FlagSet) daemon.NewRegistry {
	var cfg consul.Config
	var all bool
	fs.StringVar(&cfg.Address, "consul-address", "", "Consul agent: host:port, http(s)://host:port or unix:///path (default: CONSUL_HTTP_ADDR, else 127.0.0.1:8500)")
	fs.StringVar(&cfg.Token, "token", "", "ACL token (default: CONSUL_HTTP_TOKEN); prefer --token-file")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "file holding the ACL token, read again when it changes (default: CONSUL_HTTP_TOKEN_FILE); wins over --token")
	fs.StringVar(&cfg.CAFile, "ca-file", "", "PEM CA bundle verifying the agent's certificate; turns TLS on (default: CONSUL_CACERT)")
	fs.StringVar(&cfg.CertFile, "cert-file", "", "PEM client certificate for mutual TLS, with --key-file (default: CONSUL_CLIENT_CERT)")
	fs.StringVar(&cfg.KeyFile, "key-file", "", "PEM private key of --cert-file (default: CONSUL_CLIENT_KEY)")
	fs.StringVar(&cfg.TLSServerName, "tls-server-name", "", "name the agent's certificate must carry (default: CONSUL_TLS_SERVER_NAME, else the address's host)")
	fs.StringSliceVar(&cfg.Datacenters, "datacenters", nil, "datacenters to watch, comma-separated, or \"all\" (default: the agent's own)")
	fs.BoolVar(&all, "all-datacenters", false, "watch every datacenter the agent knows, following new ones (same as --datacenters all)")
	fs.StringVar(&cfg.ConsulNamespace, "consul-namespace", "", "Consul Enterprise namespace to read (default: CONSUL_NAMESPACE)")
	fs.StringVar(&cfg.Partition, "consul-partition", "", "Consul Enterprise admin partition to read (default: CONSUL_PARTITION)")
	fs.StringVar(&cfg.Consistency, "consistency", consul.ConsistencyDefault, "read consistency: default, stale (any server; scales reads) or consistent (leader-verified)")
	fs.DurationVar(&cfg.Wait, "wait", consul.DefaultWait, "longest wait of a signal's blocking query (1s to 10m); bounds how long a silently dead connection goes unnoticed (service watches wait 10m)")
	fs.StringVar(&cfg.HostTemplate, "host-template", consul.DefaultHostTemplate, "host of a service: Go template with {{.Service}}, {{.Datacenter}}, {{.Namespace}}, {{.Partition}}")
	fs.StringVar(&cfg.Namespace, "namespace", consul.DefaultNamespace, "namespace of the ServiceEntries")
	fs.StringVar(&cfg.NamespaceMetaKey, "namespace-meta-key", "", "service meta key whose value, when set, is the ServiceEntry's namespace instead of --namespace")
	fs.StringSliceVar(&cfg.ExportTo, "export-to", nil, "exportTo of the ServiceEntries, comma-separated (default: every namespace)")
	fs.StringVar(&cfg.ExportToMetaKey, "export-to-meta-key", "", "service meta key whose value (comma-separated), when present, is the exportTo instead of --export-to")
	fs.StringVar(&cfg.AddressSource, "address-source", consul.AddressService, "endpoint address: service (service address, else node address) or a tagged address: lan, wan, lan_ipv4, lan_ipv6, wan_ipv4, wan_ipv6")
	fs.BoolVar(&cfg.IncludeWarning, "include-warning", false, "serve instances whose worst check is warning (default: passing only)")
	fs.IntVar(&cfg.FetchConcurrency, "fetch-concurrency", consul.DefaultFetchConcurrency, "per-service requests in flight (each an HTTP connection; the agent allows 200 per client)")
	fs.DurationVar(&cfg.Resync, "resync", consul.DefaultResync, "period of the index sweep over every service that catches what no blocking query signals (node address changes)")
	fs.DurationVar(&cfg.SweepInterval, "sweep-interval", consul.DefaultSweepInterval, "least time between two sweeps caused by catalog changes no signal attributes to a service")
	fs.IntVar(&cfg.ServiceWatches, "service-watches", 0, "most services each followed by a blocking query of its own, which sees port, meta and address edits in milliseconds instead of a sweep (needs the agent's HTTPS listener: HTTP/2; 0: none)")
	fs.DurationVar(&cfg.DatacenterRefresh, "datacenter-refresh", consul.DefaultDatacenterRefresh, "how often the datacenter list is read again with --datacenters all")
	return func(env daemon.Env) (registry.Registry, error) {
		if all {
			cfg.Datacenters = []string{consul.AllDatacenters}
		}
		cfg.Logger = env.Logger
		cfg.Registerer = env.Registerer
		return consul.New(cfg)
	}
}
