package nacos

import (
	"time"

	"github.com/spf13/pflag"
)

// The adapter's flag names (without "--"). Every error that asks an operator to fix a setting
// names it by one of these. The mapping's flags are Naming's (naming.go).
const (
	flagServers           = "nacos-servers"
	flagGRPCPortOffset    = "nacos-grpc-port-offset"
	flagAPI               = "nacos-api"
	flagContextPath       = "nacos-context-path"
	flagNamespaces        = "nacos-namespaces"
	flagGroups            = "nacos-groups"
	flagDiscoveryInterval = "nacos-discovery-interval"
	flagPageSize          = "nacos-page-size"
	flagRefreshInterval   = "nacos-refresh-interval"
	flagRefreshMaxRate    = "nacos-refresh-max-rate"
	flagTimeout           = "nacos-timeout"
	flagMaxMessage        = "nacos-max-message"
	flagMaxServices       = "nacos-max-services"
	flagMaxInstances      = "nacos-max-instances"
	flagUDPPort           = "nacos-udp-port"
	flagUsername          = "nacos-username"
	flagPasswordFile      = "nacos-password-file"
	flagAccessKey         = "nacos-access-key"
	flagSecretKeyFile     = "nacos-secret-key-file"
	flagTLS               = "nacos-tls"
	flagTLSCA             = "nacos-tls-ca"
	flagTLSCert           = "nacos-tls-cert"
	flagTLSKey            = "nacos-tls-key"
	flagTLSServerName     = "nacos-tls-server-name"
)

// AddFlags declares the adapter's flags on fs, each setting a field of c, and the mapping's
// (Naming.AddFlags). Secrets are read from files, never given as flags: a flag's value is in
// the process list and in shell histories.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	c.addServerFlags(fs)
	c.addScopeFlags(fs)
	c.addAccessFlags(fs)
	c.Naming.AddFlags(fs)
}

// addServerFlags: which servers, over which API, with which bounds.
func (c *Config) addServerFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&c.Servers, flagServers, nil, "Nacos servers, host:port,... with the HTTP port as Nacos clients are given it (serverAddr; default port 8848); read one at a time, the next when it fails (required)")
	fs.IntVar(&c.GRPCPortOffset, flagGRPCPortOffset, DefaultGRPCPortOffset, "the gRPC port of a server is its HTTP port plus this, as Nacos's own clients compute it (nacos.server.grpc.port.offset); may be negative; 0 means the default")
	fs.StringVar(&c.API, flagAPI, APIAuto, "API to watch with: auto (gRPC with pushes, the HTTP OpenAPI when a server has no gRPC port: Nacos 1.x), grpc or http")
	fs.StringVar(&c.ContextPath, flagContextPath, DefaultContextPath, "context path of the servers' HTTP API (nacos.server.contextPath)")
	fs.DurationVar(&c.Timeout, flagTimeout, DefaultTimeout, "longest one request may take, and the connection's setup")
	fs.IntVar(&c.MaxMessage, flagMaxMessage, DefaultMaxMessage, "largest message (gRPC) or body (HTTP) accepted from a server, in bytes")
	fs.IntVar(&c.UDPPort, flagUDPPort, 0, "HTTP API only: UDP port the servers push changes to (Nacos 1.x push); 0 picks a free one, -1 turns the push off (polling only)")
}

// addScopeFlags: what is watched, and how often it is looked for.
func (c *Config) addScopeFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&c.Namespaces, flagNamespaces, []string{DefaultNamespace}, "Nacos namespaces (IDs) to watch, ID,...; \"*\" watches every namespace the server lists, followed as they come and go")
	fs.StringSliceVar(&c.Groups, flagGroups, nil, "Nacos groups to watch, group,...; default: every group when the server can list them, else "+DefaultGroup)
	fs.DurationVar(&c.DiscoveryInterval, flagDiscoveryInterval, DefaultDiscoveryInterval, "how often the service lists are read to find services added and removed; each read costs one request per page (--"+flagPageSize+") per namespace and group")
	c.RefreshInterval = DefaultRefreshInterval
	fs.Var(refreshValue{&c.RefreshInterval}, flagRefreshInterval, "how often every subscribed service is read again over gRPC (a Subscribe), the safety net for a lost push: "+
		"polaris-server 1.18.1 never pushes a change of a service outside "+DefaultGroup+" (its core/push.go takes the group from the bare service name), and any server may drop a push to a slow client; "+
		"costs one request per service per interval, spread evenly, whether anything changed or not, at most --"+flagRefreshMaxRate+" a second; 0 turns it off")
	fs.Float64Var(&c.RefreshMaxRate, flagRefreshMaxRate, DefaultRefreshMaxRate, "most refresh requests a second (--"+flagRefreshInterval+"): with more services than interval x rate, each is read every services / rate seconds (10,000 services at 20 a second: every 8m20s)")
	fs.IntVar(&c.PageSize, flagPageSize, DefaultPageSize, "services per page of a service listing")
	fs.IntVar(&c.MaxServices, flagMaxServices, DefaultMaxServices, "most services watched; those over it (in namespace, group, name order) are not, with a warning")
	fs.IntVar(&c.MaxInstances, flagMaxInstances, DefaultMaxInstances, "most instances of one service; a service over it keeps its last state, rejected")
}

// addAccessFlags: credentials and TLS.
func (c *Config) addAccessFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Username, flagUsername, "", "user name to log in with (Nacos auth: POST /v1/auth/login), with --"+flagPasswordFile)
	fs.StringVar(&c.PasswordFile, flagPasswordFile, "", "file holding the password of --"+flagUsername+"; read at every login, so a rotated password needs no restart")
	fs.StringVar(&c.AccessKey, flagAccessKey, "", "access key for Nacos AK/SK request signing, with --"+flagSecretKeyFile)
	fs.StringVar(&c.SecretKeyFile, flagSecretKeyFile, "", "file holding the secret key of --"+flagAccessKey)
	fs.BoolVar(&c.TLS, flagTLS, false, "reach the servers over TLS (implied by --"+flagTLSCA+", --"+flagTLSCert+" and https:// servers)")
	fs.StringVar(&c.TLSCAFile, flagTLSCA, "", "PEM CA bundle that verifies the servers (default: the system's roots); read at every connection")
	fs.StringVar(&c.TLSCertFile, flagTLSCert, "", "PEM client certificate for mutual TLS (with --"+flagTLSKey+")")
	fs.StringVar(&c.TLSKeyFile, flagTLSKey, "", "PEM private key of --"+flagTLSCert)
	fs.StringVar(&c.TLSServerName, flagTLSServerName, "", "name the servers' certificates must hold (default: each server's host)")
}

// refreshValue is --nacos-refresh-interval: a duration whose 0 turns the refresh off (Config
// takes a negative interval for that, its zero value being the default).
type refreshValue struct{ d *time.Duration }

func (v refreshValue) String() string {
	if v.d == nil || *v.d < 0 {
		return "0s"
	}
	return v.d.String()
}

func (v refreshValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d == 0 {
		d = -1
	}
	*v.d = d
	return nil
}

func (v refreshValue) Type() string { return "duration" }
