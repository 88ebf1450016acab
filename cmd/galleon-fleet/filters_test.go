package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/galleon-mesh/galleon/daemon"
	"github.com/galleon-mesh/galleon/internal/testing/daemontest"
	"github.com/galleon-mesh/galleon/internal/testing/syncbuf"
)

// filtered is one registry's filtered counts in /debug/status; nil when the registry has none.
func (f *fleet) filtered(t *testing.T, registry string) *struct{ Services, Instances int } {
	t.Helper()
	resp, err := http.Get("http://" + f.http + "/debug/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Registries []struct {
			Name     string `json:"name"`
			Filtered *struct {
				Services  int `json:"services"`
				Instances int `json:"instances"`
			} `json:"filtered"`
		} `json:"registries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Registries {
		if r.Name == registry && r.Filtered != nil {
			return &struct{ Services, Instances int }{r.Filtered.Services, r.Filtered.Instances}
		}
	}
	return nil
}

// TestFleetFilters: each registry's filters leave out its services and instances (and only
// its own), what they leave out is counted in /debug/status and the metrics under the
// registry's name, and a live edit of an entry's filters takes effect.
func TestFleetFilters(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "a", "s.yaml"), "services:\n"+service("orders", "shop", "orders.mesh", 80, "10.0.0.1", "192.168.0.1")+
		service("vault", "shop", "vault.mesh", 8200, "10.0.0.2"))
	// b has a vault too, and no filter: it stays served.
	writeFile(t, filepath.Join(dir, "b", "s.yaml"), "services:\n"+service("payments", "pay", "payments.mesh", 80, "10.1.0.1", "192.168.0.9")+
		service("vault", "pay", "vault-b.mesh", 8200, "10.1.0.2"))
	entry := func(name, filters string) string {
		return fmt.Sprintf("- name: %s\n  kind: file\n  settings: {file-dir: %s, file-scan-quiet: 1ms, file-removal-delay: 0s}\n%s",
			name, filepath.Join(dir, name), filters)
	}
	list := filepath.Join(dir, "registries.yaml")
	writeFile(t, list, "registries:\n"+
		entry("a", "  filters:\n    exclude-services: [vault]\n    exclude-instance-cidrs: [192.168.0.0/16]\n")+
		entry("b", ""))
	f := startFleet(t, list)

	f.await(t, "a filtered, b whole", func(s map[string]*networking.ServiceEntry) bool {
		return slices.Equal(endpoints(s["orders.mesh"]), []string{"10.0.0.1"}) && s["vault.mesh"] == nil &&
			slices.Equal(endpoints(s["payments.mesh"]), []string{"10.1.0.1", "192.168.0.9"}) && s["vault-b.mesh"] != nil
	})
	if got := f.filtered(t, "a"); got == nil || got.Services != 1 || got.Instances != 1 {
		t.Errorf("a's filtered counts in /debug/status: %+v, want 1 service and 1 instance", got)
	}
	if got := f.filtered(t, "b"); got != nil {
		t.Errorf("b, which has no filters, reports filtered %+v", got)
	}
	for _, line := range []string{`galleon_registry_filtered_services{registry="a"} 1`, `galleon_registry_filtered_instances{registry="a"} 1`,
		`galleon_registry_filtered_services{registry="b"} 0`} {
		if !f.metric(t, line) {
			t.Errorf("metrics lack %s", line)
		}
	}
	if !strings.Contains(f.log.String(), "import filters") || !strings.Contains(f.log.String(), "exclude_services=vault") {
		t.Errorf("no log line says which filters a has:\n%s", f.log.String())
	}

	// A live edit of a's filters: from its next listing, only vault.
	writeFile(t, list, "registries:\n"+entry("a", "  filters: {include-services: [vault]}\n")+entry("b", ""))
	f.await(t, "a's new filters applied", func(s map[string]*networking.ServiceEntry) bool {
		return s["orders.mesh"] == nil && s["vault.mesh"] != nil && s["payments.mesh"] != nil
	})
	deadline := time.Now().Add(10 * time.Second)
	for got := f.filtered(t, "a"); got == nil || got.Services != 1 || got.Instances != 0; got = f.filtered(t, "a") {
		if time.Now().After(deadline) {
			t.Fatalf("a's filtered counts after the edit: %+v, want 1 service (orders) and no instance", got)
		}
		time.Sleep(30 * time.Millisecond)
	}

	// The filters taken out: a is served whole again.
	writeFile(t, list, "registries:\n"+entry("a", "")+entry("b", ""))
	f.await(t, "a whole", func(s map[string]*networking.ServiceEntry) bool {
		return slices.Equal(endpoints(s["orders.mesh"]), []string{"10.0.0.1", "192.168.0.1"}) && s["vault.mesh"] != nil
	})
}

// TestFleetRefusesProcessFilters: a fleet filters per registry; the daemon's filter flags are
// refused with where to put them, and a bad filter in the list is refused at start.
func TestFleetRefusesProcessFilters(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "registries.yaml")
	writeFile(t, list, "registries: [{name: a, kind: file, settings: {file-dir: "+dir+"}}]\n")
	var out bytes.Buffer
	code := daemon.RunFleet(context.Background(), spec(), []string{"--registries", list, "--exclude-services", "vault", "--check"}, &out)
	if code != 2 || !strings.Contains(out.String(), "--exclude-services: a fleet filters per registry") {
		t.Errorf("--exclude-services on a fleet: exit %d, output %q; want 2 and where to put the filters", code, out.String())
	}
	writeFile(t, list, "registries: [{name: a, kind: file, settings: {file-dir: "+dir+"}, filters: {include-instance-cidrs: [10.0.0.0/33]}}]\n")
	out.Reset()
	code = daemon.RunFleet(context.Background(), spec(), []string{"--registries", list, "--check"}, &out)
	if code != 2 || !strings.Contains(out.String(), `registries[0] (a): filters: include-instance-cidrs "10.0.0.0/33": not a CIDR block`) {
		t.Errorf("a bad CIDR in the list: exit %d, output %q", code, out.String())
	}
}

// TestSingleBinaryFilters: the same filters as flags of an adapter's binary (galleon-file here,
// through daemon.Run as its main runs it): a bad value stops it at start naming the flag and
// what to write; good ones leave out what they say, counted in /debug/status and the metrics.
func TestSingleBinaryFilters(t *testing.T) {
	var file daemon.Spec
	for _, s := range spec().Kinds {
		if s.Registry == "file" {
			file = s
		}
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "s.yaml"), "services:\n"+service("orders", "shop", "orders.mesh", 80, "10.0.0.1", "192.168.0.1")+
		service("vault", "shop", "vault.mesh", 8200, "10.0.0.2"))
	var out bytes.Buffer
	code := daemon.Run(context.Background(), file, []string{"--file-dir", dir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--exclude-instance-cidrs", "192.168.0.1/16"}, &out)
	if code != 2 || !strings.Contains(out.String(), `--exclude-instance-cidrs "192.168.0.1/16": has host bits set: write 192.168.0.0/16`) {
		t.Errorf("a bad CIDR: exit %d, output %q", code, out.String())
	}

	f := &fleet{listen: daemontest.FreeAddr(t), http: daemontest.FreeAddr(t), log: &syncbuf.Buffer{}}
	logs := f.log
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- daemon.Run(ctx, file, []string{"--file-dir", dir, "--file-scan-quiet", "1ms", "--listen", f.listen, "--http", f.http,
			"--debounce-quiet", "1ms", "--exclude-services", "vault", "--exclude-instance-cidrs", "192.168.0.0/16"}, logs)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-exited; code != 0 {
			t.Errorf("galleon-file exited with %d:\n%s", code, logs.String())
		}
	})
	f.await(t, "orders without 192.168.0.1, no vault", func(s map[string]*networking.ServiceEntry) bool {
		return slices.Equal(endpoints(s["orders.mesh"]), []string{"10.0.0.1"}) && s["vault.mesh"] == nil
	})
	resp, err := http.Get("http://" + f.http + "/debug/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Filtered *struct {
			Services  int `json:"services"`
			Instances int `json:"instances"`
			Filters   struct {
				ExcludeServices []string `json:"exclude-services"`
			} `json:"filters"`
		} `json:"filtered"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Filtered == nil || st.Filtered.Services != 1 || st.Filtered.Instances != 1 || !slices.Equal(st.Filtered.Filters.ExcludeServices, []string{"vault"}) {
		t.Errorf("/debug/status filtered: %+v, want 1 service, 1 instance, exclude-services [vault]", st.Filtered)
	}
	for _, line := range []string{`galleon_registry_filtered_services 1`, `galleon_registry_filtered_instances 1`} {
		if !f.metric(t, line) {
			t.Errorf("metrics lack %s", line)
		}
	}
}
