package zookeeper

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestConfigErrorsQuoteDefinedFlags: every setting New refuses is named by a flag AddFlags
// defines, and each wrong setting is named (the TLS and credentials errors in full:
// TestSecureConfigErrors).
func TestConfigErrorsQuoteDefinedFlags(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var cfg Config
	cfg.AddFlags(fs)
	bad := Config{
		Servers:          []string{"zk1:99999", "zk2/chroot", ""},
		Layout:           "etcd",
		Root:             "services/",
		SessionTimeout:   time.Millisecond,
		UnreachableAfter: -time.Second,
		Namespace:        "Not_A_Label",
		HostTemplate:     "{{.Nope}}",
		DubboProtocols:   map[string]string{"x": "carrier-pigeon"},
		RelistInterval:   time.Second,
		MaxBuffer:        1,
		ListConcurrency:  -1,
		Auth:             "nocolon",
		TLSCertFile:      "cert.pem",
	}
	_, err := New(bad)
	if err == nil {
		t.Fatal("New accepted every wrong setting")
	}
	quoted := map[string]bool{}
	for _, m := range regexp.MustCompile(`--([a-z][a-z0-9-]*)`).FindAllStringSubmatch(err.Error(), -1) {
		quoted[m[1]] = true
		if fs.Lookup(m[1]) == nil {
			t.Errorf("the error quotes --%s, which AddFlags does not define", m[1])
		}
	}
	for _, want := range []string{flagServers, flagLayout, flagRoot, flagSessionTimeout, flagUnreachableAfter,
		flagNamespace, flagHostTemplate, flagDubboProtocol, flagRelistInterval, flagMaxBuffer,
		flagListConcurrency, flagAuth, flagTLSCert, flagTLSKey} {
		if !quoted[want] {
			t.Errorf("no error names --%s:\n%s", want, strings.ReplaceAll(err.Error(), "\n", "\n\t"))
		}
	}
}
