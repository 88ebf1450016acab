package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/galleon-mesh/galleon/internal/xdsclient"
)

// list is what `kubectl get -o yaml` prints for several objects.
type list struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Items      []xdsclient.Object `json:"items"`
	Metadata   listMeta           `json:"metadata"`
}

type listMeta struct {
	ResourceVersion string `json:"resourceVersion"`
}

// writeList prints objects as a kubectl List in format "yaml" or "json".
func writeList(w io.Writer, format string, objects []xdsclient.Object) error {
	if objects == nil {
		objects = []xdsclient.Object{} // "items: []", not "items: null"
	}
	return write(w, format, list{APIVersion: "v1", Kind: "List", Items: objects})
}

// write prints v as indented JSON or as YAML, both with sorted keys, as
// kubectl prints them.
func write(w io.Writer, format string, v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var out []byte
	if format == "json" {
		// Through a generic value, so keys come out sorted like kubectl's;
		// UseNumber keeps numbers exactly as they were.
		var generic any
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.UseNumber()
		if err := dec.Decode(&generic); err != nil {
			return err
		}
		out, err = json.MarshalIndent(generic, "", "    ")
		out = append(out, '\n')
	} else {
		out, err = yaml.JSONToYAML(j)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// event is one watch response, as printed.
type event struct {
	Time      string             `json:"time"`
	TypeURL   string             `json:"typeUrl"`
	Kind      string             `json:"-"`
	Mode      string             `json:"mode"` // "sotw" or "delta"; legacy MCP: "full" or "incremental"
	Version   string             `json:"version,omitempty"`
	Nonce     string             `json:"nonce"`
	Resources int                `json:"resources"`      // total held after this response
	Sent      *int               `json:"sent,omitempty"` // legacy MCP: resources in the response
	First     bool               `json:"first,omitempty"`
	Added     []string           `json:"added,omitempty"`
	Updated   []string           `json:"updated,omitempty"`
	Removed   []string           `json:"removed,omitempty"`
	Unchanged []string           `json:"unchanged,omitempty"` // Delta only: resent as they were
	Objects   []xdsclient.Object `json:"objects,omitempty"`   // with -o yaml/json
}

// maxSummaryNames bounds each name list on a summary line; -o names
// prints them all.
const maxSummaryNames = 10

// summary is the one-line description of an event.
func (e *event) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s version=%q nonce=%q resources=%d", e.Time, e.Kind, e.Mode, e.Version, e.Nonce, e.Resources)
	if e.Sent != nil {
		fmt.Fprintf(&b, " sent=%d", *e.Sent)
	}
	lists := []struct {
		name  string
		names []string
	}{{"added", e.Added}, {"updated", e.Updated}, {"removed", e.Removed}, {"unchanged", e.Unchanged}}
	changed := false
	for _, l := range lists {
		if len(l.names) == 0 {
			continue
		}
		changed = true
		shown := l.names
		more := ""
		if len(shown) > maxSummaryNames {
			more = fmt.Sprintf(" +%d more", len(shown)-maxSummaryNames)
			shown = shown[:maxSummaryNames]
		}
		fmt.Fprintf(&b, " %s=[%s%s]", l.name, strings.Join(shown, " "), more)
	}
	switch {
	case !changed && e.First:
		b.WriteString(" (empty)")
	case !changed && (e.Mode == "sotw" || e.Mode == "full"):
		b.WriteString(" no changes (the source resent the same state)")
	case !changed:
		b.WriteString(" no changes")
	}
	return b.String()
}

// writeEvent prints e in the watch output format.
func writeEvent(w io.Writer, format string, e *event) error {
	var err error
	switch format {
	case "json": // one JSON object per line
		var j []byte
		if j, err = json.Marshal(e); err == nil {
			_, err = fmt.Fprintf(w, "%s\n", j)
		}
	case "yaml": // the summary as a comment keeps the stream valid YAML
		if _, err = fmt.Fprintf(w, "# %s\n", e.summary()); err != nil {
			return err
		}
		for _, obj := range e.Objects {
			if _, err = io.WriteString(w, "---\n"); err != nil {
				return err
			}
			if err = write(w, "yaml", obj); err != nil {
				return err
			}
		}
	case "names":
		if _, err = fmt.Fprintln(w, e.summary()); err != nil {
			return err
		}
		for _, l := range []struct {
			mark  string
			names []string
		}{{"+", e.Added}, {"~", e.Updated}, {"-", e.Removed}, {"=", e.Unchanged}} {
			for _, n := range l.names {
				if _, err = fmt.Fprintf(w, "  %s %s\n", l.mark, n); err != nil {
					return err
				}
			}
		}
	default:
		_, err = fmt.Fprintln(w, e.summary())
	}
	return err
}
