package nacos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestConfigErrors: each bad setting is refused with a message naming its flag.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("two\nlines\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	servers := []string{"127.0.0.1:8848"}
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no servers", Config{}, "--nacos-servers is empty"},
		{"bad port", Config{Servers: []string{"h:0"}}, `--nacos-servers "h:0": port "0"`},
		{"path", Config{Servers: []string{"http://h:8848/nacos"}}, "--nacos-servers"},
		{"credentials", Config{Servers: []string{"http://u:p@h:8848"}}, "without a path, credentials"},
		{"scheme", Config{Servers: []string{"ftp://h:8848"}}, `scheme "ftp"`},
		{"twice", Config{Servers: []string{"h:8848", "h"}}, "lists h:8848 twice"},
		{"offset", Config{Servers: servers, GRPCPortOffset: 60000}, "--nacos-grpc-port-offset 60000"},
		{"api", Config{Servers: servers, API: "rest"}, `--nacos-api "rest"`},
		{"context path", Config{Servers: servers, ContextPath: "nacos"}, "--nacos-context-path"},
		{"star and more", Config{Servers: servers, Namespaces: []string{"*", "dev"}}, `"*" (every namespace) goes alone`},
		{"namespace twice", Config{Servers: servers, Namespaces: []string{"public", ""}}, "--nacos-namespaces lists"},
		{"group", Config{Servers: servers, Groups: []string{"a@@b"}}, `--nacos-groups "a@@b"`},
		{"interval", Config{Servers: servers, DiscoveryInterval: 1}, "--nacos-discovery-interval"},
		{"page", Config{Servers: servers, PageSize: 100000}, "--nacos-page-size 100000"},
		{"refresh", Config{Servers: servers, RefreshInterval: 500 * time.Millisecond}, "--nacos-refresh-interval 500ms"},
		{"refresh rate", Config{Servers: servers, RefreshMaxRate: -1}, "--nacos-refresh-max-rate -1"},
		{"timeout", Config{Servers: servers, Timeout: 1}, "--nacos-timeout"},
		{"message", Config{Servers: servers, MaxMessage: 10}, "--nacos-max-message 10"},
		{"services", Config{Servers: servers, MaxServices: -1}, "--nacos-max-services -1"},
		{"instances", Config{Servers: servers, MaxInstances: -1}, "--nacos-max-instances -1"},
		{"udp", Config{Servers: servers, UDPPort: -2}, "--nacos-udp-port -2"},
		{"user alone", Config{Servers: servers, Username: "u"}, "--nacos-username and --nacos-password-file go together"},
		{"password file", Config{Servers: servers, Username: "u", PasswordFile: filepath.Join(dir, "none")}, "--nacos-password-file"},
		{"secret lines", Config{Servers: servers, AccessKey: "ak", SecretKeyFile: secret}, "--nacos-secret-key-file " + secret + ": want one non-empty line"},
		{"tls pair", Config{Servers: servers, TLSKeyFile: secret}, "--nacos-tls-cert and --nacos-tls-key go together"},
		{"tls ca", Config{Servers: servers, TLSCAFile: secret}, "--nacos-tls-ca " + secret + ": no PEM"},
	} {
		_, err := New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error naming %q", tt.name, err, tt.want)
		}
	}
}

// TestConfigDefaults: the defaults, the servers' ports and names, the scope.
func TestConfigDefaults(t *testing.T) {
	r, err := New(Config{Servers: []string{"nacos-1", "https://nacos-2:443", "[::1]:9848"}, GRPCPortOffset: -5, Namespaces: []string{"public", "dev"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, grpc string
		tls        bool
	}{{"nacos-1:8848", "nacos-1:8843", false}, {"nacos-2:443", "nacos-2:438", true}, {"[::1]:9848", "[::1]:9843", false}}
	for i, s := range r.servers {
		if s.name != want[i].name || s.grpcAddr() != want[i].grpc || s.tls != want[i].tls {
			t.Errorf("server %d: %s gRPC %s tls %v, want %+v", i, s.name, s.grpcAddr(), s.tls, want[i])
		}
	}
	if got := strings.Join(r.scope.namespaces, ","); got != ",dev" {
		t.Errorf("namespaces %q, want \",dev\" (public is \"\")", got)
	}
	if r.scope.groups != nil {
		t.Errorf("groups %v, want every group (nil)", r.scope.groups)
	}
	c := r.cfg
	if c.API != APIAuto || c.ContextPath != "/nacos" || c.DiscoveryInterval != DefaultDiscoveryInterval || c.PageSize != DefaultPageSize ||
		c.Timeout != DefaultTimeout || c.MaxMessage != DefaultMaxMessage || c.MaxServices != DefaultMaxServices || c.MaxInstances != DefaultMaxInstances {
		t.Errorf("defaults not set: %+v", c)
	}
	all, err := New(Config{Servers: []string{"h"}, Namespaces: []string{"*"}})
	if err != nil || all.scope.namespaces != nil {
		t.Errorf("--nacos-namespaces *: %v, namespaces %v; want every namespace (nil)", err, all.scope.namespaces)
	}
}

// TestRefreshIntervalFlag: --nacos-refresh-interval defaults to a minute; 0 turns the refresh
// off (Config's negative), a duration sets it.
func TestRefreshIntervalFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want time.Duration
	}{
		{nil, DefaultRefreshInterval},
		{[]string{"--nacos-refresh-interval", "0"}, -1},
		{[]string{"--nacos-refresh-interval", "5s"}, 5 * time.Second},
	} {
		var c Config
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		c.AddFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		c.Servers = []string{"h"}
		r, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		if r.cfg.RefreshInterval != tt.want {
			t.Errorf("%v: refresh interval %v, want %v", tt.args, r.cfg.RefreshInterval, tt.want)
		}
	}
	r, err := New(Config{Servers: []string{"h"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.RefreshInterval != DefaultRefreshInterval {
		t.Errorf("Config's zero refresh interval: %v, want the default %v", r.cfg.RefreshInterval, DefaultRefreshInterval)
	}
}
