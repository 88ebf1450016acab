package catalog

import (
	"io"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestFlagsKeepTheOldName: --poll-interval, the name before the catalog- prefix, still sets
// the interval.
func TestFlagsKeepTheOldName(t *testing.T) {
	for _, args := range [][]string{
		{"--catalog-url", "http://catalog.test", "--catalog-poll-interval", "3s"},
		{"--catalog-url", "http://catalog.test", "--poll-interval", "3s"},
	} {
		var cfg Config
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if cfg.URL != "http://catalog.test" || cfg.Interval != 3*time.Second {
			t.Errorf("%v: got URL %q, interval %v", args, cfg.URL, cfg.Interval)
		}
	}
}
