package main

import (
	"strings"
	"testing"
)

// scaleTSV is a canned scale.tsv; scaleWant is what scripts/bench-scale.sh's table (awk) printed
// for it.
const scaleTSV = "protocol\tsinks\tservices\tops\tp50_ms\tp99_ms\tbytes_per_sink\tbytes_per_op\tallocs_per_op\trss_mib\tlive_bytes_per_extra_sink\tseconds\n" +
	"Delta\t10\t1000\t1000\t0.2862\t1.640\t989.0\t48420\t586\t35.38\t219106\t12.3\n" +
	"SotW\t10\t1000\t300\t6.335\t13.93\t906668\t1740185\t1020\t42.18\t-\t20.1\n" +
	"Delta\t100\t1000\t1000\t1.2\t3.5\t989.0\t9999\t12345\t80.5\t219000\t30\n" +
	"Delta\t10\t50000\t1000\t0.30\t3.7\t1012\t52000\t1586\t300.4\t220000\t50\n" +
	"SotW\t10\t50000\t60\t300.5\t420.25\t47500000\t99000000\t1234567\t512.6\t-\t60\n" +
	"Delta\t100\t50000\t1000\t2.0\t6.0\t1000\t60000\t2000\t400\t230000\t90\n"

const scaleWant = `| services | sinks | protocol | ops | p50 ms | p99 ms | bytes per sink per change | allocated per change | allocs per change | RSS MiB | live memory per extra sink |
|---|---|---|---|---|---|---|---|---|---|---|
| 1,000 | 10 | Delta | 1000 | 0.29 | 1.64 | 989 B | 48.4 KB | 586 | 35 | 219 KB |
| 1,000 | 10 | SotW | 300 | 6.33 | 13.93 | 906.7 KB | 1.74 MB | 1,020 | 42 | - |
| 1,000 | 100 | Delta | 1000 | 1.20 | 3.50 | 989 B | 9,999 B | 12,345 | 80 | 219 KB |
| 50,000 | 10 | Delta | 1000 | 0.30 | 3.70 | 1,012 B | 52.0 KB | 1,586 | 300 | 220 KB |
| 50,000 | 10 | SotW | 60 | 300.50 | 420.25 | 47.50 MB | 99.00 MB | 1,234,567 | 513 | - |
| 50,000 | 100 | Delta | 1000 | 2.00 | 6.00 | 1,000 B | 60.0 KB | 2,000 | 400 | 230 KB |

Delta, 10 sinks, 1,000 -> 50,000 services: p50 x1.05, p99 x2.26; target <= 2x met at p50, missed at p99
Delta, 100 sinks, 1,000 -> 50,000 services: p50 x1.67, p99 x1.71; target <= 2x met
Live memory per extra sink, Delta, 10 sinks: 1,000 services 219 KB, 50,000 services 220 KB
Live memory per extra sink, SotW, 10 sinks: 1,000 services -, 50,000 services -
Live memory per extra sink, Delta, 100 sinks: 1,000 services 219 KB, 50,000 services 230 KB
`

func TestScaleTable(t *testing.T) {
	if got := scaleTable(scaleTSV); got != scaleWant {
		t.Errorf("scaleTable:\n%s\nwant (the script's):\n%s", got, scaleWant)
	}
}

func TestTSVRow(t *testing.T) {
	out := "goos: linux\n" +
		"BenchmarkInstanceChange/delta-10sinks-2         \t       5\t    586280 ns/op\t       989.0 bytes/sink\t    219106 live-B/extra-sink\t         0.2862 p50-ms\t         1.640 p99-ms\t        35.38 rss-MB\t   48420 B/op\t     586 allocs/op\n" +
		"BenchmarkInstanceChange/delta-100sinks-2 \t 5\t 1 ns/op\t 2 p50-ms\n" +
		"PASS\n"
	want := "Delta\t10\t1000\t5\t0.2862\t1.640\t989.0\t48420\t586\t35.38\t219106\t0.21\n"
	if got := tsvRow(out, "delta", 1000, 10, "0.21"); got != want {
		t.Errorf("tsvRow = %q, want %q", got, want)
	}
	// No live-B/extra-sink: "-"; a missing figure stays empty, as awk left it.
	got := tsvRow(out, "delta", 1000, 100, "1.00")
	if want := "Delta\t100\t1000\t5\t2\t\t\t\t\t\t-\t1.00\n"; got != want {
		t.Errorf("tsvRow without figures = %q, want %q", got, want)
	}
	if got := tsvRow(out, "sotw", 1000, 10, "1"); got != "" {
		t.Errorf("tsvRow of a missing result = %q, want none", got)
	}
}

func TestScaleOps(t *testing.T) {
	s := scaleSettings{}
	for _, c := range []struct {
		proto           string
		services, sinks int
		want            int
	}{
		{"delta", 50000, 100, 1000},
		{"sotw", 1000, 10, 300},
		{"sotw", 10000, 10, 300},
		{"sotw", 10000, 100, 30},
		{"sotw", 50000, 10, 60},
		{"sotw", 50000, 100, 6},
		{"sotw", 62750, 100, 5},
	} {
		if got := s.opsFor(c.proto, c.services, c.sinks); got != c.want {
			t.Errorf("opsFor(%s, %d, %d) = %d, want %d", c.proto, c.services, c.sinks, got, c.want)
		}
	}
	if got := (scaleSettings{ops: 5}).opsFor("delta", 1000, 10); got != 5 {
		t.Errorf("OPS=5: %d", got)
	}
}

func TestParseScale(t *testing.T) {
	t.Setenv("SERVICES", "1000 2000")
	t.Setenv("SINKS", "")
	t.Setenv("OPS", "")
	t.Setenv("PNG", "")
	s, err := parseScale([]string{"--sinks", "3", "/tmp/out"}, "/repo")
	if err != nil || len(s.services) != 2 || s.sinks[0] != 3 || len(s.sinks) != 1 || s.outDir != "/tmp/out" || s.png != "/repo/docs/benchmarks-scale.png" {
		t.Errorf("parseScale = %+v, %v", s, err)
	}
	_, err = parseScale([]string{"--ops", "0"}, "/repo")
	if err == nil || err.Error() != "SERVICES, SINKS and OPS take whole numbers of at least 1, got '0'" {
		t.Errorf("OPS=0: %v", err)
	}
	if _, err := parseScale([]string{"a", "b"}, "/repo"); err == nil || !strings.Contains(err.Error(), `unexpected argument "b"`) {
		t.Errorf("two OUT_DIRs: %v", err)
	}
}
