package nacosclient

import (
	"strings"
	"testing"
)

// TestOpenRefusesWhatItCannotUse: Open says what is missing or malformed before the SDK is
// started (which would write its log and cache into the working directory, or dial nothing).
func TestOpenRefusesWhatItCannotUse(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no server", Options{Dir: dir}, "no server"},
		{"no directory", Options{Servers: []Server{{HTTPAddr: "127.0.0.1:8848"}}}, "Options.Dir is required"},
		{"no port", Options{Dir: dir, Servers: []Server{{HTTPAddr: "127.0.0.1"}}}, `server "127.0.0.1"`},
		{"port out of range", Options{Dir: dir, Servers: []Server{{HTTPAddr: "127.0.0.1:70000"}}}, `port "70000"`},
		{"bad gRPC address", Options{Dir: dir, Servers: []Server{{HTTPAddr: "127.0.0.1:8848", GRPCAddr: "x"}}}, `gRPC address "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Open(tc.opts)
			if err == nil {
				c.Close()
				t.Fatalf("Open(%+v) succeeded, want an error containing %q", tc.opts, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open: %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestQuietLoggerHandsOnWarningsAndErrorsOnly: the SDK's info and debug lines are dropped, its
// warnings and errors reach Logf, and no Logf drops everything.
func TestQuietLoggerHandsOnWarningsAndErrorsOnly(t *testing.T) {
	var got []string
	l := quietLogger{logf: func(f string, args ...any) { got = append(got, args[0].(string)) }}
	l.Info("i")
	l.Infof("i%d", 1)
	l.Debug("d")
	l.Debugf("d%d", 1)
	l.Warn("w")
	l.Warnf("w%d", 2)
	l.Error("e")
	l.Errorf("e%d", 3)
	want := []string{"nacos-sdk-go warn: w", "nacos-sdk-go warn: w2", "nacos-sdk-go error: e", "nacos-sdk-go error: e3"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("logged %q, want %q", got, want)
	}
	quietLogger{}.Error("dropped") // no Logf: must not panic
}
