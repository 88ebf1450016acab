package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/daemon"
)

// TestBadFlagsFailAtStart checks that a bad value stops the binary with
// exit status 2 and a message naming the flag to fix.
func TestBadFlagsFailAtStart(t *testing.T) {
	spec := daemon.Spec{Name: "galleon-consul", Registry: "consul", Flags: flags}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--consistency", "eventual"}, "--consistency"},
		{[]string{"--wait", "20m"}, "--wait"},
		{[]string{"--host-template", "{{.Nope}}"}, "--host-template"},
		{[]string{"--address-source", "public"}, "--address-source"},
		{[]string{"--fetch-concurrency", "500"}, "--fetch-concurrency"},
		{[]string{"--datacenters", "all,dc1"}, "--datacenters"},
		{[]string{"--token-file", "/nonexistent/token"}, "--token-file"},
		{[]string{"--cert-file", "/x.pem"}, "--cert-file and --key-file"},
		{[]string{"--namespace", "Bad_NS"}, "--namespace"},
		{[]string{"--service-watches", "100"}, "--service-watches 100: needs the agent's HTTPS listener"},
		{[]string{"--service-watches", "50000", "--consul-address", "https://127.0.0.1:8501"}, "--service-watches 50000: want 0 (none) to 40000"},
	} {
		var stderr bytes.Buffer
		code := daemon.Run(context.Background(), spec, append(tt.args, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"), &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", tt.args, code, stderr.String(), tt.want)
		}
	}
}
