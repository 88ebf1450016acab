package file

import (
	"fmt"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

// checkDecodeService fails t if decodeService accepts a service node and fills anything but what
// Node.Decode fills. It reports whether decodeService accepted it.
func checkDecodeService(t *testing.T, name string, n *yaml.Node) bool {
	t.Helper()
	var got serviceSpec
	if !decodeService(n, &got, newInterner(0)) {
		return false
	}
	var want serviceSpec
	if err := n.Decode(&want); err != nil {
		t.Errorf("%s: decodeService accepted a service Node.Decode refuses (%v)", name, err)
		return true
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: decodeService filled\n%#v\nNode.Decode fills\n%#v", name, got, want)
	}
	return true
}

// serviceNodes returns the service nodes of every document yaml.v3 reads from data.
func serviceNodes(data []byte) []*yaml.Node {
	docs, err := yamlV3Documents(data)
	if err != nil {
		return nil
	}
	var out []*yaml.Node
	for _, d := range docs {
		items, err := servicesOf(d)
		if err == nil {
			out = append(out, items...)
		}
	}
	return out
}

func TestDecodeServiceMatchesYAMLv3(t *testing.T) {
	accepted := map[string]string{
		"every field": `services:
- name: a
  namespace: ns
  hosts: [a.example.com, "b"]
  addresses: [10.0.0.0/24]
  ports: [{number: 80, protocol: HTTP, name: http}, {number: 0}]
  labels: {app: a, 'x': ""}
  annotations: {note: n}
  location: MESH_EXTERNAL
  resolution: STATIC
  exportTo: ["."]
  instances:
  - {id: i, address: 10.0.0.1, ports: {80: 8080}, labels: {v: "1"}, locality: r/z, network: n, weight: 4294967295, health: HEALTHY, serviceAccount: sa}
`,
		"empty collections": "services:\n- name: a\n  hosts: []\n  ports: []\n  labels: {}\n  instances: [{address: x, ports: {}}]\n",
	}
	for name, in := range accepted {
		nodes := serviceNodes([]byte(in))
		if len(nodes) == 0 {
			t.Fatalf("%s: no service", name)
		}
		for _, n := range nodes {
			if !checkDecodeService(t, name, n) {
				t.Errorf("%s: decodeService left it to Node.Decode:\n%s", name, in)
			}
		}
	}
	declined := map[string]string{
		"number as name":  "services:\n- name: 80\n",
		"octal":           "services:\n- name: a\n  ports: [{number: 010}]\n",
		"underscore":      "services:\n- name: a\n  ports: [{number: 8_080}]\n",
		"signed":          "services:\n- name: a\n  ports: [{number: +80}]\n",
		"too large":       "services:\n- name: a\n  instances: [{address: x, weight: 4294967296}]\n",
		"null":            "services:\n- name: a\n  hosts: ~\n",
		"null in a map":   "services:\n- name: a\n  labels: {a: null}\n",
		"repeated key":    "services:\n- name: a\n  name: b\n",
		"repeated label":  "services:\n- name: a\n  labels: {x: a, y: b, x: c}\n",
		"repeated port":   "services:\n- name: a\n  instances: [{address: x, ports: {80: 1, 80: 2}}]\n",
		"float":           "services:\n- name: a\n  ports: [{number: 80.5}]\n",
		"bool as string":  "services:\n- name: a\n  location: true\n",
		"alias":           "services:\n- name: &n a\n  namespace: *n\n",
		"unknown field":   "services:\n- name: a\n  colour: red\n",
		"string as port":  "services:\n- name: a\n  ports: [{number: \"80\"}]\n",
		"mapping as list": "services:\n- name: a\n  hosts: {a: b}\n",
	}
	for name, in := range declined {
		nodes := serviceNodes([]byte(in))
		if len(nodes) == 0 {
			t.Fatalf("%s: no service", name)
		}
		if checkDecodeService(t, name, nodes[0]) {
			t.Errorf("%s: decodeService accepted it; Node.Decode must read it:\n%s", name, in)
		}
	}

	// The load tool's registry: every service takes the fast path.
	for path, data := range generatedFiles(t, 60, 3, 30) {
		for _, n := range serviceNodes(data) {
			if !checkDecodeService(t, path, n) {
				t.Errorf("%s: a service of the load tool's registry is left to Node.Decode", path)
			}
		}
	}
}

// FuzzDecodeService: whatever decodeService accepts, Node.Decode reads to the same spec.
func FuzzDecodeService(f *testing.F) {
	for _, s := range []string{
		"services:\n- name: a\n  namespace: ns\n  ports: [{number: 80, protocol: HTTP}]\n  labels: {app: a}\n  instances:\n  - {id: a-0, address: 10.0.0.1, ports: {80: 81}, weight: 3, labels: {v: v1}}\n",
		"services:\n- name: a\n  hosts: [x, 'y']\n  exportTo: []\n  annotations: {}\n",
		"services:\n- {name: a, ports: [{number: 010}], instances: [{address: b, weight: 0}]}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for i, n := range serviceNodes(data) {
			checkDecodeService(t, fmt.Sprintf("service %d", i), n)
		}
	})
}
