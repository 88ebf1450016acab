package eurekatest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// TestStartServerAndClose: the form for a program that is not a test starts a polaris-server in
// a directory of its own, and Close stops it and removes that directory.
func TestStartServerAndClose(t *testing.T) {
	toolcache.RequireRealServers(t, "polaris-server "+Version)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := StartServer(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apps(ctx, "/apps"); err != nil {
		s.Close()
		t.Fatalf("StartServer returned, but /apps does not answer: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Proc().Running() {
		t.Error("polaris-server still runs after Close")
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("Close left %s (stat: %v)", s.Dir, err)
	}
}
