package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Higress's Nacos 2 watcher reads pages of 50 until one is short: floor(N/50)+1 requests.
func TestHigressRequests(t *testing.T) {
	for n, want := range map[int]int{1: 1, 49: 1, 50: 2, 99: 2, 100: 3, 1001: 21, 10000: 201, 10001: 201} {
		if got := higressRequests(n); got != want {
			t.Errorf("higressRequests(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestParseNacos(t *testing.T) {
	s, err := parseNacos([]string{"--services", "300", "--churn", "2.5", "--window", "12s", "--changes", "7"})
	if err != nil {
		t.Fatal(err)
	}
	if s.services != 300 || s.instances != 10 || s.churn != "2.5" || s.window != 12*time.Second || s.changes != 7 || s.sinks != 10 {
		t.Fatalf("settings %+v", s)
	}
	for _, args := range [][]string{{"--churn", "x"}, {"--window", "1m"}, {"--services", "0"}, {"--instances", "251"}} {
		if _, err := parseNacos(args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	var ue usageError
	if _, err := parseNacos([]string{"stray"}); !errors.As(err, &ue) {
		t.Errorf("a stray argument: %v, want a usage error", err)
	}
}

func TestReadNacosCounts(t *testing.T) {
	const page = `# HELP galleon_nacos_pushes_total x
galleon_nacos_pushes_total{outcome="applied"} 300
galleon_nacos_pushes_total{outcome="unknown"} 2
galleon_nacos_requests_total{kind="list",result="ok",server="127.0.0.1:8848"} 6
galleon_nacos_requests_total{kind="subscribe",result="ok",server="127.0.0.1:8848"} 1001
galleon_nacos_requests_total{kind="subscribe",result="unreachable",server="127.0.0.1:8848"} 1
galleon_nacos_subscriptions 1001
`
	c := readNacosCounts(page)
	if c.pushes["applied"] != 300 || c.pushes["unknown"] != 2 || len(c.pushes) != 2 {
		t.Errorf("pushes %v", c.pushes)
	}
	if c.requests["list"] != 6 || c.requests["subscribe"] != 1001 || c.requests["subscribe unreachable"] != 1 || len(c.requests) != 3 {
		t.Errorf("requests %v", c.requests)
	}
	d := readNacosCounts(strings.ReplaceAll(page, "} 300", "} 310")).minus(c)
	if d.pushes["applied"] != 10 || d.pushes["unknown"] != 0 || d.requests["list"] != 0 {
		t.Errorf("difference %+v", d)
	}
	if got := counts(c.requests); got != "list 6, subscribe 1,001, subscribe unreachable 1" {
		t.Errorf("counts: %q", got)
	}
	if got := counts(map[string]float64{"list": 0}); got != "none" {
		t.Errorf("counts of zeros: %q", got)
	}
}

func TestGenReports(t *testing.T) {
	log := filepath.Join(t.TempDir(), "nacos-generate.log")
	text := "nacos-generate: 10/20 instances registered (50%), 1s, 10 a second\n" +
		"registered 2 services x 10 instances ...\n" +
		"nacos-generate: 5s: 50 changes (0 failed, at most 0 behind schedule); 0 health checks failed\n" +
		"nacos-generate: 1m0s: 600 changes (2 failed, at most 3 behind schedule); 0 health checks failed\n"
	if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got := genReports(log)
	if len(got) != 2 || got[0] != (genReportAt{5, 50, 0}) || got[1] != (genReportAt{60, 600, 2}) {
		t.Fatalf("reports %+v", got)
	}
	line := "registered 1000 services x 10 instances and load-target on 127.0.0.1:1: 10010 instances in 40.125s (3 retried, 12 registered again), all listed 43.486s after the start; churning 10 changes a second until stopped"
	if submatch(nacosGenTook, line) != "40.125s" || submatch(nacosGenRetried, line) != "3" || submatch(nacosGenAgain, line) != "12" || submatch(nacosGenListed, line) != "43.486s" {
		t.Errorf("the registered line's figures: %q %q %q %q", submatch(nacosGenTook, line), submatch(nacosGenRetried, line), submatch(nacosGenAgain, line), submatch(nacosGenListed, line))
	}
}
