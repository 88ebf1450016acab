package registrytest

import (
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The kit runs each Run under a pprof label unique to that Run. Goroutines
// inherit the labels of the goroutine that starts them, so the goroutines
// carrying the label are exactly those Run started, directly or through
// others, and not those of the driver or of the test (a driver's HTTP
// client keeping connections open is not the adapter's leak).
const labelKey = "registrytest"

var runSeq atomic.Int64

// newRunLabel returns a label value no other Run of the process has.
func newRunLabel() string { return "run-" + strconv.FormatInt(runSeq.Add(1), 10) }

// withRunLabel calls f in a context labelled with value, so that every
// goroutine f starts carries the label.
func withRunLabel(ctx context.Context, value string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(labelKey, value), f)
}

// labelled returns the goroutines that carry the run label value, grouped
// by stack as "N goroutine(s):\n<frames>", leaving out stacks that contain
// any of ignore.
func labelled(value string, ignore []string) []string {
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		return []string{"cannot read the goroutine profile: " + err.Error()}
	}
	want := fmt.Sprintf("%q:%q", labelKey, value)
	var out []string
next:
	// Records are separated by blank lines: "N @ pcs", "# labels: {...}",
	// then one "#\t<pc>\t<func>\t<file:line>" line per frame.
	for _, rec := range strings.Split(b.String(), "\n\n") {
		head, rest, _ := strings.Cut(rec, "\n")
		labels, frames, _ := strings.Cut(rest, "\n")
		if !strings.HasPrefix(labels, "# labels: ") || !strings.Contains(labels, want) {
			continue
		}
		for _, s := range ignore {
			if strings.Contains(frames, s) {
				continue next
			}
		}
		count, _, _ := strings.Cut(head, " @ ")
		out = append(out, count+" goroutine(s):\n"+frames)
	}
	return out
}

// waitLabelled polls until no goroutine carries the run label value (nil)
// or timeout passes (their stacks). Goroutine exits cannot be waited for,
// hence the polling.
func waitLabelled(value string, ignore []string, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		left := labelled(value, ignore)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}
