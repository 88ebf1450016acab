package main

import (
	"maps"
	"testing"
)

// runOut is galleon-load run's report as bench-peer saw it.
const runOut = `2 delta sinks synced in 3.587ms
sinks=2 protocol=delta registry=file
initial sync of all sinks: 3.587ms (198126 bytes per sink)
registry change -> every sink (5 changes): p50 22.418ms  p99 1.5s  max 850µs  (1095 bytes per sink per change)
updates per sink: 5 for 5 changes
source resident memory: 25.5 MiB
`

func TestParseRunOutput(t *testing.T) {
	got, err := parseRunOutput(runOut)
	want := map[string]string{"sync": "3.59", "sync_bytes": "198126", "p50": "22.42", "p99": "1500.00", "max": "0.85",
		"change_bytes": "1095", "updates": "5", "rss_metric": "25.5"}
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("parseRunOutput = %v, %v; want %v", got, err, want)
	}
	if _, err := parseRunOutput("initial sync of all sinks: 3ms (1 bytes per sink)\n"); err == nil || err.Error() != `printed no "registry change -> every sink" line` {
		t.Errorf("no change line: %v", err)
	}
	if _, err := parseRunOutput(""); err == nil || err.Error() != "printed no initial sync line" {
		t.Errorf("no sync line: %v", err)
	}
}

func TestCompareRow(t *testing.T) {
	for _, c := range []struct {
		label, a, b, unit string
		scale             float64
		want              string
	}{
		{"Delta: initial sync, 2 sinks", "3.59", "4.83", "ms", 1, "| Delta: initial sync, 2 sinks | 3.59 ms | 4.83 ms | 1.35 |"},
		{"Delta: updates per sink", "5", "5", "", 1, "| Delta: updates per sink | 5 | 5 | 1.00 |"},
		{"VmRSS", "24166", "26726", "MiB", 1.0 / 1024, "| VmRSS | 23.6 MiB | 26.1 MiB | 1.11 |"},
		{"unknown", "", "4", "B", 1, "| unknown | ? | 4 B | ? |"},
		{"zero", "0", "4", "B", 1, "| zero | 0 B | 4 B | ? |"},
	} {
		if got := compareRow(c.label, c.a, c.b, c.unit, c.scale); got != c.want {
			t.Errorf("compareRow = %q, want %q", got, c.want)
		}
	}
}

func TestParsePeer(t *testing.T) {
	for _, k := range []string{"SERVICES", "INSTANCES", "SINKS", "CHANGES", "INTERVAL", "PROTOCOLS", "DEBOUNCE", "PIN", "SERVER_ENV"} {
		t.Setenv(k, "")
	}
	t.Setenv("SINKS", "2")
	s, err := parsePeer([]string{"--changes", "5", "--protocols", "sotw"})
	if err != nil || s.sinks != 2 || s.changes != 5 || s.services != 10000 || len(s.protocols) != 1 || len(s.debounce) != 4 {
		t.Errorf("parsePeer = %+v, %v", s, err)
	}
	for args, want := range map[string]string{
		"--instances=251":       "INSTANCES=251: want 1 to 250",
		"--protocols=":          "PROTOCOLS is empty: want delta, sotw or both",
		"--protocols=delta xds": "PROTOCOLS: xds: want delta or sotw",
		"--server-env=GOGC":     "SERVER_ENV: GOGC: want NAME=VALUE words",
		"--services=0":          "SERVICES=0: want a whole number >= 1",
	} {
		if _, err := parsePeer([]string{args}); err == nil || err.Error() != want {
			t.Errorf("parsePeer(%s) = %v, want %q", args, err, want)
		}
	}
}
