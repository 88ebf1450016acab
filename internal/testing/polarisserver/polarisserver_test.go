package polarisserver

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// uncommented is cfg without its comment lines.
func uncommented(cfg string) string {
	var b strings.Builder
	for _, line := range strings.Split(cfg, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func TestConfigBlocks(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ports     Ports
		opts      Options
		want, bad []string
		listenIPs int
	}{
		{
			name: "eureka", ports: Ports{Eureka: 18761, HTTP: 18090, GRPC: 18091},
			opts:      Options{EurekaDeltaExpireInterval: 5 * time.Second},
			want:      []string{"- name: service-eureka", "listenPort: 18761", "deltaExpireInterval: 5\n", "clientOpen: false", "healthcheck:\n  open: true\n"},
			bad:       []string{"service-nacos", "@", "listenPort: 0"},
			listenIPs: 3,
		},
		{
			name: "nacos with auth", ports: Ports{Nacos: 18848, HTTP: 18090, GRPC: 18091},
			opts:      Options{Auth: true, NoHealthCheck: true},
			want:      []string{"- name: service-nacos", "listenPort: 18848", "defaultNamespace: default", "clientOpen: true", "clientStrict: true", "healthcheck:\n  open: false\n"},
			bad:       []string{"service-eureka", "deltaExpireInterval", "@LISTEN", "@NACOS", "listenPort: 0", "maxConnLimit: 10240\n      tls:"},
			listenIPs: 3,
		},
		{
			name: "nacos over tls", ports: Ports{Nacos: 18848, HTTP: 18090, GRPC: 18091},
			opts: Options{Nacos: true, NacosTLS: &TLSFiles{CertFile: "/pki/server cert.pem", KeyFile: "/pki/key.pem", CAFile: "/pki/ca.pem"}},
			want: []string{
				"        maxConnLimit: 10240\n      tls:\n        certFile: \"/pki/server cert.pem\"\n        keyFile: \"/pki/key.pem\"\n        trustedCAFile: \"/pki/ca.pem\"\nauth:\n",
			},
			bad:       []string{"@NACOS_TLS"},
			listenIPs: 3,
		},
		{
			name: "tls without nacos", ports: Ports{Eureka: 18761, HTTP: 18090, GRPC: 18091},
			opts:      Options{NacosTLS: &TLSFiles{CertFile: "/pki/cert.pem", KeyFile: "/pki/key.pem", CAFile: "/pki/ca.pem"}},
			bad:       []string{"/pki/", "service-nacos"},
			listenIPs: 3,
		},
		{
			name: "both", ports: Ports{Eureka: 1, Nacos: 2, HTTP: 3, GRPC: 4},
			want:      []string{"- name: service-eureka", "- name: service-nacos"},
			listenIPs: 4,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Config(tc.ports, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			body := uncommented(cfg)
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("config lacks %q", w)
				}
			}
			for _, b := range tc.bad {
				// "@" is allowed in the salt only.
				if strings.Contains(strings.ReplaceAll(body, "polarismesh@2021", ""), b) {
					t.Errorf("config has %q", b)
				}
			}
			if strings.Contains(cfg, "\n# @BEGIN eureka@\n") || strings.Contains(cfg, "\n# @END nacos@\n") {
				t.Error("block markers left in the config")
			}
			if n := strings.Count(body, "listenIP: \"127.0.0.1\""); n != tc.listenIPs {
				t.Errorf("%d listenIP lines, want %d", n, tc.listenIPs)
			}
		})
	}
}

func TestKeepBlocksErrors(t *testing.T) {
	for _, cfg := range []string{
		"# @BEGIN nope@\nx\n# @END nope@\n",
		"# @BEGIN eureka@\nx\n",
		"# @BEGIN eureka@\n# @BEGIN nacos@\n# @END nacos@\n# @END eureka@\n",
	} {
		if _, err := keepBlocks(cfg, map[string]bool{"eureka": true, "nacos": true}); err == nil {
			t.Errorf("keepBlocks(%q): no error", cfg)
		}
	}
	got, err := keepBlocks("a\n# @BEGIN eureka@\nb\n# @END eureka@\nc\n", map[string]bool{"eureka": false})
	if err != nil || got != "a\nc\n" {
		t.Errorf("dropping a block: %q, %v", got, err)
	}
}

// TestNewRefusesHalfNacosTLS: Polaris serves plaintext, silently, without both a certificate and
// a key, and the probe cannot verify without the CA; TLS is for the Nacos API only.
func TestNewRefusesHalfNacosTLS(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("no PEM here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]Options{
		"no key":    {Nacos: true, NacosTLS: &TLSFiles{CertFile: "c.pem", CAFile: ca}},
		"no cert":   {Nacos: true, NacosTLS: &TLSFiles{KeyFile: "k.pem", CAFile: ca}},
		"no ca":     {Nacos: true, NacosTLS: &TLSFiles{CertFile: "c.pem", KeyFile: "k.pem"}},
		"ca no pem": {Nacos: true, NacosTLS: &TLSFiles{CertFile: "c.pem", KeyFile: "k.pem", CAFile: ca}},
		"no nacos":  {Eureka: true, NacosTLS: &TLSFiles{CertFile: "c.pem", KeyFile: "k.pem", CAFile: ca}},
	} {
		opts.Dir = t.TempDir()
		if _, err := New("/nonexistent", opts); err == nil {
			t.Errorf("%s: New took it", name)
		}
	}
}

func TestNewRefusesShortDeltaWindow(t *testing.T) {
	if _, err := New("/nonexistent", Options{Dir: t.TempDir(), EurekaDeltaExpireInterval: time.Millisecond}); err == nil {
		t.Fatal("New took a delta window under a second")
	}
}

// TestNacosPort: the Nacos port has its +1000 free, and another is found when it has not.
func TestNacosPort(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	taken := lis.Addr().(*net.TCPAddr).Port
	if taken <= NacosGRPCOffset {
		t.Skipf("port %d has no port 1000 below it", taken)
	}
	p, err := nacosPort(taken-NacosGRPCOffset, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p == taken-NacosGRPCOffset {
		t.Fatalf("nacosPort kept %d, whose +1000 (%d) is taken", p, taken)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+NacosGRPCOffset)))
	if err != nil {
		t.Fatalf("port %d + 1000 is not free: %v", p, err)
	}
	l.Close()
}
