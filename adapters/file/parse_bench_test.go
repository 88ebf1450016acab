package file

import (
	"testing"
)

// BenchmarkParseGenerated parses the load tool's registry (10,000 services x 10 instances, 21
// files, 12 MB) on parsePool's goroutines: the part of galleon-file's start that reads the
// directory. -cpu 1,2 shows what parsing the files in parallel gives.
func BenchmarkParseGenerated(b *testing.B) {
	var names []string
	var files [][]byte
	size := 0
	for path, data := range generatedFiles(b, 10000, 10, 500) {
		names, files = append(names, path), append(files, data)
		size += len(data)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		jobs := make([]fileParse, len(files))
		for i := range files {
			jobs[i] = fileParse{path: names[i], data: files[i]}
		}
		pool := parsePool{namespace: "default"}
		for i := range jobs {
			pool.add(&jobs[i])
		}
		pool.wait()
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
