package catalog

import (
	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/daemon"
)

// The adapter's flags. Like every Galleon adapter's, their names start with the adapter's
// short name, so they never collide with the daemon's own (daemon.DaemonFlags) or with
// another adapter's in a binary that serves two.
const (
	FlagURL      = "catalog-url"
	FlagInterval = "catalog-poll-interval"
	FlagTimeout  = "catalog-timeout"
)

// AddFlags defines the adapter's flags on fs; once fs is parsed, c holds their values.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.URL, FlagURL, "", "base URL of the catalog, e.g. http://catalog.example:8080; services are listed from <url>/v1/services (required)")
	fs.DurationVar(&c.Interval, FlagInterval, DefaultInterval, "time between polls of the catalog (an unchanged catalog answers 304, so polls are cheap)")
	fs.DurationVar(&c.Timeout, FlagTimeout, DefaultTimeout, "how long one poll may take; a catalog that does not answer within it is reported unreachable")
	// The flag's name before it took the prefix: it keeps working, with a warning, on the
	// command line, as GALLEON_POLL_INTERVAL and in the config file.
	daemon.DeprecatedFlag(fs, "poll-interval", FlagInterval)
}
