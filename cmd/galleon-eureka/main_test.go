package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/adapters/eureka"
	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/testing/daemontest"
)

// TestBadFlagsFailAtStart checks that a bad value stops the binary with exit status 2 and a
// message naming the flag to fix, by its current name even when an old one was given.
func TestBadFlagsFailAtStart(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "--eureka-urls is empty"},
		{[]string{"--eureka-urls", "http://127.0.0.1:1/eureka", "--eureka-poll-interval", "1ms"}, "--eureka-poll-interval 1ms"},
		{[]string{"--eureka-urls", "http://127.0.0.1:1/eureka", "--poll-interval", "1ms"}, "--eureka-poll-interval 1ms"},
		{[]string{"--eureka-urls", "http://127.0.0.1:1/eureka", "--max-lease-age", "-1s"}, "--eureka-max-lease-age -1s"},
		{[]string{"--eureka-urls", "http://127.0.0.1:1/eureka", "--eureka-host-template", "{{.Nope}}"}, "--eureka-host-template"},
		{[]string{"--eureka-urls", "http://127.0.0.1:1/eureka", "--namespace", "Bad_NS"}, `--namespace "Bad_NS"`},
	} {
		var stderr bytes.Buffer
		code := daemon.Run(context.Background(), builtin.Eureka(), append(tt.args, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"), &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", tt.args, code, stderr.String(), tt.want)
		}
	}
}

// TestOldFlagNamesStillWork: each flag's name before issue 28 sets the same value as its
// current name, and warns that it is deprecated.
func TestOldFlagNamesStillWork(t *testing.T) {
	values := map[string]string{"poll-interval": "7s", "max-lease-age": "3m"}
	daemontest.CheckRenamedFlags(t, builtin.Eureka().Flags, eureka.RenamedFlags(), values)
}
