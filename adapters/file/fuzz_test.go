package file

import (
	"testing"

	"github.com/galleon-mesh/galleon/internal/convert"
)

// FuzzParseFile feeds arbitrary bytes to the file format's parser and the
// core's conversion of what it accepts: neither may panic, every accepted
// service has a key, and every rejection names a line inside the file.
func FuzzParseFile(f *testing.F) {
	// Small seeds: the fuzzer minimises every input that finds new
	// coverage, and a large one (examples/file) takes it minutes.
	for _, s := range []string{
		"services: []\n",
		"services:\n- name: a\n  ports: [{number: 80}]\n  instances:\n  - {address: 10.0.0.1, ports: {80: 81}, weight: 3}\n",
		"services:\n- name: a\n  ports: [{number: 80.5}]\n",
		"services:\n- &a {name: x, ports: [{number: 1}]}\n- *a\n",
		"services: {a: b}\n---\nservices: [1, 2]\n",
		"services:\n- name: a_b\n  hosts: ['*', a_b.example.com]\n  ports: [{number: 443, protocol: tls}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pf, rej := parseFile("/fuzz/a.yaml", data, "default")
		if rej != nil {
			if rej.err == nil || rej.path != "/fuzz/a.yaml" {
				t.Fatalf("file rejection without an error or with the wrong path: %+v", rej)
			}
			return
		}
		lines := 1
		for _, c := range data {
			if c == '\n' {
				lines++
			}
		}
		for _, r := range pf.rejected {
			if r.err == nil || r.line < 1 || r.line > lines {
				t.Fatalf("service rejection %v at line %d of a %d-line file", r.err, r.line, lines)
			}
		}
		for _, ps := range pf.services {
			if ps.svc.Name == "" || ps.svc.Namespace == "" {
				t.Fatalf("accepted a service without a key: %+v", ps.svc)
			}
			_, _ = convert.Convert(ps.svc, convert.Options{}) // must not panic
		}
	})
}
