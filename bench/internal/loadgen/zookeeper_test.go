package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/galleon-mesh/galleon/adapters/file/filetest/filegen"
	"github.com/galleon-mesh/galleon/adapters/zookeeper/zktest"
)

// testZK connects a client of the test's own to addr, closed when the test
// ends.
func testZK(t *testing.T, addr string) *zkClient {
	t.Helper()
	c, err := dialZK(context.Background(), []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// zkInstances returns the instance addresses of every service under root,
// by service znode name, checking each node as the layout's consumer would
// read it.
func zkInstances(t *testing.T, c *zkClient, layout, root string) map[string][]string {
	t.Helper()
	names, _, err := c.Children(root)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, name := range names {
		dir := root + "/" + name
		if layout == ZKLayoutDubbo {
			dir += "/providers"
		}
		kids, _, err := c.Children(dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, k := range kids {
			data, _, err := c.Get(dir + "/" + k)
			if err != nil {
				t.Fatal(err)
			}
			var addr string
			if layout == ZKLayoutDubbo {
				addr = checkProvider(t, name, k, data)
			} else {
				addr = checkCurator(t, name, k, data)
			}
			out[name] = append(out[name], addr)
		}
		slices.Sort(out[name])
	}
	return out
}

// checkProvider checks a Dubbo provider node of iface and returns its IP.
func checkProvider(t *testing.T, iface, name string, data []byte) string {
	t.Helper()
	raw, err := url.QueryUnescape(name)
	if err != nil {
		t.Fatalf("provider %q of %s is not URL-encoded: %v", name, iface, err)
	}
	if url.QueryEscape(raw) != name {
		t.Errorf("provider %q of %s is not encoded as url.QueryEscape encodes", name, iface)
	}
	if string(data) != raw {
		t.Errorf("provider node %s of %s holds %q, want its URL", raw, iface, data)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("provider %q of %s: %v", raw, iface, err)
	}
	q := u.Query()
	if u.Scheme != "dubbo" || u.Port() != "20880" || net.ParseIP(u.Hostname()) == nil || u.Path != "/"+iface ||
		q.Get("side") != "provider" || q.Get("interface") != iface || q.Get("version") != "1.0.0" || q.Get("application") == "" {
		t.Errorf("provider URL %q of %s: want dubbo://<ip>:20880/%s?...interface=%s&side=provider&version=1.0.0 with an application", raw, iface, iface, iface)
	}
	return u.Hostname()
}

// checkCurator checks a Curator instance node id of service name and
// returns its address.
func checkCurator(t *testing.T, name, id string, data []byte) string {
	t.Helper()
	var doc struct {
		Name, ID, Address   string
		Port                int
		SSLPort             *int
		ServiceType         string
		RegistrationTimeUTC int64
		Payload             struct {
			Class    string            `json:"@class"`
			Metadata map[string]string `json:"metadata"`
		}
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("instance %s/%s is not JSON: %v: %s", name, id, err, data)
	}
	if doc.Name != name || doc.ID != id || net.ParseIP(doc.Address) == nil || doc.Port != 8080 || doc.SSLPort != nil ||
		doc.ServiceType != "DYNAMIC" || doc.RegistrationTimeUTC == 0 ||
		doc.Payload.Class != "org.springframework.cloud.zookeeper.discovery.ZookeeperInstance" || doc.Payload.Metadata["instance_status"] != "UP" {
		t.Errorf("instance %s/%s is not a Curator ServiceInstance of %s on port 8080: %s", name, id, name, data)
	}
	return doc.Address
}

// TestZKGenerate writes a registry in each layout, checks every service and
// instance, then deletes some and runs again: the second run completes what
// is missing and leaves the rest.
func TestZKGenerate(t *testing.T) {
	srv := zktest.Start(t, zktest.Options{})
	c := testZK(t, srv.Addr())
	// 150 x 3 takes two Multi transactions in the Dubbo layout, run at once.
	const services, instances = 150, 3
	for _, tc := range []struct {
		layout, root, deleteOne, deleteService string
		dirs                                   int // znodes per service besides its instances
	}{
		{ZKLayoutDubbo, "/dubbo", "/dubbo/org.galleon.load.Service00007/providers", "/dubbo/org.galleon.load.Service00012", 3},
		{ZKLayoutCurator, "/services", "/services/svc-00007", "/services/svc-00012", 1},
	} {
		t.Run(tc.layout, func(t *testing.T) {
			cfg := ZKGenerateConfig{Servers: []string{srv.Addr()}, Layout: tc.layout, Services: services, Instances: instances, Concurrency: 4}
			st, err := ZKGenerate(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			total := (services + 1) * (tc.dirs + instances)
			if st.Created != total || st.Existing != 0 || st.Root != tc.root {
				t.Fatalf("first run: %+v, want %d znodes created under %s", st, total, tc.root)
			}
			got := zkInstances(t, c, tc.layout, tc.root)
			if len(got) != services+1 {
				t.Fatalf("%d services under %s, want %d", len(got), tc.root, services+1)
			}
			for i := range services {
				name := fmt.Sprintf("svc-%05d", i)
				if tc.layout == ZKLayoutDubbo {
					name = dubboInterface(i)
				}
				want := []string{filegen.InstanceAddr(i, 0), filegen.InstanceAddr(i, 1), filegen.InstanceAddr(i, 2)}
				slices.Sort(want)
				if !slices.Equal(got[name], want) {
					t.Errorf("%s has instances at %v, want %v", name, got[name], want)
				}
			}
			target := TargetService
			if tc.layout == ZKLayoutDubbo {
				target = TargetInterface
			}
			if want := []string{targetAddr(0), targetAddr(1), targetAddr(2)}; !slices.Equal(got[target], want) {
				t.Errorf("the target %s has instances at %v, want %v", target, got[target], want)
			}

			// Take one instance and one whole service away, then run again.
			kids, _, err := c.Children(tc.deleteOne)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Delete(tc.deleteOne+"/"+kids[0], -1); err != nil {
				t.Fatal(err)
			}
			deleteTree(t, c, tc.deleteService)
			st, err = ZKGenerate(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if again := 1 + tc.dirs + instances; st.Created != again || st.Existing != total-again {
				t.Fatalf("second run: %+v, want %d created and %d there already", st, again, total-again)
			}
			if after := zkInstances(t, c, tc.layout, tc.root); fmt.Sprint(after) != fmt.Sprint(got) {
				t.Fatalf("after the second run:\n%v\nwant:\n%v", after, got)
			}
		})
	}
}

func deleteTree(t *testing.T, c *zkClient, p string) {
	t.Helper()
	kids, _, err := c.Children(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		deleteTree(t, c, p+"/"+k)
	}
	if err := c.Delete(p, -1); err != nil {
		t.Fatal(err)
	}
}

// TestZKChanger makes changes to the target in each layout: after each, the
// target has the same number of instances, one of them moved to the address
// the change returned; a second changer (a second run) moves the same one
// on.
func TestZKChanger(t *testing.T) {
	srv := zktest.Start(t, zktest.Options{})
	c := testZK(t, srv.Addr())
	ctx := context.Background()
	const instances = 4
	for _, layout := range []string{ZKLayoutDubbo, ZKLayoutCurator} {
		t.Run(layout, func(t *testing.T) {
			root, _ := zkRoot(layout, "")
			if _, err := ZKGenerate(ctx, ZKGenerateConfig{Servers: []string{srv.Addr()}, Layout: layout, Services: 5, Instances: instances}); err != nil {
				t.Fatal(err)
			}
			target := TargetService
			if layout == ZKLayoutDubbo {
				target = TargetInterface
			}
			before := zkInstances(t, c, layout, root)
			// The first by node name moves: for both layouts here, the one at
			// targetAddr(0) (Curator ids are hashes: find it).
			check := func(moved string, changes int) {
				t.Helper()
				after := zkInstances(t, c, layout, root)
				want := slices.Clone(before[target])
				want[slices.Index(want, moved)] = filegen.MoverAddr(changes)
				slices.Sort(want)
				if !slices.Equal(after[target], want) {
					t.Fatalf("after %d changes the target has instances at %v, want %v", changes, after[target], want)
				}
				delete(after, target)
				for name, addrs := range after {
					if !slices.Equal(addrs, before[name]) {
						t.Fatalf("service %s changed: %v, was %v", name, addrs, before[name])
					}
				}
			}
			ch, err := newZKChanger(ctx, []string{srv.Addr()}, layout, "")
			if err != nil {
				t.Fatal(err)
			}
			first, err := ch.read(ch.mover)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 5; i++ {
				sent, addr, err := ch.Change(ctx, i)
				if err != nil {
					t.Fatal(err)
				}
				if addr != filegen.MoverAddr(i) || sent.IsZero() || time.Since(sent) > time.Minute {
					t.Fatalf("change %d returned %s at %v, want %s now", i, addr, sent, filegen.MoverAddr(i))
				}
				check(first, i)
			}
			ch.Close()

			ch, err = newZKChanger(ctx, []string{srv.Addr()}, layout, "")
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			if _, addr, err := ch.Change(ctx, 1); err != nil || addr != filegen.MoverAddr(6) {
				t.Fatalf("a second run's first change moved to %s (%v), want %s: the moved instance moves on", addr, err, filegen.MoverAddr(6))
			}
			check(first, 6)
		})
	}
	// No target: the error says how to write one.
	if _, err := newZKChanger(ctx, []string{srv.Addr()}, ZKLayoutDubbo, "/elsewhere"); err == nil || !strings.Contains(err.Error(), "galleon-load zk-generate --layout dubbo --root /elsewhere") {
		t.Fatalf("a changer without a target: %v, want an error saying to run zk-generate", err)
	}
}

// TestScrapeSums sums every series of a metric, whatever its labels, but the ZooKeeper
// adapter's liveness probes, which no change causes.
func TestScrapeSums(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `# HELP galleon_zookeeper_requests_total Requests.
# TYPE galleon_zookeeper_requests_total counter
galleon_zookeeper_requests_total{op="children"} 12
galleon_zookeeper_requests_total{op="probe",result="ok"} 100
galleon_zookeeper_requests_total{op="get",note="a } and \" inside"} 30 1700000000000
galleon_zookeeper_requests_total{op="exists"} 1.5e1
process_resident_memory_bytes 2.5e+07
other{x="1"} NaN
`)
	}))
	defer srv.Close()
	sums, err := scrapeSums(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := sums[zkRequestsMetric]; got != 57 {
		t.Errorf("%s sums to %v, want 57", zkRequestsMetric, got)
	}
	if got := sums["process_resident_memory_bytes"]; got != 25e6 {
		t.Errorf("process_resident_memory_bytes is %v, want 25e6", got)
	}
	if _, ok := sums["galleon_other_total"]; ok {
		t.Error("a metric that is not there has a sum")
	}
}
