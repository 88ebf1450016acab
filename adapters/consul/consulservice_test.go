package consul_test

import (
	"io"
	"testing"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/adapters/consul"
	"github.com/galleon-mesh/galleon/adapters/consul/consultest"
	"github.com/galleon-mesh/galleon/model"
)

// TestConsulServiceLeftOut: the catalog's own "consul" service (the servers' entry, which every
// agent's catalog holds) is not served by default, and is with --consul-include-consul-service.
func TestConsulServiceLeftOut(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a, consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: "web-1", Service: "web", Port: 8080, Check: "passing"})
	own := model.ServiceKey{Namespace: consul.DefaultNamespace, Name: consul.ConsulService}
	web := model.ServiceKey{Namespace: consul.DefaultNamespace, Name: "web"}

	for _, tc := range []struct {
		name  string
		args  []string
		serve bool
	}{
		{"by default", nil, false},
		{"with --consul-include-consul-service", []string{"--consul-include-consul-service"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var flags consul.Config
			fs := pflag.NewFlagSet("galleon-consul", pflag.ContinueOnError)
			fs.SetOutput(io.Discard)
			flags.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(a)
			cfg.IncludeConsulService = flags.IncludeConsulService
			r := run(t, cfg)
			// The first listing is one Replace of every service listed: web and, when
			// served, consul arrive together.
			// (The state is the Recorder's, locked only while the condition runs.)
			served := false
			r.rec.WaitFor(t, waitFor, func(s map[model.ServiceKey]model.Service) bool {
				_, served = s[own]
				_, ok := s[web]
				return ok
			})
			if served != tc.serve {
				t.Fatalf("consul service served: %v, want %v", served, tc.serve)
			}
			if tc.serve {
				return
			}
			// A later change (a sweep, a catalog update) does not bring it back either.
			register(t, a, consultest.Instance{Node: "n1", NodeAddress: "10.0.0.1", ID: "web-2", Service: "web", Port: 8080, Check: "passing"})
			r.waitService(t, "web", "web-2", func(s model.Service) bool { return len(s.Instances) == 2 })
			r.settle(t)
			r.rec.WaitFor(t, waitFor, func(s map[model.ServiceKey]model.Service) bool { _, served = s[own]; return true })
			if served {
				t.Fatal("consul service served after a catalog change")
			}
		})
	}
}
