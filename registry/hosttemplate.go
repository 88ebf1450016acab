package registry

import (
	"fmt"
	"strings"
	"text/template"

	"github.com/galleon-mesh/galleon/model"
)

// ParseHostTemplate parses a host template: a Go text/template an adapter renders into each
// service's host, with the fields of the adapter's own data type ({{.Name}} in every Galleon
// adapter, beside the registry's own: {{.Datacenter}}, {{.Group}}, ...). It renders sample (a
// value of that type) once, so that a template naming a field the type lacks, or one that
// renders no host name, fails at start instead of on the first service. A missing map key is
// an error (missingkey=error); an adapter whose template reads free-form metadata sets
// another option on the result.
func ParseHostTemplate(text string, sample any) (*template.Template, error) {
	t, err := template.New("host").Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	if err := t.Execute(&b, sample); err != nil {
		return nil, err
	}
	if model.HostName(b.String()) == "" {
		return nil, fmt.Errorf("%q renders %q for a sample service, which is not a host name", text, b.String())
	}
	return t, nil
}
