package file

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/galleon-mesh/galleon/internal/loadtest"
)

// BenchmarkParseGenerated parses the load tool's registry (10,000 services x 10 instances in 20
// files of 500, 12 MB): the part of galleon-file's start that reads the directory. -cpu 1,2
// shows what parsing the files in parallel gives.
func BenchmarkParseGenerated(b *testing.B) {
	dir := b.TempDir()
	if err := loadtest.Generate(loadtest.GenerateConfig{Dir: dir, Services: 10000, Instances: 10, PerFile: 500}); err != nil {
		b.Fatal(err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(names) == 0 {
		b.Fatalf("generated files: %v %v", names, err)
	}
	files := make([][]byte, len(names))
	size := 0
	for i, n := range names {
		if files[i], err = os.ReadFile(n); err != nil {
			b.Fatal(err)
		}
		size += len(files[i])
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		jobs := make([]fileParse, len(files))
		for i := range files {
			jobs[i] = fileParse{path: names[i], data: files[i]}
		}
		parseFiles(jobs, "default")
		services := 0
		for _, j := range jobs {
			if j.rej != nil {
				b.Fatalf("%s: %v", j.path, j.rej.err)
			}
			services += len(j.parsed.services)
		}
		if services < 10000 {
			b.Fatalf("parsed %d services, want at least 10,000", services)
		}
	}
}
