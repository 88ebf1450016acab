package benchrun

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// durPart is one number and unit of a Go duration; µs in both spellings Go prints and reads.
var durPart = regexp.MustCompile(`^([0-9.]+)(h|ms|m|s|ns|us|µs|μs)`)

// unitSeconds is a duration unit in seconds.
func unitSeconds(unit string) float64 {
	switch unit {
	case "h":
		return 3600
	case "m":
		return 60
	case "s":
		return 1
	case "ms":
		return 1e-3
	case "ns":
		return 1e-9
	}
	return 1e-6 // us, µs, μs
}

// DurSeconds is a Go duration as galleon-load prints it (1m2.5s, 850.3ms, 12µs) in seconds,
// summed from its parts as decimals (time.ParseDuration would round to nanoseconds first).
func DurSeconds(d string) (float64, error) {
	if d == "" {
		return 0, fmt.Errorf("empty duration")
	}
	var t float64
	for rest := d; rest != ""; {
		m := durPart.FindStringSubmatch(rest)
		if m == nil {
			return 0, fmt.Errorf("%q is not a Go duration", d)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a Go duration", d)
		}
		t += v * unitSeconds(m[2])
		rest = rest[len(m[0]):]
	}
	return t, nil
}

var oneUnit = regexp.MustCompile(`^([0-9.]+)(ns|us|µs|μs|ms|s)$`)

// Ms is a Go duration in milliseconds with two decimals ("30.25"). A duration of one unit (all
// galleon-load prints below a minute) is converted as bench-lib.sh's ms did, v times the unit's
// factor, so that 30.249ms stays 30.249 before it is rounded.
func Ms(d string) (string, error) {
	if m := oneUnit.FindStringSubmatch(d); m != nil {
		v, err := strconv.ParseFloat(m[1], 64)
		if err == nil {
			return fmt.Sprintf("%.2f", v*msFactor(m[2])), nil
		}
	}
	s, err := DurSeconds(d)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%.2f", s*1000), nil
}

// msFactor is a duration unit in milliseconds, written as the factors bench-lib.sh multiplied by
// (1e-3, not 1e-6 * 1e3, whose product may differ in the last bit).
func msFactor(unit string) float64 {
	switch unit {
	case "s":
		return 1e3
	case "ms":
		return 1
	case "ns":
		return 1e-6
	}
	return 1e-3 // us, µs, μs
}

// Secs is b - a in seconds with two decimals.
func Secs(a, b time.Time) string { return fmt.Sprintf("%.2f", b.Sub(a).Seconds()) }

// MiB is kB as MiB with one decimal: "12.3 MiB".
func MiB(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

// Thousands is n rounded to a whole number, with commas between thousands: 1,234,567.
func Thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out string
	for len(s) > 3 {
		out = "," + s[len(s)-3:] + out
		s = s[:len(s)-3]
	}
	if neg {
		s = "-" + s
	}
	return s + out
}

// Median is the middle value, the mean of the two middle ones for an even count; NaN for none.
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// AwkNumber is v as awk's print writes a number: whole numbers as integers, others with six
// significant digits (%.6g), as the shell scripts printed their medians.
func AwkNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return fmt.Sprintf("%.6g", v)
}

// Ratio is b / a with two decimals, "?" when a is 0.
func Ratio(a, b float64) string {
	if a == 0 {
		return "?"
	}
	return fmt.Sprintf("%.2f", b/a)
}

// Row is a markdown table row of cells: "| a | b |".
func Row(cells ...string) string { return "| " + strings.Join(cells, " | ") + " |" }

// Rows collects the "| measure | value |" rows a run prints at its end.
type Rows []string

// Add appends the row of measure and value.
func (r *Rows) Add(measure, value string) { *r = append(*r, Row(measure, value)) }

// Stamp is now in UTC to the minute, as the reports print it: "2026-11-27 04:30 UTC".
func Stamp() string { return time.Now().UTC().Format("2006-01-02 15:04 UTC") }
