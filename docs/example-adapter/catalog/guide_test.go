package catalog

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/daemon"
)

// readGuide returns docs/authoring-adapters.md.
func readGuide(t *testing.T) string {
	t.Helper()
	guide, err := os.ReadFile(filepath.Join("..", "..", "authoring-adapters.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(guide)
}

// goBlocks returns the guide's ```go blocks, each split into its first line and the rest.
func goBlocks(t *testing.T, guide string) (firsts, rests []string) {
	t.Helper()
	for _, b := range strings.Split(guide, "```go\n")[1:] {
		code, _, ok := strings.Cut(b, "```")
		if !ok {
			t.Fatal("a ```go block in the guide is not closed")
		}
		first, rest, _ := strings.Cut(code, "\n")
		firsts, rests = append(firsts, first), append(rests, strings.TrimSuffix(rest, "\n"))
	}
	return firsts, rests
}

// TestGuideQuotesThisModule checks that every Go excerpt in
// docs/authoring-adapters.md that says where it is from ("// From
// docs/example-adapter/<path>" as its first line) is in that file word for
// word, so the guide shows code that is built and tested, not a copy that
// drifted.
func TestGuideQuotesThisModule(t *testing.T) {
	const marker = "// From docs/example-adapter/"
	firsts, rests := goBlocks(t, readGuide(t))
	quoted := 0
	for i, first := range firsts {
		if !strings.HasPrefix(first, marker) {
			continue
		}
		path := strings.TrimPrefix(first, marker)
		src, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(path)))
		if err != nil {
			t.Errorf("the guide quotes %s: %v", path, err)
			continue
		}
		if !strings.Contains(string(src), rests[i]) {
			t.Errorf("the guide's excerpt of %s is not in that file as it stands: copy it again from the file", path)
		}
		quoted++
	}
	if quoted < 3 {
		t.Fatalf("the guide quotes %d excerpts of this module, want the adapter's Run, its conformance test and its main", quoted)
	}
}

// sdkDirs are the SDK's packages by name, as a guide excerpt names them on its first line
// ("// package registry"), with their directories in the Galleon module.
var sdkDirs = map[string]string{
	"registry":     "registry",
	"registrytest": "registry/registrytest",
	"tlsfiles":     "registry/tlsfiles",
	"model":        "model",
	"daemon":       "daemon",
}

// TestGuideQuotesTheSDK checks that every Go excerpt in the guide whose first line is
// "// package <name>" (an SDK package: the contract in registry's package documentation, the
// kit's interfaces) is in one of that package's files word for word: the guide shows the
// contract as the SDK states it, never a restatement that drifts.
func TestGuideQuotesTheSDK(t *testing.T) {
	root := filepath.Join("..", "..", "..") // the Galleon module this example builds against
	firsts, rests := goBlocks(t, readGuide(t))
	quoted := map[string]int{}
	for i, first := range firsts {
		name, ok := strings.CutPrefix(first, "// package ")
		if !ok {
			continue
		}
		dir, ok := sdkDirs[name]
		if !ok {
			t.Errorf("the guide quotes package %s, which is not an SDK package (%v)", name, slices.Sorted(maps.Keys(sdkDirs)))
			continue
		}
		files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("package %s: no Go files in %s (%v)", name, dir, err)
		}
		found := false
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			found = found || strings.Contains(string(src), rests[i])
		}
		if !found {
			t.Errorf("the guide's excerpt %d of package %s is not in %s as it stands: copy it again from the source:\n%s", quoted[name]+1, name, dir, rests[i])
		}
		quoted[name]++
	}
	if quoted["registry"] < 2 {
		t.Errorf("the guide quotes package registry %d times, want the contract and the interfaces", quoted["registry"])
	}
}

// TestGuideListsEveryDaemonFlag checks that the guide's list of the daemon's own flags (the
// line after "<!-- daemon flags -->") is daemon.DaemonFlags(), all of them.
func TestGuideListsEveryDaemonFlag(t *testing.T) {
	guide := readGuide(t)
	_, after, ok := strings.Cut(guide, "<!-- daemon flags -->\n")
	if !ok {
		t.Fatal(`the guide has no "<!-- daemon flags -->" list`)
	}
	list, _, _ := strings.Cut(after, "\n\n")
	var listed []string
	for _, m := range regexp.MustCompile("`--([a-z0-9-]+)`").FindAllStringSubmatch(list, -1) {
		listed = append(listed, m[1])
	}
	want := slices.Sorted(slices.Values(daemon.DaemonFlags()))
	if !slices.Equal(listed, want) {
		t.Errorf("the guide lists the daemon's flags\n  %v\nwant daemon.DaemonFlags(), sorted:\n  %v", listed, want)
	}
}
