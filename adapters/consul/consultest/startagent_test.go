package consultest

import (
	"os"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

// TestStartAgentAndClose: the form for a program that is not a test starts an agent in a
// directory of its own, and Close stops it and removes that directory.
func TestStartAgentAndClose(t *testing.T) {
	toolcache.RequireRealServers(t, "consul "+Version)
	a, err := StartAgent(ctxT(t, time.Minute), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Proc().Running() {
		t.Fatal("StartAgent returned, but the agent does not run")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if a.Proc().Running() {
		t.Error("the agent still runs after Close")
	}
	if _, err := os.Stat(a.DataDir); !os.IsNotExist(err) {
		t.Errorf("Close left %s (stat: %v)", a.DataDir, err)
	}
}

// TestDeregister: a deregistered instance leaves the catalog, its check with it.
func TestDeregister(t *testing.T) {
	a := Start(t, Options{})
	ctx := ctxT(t, 30*time.Second)
	in := Instance{Node: "vm-1", NodeAddress: "10.0.0.1", ID: "web-1", Service: "web", Port: 80, Check: "passing"}
	if err := Register(ctx, a, []Instance{in}); err != nil {
		t.Fatal(err)
	}
	if err := Deregister(ctx, a, "vm-1", "web-1"); err != nil {
		t.Fatal(err)
	}
	var entries []catalogEntry
	if err := a.Do(ctx, "GET", "/v1/catalog/service/web", nil, &entries); err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("the catalog still lists web after Deregister: %+v", entries)
	}
	var checks []struct{ CheckID string }
	if err := a.Do(ctx, "GET", "/v1/health/node/vm-1", nil, &checks); err != nil {
		t.Fatal(err)
	}
	if len(checks) != 0 {
		t.Errorf("node vm-1 still has checks after Deregister: %+v", checks)
	}
}
