package file

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/model"
)

func TestParseFileDefaults(t *testing.T) {
	data := `services:
- name: reviews
  ports: [{number: 9080, protocol: http}]
  instances:
  - address: 10.0.0.11
  - address: 10.0.0.11
    ports: {9080: 9081}
    health: Draining
`
	pf, rej := parseFile("/r/a.yaml", []byte(data), "default")
	if rej != nil {
		t.Fatalf("file rejected: %v", rej.err)
	}
	if len(pf.rejected) != 0 {
		t.Fatalf("rejected services: %v", pf.rejected)
	}
	want := model.Service{

		Namespace: "default",
		Name:      "reviews",
		Hosts:     []string{"reviews.default.internal"},
		Ports:     []model.Port{{Number: 9080, Protocol: model.ProtocolHTTP}},
		Instances: []model.Instance{
			{ID: "10.0.0.11", Address: "10.0.0.11"},
			{ID: "10.0.0.11:9081", Address: "10.0.0.11", Ports: map[uint32]uint32{9080: 9081}, Health: model.Draining},
		},
	}
	if len(pf.services) != 1 || pf.services[0].line != 2 {
		t.Fatalf("services = %+v", pf.services)
	}
	if got := pf.services[0].svc; !reflect.DeepEqual(got, want) {
		t.Errorf("service =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseFileAllFields(t *testing.T) {
	data := `services:
- name: payments
  namespace: shop
  hosts: [payments.example.com]
  addresses: [240.0.0.1]
  ports:
  - {number: 443, protocol: TLS, name: tls}
  labels: {app: payments, tier: 1}
  annotations: {owner: team-a}
  location: external
  resolution: DNS
  exportTo: [".", istio-system]
  instances:
  - id: p1
    address: payments.example.com
    labels: {version: v2}
    locality: eu/eu-west1/a
    network: net1
    weight: 3
    health: unhealthy
    serviceAccount: payments
`
	pf, rej := parseFile("/r/a.yaml", []byte(data), "default")
	if rej != nil || len(pf.rejected) != 0 {
		t.Fatalf("rejected: %v %v", rej, pf.rejected)
	}
	want := model.Service{

		Namespace:   "shop",
		Name:        "payments",
		Hosts:       []string{"payments.example.com"},
		Addresses:   []string{"240.0.0.1"},
		Ports:       []model.Port{{Number: 443, Protocol: model.ProtocolTLS, Name: "tls"}},
		Labels:      map[string]string{"app": "payments", "tier": "1"},
		Annotations: map[string]string{"owner": "team-a"},
		Location:    model.MeshExternal,
		Resolution:  model.ResolutionDNS,
		ExportTo:    []string{".", "istio-system"},
		Instances: []model.Instance{{
			ID: "p1", Address: "payments.example.com", Labels: map[string]string{"version": "v2"},
			Locality: "eu/eu-west1/a", Network: "net1", Weight: 3, Health: model.Unhealthy, ServiceAccount: "payments",
		}},
	}
	if got := pf.services[0].svc; !reflect.DeepEqual(got, want) {
		t.Errorf("service =\n%+v\nwant\n%+v", got, want)
	}
}

// TestParseFileErrors checks that every kind of mistake is pinned to the
// right line and explained.
func TestParseFileErrors(t *testing.T) {
	const good = "- name: ok\n  ports: [{number: 80}]\n"
	// 40 instances, the 36th with the 4th one's id: past the size at which IDs are indexed.
	var many strings.Builder
	many.WriteString("services:\n- name: b\n  ports: [{number: 80}]\n  instances:\n")
	for i := range 40 {
		if i == 35 {
			i = 3
		}
		fmt.Fprintf(&many, "  - address: 10.0.0.%d\n", i)
	}
	cases := []struct {
		name     string
		data     string
		fileErr  bool // the whole file is rejected
		line     int
		contains string
	}{
		{"unclosed bracket", "services:\n- name: a\n  ports: [{number: 80}\n- name: b\n", true, 3, "invalid YAML"},
		{"bad indent", "services:\n- name: a\n  ports: [{number: 80}]\n    bad: x\n", true, 4, "did not find expected key"},
		{"bad indent after multi-line string", "services:\n- name: 'a\n   b'\n  labels:\n    a: b\n   c: d\n", true, 6, "did not find expected key"},
		{"bad character", "services:\n- name: a\n  x: @y\n", true, 3, "cannot start any token"},
		{"tab", "services:\n- name: a\n  labels:\n\ta: b\n", true, 4, "cannot start any token"},
		{"top-level list", "- name: a\n", true, 1, `mapping with a "services" list`},
		{"unknown top-level key", "service:\n" + good, true, 1, `unknown top-level key "service"`},
		{"services not a list", "services: {name: a}\n", true, 1, `"services" must be a list`},
		{"duplicate top-level key", "services: []\nservices: []\n", true, 2, "already defined"},
		{"unknown service field", "services:\n" + good + "- name: b\n  prots: [{number: 80}]\n", false, 5, `unknown field "prots"`},
		{"unknown instance field", "services:\n- name: b\n  ports: [{number: 80}]\n  instances:\n  - address: 1.2.3.4\n    helth: ok\n", false, 6, `unknown field "helth"`},
		{"no ports", "services:\n" + good + "- name: b\n  labels: {a: b}\n", false, 4, "at least one port"},
		{"bad health", "services:\n- name: b\n  ports: [{number: 80}]\n  instances:\n  - address: 1.2.3.4\n  - address: 1.2.3.5\n    health: sick\n", false, 6, `health "sick"`},
		{"bad protocol", "services:\n- name: b\n  ports:\n  - number: 80\n  - {number: 81, protocol: SPDY}\n", false, 5, `protocol "SPDY"`},
		{"port out of range", "services:\n- name: b\n  ports: [{number: 70000}]\n", false, 3, "not in 1-65535"},
		{"duplicate port", "services:\n- name: b\n  ports: [{number: 80}, {number: 80}]\n", false, 3, "already listed"},
		{"port type", "services:\n- name: b\n  ports:\n  - number: eighty\n", false, 4, "cannot unmarshal"},
		{"port not a whole number", "services:\n- name: b\n  ports: [{number: 80.5}]\n", false, 3, "80.5 is not a whole number"},
		{"instance port not a whole number", "services:\n- name: b\n  ports: [{number: 80}]\n  instances:\n  - address: 1.2.3.4\n    ports: {80: 81.9}\n", false, 6, "81.9 is not a whole number"},
		{"instance port key not a whole number", "services:\n- name: b\n  ports: [{number: 80}]\n  instances:\n  - address: 1.2.3.4\n    ports: {80.0: 81}\n", false, 6, "80.0 is not a whole number"},
		{"weight not a whole number", "services:\n- name: b\n  ports: [{number: 80}]\n  instances:\n  - address: 1.2.3.4\n    weight: 1.5\n", false, 6, "1.5 is not a whole number"},
		{"no name", "services:\n- namespace: x\n  ports: [{number: 80}]\n", false, 2, "name is required"},
		{"bad name", "services:\n- name: Bad_Name\n  ports: [{number: 80}]\n", false, 2, `name "Bad_Name"`},
		{"bad namespace", "services:\n- name: b\n  namespace: a.b\n  ports: [{number: 80}]\n", false, 3, `namespace "a.b"`},
		{"bad location", "services:\n- name: b\n  location: mesh\n  ports: [{number: 80}]\n", false, 3, `location "mesh"`},
		{"bad resolution", "services:\n- name: b\n  resolution: magic\n  ports: [{number: 80}]\n", false, 3, `resolution "magic"`},
		{"no address", "services:\n- name: b\n  ports: [{number: 80}]\n  instances:\n  - id: x\n", false, 5, "address is required"},
		{"unknown instance port", "services:\n- name: b\n  ports: [{number: 80}]\n  instances:\n  - address: 1.2.3.4\n    ports: {81: 82}\n", false, 5, "81 is not a port of the service"},
		{"duplicate instance id", "services:\n- name: b\n  ports: [{number: 80}]\n  instances:\n  - address: 1.2.3.4\n  - address: 1.2.3.4\n", false, 6, `id "1.2.3.4" is already used`},
		{"duplicate instance id of a large service", many.String(), false, 40, `instances[35]: id "10.0.0.3" is already used by instances[3]`},
		{"duplicate service", "services:\n" + good + good, false, 4, "already defined at line 2"},
		{"service not a mapping", "services:\n- reviews\n", false, 2, "must be a mapping"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pf, rej := parseFile("/r/a.yaml", []byte(tc.data), "default")
			var got rejection
			switch {
			case tc.fileErr && rej == nil:
				t.Fatalf("file accepted, want it rejected; services %+v, rejected %+v", pf.services, pf.rejected)
			case tc.fileErr:
				got = *rej
			case rej != nil:
				t.Fatalf("file rejected: %v", rej.err)
			case len(pf.rejected) != 1:
				t.Fatalf("rejected services = %+v, want exactly one", pf.rejected)
			default:
				got = pf.rejected[0].rejection
			}
			if got.line != tc.line || !strings.Contains(got.err.Error(), tc.contains) {
				t.Errorf("rejection %s: %v; want line %d and %q", got.record(), got.err, tc.line, tc.contains)
			}
			if want := "/r/a.yaml:" + strconv.Itoa(tc.line); got.record() != want {
				t.Errorf("record = %q, want %q", got.record(), want)
			}
		})
	}
}

func TestParseFileMultiDocAndEmpty(t *testing.T) {
	for _, data := range []string{"", "# nothing\n", "services:\n", "services: []\n", "---\n---\n"} {
		pf, rej := parseFile("a.yaml", []byte(data), "default")
		if rej != nil || len(pf.services) != 0 || len(pf.rejected) != 0 {
			t.Errorf("%q: got %+v %+v", data, pf, rej)
		}
	}
	data := "services:\n- name: a\n  ports: [{number: 80}]\n---\nservices:\n- name: b\n  ports: [{number: 80}]\n"
	pf, rej := parseFile("a.yaml", []byte(data), "default")
	if rej != nil || len(pf.services) != 2 || pf.services[1].line != 6 {
		t.Errorf("multi-doc: %+v %+v", pf, rej)
	}
}

// TestExamplesParse keeps examples/file valid: the demo relies on it.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob("../../examples/file/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	total := 0
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		pf, rej := parseFile(path, data, DefaultNamespace)
		if rej != nil {
			t.Fatalf("%s: %v", rej.record(), rej.err)
		}
		for _, r := range pf.rejected {
			t.Errorf("%s: %v", r.record(), r.err)
		}
		total += len(pf.services)
	}
	if total < 6 {
		t.Errorf("examples define %d services, want at least 6", total)
	}
}

// A parse error must not quote the file's content: a file holding only a
// secret (a token pasted into the wrong place) was once echoed into the log.
func TestParseErrorsDoNotQuoteContent(t *testing.T) {
	const secret = "s3cr3t"
	for _, data := range []string{
		secret + "\n",
		"services:\n- name: b\n  ports:\n  - number: " + secret + "\n",
		"services:\n- name: b\n  ports: [{number: 80}]\n  labels: " + secret + "\n",
		"services: " + secret + "\n",
		"services:\n- name: b\n  ports: [{number: 80}]\n  instances:\n  - address: 1.2.3.4\n    weight: " + secret + "\n",
	} {
		pf, rej := parseFile("/r/a.yaml", []byte(data), "default")
		var msgs []string
		if rej != nil {
			msgs = append(msgs, rej.err.Error())
		}
		if pf != nil {
			for _, r := range pf.rejected {
				msgs = append(msgs, r.err.Error())
			}
		}
		if len(msgs) == 0 {
			t.Errorf("%q was accepted", data)
		}
		for _, m := range msgs {
			if strings.Contains(m, secret) {
				t.Errorf("the error quotes the file's content: %s", m)
			}
		}
	}
}
