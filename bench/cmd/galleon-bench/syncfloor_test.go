package main

import "testing"

func TestRangeStats(t *testing.T) {
	if got, want := rangeStats([]float64{2.01, 3.73, 2.31}), "2.3 ms (2.0-3.7)"; got != want {
		t.Errorf("rangeStats = %q, want %q", got, want)
	}
	if got, want := rangeStats([]float64{4, 1, 2, 3}), "2.5 ms (1.0-4.0)"; got != want {
		t.Errorf("rangeStats = %q, want %q", got, want)
	}
}

func TestParseSyncFloor(t *testing.T) {
	for _, k := range []string{"SERVICES", "INSTANCES", "SINKS", "RUNS", "PROTOCOLS", "PIN"} {
		t.Setenv(k, "")
	}
	t.Setenv("RUNS", "3")
	s, err := parseSyncFloor(nil)
	if err != nil || s.runs != 3 || s.sinks != 10 || s.pin != "auto" || len(s.protocols) != 2 {
		t.Errorf("parseSyncFloor = %+v, %v", s, err)
	}
	for args, want := range map[string]string{
		"--pin=1":         "PIN=1: want auto or 0",
		"--protocols=xds": "PROTOCOLS: xds is not delta or sotw",
		"--runs=x":        "RUNS=x: want a whole number >= 1",
	} {
		if _, err := parseSyncFloor([]string{args}); err == nil || err.Error() != want {
			t.Errorf("parseSyncFloor(%s) = %v, want %q", args, err, want)
		}
	}
}
