package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
)

// TestBadFlagsFailAtStart checks that a bad value stops the binary with exit status 2 and a
// message naming the flag to fix.
func TestBadFlagsFailAtStart(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	server := []string{"--nacos-servers", "127.0.0.1:8848"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "--nacos-servers is empty"},
		{[]string{"--nacos-servers", "127.0.0.1:99999"}, "--nacos-servers \"127.0.0.1:99999\""},
		{append(server, "--nacos-api", "soap"), "--nacos-api \"soap\""},
		{append(server, "--nacos-grpc-port-offset", "60000"), "--nacos-grpc-port-offset 60000"},
		{append(server, "--nacos-discovery-interval", "1ms"), "--nacos-discovery-interval 1ms"},
		{append(server, "--nacos-page-size", "-1"), "--nacos-page-size -1"},
		{append(server, "--nacos-namespaces", "*,dev"), "--nacos-namespaces"},
		{append(server, "--nacos-username", "nacos"), "--nacos-username and --nacos-password-file go together"},
		{append(server, "--nacos-username", "nacos", "--nacos-password-file", missing), "--nacos-password-file"},
		{append(server, "--nacos-access-key", "ak", "--nacos-secret-key-file", empty), "--nacos-secret-key-file " + empty + ": want one non-empty line"},
		{append(server, "--nacos-tls-cert", missing), "--nacos-tls-cert and --nacos-tls-key go together"},
		{append(server, "--nacos-host-template", "{{.Nope}}"), "--nacos-host-template"},
		{append(server, "--namespace", "Bad_NS"), `--namespace "Bad_NS"`},
	} {
		var stderr bytes.Buffer
		code := daemon.Run(context.Background(), builtin.Nacos(), append(tt.args, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"), &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", tt.args, code, stderr.String(), tt.want)
		}
	}
}
