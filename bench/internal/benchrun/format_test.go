package benchrun

import (
	"flag"
	"math"
	"testing"
)

// The wants are what scripts/bench-lib.sh's ms and dur_s printed for the same input.
func TestMsAndDurSeconds(t *testing.T) {
	for _, c := range []struct {
		in, ms string
		secs   float64
	}{
		{"30.249ms", "30.25", 0.030249},
		{"1.5s", "1500.00", 1.5},
		{"850µs", "0.85", 0.00085},
		{"850μs", "0.85", 0.00085}, // Greek mu, which time.ParseDuration reads too
		{"850us", "0.85", 0.00085},
		{"12ns", "0.00", 12e-9},
		{"1m2.5s", "62500.00", 62.5},
		{"1h0m0.001s", "3600001.00", 3600.001},
		{"2.0005ms", "2.00", 0.0020005},
	} {
		got, err := Ms(c.in)
		if err != nil || got != c.ms {
			t.Errorf("Ms(%q) = %q, %v; want %q", c.in, got, err, c.ms)
		}
		secs, err := DurSeconds(c.in)
		if err != nil || math.Abs(secs-c.secs) > 1e-12 {
			t.Errorf("DurSeconds(%q) = %v, %v; want %v", c.in, secs, err, c.secs)
		}
	}
	for _, bad := range []string{"", "5", "ms", "1.5x", "-1s", "1s junk"} {
		if _, err := Ms(bad); err == nil {
			t.Errorf("Ms(%q): no error", bad)
		}
	}
}

func TestNumbers(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Thousands(0), "0"},
		{Thousands(999), "999"},
		{Thousands(1000), "1,000"},
		{Thousands(1234567.4), "1,234,567"},
		{Thousands(-1234), "-1,234"},
		{MiB(34150), "33.3 MiB"},
		{AwkNumber(Median([]float64{68, 66, 141})), "68"},
		{AwkNumber(Median([]float64{63, 59})), "61"},
		{AwkNumber(Median([]float64{63, 60})), "61.5"},
		{AwkNumber(123456.75), "123457"},
		{Ratio(0, 3), "?"},
		{Ratio(2, 3), "1.50"},
		{Row("a", "b c", ""), "| a | b c |  |"},
		{LoadAvgOf("0.52 0.61 0.70 2/345 6789\n"), "0.52 0.61 0.70"},
		{LoadAvgOf(""), "?"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Errorf("Median(nil) = %v, want NaN", Median(nil))
	}
	var rows Rows
	rows.Add("start → /readyz 200", "0.05 s")
	if len(rows) != 1 || rows[0] != "| start → /readyz 200 | 0.05 s |" {
		t.Errorf("Rows.Add: %q", rows)
	}
}

func TestSettings(t *testing.T) {
	if n, err := Whole("SINKS", "10"); err != nil || n != 10 {
		t.Errorf("Whole(10) = %d, %v", n, err)
	}
	for _, bad := range []string{"0", "01", "-1", "1.5", "", "x"} {
		if _, err := Whole("SINKS", bad); err == nil || err.Error() != "SINKS="+bad+": want a whole number >= 1" {
			t.Errorf("Whole(%q): %v", bad, err)
		}
	}
	if _, err := Instances("INSTANCES", "251"); err == nil || err.Error() != "INSTANCES=251: want 1 to 250" {
		t.Errorf("Instances(251): %v", err)
	}
	if err := OneOf("PIN", "2", "auto", "0"); err == nil || err.Error() != "PIN=2: want auto or 0" {
		t.Errorf("OneOf: %v", err)
	}
	if err := EnvWords("SERVER_ENV", []string{"GOMEMLIMIT=140MiB", "A_1="}); err != nil {
		t.Errorf("EnvWords: %v", err)
	}
	if err := EnvWords("SERVER_ENV", []string{"1A=x"}); err == nil || err.Error() != "SERVER_ENV: 1A=x: want NAME=VALUE words" {
		t.Errorf("EnvWords(1A=x): %v", err)
	}
	t.Setenv("GALLEON_BENCHRUN_TEST", "")
	if got := Env("GALLEON_BENCHRUN_TEST", "def"); got != "def" {
		t.Errorf("Env of an empty variable = %q, want the default", got)
	}
	t.Setenv("GALLEON_BENCHRUN_TEST", "5")
	if got := Env("GALLEON_BENCHRUN_TEST", "def"); got != "5" {
		t.Errorf("Env = %q, want 5", got)
	}
}

func TestSetting(t *testing.T) {
	t.Setenv("SERVER_ENV", "GOGC=50")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	v := Setting(fs, "SERVER_ENV", "", "words")
	if *v != "GOGC=50" {
		t.Errorf("Setting's default = %q, want the variable's value", *v)
	}
	if err := fs.Parse([]string{"--server-env", "GOGC=10"}); err != nil || *v != "GOGC=10" {
		t.Errorf("--server-env: %q, %v; the flag must win", *v, err)
	}
	if f := fs.Lookup("server-env"); f == nil || f.Usage != "SERVER_ENV: words" {
		t.Errorf("flag server-env: %+v", f)
	}
}
