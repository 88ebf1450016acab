package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseFleet(t *testing.T) {
	for _, k := range []string{"REGISTRIES", "SERVICES", "INSTANCES", "CHANGES", "GAP", "SETTLE"} {
		t.Setenv(k, "")
	}
	s, err := parseFleet([]string{"--registries", "2", "--gap", "50ms"})
	if err != nil || s.registries != 2 || s.services != 10000 || s.instances != 10 || s.changes != 30 || s.gap != 50*time.Millisecond || s.settle != 5*time.Second {
		t.Errorf("parseFleet = %+v, %v", s, err)
	}
	if _, err := parseFleet([]string{"--settle", "soon"}); err == nil || !strings.Contains(err.Error(), "SETTLE=soon: want a duration") {
		t.Errorf("SETTLE=soon: %v", err)
	}
	if _, err := parseFleet([]string{"--registries", "0"}); err == nil {
		t.Error("REGISTRIES=0 accepted")
	}
}
