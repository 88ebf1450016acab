package serve

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestClientText(t *testing.T) {
	if got := ClientText("short", 10); got != "short" {
		t.Errorf("short text changed: %q", got)
	}
	got := ClientText(strings.Repeat("é", 100), 51) // 2 bytes each: cut at 50
	if !utf8.ValidString(got) {
		t.Errorf("cut inside a rune: %q", got)
	}
	if want := strings.Repeat("é", 25) + "... (150 more bytes)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestLogLimiter(t *testing.T) {
	l := NewServerLogLimiter().ForStream()
	now := time.Unix(0, 0)
	for i := range logBurst {
		if ok, _ := l.Allow(now); !ok {
			t.Fatalf("line %d of the burst refused", i+1)
		}
	}
	for range 7 {
		if ok, _ := l.Allow(now); ok {
			t.Fatal("a line over the burst was allowed")
		}
	}
	if ok, _ := l.Allow(now.Add(logEvery / 2)); ok {
		t.Fatal("allowed before a token was back")
	}
	ok, suppressed := l.Allow(now.Add(logEvery))
	if !ok || suppressed != 8 {
		t.Fatalf("after one interval: ok=%v suppressed=%d, want true and 8", ok, suppressed)
	}
	// A long quiet time refills to the burst, not beyond.
	later := now.Add(100 * logEvery)
	n := 0
	for {
		if ok, _ := l.Allow(later); !ok {
			break
		}
		n++
	}
	if n != logBurst {
		t.Errorf("after a long quiet time %d lines were allowed at once, want %d", n, logBurst)
	}
}

// TestLogLimiterBoundsStreamsTogether: a client that opens stream after
// stream, each within its own burst, still meets the server's limit, and
// the first line after it says how many lines all streams had left out.
func TestLogLimiterBoundsStreamsTogether(t *testing.T) {
	server := NewServerLogLimiter()
	now := time.Unix(0, 0)
	logged := 0
	for range 100 {
		stream := server.ForStream()
		for range logBurst + 1 { // one over the stream's own burst
			if ok, _ := stream.Allow(now); ok {
				logged++
			}
		}
	}
	if logged != serverLogBurst {
		t.Fatalf("100 streams logged %d lines at once, want the server's burst of %d", logged, serverLogBurst)
	}
	ok, suppressed := server.ForStream().Allow(now.Add(serverLogEvery))
	// Left out since the last line logged (the 10th stream's 5th): that
	// stream's 6th, refused by its own limit, and every line of the 90
	// streams after it.
	if want := 1 + 90*(logBurst+1); !ok || suppressed != want {
		t.Fatalf("after one interval: ok=%v suppressed=%d, want true and %d", ok, suppressed, want)
	}
}

func TestAdmitNames(t *testing.T) {
	long := strings.Repeat("n", MaxNameLen+1)
	held := map[string]struct{}{"a": {}, "b": {}}
	for _, tc := range []struct {
		name      string
		held      int
		subscribe []string
		resume    map[string]string
		want      string
	}{
		{"within", 2, []string{"a", "c"}, map[string]string{"d": "v1"}, ""},
		{"re-subscribed names count once", MaxNamesPerStream - 1, []string{"a", "b", "c"}, nil, ""},
		{"one over", MaxNamesPerStream - 1, []string{"c", "d"}, nil, "too_many_names"},
		{"resume counts", MaxNamesPerStream, nil, map[string]string{"x": "1"}, "too_many_names"},
		{"long name", 0, []string{long}, nil, "name_too_long"},
		{"long version", 0, nil, map[string]string{"x": long}, "name_too_long"},
	} {
		reason, err := AdmitNames(tc.held, held, tc.subscribe, tc.resume)
		if reason != tc.want || (err == nil) != (tc.want == "") {
			t.Errorf("%s: reason %q, err %v; want reason %q", tc.name, reason, err, tc.want)
		}
	}
}
