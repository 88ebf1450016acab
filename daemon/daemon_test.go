package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/server"
	"github.com/galleon-mesh/galleon/registry"
)

// TestDeprecatedFlagKeepsOldNamesWorking: a renamed flag is read under its old name from the
// command line, the environment and the config file, warns each time, and the current name
// wins when both are given.
func TestDeprecatedFlagKeepsOldNamesWorking(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want string
		warn bool
	}{
		{name: "current name", args: []string{"--acme-token", "new"}, want: "new"},
		{name: "old name on the command line", args: []string{"--token", "old"}, want: "old", warn: true},
		{name: "old name in the environment", env: map[string]string{"GALLEON_TOKEN": "env-old"}, want: "env-old", warn: true},
		{name: "old name in the file", file: "token: file-old\n", want: "file-old", warn: true},
		{name: "command line's old name beats the environment's new", args: []string{"--token", "cli-old"},
			env: map[string]string{"GALLEON_ACME_TOKEN": "env-new"}, want: "cli-old", warn: true},
		{name: "new name beats old in the environment", env: map[string]string{"GALLEON_TOKEN": "env-old", "GALLEON_ACME_TOKEN": "env-new"},
			want: "env-new"},
		{name: "new name in the file beats the old", file: "token: file-old\nacme-token: file-new\n", want: "file-new"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := append([]string{"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, tc.args...)
			if tc.file != "" {
				path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
				if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", path)
			}
			var got string
			errStop := errors.New("stop here")
			spec := daemon.Spec{Name: "galleon-acme", Registry: "acme", Summary: "test",
				Flags: func(fs *pflag.FlagSet) daemon.NewRegistry {
					token := fs.String("acme-token", "", "the token")
					daemon.DeprecatedFlag(fs, "token", "acme-token")
					return func(daemon.Env) (registry.Registry, error) {
						got = *token
						return nil, errStop
					}
				}}
			var stderr strings.Builder
			if code := daemon.Run(context.Background(), spec, args, &stderr); code != 2 {
				t.Fatalf("exit %d, want 2 (the constructor's error); stderr:\n%s", code, stderr.String())
			}
			if got != tc.want {
				t.Errorf("--acme-token = %q, want %q; stderr:\n%s", got, tc.want, stderr.String())
			}
			warned := strings.Contains(stderr.String(), "use=--acme-token") &&
				strings.Contains(stderr.String(), "Flag --token has been deprecated, use --acme-token")
			if warned != tc.warn {
				t.Errorf("warned = %v, want %v; stderr:\n%s", warned, tc.warn, stderr.String())
			}
		})
	}
}

// TestDeprecatedFlagIsHiddenFromHelp: --help lists the current name only.
func TestDeprecatedFlagIsHiddenFromHelp(t *testing.T) {
	spec := daemon.Spec{Name: "galleon-acme", Registry: "acme", Summary: "test",
		Flags: func(fs *pflag.FlagSet) daemon.NewRegistry {
			fs.String("acme-token", "", "the token")
			daemon.DeprecatedFlag(fs, "token", "acme-token")
			return func(daemon.Env) (registry.Registry, error) { return nil, errors.New("unused") }
		}}
	var stderr strings.Builder
	if code := daemon.Run(context.Background(), spec, []string{"--help"}, &stderr); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	if !strings.Contains(stderr.String(), "--acme-token") || strings.Contains(stderr.String(), "--token ") {
		t.Errorf("--help should list --acme-token and not --token:\n%s", stderr.String())
	}
}

// TestDefaultsAreTheServers: the addresses this package documents are the ones the daemon's
// body listens on when no flag says otherwise.
func TestDefaultsAreTheServers(t *testing.T) {
	if daemon.DefaultListen != server.DefaultListen || daemon.DefaultHTTP != server.DefaultHTTP {
		t.Errorf("daemon says %s and %s, internal/server listens on %s and %s",
			daemon.DefaultListen, daemon.DefaultHTTP, server.DefaultListen, server.DefaultHTTP)
	}
}
