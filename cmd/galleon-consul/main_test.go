package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/consul"
	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/testing/daemontest"
	"github.com/galleon-mesh/galleon/registry"
)

// TestBadFlagsFailAtStart checks that a bad value stops the binary with
// exit status 2 and a message naming the flag to fix.
func TestBadFlagsFailAtStart(t *testing.T) {
	spec := daemon.Spec{Name: "galleon-consul", Registry: "consul", Flags: builtin.Consul().Flags}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--consul-consistency", "eventual"}, "--consul-consistency"},
		{[]string{"--consul-wait", "20m"}, "--consul-wait"},
		{[]string{"--consul-host-template", "{{.Nope}}"}, "--consul-host-template"},
		{[]string{"--consul-address-source", "public"}, "--consul-address-source"},
		{[]string{"--consul-fetch-concurrency", "500"}, "--consul-fetch-concurrency"},
		{[]string{"--consul-datacenters", "all,dc1"}, "--consul-datacenters"},
		{[]string{"--consul-token-file", "/nonexistent/token"}, "--consul-token-file"},
		{[]string{"--consul-tls-cert", "/x.pem"}, "--consul-tls-cert and --consul-tls-key"},
		{[]string{"--namespace", "Bad_NS"}, "--namespace"},
		{[]string{"--consul-service-watches", "100"}, "--consul-service-watches 100: needs the agent's HTTPS listener"},
		{[]string{"--consul-service-watches", "50000", "--consul-address", "https://127.0.0.1:8501"}, "--consul-service-watches 50000: want 0 (none) to 40000"},
		// An old name: the error names the flag by its current name.
		{[]string{"--consistency", "eventual"}, "--consul-consistency"},
	} {
		var stderr bytes.Buffer
		code := daemon.Run(context.Background(), spec, append(tt.args, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"), &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", tt.args, code, stderr.String(), tt.want)
		}
	}
}

// TestOldFlagNamesStillWork: each flag's name before issue 28 sets the
// same value as its current name, and warns that it is deprecated.
func TestOldFlagNamesStillWork(t *testing.T) {
	values := map[string]string{
		"datacenters": "dc1,dc2", "export-to": ".,istio-system",
		"all-datacenters": "true", "include-warning": "true",
		"wait": "3m", "resync": "7m", "sweep-interval": "3s", "datacenter-refresh": "2m",
		"fetch-concurrency": "9", "service-watches": "12",
	}
	daemontest.CheckRenamedFlags(t, builtin.Consul().Flags, consul.RenamedFlags(), values)
}

// errTemplateOK stops the daemon once the registry was built.
var errTemplateOK = errors.New("the registry was built")

// TestHostTemplateServiceFieldWarns: {{.Service}}, the old name of
// {{.Name}}, still works and is warned about once at start.
func TestHostTemplateServiceFieldWarns(t *testing.T) {
	for _, tt := range []struct {
		template string
		warn     bool
	}{
		{"{{.Service}}.service.consul", true},
		{"{{if .Service}}{{.Name}}{{end}}.mesh", true},
		{"{{.Name}}.service.consul", false},
		{"{{.Name}}.service.{{.Datacenter}}.consul", false},
	} {
		spec := daemon.Spec{Name: "galleon-consul", Registry: "consul", Summary: "test",
			Flags: func(fs *pflag.FlagSet) daemon.NewRegistry {
				newRegistry := builtin.Consul().Flags(fs)
				return func(env daemon.Env) (registry.Registry, error) {
					if _, err := newRegistry(env); err != nil {
						return nil, err
					}
					return nil, errTemplateOK
				}
			}}
		var stderr strings.Builder
		args := []string{"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--consul-host-template", tt.template}
		if code := daemon.Run(context.Background(), spec, args, &stderr); code != 2 || !strings.Contains(stderr.String(), errTemplateOK.Error()) {
			t.Fatalf("%s: exit %d, want 2 from the test's constructor; stderr:\n%s", tt.template, code, stderr.String())
		}
		if n := strings.Count(stderr.String(), "{{.Service}}, the old name of {{.Name}}"); n != map[bool]int{true: 1}[tt.warn] {
			t.Errorf("%s: warned %d times, want warn=%v; stderr:\n%s", tt.template, n, tt.warn, stderr.String())
		}
	}
}
