package file

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// yamlV3Documents is what parseFile's yaml.v3 path reads: every document of the stream.
func yamlV3Documents(data []byte) ([]*yaml.Node, error) {
	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, &doc)
	}
}

// nodeDiff describes the first difference between two trees, or is "". Comments are not
// compared: fastDocuments drops them, and nothing that reads the nodes looks at them.
func nodeDiff(path string, got, want *yaml.Node) string {
	if got.Kind != want.Kind || got.Style != want.Style || got.Tag != want.Tag || got.Value != want.Value ||
		got.Line != want.Line || got.Column != want.Column || got.Anchor != want.Anchor || len(got.Content) != len(want.Content) {
		return fmt.Sprintf("%s: got kind %v style %v tag %q value %q at %d:%d with %d children, yaml.v3 has kind %v style %v tag %q value %q at %d:%d with %d children",
			path, got.Kind, got.Style, got.Tag, got.Value, got.Line, got.Column, len(got.Content),
			want.Kind, want.Style, want.Tag, want.Value, want.Line, want.Column, len(want.Content))
	}
	for i := range got.Content {
		if d := nodeDiff(fmt.Sprintf("%s/%d", path, i), got.Content[i], want.Content[i]); d != "" {
			return d
		}
	}
	return ""
}

// checkFastDocuments fails t if fastDocuments accepts data and builds anything but yaml.v3's
// trees. It reports whether fastDocuments accepted it.
func checkFastDocuments(t *testing.T, name string, data []byte) bool {
	t.Helper()
	got, ok := fastDocuments(data, nil)
	if !ok {
		return false
	}
	want, err := yamlV3Documents(data)
	if err != nil {
		t.Errorf("%s: fastDocuments accepted what yaml.v3 refuses (%v):\n%s", name, err, data)
		return true
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d documents, yaml.v3 reads %d:\n%s", name, len(got), len(want), data)
		return true
	}
	for i := range got {
		if d := nodeDiff(fmt.Sprintf("document %d", i), got[i], want[i]); d != "" {
			t.Errorf("%s: %s\n%s", name, d, data)
			return true
		}
	}
	return true
}

