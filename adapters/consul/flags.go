package consul

import (
	"github.com/spf13/pflag"
)

// The adapter's flag names (without "--"). Every error that asks an
// operator to fix a setting names it by one of these.
const (
	flagAddress           = "consul-address"
	flagToken             = "consul-token"
	flagTokenFile         = "consul-token-file"
	flagTLSCA             = "consul-tls-ca"
	flagTLSCert           = "consul-tls-cert"
	flagTLSKey            = "consul-tls-key"
	flagTLSServerName     = "consul-tls-server-name"
	flagDatacenters       = "consul-datacenters"
	flagAllDatacenters    = "consul-all-datacenters"
	flagConsulNamespace   = "consul-namespace"
	flagPartition         = "consul-partition"
	flagConsistency       = "consul-consistency"
	flagWait              = "consul-wait"
	flagHostTemplate      = "consul-host-template"
	flagNamespace         = "namespace"
	flagNamespaceMetaKey  = "consul-namespace-meta-key"
	flagExportTo          = "consul-export-to"
	flagExportToMetaKey   = "consul-export-to-meta-key"
	flagAddressSource     = "consul-address-source"
	flagIncludeWarning    = "consul-include-warning"
	flagIncludeConsul     = "consul-include-consul-service"
	flagFetchConcurrency  = "consul-fetch-concurrency"
	flagRelistInterval    = "consul-relist-interval"
	flagSweepInterval     = "consul-sweep-interval"
	flagServiceWatches    = "consul-service-watches"
	flagDatacenterRefresh = "consul-datacenter-refresh"
)

// RenamedFlags maps each flag's name before issue 28 to its name now; the
// old names keep working, with a warning (daemon.DeprecatedFlag).
func RenamedFlags() map[string]string {
	return map[string]string{
		"token":              flagToken,
		"token-file":         flagTokenFile,
		"ca-file":            flagTLSCA,
		"cert-file":          flagTLSCert,
		"key-file":           flagTLSKey,
		"tls-server-name":    flagTLSServerName,
		"datacenters":        flagDatacenters,
		"all-datacenters":    flagAllDatacenters,
		"consistency":        flagConsistency,
		"wait":               flagWait,
		"host-template":      flagHostTemplate,
		"namespace-meta-key": flagNamespaceMetaKey,
		"export-to":          flagExportTo,
		"export-to-meta-key": flagExportToMetaKey,
		"address-source":     flagAddressSource,
		"include-warning":    flagIncludeWarning,
		"fetch-concurrency":  flagFetchConcurrency,
		"resync":             flagRelistInterval,
		"sweep-interval":     flagSweepInterval,
		"service-watches":    flagServiceWatches,
		"datacenter-refresh": flagDatacenterRefresh,
	}
}

// AddFlags declares the adapter's flags on fs, each setting a field of c. The
// names before issue 28 (RenamedFlags) are the command's to keep working, with
// daemon.DeprecatedFlag: the adapter stays clear of the daemon.
// Every default is the Config's, so that an unset flag leaves the CONSUL_*
// environment in charge.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	c.addConnectionFlags(fs)
	c.addMappingFlags(fs)
	c.addWatchFlags(fs)
}

