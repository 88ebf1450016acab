package zktest

import (
	"context"
	"net/url"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/galleon-mesh/galleon/internal/testing/toolcache"
)

func greeter(ip string) DubboProvider {
	return DubboProvider{Interface: "org.apache.demo.GreetingService", IP: ip, Port: 20880,
		Params: url.Values{"application": {"greeter"}, "version": {"1.0.0"}}}
}

func TestDubboProviderURLAndNode(t *testing.T) {
	p := greeter("10.0.0.1")
	const want = "dubbo://10.0.0.1:20880/org.apache.demo.GreetingService?application=greeter&interface=org.apache.demo.GreetingService&version=1.0.0"
	if got := p.URL(); got != want {
		t.Errorf("URL() = %s, want %s", got, want)
	}
	if got, wantNode := p.Node(), "dubbo%3A%2F%2F10.0.0.1%3A20880%2Forg.apache.demo.GreetingService%3Fapplication%3Dgreeter%26interface%3Dorg.apache.demo.GreetingService%26version%3D1.0.0"; got != wantNode {
		t.Errorf("Node() = %s, want %s", got, wantNode)
	}
	if got := p.Path(); got != "/dubbo/org.apache.demo.GreetingService/providers/"+p.Node() {
		t.Errorf("Path() = %s", got)
	}
	if p.Params.Get("interface") != "" {
		t.Error("URL() added interface to the caller's Params")
	}
}

func TestDubboWriter(t *testing.T) {
	s := Start(t, Options{})
	conn, _, err := zk.Connect([]string{s.Addr()}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w := DubboWriter{Conn: conn}
	for _, ip := range []string{"10.0.0.2", "10.0.0.1"} {
		if err := w.Register(greeter(ip)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Unregister(greeter("10.0.0.2")); err != nil {
		t.Fatal(err)
	}
	if err := w.Register(greeter("10.0.0.3")); err != nil {
		t.Fatal(err)
	}
	got, err := w.Providers("org.apache.demo.GreetingService")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{greeter("10.0.0.1").URL(), greeter("10.0.0.3").URL()}; !slices.Equal(got, want) {
		t.Errorf("Providers = %v, want %v", got, want)
	}
}

// TestStartServerAndClose: the form for a program that is not a test starts a server in a
// directory of its own, and Close stops it and removes that directory.
func TestStartServerAndClose(t *testing.T) {
	toolcache.RequireRealServers(t, "ZooKeeper")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := StartServer(ctx, Options{TickTime: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := s.FourLetter("ruok"); out != "imok" {
		s.Close()
		t.Fatalf("StartServer returned, but ruok answers %q, %v", out, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Proc().Running() {
		t.Error("ZooKeeper still runs after Close")
	}
	if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
		t.Errorf("Close left %s (stat: %v)", s.Dir(), err)
	}
}
