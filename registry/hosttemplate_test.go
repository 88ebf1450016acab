package registry_test

import (
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/registry"
)

func TestParseHostTemplateChecksAtStart(t *testing.T) {
	type fields struct{ Name, Group string }
	sample := fields{Name: "orders", Group: "g1"}
	tmpl, err := registry.ParseHostTemplate("{{.Name}}.{{.Group}}.svc", sample)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, fields{Name: "pay", Group: "g2"}); err != nil || b.String() != "pay.g2.svc" {
		t.Errorf("rendered %q, %v; want pay.g2.svc", b.String(), err)
	}
	for text, want := range map[string]string{
		"{{.Service}}.svc":  "Service",         // a field the type lacks
		"{{.Name":           "unclosed action", // does not parse
		"{{/* nothing */}}": "not a host name", // renders no host
	} {
		if _, err := registry.ParseHostTemplate(text, sample); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseHostTemplate(%q) = %v, want an error about %q", text, err, want)
		}
	}
}
