package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestYAMLItem(t *testing.T) {
	list := "apiVersion: v1\nitems:\n- kind: ServiceEntry\n  metadata:\n    name: a\n- kind: ServiceEntry\n  metadata:\n    name: web\nkind: List\n"
	if got, want := yamlItem(list, ""), "kind: ServiceEntry\nmetadata:\n  name: a"; got != want {
		t.Errorf("first item = %q, want %q", got, want)
	}
	if got, want := yamlItem(list, "web"), "kind: ServiceEntry\nmetadata:\n  name: web"; got != want {
		t.Errorf("item web = %q, want %q", got, want)
	}
	if got := yamlItem(list, "none"); got != "" {
		t.Errorf("item none = %q, want nothing", got)
	}
}

func TestProgressIndentsEveryLine(t *testing.T) {
	var b bytes.Buffer
	w := (&narrator{w: &b}).progress()
	for _, s := range []string{"build", "ing...\nusing ", "cached x\n"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := b.String(), "    building...\n    using cached x\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestTableAlignsColumns(t *testing.T) {
	var b bytes.Buffer
	(&narrator{w: &b}).table([]string{"NAME", ">N"}, [][]string{{"a/long", "1"}, {"b", "12"}})
	want := "    NAME     N\n    a/long   1\n    b       12\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestEditFileRefusesAnEditThatChangesNothing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bookinfo.yaml")
	if err := os.WriteFile(file, []byte("- name: a\n  address: 10.0.0.1\n- name: productpage\n  x: y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := editFile(file, "address: 10.0.0.9\n", "address: 10.0.0.2\n"); err == nil {
		t.Error("editFile of a missing line succeeded")
	}
	if err := editFile(file, "address: 10.0.0.1\n", "address: 10.0.0.2\n"); err != nil {
		t.Fatal(err)
	}
	if err := cutFrom(file, "- name: productpage\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(file)
	if want := "- name: a\n  address: 10.0.0.2\n"; string(got) != want {
		t.Errorf("file = %q, want %q", got, want)
	}
}
