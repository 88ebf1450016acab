package main

import (
	"strings"
	"testing"
	"time"
)

// Both commands take their settings from the environment, and a flag wins over it.
func TestSettingsFlagWinsOverEnvironment(t *testing.T) {
	t.Setenv("APPS", "50")
	t.Setenv("POLL", "2s")
	t.Setenv("SERVICES", "200")
	t.Setenv("LAYOUT", "curator")
	e, err := parseEureka(nil)
	if err != nil || e.apps != 50 || e.poll != 2*time.Second || e.pollText != "2s" || e.changes != 40 || e.protocol != "delta" {
		t.Errorf("eureka from the environment: %+v, %v", e, err)
	}
	if e, err = parseEureka([]string{"--apps", "7", "--poll=3s"}); err != nil || e.apps != 7 || e.poll != 3*time.Second {
		t.Errorf("eureka's flags did not win over the environment: %+v, %v", e, err)
	}
	z, err := parseZooKeeper(nil)
	if err != nil || z.services != 200 || z.layout != "curator" || z.root != "/services" || z.changes != 100 || z.interval != "20ms" {
		t.Errorf("zookeeper from the environment: %+v, %v", z, err)
	}
	if z, err = parseZooKeeper([]string{"--services=3", "--layout", "dubbo"}); err != nil || z.services != 3 || z.root != "/dubbo" {
		t.Errorf("zookeeper's flags did not win over the environment: %+v, %v", z, err)
	}
	settingErrors(t, func(args []string) error { _, err := parseEureka(args); return err }, map[string]string{
		"--poll 5":        "POLL=5: want whole seconds, e.g. 5s",
		"--churn x":       "CHURN=x: want a percentage, e.g. 1",
		"--protocol mcp":  "PROTOCOL=mcp: want delta or sotw",
		"--lease 1m":      "LEASE=1m: want whole seconds, e.g. 180s",
		"--instances 251": "INSTANCES=251: want 1 to 250",
	})
	settingErrors(t, func(args []string) error { _, err := parseZooKeeper(args); return err }, map[string]string{
		"--layout nacos": "LAYOUT=nacos: want dubbo or curator",
		"--services 0":   "SERVICES=0: want a whole number >= 1",
		"--sinks -1":     "SINKS=-1: want a whole number >= 1",
	})
}

// settingErrors checks that parse refuses each arguments (split on spaces) with its error.
func settingErrors(t *testing.T, parse func(args []string) error, errs map[string]string) {
	t.Helper()
	for args, want := range errs {
		if err := parse(strings.Fields(args)); err == nil || err.Error() != want {
			t.Errorf("%s: error %v, want %q", args, err, want)
		}
	}
}

// Outputs of galleon-load run, as the eureka and zookeeper commands got them.
const (
	eurekaRunOut = `10 delta sinks synced in 21.014ms
sinks=10 protocol=delta registry=eureka
initial sync of all sinks: 21.014ms (144731 bytes per sink)
registry change -> every sink (5 changes): p50 796.014ms  p99 4.918873s  max 4.918873s  (15962 bytes per sink per change)
registry change -> listed by the server (GET /apps/LOAD-TARGET every 50ms): p50 575ms  p99 696ms  max 696ms
updates per sink: 5 while 5 changes were made (other changes in the registry, churn, are served too)
eureka requests over the changes: 5 delta, 0 full
source resident memory: 32.2 MiB
`
	zkRunOut = `10 sotw sinks synced in 19.318ms
sinks=10 protocol=sotw registry=zookeeper dubbo
initial sync of all sinks: 19.318ms (294388 bytes per sink)
registry change -> every sink (5 changes): p50 108.156ms  p99 112.937ms  max 112.937ms  (294390 bytes per sink per change)
updates per sink: 5 for 5 changes
zookeeper requests per change: 1.0 (5 over 5 changes)
source resident memory: 38.6 MiB
`
)

func TestParseLoadRun(t *testing.T) {
	for _, c := range []struct {
		name, out string
		want      loadRun
	}{
		{"eureka", eurekaRunOut, loadRun{
			sync: "21.014ms", syncBytes: "144731", p50: "796.014ms", p99: "4.918873s", max: "4.918873s", bytes: "15962",
			listedP50: "575ms", listedP99: "696ms", listedMax: "696ms",
			updates: "5 while 5 changes were made (other changes in the registry, churn, are served too)",
		}},
		{"zookeeper", zkRunOut, loadRun{
			sync: "19.318ms", syncBytes: "294388", p50: "108.156ms", p99: "112.937ms", max: "112.937ms", bytes: "294390",
			updates: "5 for 5 changes", zkRequests: "1.0 (5 over 5 changes)",
		}},
	} {
		got, err := parseLoadRun(c.out)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
	if _, err := parseLoadRun("initial sync of all sinks: 1ms (5 bytes per sink)\n"); err == nil {
		t.Error("an output without the change -> every sink line parsed without an error")
	}
}

func TestLogFieldAndTime(t *testing.T) {
	line := `time=2026-11-27T04:37:51.123Z level=DEBUG msg="read ZooKeeper" reads=402 took=310.661426ms services=201`
	for key, want := range map[string]string{"reads": "402", "took": "310.661426ms", "services": "201", "session": ""} {
		if got := logField(line, key); got != want {
			t.Errorf("logField(%s) = %q, want %q", key, got, want)
		}
	}
	got, err := logTime(line)
	if want := time.Date(2026, 11, 27, 4, 37, 51, 123e6, time.UTC); err != nil || !got.Equal(want) {
		t.Errorf("logTime = %v, %v; want %v", got, err, want)
	}
	if _, err := logTime(`level=INFO msg="no time"`); err == nil {
		t.Error("logTime of a line without time= gave no error")
	}
}

func TestDurSecs(t *testing.T) {
	for in, want := range map[string]string{"310.661426ms": "0.311", "1m2.5s": "62.500", "850µs": "0.001", "": "?", "soon": "?"} {
		if got := durSecs(in); got != want {
			t.Errorf("durSecs(%q) = %q, want %q", in, got, want)
		}
	}
}
