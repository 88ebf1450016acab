package consul

import (
	"io"
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

// TestAllDatacentersFlag: --consul-all-datacenters means --consul-datacenters
// all, whatever else --consul-datacenters says (as before issue 28; its old
// name is cmd/galleon-consul's TestOldFlagNamesStillWork).
func TestAllDatacentersFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{nil, nil},
		{[]string{"--consul-datacenters", "dc1,dc2"}, []string{"dc1", "dc2"}},
		{[]string{"--consul-all-datacenters"}, []string{AllDatacenters}},
		{[]string{"--consul-all-datacenters", "--consul-datacenters", "dc1"}, []string{AllDatacenters}},
	} {
		var cfg Config
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.AddFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if got := cfg.withDefaults().Datacenters; !slices.Equal(got, tt.want) {
			t.Errorf("%v: datacenters %v, want %v", tt.args, got, tt.want)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%v: %v", tt.args, err)
		}
	}
}

// TestServiceFieldIsFound: the templates that read {{.Service}}, the old
// name of {{.Name}}, wherever it is, and only those.
func TestServiceFieldIsFound(t *testing.T) {
	for text, want := range map[string]bool{
		"{{.Name}}.service.consul":                                                             false,
		"{{.Service}}.service.consul":                                                          true,
		"{{if .Service}}{{.Name}}{{end}}.mesh":                                                 true,
		"{{with $d := .}}{{$d.Service}}{{end}}.mesh":                                           true,
		"{{with $n := .Namespace}}{{$n}}.{{end}}{{.Name}}.x":                                   false,
		"{{.Name}}{{if eq .Datacenter \"dc1\"}}-a{{else}}-{{printf \"%s\" .Service}}{{end}}.x": true,
		`{{define "h"}}{{.Service}}{{end}}{{template "h" .}}.x`:                                true,
		`{{"Service"}}-{{.Name}}.x`:                                                            false,
	} {
		tmpl, err := parseHostTemplate(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if got := usesServiceField(tmpl); got != want {
			t.Errorf("%s: uses {{.Service}} = %v, want %v", text, got, want)
		}
	}
}
