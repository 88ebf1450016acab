package eureka

import (
	"github.com/spf13/pflag"
)

// The adapter's flag names (without "--"). Every error that asks an operator to fix a setting
// names it by one of these.
const (
	flagURLs           = "eureka-urls"
	flagPollInterval   = "eureka-poll-interval"
	flagDeltaWindow    = "eureka-delta-window"
	flagRelistInterval = "eureka-relist-interval"
	flagTimeout        = "eureka-timeout"
	flagMaxBody        = "eureka-max-body"
	flagMaxInstances   = "eureka-max-instances"
	flagMaxApps        = "eureka-max-apps"
	flagAuthFile       = "eureka-auth-file"
	flagTLSCA          = "eureka-tls-ca"
	flagTLSCert        = "eureka-tls-cert"
	flagTLSKey         = "eureka-tls-key"
	flagTLSServerName  = "eureka-tls-server-name"
	flagHostTemplate   = "eureka-host-template"
	flagAddress        = "eureka-address"
	flagProtocolKey    = "eureka-protocol-key"
	flagZoneKey        = "eureka-zone-key"
	flagRegionKey      = "eureka-region-key"
	flagRegion         = "eureka-region"
	flagMaxLeaseAge    = "eureka-max-lease-age"
	flagNamespace      = "namespace"
)

// RenamedFlags maps each flag's name before issue 28 to its name now; the old names keep
// working, with a warning (daemon.DeprecatedFlag).
func RenamedFlags() map[string]string {
	return map[string]string{
		"poll-interval": flagPollInterval,
		"max-lease-age": flagMaxLeaseAge,
	}
}

// AddFlags declares the adapter's flags on fs, each setting a field of c. The names before
// issue 28 (RenamedFlags) are the command's to keep working, with daemon.DeprecatedFlag: the
// adapter stays clear of the daemon.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	c.addServerFlags(fs)
	c.addMappingFlags(fs)
}

// addServerFlags: which servers, how often, how much, and how to reach them.
func (c *Config) addServerFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&c.URLs, flagURLs, nil, "base URLs of the Eureka servers, URL,URL,... as clients are given them, e.g. http://eureka-1:8761/eureka (required; /eureka/v2 and other paths as given; user:password@ for basic auth)")
	fs.DurationVar(&c.PollInterval, flagPollInterval, DefaultPollInterval, "how often /apps/delta is fetched")
	fs.DurationVar(&c.DeltaWindow, flagDeltaWindow, DefaultDeltaWindow, "how long the servers keep changes for /apps/delta (Netflix: retentionTimeInMSInDeltaQueue, 3m; Polaris: 60s); after an outage this long the full listing is fetched")
	fs.DurationVar(&c.RelistInterval, flagRelistInterval, DefaultRelistInterval, "fetch the full listing this often even when every delta reconciled (negative: never)")
	fs.DurationVar(&c.Timeout, flagTimeout, DefaultTimeout, "longest one request may take, body included")
	fs.Int64Var(&c.MaxBody, flagMaxBody, DefaultMaxBody, "largest listing accepted, in bytes after decompression")
	fs.IntVar(&c.MaxInstances, flagMaxInstances, DefaultMaxInstances, "most instances (servable or not) one listing, or the registry deltas build, may hold; a listing over it is refused as it is read, never held whole, and the last state stays served")
	fs.IntVar(&c.MaxApps, flagMaxApps, DefaultMaxApps, "most applications one listing, or the registry deltas build, may hold; a listing over it is refused as it is read and the last state stays served")
	fs.StringVar(&c.AuthFile, flagAuthFile, "", "file holding user:password for HTTP basic auth to servers whose URL has none; read before every request")
	fs.StringVar(&c.TLSCAFile, flagTLSCA, "", "PEM CA bundle that verifies https servers (default: the system's roots); read at every connection")
	fs.StringVar(&c.TLSCertFile, flagTLSCert, "", "PEM client certificate for mutual TLS (with --"+flagTLSKey+")")
	fs.StringVar(&c.TLSKeyFile, flagTLSKey, "", "PEM private key of --"+flagTLSCert)
	fs.StringVar(&c.TLSServerName, flagTLSServerName, "", "name the servers' certificates must hold (default: each URL's host)")
	fs.DurationVar(&c.MaxLeaseAge, flagMaxLeaseAge, 0, "leave out instances whose last renewal is older than this, as a server in self-preservation keeps them UP (0: off; needs full listings every "+flagMaxLeaseAge+"/2)")
}

// addMappingFlags: how an application becomes a ServiceEntry.
func (c *Config) addMappingFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.HostTemplate, flagHostTemplate, DefaultHostTemplate, "host of an application: Go template with {{.Name}} (lower case), {{.App}}, {{.Namespace}}, {{.VIPAddress}}, {{.SecureVIPAddress}}, {{.Metadata}}, e.g. '{{.VIPAddress}}' or '{{index .Metadata \"mesh-host\"}}'")
	fs.StringVar(&c.Address, flagAddress, AddressIP, "endpoint address of an instance: ip (ipAddr) or hostname (hostName)")
	fs.StringVar(&c.ProtocolKey, flagProtocolKey, DefaultProtocolKey, "metadata key naming the protocol of an instance's port (http, http2, grpc, tcp, ...; default HTTP)")
	fs.StringVar(&c.ZoneKey, flagZoneKey, DefaultZoneKey, "metadata key of an instance's zone, the locality's zone when its dataCenterInfo has no availability-zone")
	fs.StringVar(&c.RegionKey, flagRegionKey, DefaultRegionKey, "metadata key of an instance's region, the locality's region")
	fs.StringVar(&c.Region, flagRegion, "", "region of the instances whose record names none (no metadata region, a zone such as zone-a that holds no cloud region, or no zone), as eureka.client.region; empty: those get no locality, never a zone without a region")
	fs.StringVar(&c.Namespace, flagNamespace, DefaultNamespace, "namespace of the ServiceEntries")
}
