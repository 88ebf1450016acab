// Command galleon-eureka serves the applications registered in Netflix Eureka 1.x (or a server
// with its API) to istiod as ServiceEntries: one per application, its UP instances as endpoints,
// kept current with /apps/delta and apps__hashcode reconciliation.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/eureka"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/registry"
)

func main() {
	os.Exit(daemon.Main(daemon.Spec{
		Name:     "galleon-eureka",
		Registry: "eureka",
		Summary:  "serves the applications registered in Eureka to istiod",
		Flags:    flags,
	}))
}

func flags(fs *pflag.FlagSet) daemon.NewRegistry {
	var cfg eureka.Config
	fs.StringSliceVar(&cfg.URLs, "eureka-urls", nil, "base URLs of the Eureka servers, URL,URL,... as clients are given them, e.g. http://eureka-1:8761/eureka (required; /eureka/v2 and other paths as given; user:password@ for basic auth)")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", eureka.DefaultPollInterval, "how often /apps/delta is fetched")
	fs.DurationVar(&cfg.DeltaWindow, "eureka-delta-window", eureka.DefaultDeltaWindow, "how long the servers keep changes for /apps/delta (Netflix: retentionTimeInMSInDeltaQueue, 3m; Polaris: 60s); after an outage this long the full listing is fetched")
	fs.DurationVar(&cfg.RelistInterval, "eureka-relist-interval", eureka.DefaultRelistInterval, "fetch the full listing this often even when every delta reconciled (negative: never)")
	fs.DurationVar(&cfg.Timeout, "eureka-timeout", eureka.DefaultTimeout, "longest one request may take, body included")
	fs.Int64Var(&cfg.MaxBody, "eureka-max-body", eureka.DefaultMaxBody, "largest listing accepted, in bytes after decompression")
	fs.IntVar(&cfg.MaxInstances, "eureka-max-instances", eureka.DefaultMaxInstances, "most instances (servable or not) one listing, or the registry deltas build, may hold; a listing over it is refused as it is read, never held whole, and the last state stays served")
	fs.IntVar(&cfg.MaxApps, "eureka-max-apps", eureka.DefaultMaxApps, "most applications one listing, or the registry deltas build, may hold; a listing over it is refused as it is read and the last state stays served")
	fs.StringVar(&cfg.AuthFile, "eureka-auth-file", "", "file holding user:password for HTTP basic auth to servers whose URL has none; read before every request")
	fs.StringVar(&cfg.TLSCAFile, "eureka-tls-ca", "", "PEM CA bundle that verifies https servers (default: the system's roots); read at every connection")
	fs.StringVar(&cfg.TLSCertFile, "eureka-tls-cert", "", "PEM client certificate for mutual TLS (with --eureka-tls-key)")
	fs.StringVar(&cfg.TLSKeyFile, "eureka-tls-key", "", "PEM private key of --eureka-tls-cert")
	fs.StringVar(&cfg.TLSServerName, "eureka-tls-server-name", "", "name the servers' certificates must hold (default: each URL's host)")
	fs.StringVar(&cfg.HostTemplate, "eureka-host-template", eureka.DefaultHostTemplate, "host of an application: Go template with {{.Name}} (lower case), {{.App}}, {{.Namespace}}, {{.VIPAddress}}, {{.SecureVIPAddress}}, {{.Metadata}}, e.g. '{{.VIPAddress}}' or '{{index .Metadata \"mesh-host\"}}'")
	fs.StringVar(&cfg.Address, "eureka-address", eureka.AddressIP, "endpoint address of an instance: ip (ipAddr) or hostname (hostName)")
	fs.StringVar(&cfg.ProtocolKey, "eureka-protocol-key", eureka.DefaultProtocolKey, "metadata key naming the protocol of an instance's port (http, http2, grpc, tcp, ...; default HTTP)")
	fs.StringVar(&cfg.ZoneKey, "eureka-zone-key", eureka.DefaultZoneKey, "metadata key of an instance's zone, the locality's zone when its dataCenterInfo has no availability-zone")
	fs.StringVar(&cfg.RegionKey, "eureka-region-key", eureka.DefaultRegionKey, "metadata key of an instance's region, the locality's region")
	fs.StringVar(&cfg.Region, "eureka-region", "", "region of the instances whose record names none (no metadata region, a zone such as zone-a that holds no cloud region, or no zone), as eureka.client.region; empty: those get no locality, never a zone without a region")
	fs.DurationVar(&cfg.MaxLeaseAge, "max-lease-age", 0, "leave out instances whose last renewal is older than this, as a server in self-preservation keeps them UP (0: off; needs full listings every max-lease-age/2)")
	fs.StringVar(&cfg.Namespace, "namespace", eureka.DefaultNamespace, "namespace of the ServiceEntries")
	return func(env daemon.Env) (registry.Registry, error) {
		cfg.Logger = env.Logger
		cfg.Registerer = env.Registerer
		return eureka.New(cfg)
	}
}
