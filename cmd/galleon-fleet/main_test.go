package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/cmd/internal/builtin"
	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/testing/daemontest"
	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
	"github.com/galleon-mesh/galleon/internal/xdsclient"
)

const seTypeURL = "networking.istio.io/v1/ServiceEntry"

func spec() daemon.FleetSpec {
	return daemon.FleetSpec{Name: "galleon-fleet", Summary: "test", Kinds: builtin.All()}
}

// writeFile replaces path's content in one step, as a ConfigMap volume and an editor's save do.
func writeFile(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// service is a galleon-file service of one HTTP port with instances at addrs.
func service(name, ns, host string, port int, addrs ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- name: %s\n  namespace: %s\n  hosts: [%s]\n  ports: [{number: %d, protocol: HTTP}]\n  instances:\n", name, ns, host, port)
	for i, a := range addrs {
		fmt.Fprintf(&b, "  - {id: i%d, address: %s}\n", i, a)
	}
	if len(addrs) == 0 {
		b.WriteString("  []\n")
	}
	return b.String()
}

// fleet is a galleon-fleet run by a test.
type fleet struct {
	listen, http, list string
	log                *syncbuf.Buffer
}

// startFleet runs galleon-fleet with the list file list until the test ends.
func startFleet(t *testing.T, list string, extra ...string) *fleet {
	t.Helper()
	f := &fleet{listen: daemontest.FreeAddr(t), http: daemontest.FreeAddr(t), list: list, log: &syncbuf.Buffer{}}
	args := append([]string{"--registries", list, "--listen", f.listen, "--http", f.http, "--debounce-quiet", "1ms",
		"--registries-check-interval", "50ms", "--removal-hold", "0"}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() { exited <- daemon.RunFleet(ctx, spec(), args, f.log) }()
	t.Cleanup(func() {
		cancel()
		if code := <-exited; code != 0 {
			t.Errorf("galleon-fleet exited with %d:\n%s", code, f.log.String())
		}
	})
	return f
}

// sotw is the fleet's first SotW response of ServiceEntries to a new stream: what it serves.
func (f *fleet) sotw(t *testing.T) *xdsclient.Response { return sotwAt(t, f.listen) }

// sotwAt is the first SotW response of ServiceEntries to a new stream to addr.
func sotwAt(t *testing.T, addr string) *xdsclient.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := xdsclient.FirstSotW(ctx, addr, "fleet-test", seTypeURL)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// served returns the ServiceEntries the fleet serves over xDS, by host, failing the test when a
// host is served twice.
func (f *fleet) served(t *testing.T) map[string]*networking.ServiceEntry {
	t.Helper()
	resp := f.sotw(t)
	out := map[string]*networking.ServiceEntry{}
	for _, r := range resp.Resources {
		spec, err := r.Spec()
		if err != nil {
			t.Fatal(err)
		}
		se := spec.(*networking.ServiceEntry)
		for _, h := range se.Hosts {
			if _, dup := out[h]; dup {
				t.Fatalf("host %s served by two ServiceEntries", h)
			}
			out[h] = se
		}
	}
	return out
}

func endpoints(se *networking.ServiceEntry) []string {
	var out []string
	for _, e := range se.GetEndpoints() {
		out = append(out, e.Address)
	}
	slices.Sort(out)
	return out
}

// await polls what the fleet serves until ok says it is what the test waits for.
func (f *fleet) await(t *testing.T, what string, ok func(map[string]*networking.ServiceEntry) bool) map[string]*networking.ServiceEntry {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if f.ready() {
			got := f.served(t)
			if ok(got) {
				return got
			}
			if time.Now().After(deadline) {
				var hosts []string
				for h, se := range got {
					hosts = append(hosts, fmt.Sprintf("%s %v", h, endpoints(se)))
				}
				slices.Sort(hosts)
				t.Fatalf("waited 15s for %s; served: %s\nlog:\n%s", what, strings.Join(hosts, ", "), f.log.String())
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("not ready after 15s, waiting for %s\nlog:\n%s", what, f.log.String())
		}
		time.Sleep(30 * time.Millisecond)
	}
}

func (f *fleet) ready() bool {
	resp, err := http.Get("http://" + f.http + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// status is the part of /debug/status the tests read.
type status struct {
	ListError  string `json:"listError"`
	Registries []struct {
		Name     string     `json:"name"`
		Services int        `json:"services"`
		RemoveAt *time.Time `json:"removeAt"`
	} `json:"registries"`
	Collisions []struct {
		Host    string   `json:"host"`
		Outcome string   `json:"outcome"`
		Served  []string `json:"served"`
	} `json:"collisions"`
}

func (f *fleet) status(t *testing.T) status {
	t.Helper()
	resp, err := http.Get("http://" + f.http + "/debug/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (f *fleet) metric(t *testing.T, line string) bool {
	t.Helper()
	resp, err := http.Get("http://" + f.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return bytes.Contains(body, []byte("\n"+line+"\n"))
}

// TestFleetMigration runs the migration the docs walk through, with two real galleon-file
// registries standing in for Eureka and Consul: one host in both, merged, then one preferred,
// then the old registry removed from the live list; a third registry added; a bad edit kept
// out.
func TestFleetMigration(t *testing.T) {
	dir := t.TempDir()
	old, current, third := filepath.Join(dir, "old"), filepath.Join(dir, "current"), filepath.Join(dir, "third")
	for _, d := range []string{old, current, third} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(old, "s.yaml"), "services:\n"+service("orders", "legacy", "orders.mesh", 80, "10.0.0.1", "10.0.0.2")+
		service("billing", "legacy", "billing.mesh", 80, "10.0.0.7"))
	writeFile(t, filepath.Join(current, "s.yaml"), "services:\n"+service("orders", "shop", "orders.mesh", 80, "10.0.1.1"))
	writeFile(t, filepath.Join(third, "s.yaml"), "services:\n"+service("stock", "dubbo", "stock.mesh", 20880, "10.0.2.1"))
	entries := func(names ...string) string {
		var b strings.Builder
		b.WriteString("registries:\n")
		for _, n := range names {
			fmt.Fprintf(&b, "- name: %s\n  kind: file\n  settings: {file-dir: %s, file-scan-quiet: 1ms, file-removal-delay: 0s}\n", n, filepath.Join(dir, n))
		}
		return b.String()
	}
	list := filepath.Join(dir, "registries.yaml")
	writeFile(t, list, entries("old", "current")+"hosts:\n- {host: orders.mesh, merge: true}\n")
	f := startFleet(t, list, "--registry-removal-delay", "1s")

	// Merge: one ServiceEntry with both registries' endpoints.
	f.await(t, "orders.mesh merged from old and current", func(s map[string]*networking.ServiceEntry) bool {
		return slices.Equal(endpoints(s["orders.mesh"]), []string{"10.0.0.1", "10.0.0.2", "10.0.1.1"}) && s["billing.mesh"] != nil
	})
	if st := f.status(t); len(st.Collisions) != 1 || st.Collisions[0].Outcome != "merged" || !slices.Equal(st.Collisions[0].Served, []string{"old", "current"}) {
		t.Fatalf("collisions %+v, want orders.mesh merged from old and current", st.Collisions)
	}
	if !f.metric(t, `galleon_fleet_host_collisions{outcome="merged"} 1`) {
		t.Errorf("galleon_fleet_host_collisions{outcome=\"merged\"} is not 1")
	}

	// One registry's instance leaves: the host keeps the other's.
	writeFile(t, filepath.Join(old, "s.yaml"), "services:\n"+service("orders", "legacy", "orders.mesh", 80, "10.0.0.1")+
		service("billing", "legacy", "billing.mesh", 80, "10.0.0.7"))
	f.await(t, "old's 10.0.0.2 gone from orders.mesh", func(s map[string]*networking.ServiceEntry) bool {
		return slices.Equal(endpoints(s["orders.mesh"]), []string{"10.0.0.1", "10.0.1.1"})
	})

	// A malformed edit keeps the running list, and says why.
	writeFile(t, list, entries("old", "current")+"hosts:\n- {host: orders.mesh, prefer: [nacos]}\n")
	deadline := time.Now().Add(10 * time.Second)
	for f.status(t).ListError == "" {
		if time.Now().After(deadline) {
			t.Fatalf("a list naming an unknown registry was not refused:\n%s", f.log.String())
		}
		time.Sleep(30 * time.Millisecond)
	}
	if st := f.status(t); !strings.Contains(st.ListError, `registry "nacos", which the list does not have`) {
		t.Errorf("listError %q does not say what is wrong", st.ListError)
	}
	if !f.metric(t, "galleon_fleet_list_refused 1") || !strings.Contains(f.log.String(), "registry list edit refused") {
		t.Errorf("the refused edit is not in the metric and the log")
	}
	if got := endpoints(f.served(t)["orders.mesh"]); !slices.Equal(got, []string{"10.0.0.1", "10.0.1.1"}) {
		t.Fatalf("after a refused edit orders.mesh serves %v, want the merge kept", got)
	}

	// prefer current, switched live, and a third registry added.
	writeFile(t, list, entries("old", "current", "third")+"hosts:\n- {host: orders.mesh, prefer: [current]}\n")
	f.await(t, "orders.mesh from current alone and third's stock.mesh", func(s map[string]*networking.ServiceEntry) bool {
		return slices.Equal(endpoints(s["orders.mesh"]), []string{"10.0.1.1"}) && s["stock.mesh"] != nil
	})
	if f.status(t).ListError != "" || !f.metric(t, "galleon_fleet_list_refused 0") {
		t.Errorf("a good edit after a refused one leaves the refusal standing")
	}

	// The old registry leaves the list: its services stay for the removal delay, then go.
	writeFile(t, list, entries("current", "third")+"hosts:\n- {host: orders.mesh, prefer: [current]}\n")
	removedAt := time.Now()
	deadline = time.Now().Add(10 * time.Second)
	for {
		st := f.status(t)
		if len(st.Registries) == 3 && st.Registries[2].Name == "old" && st.Registries[2].RemoveAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old not being removed: %+v", st.Registries)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := f.served(t); s["billing.mesh"] == nil {
		t.Fatalf("old's billing.mesh gone before the removal delay")
	}
	for !f.metric(t, `galleon_fleet_registries{state="removing"} 1`) {
		if time.Since(removedAt) > 900*time.Millisecond {
			t.Fatalf("during old's removal delay galleon_fleet_registries{state=\"removing\"} is not 1")
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.await(t, "old's billing.mesh gone after the removal delay", func(s map[string]*networking.ServiceEntry) bool {
		return s["billing.mesh"] == nil && s["orders.mesh"] != nil && s["stock.mesh"] != nil
	})
	if waited := time.Since(removedAt); waited < time.Second {
		t.Errorf("old's services left %v after the edit, before the 1s removal delay", waited)
	}
	if st := f.status(t); len(st.Registries) != 2 || len(st.Collisions) != 0 {
		t.Errorf("after old left: registries %+v, collisions %+v; want current and third, none", st.Registries, st.Collisions)
	}
	deadline = time.Now().Add(5 * time.Second)
	for !f.metric(t, `galleon_fleet_registries{state="running"} 2`) || !f.metric(t, `galleon_fleet_registries{state="removing"} 0`) {
		if time.Now().After(deadline) {
			t.Fatalf("after old left galleon_fleet_registries is not running 2, removing 0")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFleetUnplannedCollisionIsReported: with no rule, the registry listed first is served,
// and the collision is in the log, the metric and /debug/status; reject serves neither.
func TestFleetUnplannedCollisionIsReported(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "a", "s.yaml"), "services:\n"+service("orders", "a", "orders.mesh", 80, "10.0.0.1"))
	writeFile(t, filepath.Join(dir, "b", "s.yaml"), "services:\n"+service("orders", "b", "orders.mesh", 80, "10.0.0.2"))
	entries := fmt.Sprintf("registries:\n- {name: b, kind: file, settings: {file-dir: %s}}\n- {name: a, kind: file, settings: {file-dir: %s}}\n",
		filepath.Join(dir, "b"), filepath.Join(dir, "a"))
	list := filepath.Join(dir, "registries.yaml")
	writeFile(t, list, entries)
	f := startFleet(t, list)
	f.await(t, "orders.mesh from b, listed first", func(s map[string]*networking.ServiceEntry) bool {
		return slices.Equal(endpoints(s["orders.mesh"]), []string{"10.0.0.2"})
	})
	st := f.status(t)
	if len(st.Collisions) != 1 || st.Collisions[0].Outcome != "unplanned" || !slices.Equal(st.Collisions[0].Served, []string{"b"}) {
		t.Fatalf("collisions %+v, want orders.mesh unplanned, served from b", st.Collisions)
	}
	if !f.metric(t, `galleon_fleet_host_collisions{outcome="unplanned"} 1`) || !strings.Contains(f.log.String(), "host collision no rule names") {
		t.Errorf("the unplanned collision is not in the metric and the log:\n%s", f.log.String())
	}
	writeFile(t, list, entries+"hosts:\n- {host: '*.mesh', reject: true}\n")
	f.await(t, "orders.mesh rejected", func(s map[string]*networking.ServiceEntry) bool { return s["orders.mesh"] == nil })
	if !f.metric(t, `galleon_fleet_host_collisions{outcome="rejected"} 1`) {
		t.Errorf("the rejected collision is not in the metric")
	}
}

// TestFleetBadListAtStart: a list that cannot run stops the binary at start with what to fix.
func TestFleetBadListAtStart(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ list, want string }{
		{"registries: [{name: a, kind: file, settings: {file-dri: /x}}]", `registry a (file): settings: unknown key "file-dri"; the keys are the flags of galleon-file`},
		{"registries: [{name: a, kind: file, settings: {file-removal-delay: soon}}]", `registry a (file): settings: file-removal-delay: invalid argument "soon"`},
		{"registries: [{name: a, kind: file}]", "registry a (file): file registry: Dir is empty: set it (--file-dir)"},
		{"registries: [{name: a, kind: etcd}]", `kind "etcd": want one of consul, eureka, file, nacos, zookeeper`},
	} {
		list := filepath.Join(dir, "registries.yaml")
		writeFile(t, list, tc.list)
		var out bytes.Buffer
		code := daemon.RunFleet(context.Background(), spec(), []string{"--registries", list, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, &out)
		if code != 2 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%s: exit %d, output %q; want 2 and %q", tc.list, code, out.String(), tc.want)
		}
	}
	huge := filepath.Join(dir, "huge.yaml")
	writeFile(t, huge, "registries: []\n# "+strings.Repeat("x", 1<<20)+"\n")
	var big bytes.Buffer
	if code := daemon.RunFleet(context.Background(), spec(), []string{"--registries", huge, "--check"}, &big); code != 2 || !strings.Contains(big.String(), "is larger than 1048576 bytes") {
		t.Errorf("a list over 1 MiB: exit %d, output %q", code, big.String())
	}
	var out bytes.Buffer
	if code := daemon.RunFleet(context.Background(), spec(), nil, &out); code != 2 || !strings.Contains(out.String(), "--registries: required") {
		t.Errorf("no --registries: exit %d, output %q", code, out.String())
	}
}

// TestDocumentedListsAreGood: the example list and every list in the guide are checked as
// `galleon-fleet --check` checks them.
func TestDocumentedListsAreGood(t *testing.T) {
	root := filepath.Join("..", "..")
	lists := []string{filepath.Join(root, "examples", "fleet", "registries.yaml")}
	guide, err := os.ReadFile(filepath.Join(root, "docs", "running-several-registries.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	blocks := 0
	for _, block := range strings.Split(string(guide), "```yaml\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		body = unindent(body)
		if !strings.HasPrefix(body, "registries:") {
			continue
		}
		blocks++
		path := filepath.Join(dir, fmt.Sprintf("guide-%d.yaml", blocks))
		writeFile(t, path, body)
		lists = append(lists, path)
	}
	if blocks < 3 {
		t.Fatalf("%d registry lists found in the guide, want the 3 it shows", blocks)
	}
	for _, list := range lists {
		var out bytes.Buffer
		if code := daemon.RunFleet(context.Background(), spec(), []string{"--registries", list, "--check"}, &out); code != 0 || !strings.Contains(out.String(), "is good") {
			t.Errorf("%s: exit %d: %s", list, code, out.String())
		}
	}
}

// unindent removes the indentation of a code block nested in a list item.
func unindent(s string) string {
	lines := strings.Split(s, "\n")
	indent := len(lines[0]) - len(strings.TrimLeft(lines[0], " "))
	for i, l := range lines {
		if len(l) >= indent {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

// TestFleetRemovedRegistryKeepsItsHostsUntilItGoes: a registry removed from the list keeps its
// place in the order until its removal delay has passed, so a host it shares stays served from
// it until then, not switched at the edit.
func TestFleetRemovedRegistryKeepsItsHostsUntilItGoes(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, n, "s.yaml"), "services:\n"+service("orders", n, "orders.mesh", 80, map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"}[n]))
	}
	entry := func(n string) string {
		return fmt.Sprintf("- {name: %s, kind: file, settings: {file-dir: %s}}\n", n, filepath.Join(dir, n))
	}
	list := filepath.Join(dir, "registries.yaml")
	writeFile(t, list, "registries:\n"+entry("a")+entry("b"))
	f := startFleet(t, list, "--registry-removal-delay", "2s")
	f.await(t, "orders.mesh from a, listed first", func(s map[string]*networking.ServiceEntry) bool {
		return slices.Equal(endpoints(s["orders.mesh"]), []string{"10.0.0.1"})
	})
	writeFile(t, list, "registries:\n"+entry("b"))
	edited := time.Now()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := f.status(t)
		if len(st.Registries) == 2 && st.Registries[1].Name == "a" && st.Registries[1].RemoveAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a not being removed: %+v", st.Registries)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := endpoints(f.served(t)["orders.mesh"]); !slices.Equal(got, []string{"10.0.0.1"}) || time.Since(edited) >= 2*time.Second {
		t.Fatalf("during a's removal delay orders.mesh serves %v (%v after the edit), want a's [10.0.0.1]", got, time.Since(edited))
	}
	f.await(t, "orders.mesh from b once a is gone", func(s map[string]*networking.ServiceEntry) bool {
		return slices.Equal(endpoints(s["orders.mesh"]), []string{"10.0.0.2"})
	})
	if waited := time.Since(edited); waited < 2*time.Second {
		t.Errorf("orders.mesh switched to b %v after the edit, before a's 2s removal delay", waited)
	}
}

// TestFleetReplicasServeTheSame: two replicas of a fleet with one list serve byte-identical
// snapshots, collisions and all (merged, unplanned, a further host, a name two registries
// share), whatever order their registries answered in, so that istiod switching replicas
// pushes nothing.
func TestFleetReplicasServeTheSame(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.Mkdir(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	furtherHost := "- name: pay\n  namespace: shop\n  hosts: [pay.mesh, orders.dc1.mesh]\n  ports: [{number: 80, protocol: HTTP}]\n  instances: [{id: p1, address: 10.0.9.1}]\n"
	writeFile(t, filepath.Join(dir, "a", "s.yaml"), "services:\n"+service("orders", "shop", "orders.mesh", 80, "10.0.0.1")+
		service("billing", "shop", "billing.mesh", 80, "10.0.0.3")+furtherHost)
	writeFile(t, filepath.Join(dir, "b", "s.yaml"), "services:\n"+service("orders", "legacy", "orders.mesh", 80, "10.0.1.1", "10.0.1.2")+
		service("billing", "legacy", "billing.mesh", 80, "10.0.1.3")+service("dc1", "legacy", "orders.dc1.mesh", 80, "10.0.1.9"))
	writeFile(t, filepath.Join(dir, "c", "s.yaml"), "services:\n"+service("orders", "shop", "orders.other.mesh", 80, "10.0.2.1"))
	var list strings.Builder
	list.WriteString("registries:\n")
	for _, n := range []string{"a", "b", "c"} {
		fmt.Fprintf(&list, "- {name: %s, kind: file, settings: {file-dir: %s}}\n", n, filepath.Join(dir, n))
	}
	list.WriteString("hosts:\n- {host: orders.mesh, merge: true}\n")
	path := filepath.Join(dir, "registries.yaml")
	writeFile(t, path, list.String())
	one, two := startFleet(t, path), startFleet(t, path)
	want := func(s map[string]*networking.ServiceEntry) bool {
		return len(endpoints(s["orders.mesh"])) == 3 && s["orders.other.mesh"] != nil && s["orders.dc1.mesh"] != nil
	}
	one.await(t, "replica one serving", want)
	two.await(t, "replica two serving", want)
	a, b := one.raw(t), two.raw(t)
	if a.version != b.version || len(a.resources) != len(b.resources) {
		t.Fatalf("replicas serve version %s (%d resources) and %s (%d)", a.version, len(a.resources), b.version, len(b.resources))
	}
	for name, body := range a.resources {
		if !bytes.Equal(body, b.resources[name]) {
			t.Errorf("resource %s differs between the replicas", name)
		}
	}
	// orders.mesh merged under a's name; billing.mesh a's (unplanned); pay.mesh without
	// orders.dc1.mesh, which is b's dc1's first host; c's orders at another host, named
	// orders-c since a's orders has the name.
	if got, want := slices.Sorted(maps.Keys(a.resources)), []string{"legacy/dc1", "shop/billing", "shop/orders", "shop/orders-c", "shop/pay"}; !slices.Equal(got, want) {
		t.Errorf("served %v, want %v", got, want)
	}
}

// rawState is one SotW response's version and resource bytes by name.
type rawState struct {
	version   string
	resources map[string][]byte
}

func (f *fleet) raw(t *testing.T) rawState { return rawAt(t, f.listen) }

// rawAt is raw for any address of the fleet (a shard's).
func rawAt(t *testing.T, addr string) rawState {
	t.Helper()
	resp := sotwAt(t, addr)
	out := rawState{version: resp.VersionInfo, resources: map[string][]byte{}}
	for _, r := range resp.Resources {
		out.resources[r.Key()] = r.Body.GetValue()
	}
	return out
}

// TestFleetShards runs two replicas of a fleet with two shards each (--shard-listen): the
// shards split the merged view (together, each served ServiceEntry once), and each shard's
// version and bytes are the same in both replicas, so istiod switching replicas pushes nothing.
func TestFleetShards(t *testing.T) {
	dir := t.TempDir()
	var a, b strings.Builder
	a.WriteString("services:\n")
	b.WriteString("services:\n")
	for i := range 20 {
		a.WriteString(service(fmt.Sprintf("svc-%02d", i), "shop", fmt.Sprintf("svc-%02d.mesh", i), 80, fmt.Sprintf("10.0.%d.1", i)))
		b.WriteString(service(fmt.Sprintf("svc-%02d", i), "legacy", fmt.Sprintf("svc-%02d.mesh", i), 80, fmt.Sprintf("10.1.%d.1", i)))
	}
	for _, r := range []struct{ name, body string }{{"a", a.String()}, {"b", b.String()}} {
		if err := os.Mkdir(filepath.Join(dir, r.name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, r.name, "s.yaml"), r.body)
	}
	path := filepath.Join(dir, "registries.yaml")
	writeFile(t, path, fmt.Sprintf("registries:\n- {name: a, kind: file, settings: {file-dir: %s}}\n- {name: b, kind: file, settings: {file-dir: %s}}\nhosts:\n- {host: \"*.mesh\", merge: true}\n",
		filepath.Join(dir, "a"), filepath.Join(dir, "b")))
	shards := [2][]string{{daemontest.FreeAddr(t), daemontest.FreeAddr(t)}, {daemontest.FreeAddr(t), daemontest.FreeAddr(t)}}
	var replicas []*fleet
	for _, s := range shards {
		f := startFleet(t, path, "--shard-listen", strings.Join(s, ","))
		f.await(t, "every host merged", func(s map[string]*networking.ServiceEntry) bool {
			return len(s) == 20 && len(endpoints(s["svc-19.mesh"])) == 2
		})
		replicas = append(replicas, f)
	}
	all := rawAt(t, replicas[0].listen)
	seen := map[string]int{}
	for i := range 2 {
		one, two := rawAt(t, shards[0][i]), rawAt(t, shards[1][i])
		if one.version != two.version || !maps.EqualFunc(one.resources, two.resources, bytes.Equal) {
			t.Errorf("shard %d: the replicas serve version %s (%d resources) and %s (%d)", i, one.version, len(one.resources), two.version, len(two.resources))
		}
		if len(one.resources) == 0 || len(one.resources) == len(all.resources) {
			t.Errorf("shard %d serves %d of %d ServiceEntries: the shards do not split the view", i, len(one.resources), len(all.resources))
		}
		for name, body := range one.resources {
			seen[name]++
			if !bytes.Equal(body, all.resources[name]) {
				t.Errorf("shard %d serves %s unlike --listen", i, name)
			}
		}
	}
	if len(seen) != len(all.resources) {
		t.Errorf("the shards serve %d ServiceEntries together, --listen %d", len(seen), len(all.resources))
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("%s served by %d shards", name, n)
		}
	}
}