// TestFastDocumentsMatchYAMLv3 checks the fast path against yaml.v3 on the subset it must
// accept (so that starts are fast), on what it must leave to yaml.v3, and on every YAML file in
// the repository.
func TestFastDocumentsMatchYAMLv3(t *testing.T) {
	accepted := map[string]string{
		"registry":          "services:\n- name: a\n  namespace: ns\n  ports: [{number: 8080, protocol: HTTP}]\n  labels: {app: a}\n  instances:\n  - {id: a-0, address: 10.0.0.1, labels: {app: a, version: v1}, locality: us-east1/us-east1-b}\n  - {id: a-1, address: 10.0.0.2, weight: 3}\n",
		"nested blocks":     "services:\n  - name: a\n    ports:\n      - number: 80\n        name: http\n    instances:\n      - address: 10.0.0.1\n        labels:\n          app: a\n",
		"comments":          "# head\nservices: # why\n# between\n- name: a # the name\n\n  ports: [] # none\n# tail\n",
		"quotes":            "services:\n- name: 'it''s'\n  hosts: [\"a.example.com\", '*']\n  labels: {\"k\": 'v', 'x y': \"z w\"}\n",
		"types":             "a: 1\nb: -2\nc: 1.5\nd: true\ne: null\nf: ~\ng: 0x1F\nh: 2001-12-14\ni: .inf\nj: 1e3\nk: \"1\"\nl: yes\n",
		"spaces in plain":   "a: hello   world  \nb: [x y, z]\n",
		"documents":         "services: []\n---\nservices: [{name: b}]\n",
		"leading marker":    "---\nservices: []\n",
		"empty collections": "a: {}\nb: []\nc: [ ]\nd: { }\n",
		"flow nesting":      "a: [[1, 2], [3, [4]], {b: [c]}]\n",
		"indentless nested": "a:\n- b: 1\n  c:\n  - d\n  - e\n  f: 2\ng: 3\n",
		"no final newline":  "a: b",
		"dash in scalars":   "a: -x\nb: a-b\nc: [-1, -y]\n",
		"empty file":        "",
		"only comments":     "# nothing\n\n  # here\n",
	}
	for name, in := range accepted {
		if !checkFastDocuments(t, name, []byte(in)) {
			t.Errorf("%s: fastDocuments left it to yaml.v3; it is in the subset:\n%s", name, in)
		}
	}
	declined := map[string]string{
		"tab":                 "a:\tb\n",
		"anchor":              "a: &x 1\nb: *x\n",
		"tag":                 "a: !!str 1\n",
		"block scalar":        "a: |\n  text\n",
		"folded scalar":       "a: >\n  text\n",
		"multi-line plain":    "a: one\n  two\n",
		"multi-line flow":     "a: [1,\n  2]\n",
		"empty value":         "a:\nb: 1\n",
		"escapes":             "a: \"x\\ty\"\n",
		"colon in plain":      "a: http://x\n",
		"hash in plain":       "a: b#c\n",
		"merge key":           "a: {b: 1}\n<<: {c: 2}\n",
		"merge value":         "a: <<\n",
		"non-ASCII":           "a: caf\xc3\xa9\n",
		"carriage return":     "a: b\r\n",
		"bad indentation":     "a:\n  b: 1\n c: 2\n",
		"sequence in mapping": "a: 1\n- b\n",
		"scalar root":         "just text\n",
		"flow root":           "{a: 1}\n",
		"empty document":      "a: 1\n---\n---\nb: 2\n",
		"trailing comma":      "a: [1, 2,]\n",
		"entry on next line":  "a:\n-\n  b: 1\n",
		"nested entry":        "a:\n- - 1\n",
		"document end":        "a: 1\n...\n",
		"invalid":             "a: [1, 2\n",
		"question key":        "? a\n: b\n",
		"deep":                "a: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\n",
		"long key":            strings.Repeat("k", 1100) + ": v\n",
		"long flow key":       "a: {" + strings.Repeat("k", 1100) + ": v}\n",
		"document on a line":  "a: 1\n--- b: 2\n",
	}
	for name, in := range declined {
		if checkFastDocuments(t, name, []byte(in)) {
			t.Errorf("%s: fastDocuments accepted it; it is outside the subset:\n%q", name, in)
		}
	}

	// Every YAML file of the repository: where the fast path takes one, it must agree.
	root, err := toolcache.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, taken := 0, 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !isRegistryFile(d.Name()) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if checkFastDocuments(t, path, data) {
			taken++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of the repository's %d YAML files are in the subset, all read as yaml.v3 reads them", taken, files)

	// The load tool's registry, which the start benchmarks read.
	for path, data := range generatedFiles(t, 120, 3, 50) {
		if !checkFastDocuments(t, path, data) {
			t.Errorf("%s: the load tool's registry is left to yaml.v3", path)
		}
	}
}

// generatedFiles writes the load tool's registry (galleon-load generate) and returns its files'
// contents by path.
func generatedFiles(tb testing.TB, services, instances, perFile int) map[string][]byte {
	tb.Helper()
	dir := tb.TempDir()
	if err := filegen.Generate(filegen.GenerateConfig{Dir: dir, Services: services, Instances: instances, PerFile: perFile}); err != nil {
		tb.Fatal(err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("the generated registry in %s: %d files, %v", dir, len(paths), err)
	}
	files := make(map[string][]byte, len(paths))
	for _, path := range paths {
		if files[path], err = os.ReadFile(path); err != nil {
			tb.Fatal(err)
		}
	}
	return files
}

// FuzzFastDocuments: whatever fastDocuments accepts, yaml.v3 reads into the same trees.
func FuzzFastDocuments(f *testing.F) {
	for _, s := range []string{
		"services:\n- name: a\n  ports: [{number: 80, protocol: HTTP}]\n  instances:\n  - {address: 10.0.0.1, labels: {a: b}}\n",
		"a:\n- b: 1\n  c:\n  - d\ng: 'x''y'\n---\nh: \"z\" # c\n",
		"a: [[1, -2], {b: [c, 1.5]}, ~, true]\n",
		"a:\n  b:\n    - c: d\n      e: f\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastDocuments(t, "input", data)
	})
}

// FuzzParseFileStreams: a file parseFile reads with fastStream, handing it services as they are
// parsed, gives what yaml.v3 gives for it: the same services, service rejections and file
// rejection, in the same order. A comment that is not ASCII sends the file to yaml.v3.
func FuzzParseFileStreams(f *testing.F) {
	for _, s := range streamSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, ok := fastDocuments(data, nil); !ok {
			return // yaml.v3 reads it either way (and the comment would move its end-of-file errors)
		}
		streamed, streamedRej := parseFile("/r/a.yaml", data, "default")
		slow := append(bytes.Clone(data), "\n# é\n"...)
		read, readRej := parseFile("/r/a.yaml", slow, "default")
		if got, want := describeParse(streamed, streamedRej), describeParse(read, readRej); got != want {
			t.Fatalf("streamed:\n%s\nyaml.v3:\n%s\ninput:\n%s", got, want, data)
		}
	})
}

// streamSeeds are FuzzParseFileStreams' seeds, all in the fast path's subset
// (TestStreamSeedsInSubset): a seed outside it would compare nothing.
func streamSeeds() []string {
	const svc = "- name: a\n  ports: [{number: 80}]\n"
	return []string{
		"services:\n" + svc + "- name: b\n  ports: [{number: 80}]\n  instances:\n  - {address: 10.0.0.1, labels: {a: b}}\n",
		// The same service in a flow list, then in a block list of the next document, and back.
		"services: [{name: a, ports: [{number: 80}]}]\n---\nservices:\n" + svc,
		"services:\n" + svc + "---\nservices: [{name: a, ports: [{number: 81}]}]\n",
		"services:\n" + svc + svc,
		"services:\n" + svc + "---\nservice: []\n",
		"services:\n" + svc + "services: []\n",
		"services:\n" + svc + "- name: b\n  ports: []\n- name: c\n  prots: [{number: 80}]\n",
		"other: 1\nservices:\n" + svc,
		"- services:\n  " + svc,
	}
}

func TestStreamSeedsInSubset(t *testing.T) {
	for _, s := range streamSeeds() {
		if _, ok := fastDocuments([]byte(s), nil); !ok {
			t.Errorf("outside the fast path's subset:\n%s", s)
		}
	}
}

// describeParse prints what parseFile returned, for comparison.
func describeParse(pf *parsedFile, rej *rejection) string {
	if rej != nil {
		return fmt.Sprintf("file rejected at line %d: %v", rej.line, rej.err)
	}
	var b strings.Builder
	for _, s := range pf.services {
		fmt.Fprintf(&b, "line %d: %+v\n", s.line, s.svc)
	}
	for _, r := range pf.rejected {
		fmt.Fprintf(&b, "rejected line %d (from %d, %v %v): %v\n", r.line, r.start, r.key, r.known, r.err)
	}
	return b.String()
}
