package main

import (
	"testing"
	"time"
)

func TestDuSize(t *testing.T) {
	for b, want := range map[int64]string{
		0:                      "0",
		4096:                   "4.0K",
		816 * 1024:             "816K",
		1258292:                "1.3M", // 1.2000008 MiB: du rounds up
		1258291:                "1.2M", // 1.1999998 MiB
		12 * 1024 * 1024:       "12M",
		12*1024*1024 + 1:       "13M",
		3 * 1024 * 1024 * 1024: "3.0G",
	} {
		if got := duSize(b); got != want {
			t.Errorf("duSize(%d) = %q, want %q", b, got, want)
		}
	}
}

func TestReadyLine(t *testing.T) {
	line := `{"time":"2026-11-27T04:35:01.123456789Z","level":"INFO","msg":"ready: 1001 services served","took":"60ms"}`
	m := readyLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatal("readyLine does not match galleon-file's JSON ready line")
	}
	at, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil || at.Nanosecond() != 123456789 {
		t.Errorf("ready time %q: %v, %v", m[1], at, err)
	}
	if readyLine.MatchString(`{"time":"x","msg":"not ready: waiting"}`) {
		t.Error(`readyLine matches "not ready"`)
	}
}

func TestParseStart(t *testing.T) {
	for _, k := range []string{"SERVICES", "INSTANCES", "RUNS", "PIN", "BASE"} {
		t.Setenv(k, "")
	}
	s, err := parseStart([]string{"--runs", "3", "--pin", "1"})
	if err != nil || s.runs != 3 || !s.pin || s.services != 10000 {
		t.Errorf("parseStart = %+v, %v", s, err)
	}
	if _, err := parseStart([]string{"--pin", "auto"}); err == nil || err.Error() != "PIN=auto: want 0 or 1" {
		t.Errorf("PIN=auto: %v", err)
	}
}