// addConnectionFlags: where the agent is, how to reach and query it.
func (c *Config) addConnectionFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Address, flagAddress, "", "Consul agent: host:port, http(s)://host:port or unix:///path (default: CONSUL_HTTP_ADDR, else 127.0.0.1:8500)")
	fs.StringVar(&c.Token, flagToken, "", "ACL token (default: CONSUL_HTTP_TOKEN); prefer --"+flagTokenFile)
	fs.StringVar(&c.TokenFile, flagTokenFile, "", "file holding the ACL token, read again when it changes (default: CONSUL_HTTP_TOKEN_FILE); wins over --"+flagToken)
	fs.StringVar(&c.CAFile, flagTLSCA, "", "PEM CA bundle verifying the agent's certificate; turns TLS on (default: CONSUL_CACERT)")
	fs.StringVar(&c.CertFile, flagTLSCert, "", "PEM client certificate for mutual TLS, with --"+flagTLSKey+" (default: CONSUL_CLIENT_CERT)")
	fs.StringVar(&c.KeyFile, flagTLSKey, "", "PEM private key of --"+flagTLSCert+" (default: CONSUL_CLIENT_KEY)")
	fs.StringVar(&c.TLSServerName, flagTLSServerName, "", "name the agent's certificate must carry (default: CONSUL_TLS_SERVER_NAME, else the address's host)")
	fs.StringSliceVar(&c.Datacenters, flagDatacenters, nil, "datacenters to watch, comma-separated, or \"all\" (default: the agent's own)")
	fs.BoolVar(&c.allDatacenters, flagAllDatacenters, false, "watch every datacenter the agent knows, following new ones (same as --"+flagDatacenters+" all)")
	fs.StringVar(&c.ConsulNamespace, flagConsulNamespace, "", "Consul Enterprise namespace to read (default: CONSUL_NAMESPACE)")
	fs.StringVar(&c.Partition, flagPartition, "", "Consul Enterprise admin partition to read (default: CONSUL_PARTITION)")
	fs.StringVar(&c.Consistency, flagConsistency, ConsistencyDefault, "read consistency: default, stale (any server; scales reads) or consistent (leader-verified)")
	fs.DurationVar(&c.Wait, flagWait, DefaultWait, "longest wait of a signal's blocking query (1s to 10m); bounds how long a silently dead connection goes unnoticed (service watches wait 10m)")
}

// addMappingFlags: what a Consul service becomes.
func (c *Config) addMappingFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.HostTemplate, flagHostTemplate, DefaultHostTemplate, "host of a service: Go template with {{.Name}} (the service's name), {{.Datacenter}}, {{.Namespace}}, {{.Partition}}")
	fs.StringVar(&c.Namespace, flagNamespace, DefaultNamespace, "namespace of the ServiceEntries")
	fs.StringVar(&c.NamespaceMetaKey, flagNamespaceMetaKey, "", "service meta key whose value, when set, is the ServiceEntry's namespace instead of --"+flagNamespace)
	fs.StringSliceVar(&c.ExportTo, flagExportTo, nil, "exportTo of the ServiceEntries, comma-separated (default: every namespace)")
	fs.StringVar(&c.ExportToMetaKey, flagExportToMetaKey, "", "service meta key whose value (comma-separated), when present, is the exportTo instead of --"+flagExportTo)
	fs.StringVar(&c.AddressSource, flagAddressSource, AddressService, "endpoint address: service (service address, else node address) or a tagged address: lan, wan, lan_ipv4, lan_ipv6, wan_ipv4, wan_ipv6")
	fs.BoolVar(&c.IncludeWarning, flagIncludeWarning, false, "serve instances whose worst check is warning (default: passing only)")
	fs.BoolVar(&c.IncludeConsulService, flagIncludeConsul, false, "serve the catalog's own \""+ConsulService+"\" service (the Consul servers' entry, left out by default: a mesh client has no use for it)")
}

// addWatchFlags: how much the adapter asks of the agent, and how often.
func (c *Config) addWatchFlags(fs *pflag.FlagSet) {
	fs.IntVar(&c.FetchConcurrency, flagFetchConcurrency, DefaultFetchConcurrency, "per-service requests in flight (each an HTTP connection; the agent allows 200 per client)")
	fs.DurationVar(&c.Resync, flagRelistInterval, DefaultResync, "period of the index sweep over every service that catches what no blocking query signals (node address changes)")
	fs.DurationVar(&c.SweepInterval, flagSweepInterval, DefaultSweepInterval, "least time between two sweeps caused by catalog changes no signal attributes to a service")
	fs.IntVar(&c.ServiceWatches, flagServiceWatches, 0, "most services each followed by a blocking query of its own, which sees port, meta and address edits in milliseconds instead of a sweep (needs the agent's HTTPS listener: HTTP/2; 0: none)")
	fs.DurationVar(&c.DatacenterRefresh, flagDatacenterRefresh, DefaultDatacenterRefresh, "how often the datacenter list is read again with --"+flagDatacenters+" all")
}
