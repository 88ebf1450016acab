package catalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGuideQuotesThisModule checks that every Go excerpt in
// docs/authoring-adapters.md that says where it is from ("// From
// docs/example-adapter/<path>" as its first line) is in that file word for
// word, so the guide shows code that is built and tested, not a copy that
// drifted.
func TestGuideQuotesThisModule(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join("..", "..", "authoring-adapters.md"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "// From docs/example-adapter/"
	blocks := strings.Split(string(guide), "```go\n")[1:]
	quoted := 0
	for _, b := range blocks {
		code, _, ok := strings.Cut(b, "```")
		if !ok {
			t.Fatal("a ```go block in the guide is not closed")
		}
		first, rest, _ := strings.Cut(code, "\n")
		if !strings.HasPrefix(first, marker) {
			continue
		}
		path := strings.TrimPrefix(first, marker)
		src, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(path)))
		if err != nil {
			t.Errorf("the guide quotes %s: %v", path, err)
			continue
		}
		if !strings.Contains(string(src), strings.TrimSuffix(rest, "\n")) {
			t.Errorf("the guide's excerpt of %s is not in that file as it stands: copy it again from the file", path)
		}
		quoted++
	}
	if quoted < 3 {
		t.Fatalf("the guide quotes %d excerpts of this module, want the adapter's Run, its conformance test and its main", quoted)
	}
}
