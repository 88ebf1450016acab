package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/galleon-mesh/galleon/test/istiod"
)

// The file registry's YAML (examples/file/README.md): a top-level "services" list.
type fileRegistry struct {
	Services []fileService `json:"services"`
}

type fileService struct {
	Name      string         `json:"name"`
	Namespace string         `json:"namespace,omitempty"`
	Hosts     []string       `json:"hosts,omitempty"`
	Addresses []string       `json:"addresses,omitempty"`
	Ports     []filePort     `json:"ports"`
	Instances []fileInstance `json:"instances,omitempty"`
}

type filePort struct {
	Number   uint32 `json:"number"`
	Protocol string `json:"protocol"`
	Name     string `json:"name,omitempty"`
}

type fileInstance struct {
	ID      string            `json:"id,omitempty"`
	Address string            `json:"address"`
	Labels  map[string]string `json:"labels,omitempty"`
	Health  string            `json:"health,omitempty"`
}

// writeRegistryFile writes reg to dir/name atomically (temp file + rename), the way the file
// registry expects editors and config-management tools to write.
func writeRegistryFile(t *testing.T, dir, name string, reg fileRegistry) {
	t.Helper()
	b, err := yaml.Marshal(reg)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "."+name+".tmp") // dot files are ignored by the registry
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// copyExamples copies examples/file/*.yaml into dir and returns the "namespace/name" of every
// service they define (namespace "default" when a service names none: galleon-file's default).
func copyExamples(t *testing.T, dir string) []string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "examples", "file", "*.yaml"))
	var keys []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var reg struct {
			Services []struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"services"`
		}
		if err := yaml.Unmarshal(b, &reg); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, s := range reg.Services {
			ns := s.Namespace
			if ns == "" {
				ns = "default"
			}
			keys = append(keys, ns+"/"+s.Name)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// serviceEntry is a ServiceEntry as istiod holds it.
type serviceEntry struct {
	istiod.Config
	Spec struct {
		Hosts []string `json:"hosts"`
		Ports []struct {
			Number   uint32 `json:"number"`
			Protocol string `json:"protocol"`
			Name     string `json:"name"`
		} `json:"ports"`
		Resolution string `json:"resolution"`
		Endpoints  []struct {
			Address string            `json:"address"`
			Labels  map[string]string `json:"labels"`
		} `json:"endpoints"`
	}
}

func (se serviceEntry) endpoints() []string {
	var out []string
	for _, e := range se.Spec.Endpoints {
		out = append(out, e.Address)
	}
	sort.Strings(out)
	return out
}

func (se serviceEntry) ports() []uint32 {
	var out []uint32
	for _, p := range se.Spec.Ports {
		out = append(out, p.Number)
	}
	return out
}

func serviceEntries(ctx context.Context, ist *istiod.Istiod) (map[string]serviceEntry, error) {
	cfgs, err := ist.ConfigsOfKind(ctx, "ServiceEntry")
	if err != nil {
		return nil, err
	}
	out := make(map[string]serviceEntry, len(cfgs))
	for k, c := range cfgs {
		se := serviceEntry{Config: c}
		if err := json.Unmarshal(c.Spec, &se.Spec); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = se
	}
	return out, nil
}

// waitForServiceEntries waits until istiod's ServiceEntries (keyed "namespace/name") satisfy ok,
// which returns "" when satisfied and otherwise what is still missing (for the failure message).
func waitForServiceEntries(t *testing.T, ctx context.Context, ist *istiod.Istiod, what string, ok func(map[string]serviceEntry) string) map[string]serviceEntry {
	t.Helper()
	var ses map[string]serviceEntry
	missing := "nothing read yet"
	start := time.Now()
	err := ist.WaitFor(ctx, func() (bool, error) {
		var err error
		if ses, err = serviceEntries(ctx, ist); err != nil {
			return false, err
		}
		missing = ok(ses)
		return missing == "", nil
	})
	if err != nil {
		keys := make([]string, 0, len(ses))
		for k := range ses {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.Fatalf("%s: %v; still wrong: %s; istiod holds ServiceEntries %v", what, err, missing, keys)
	}
	t.Logf("%s: seen in istiod after %v", what, time.Since(start).Round(time.Millisecond))
	return ses
}

// TestFileRegistryToIstiod runs galleon-file on a registry directory and a real istiod reading it
// over MCP, then edits the registry: every change must reach istiod, and an endpoint-only change
// must not cost a full push.
func TestFileRegistryToIstiod(t *testing.T) { istiod.ForEachRelease(t, testFileRegistryToIstiod) }

func testFileRegistryToIstiod(t *testing.T, rel istiod.Release) {
	bin := galleonBinary(t, "galleon-file")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	dir := t.TempDir()
	exampleKeys := copyExamples(t, dir)
	reg := fileRegistry{Services: []fileService{
		{
			Name: "alpha", Namespace: "e2e", Hosts: []string{"alpha.e2e.internal"},
			Ports: []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}},
			Instances: []fileInstance{
				{ID: "alpha-1", Address: "10.1.0.1", Labels: map[string]string{"version": "v1"}},
				{ID: "alpha-2", Address: "10.1.0.2", Labels: map[string]string{"version": "v1"}},
			},
		},
		{
			Name: "beta", Namespace: "e2e", Hosts: []string{"beta.e2e.internal"},
			Ports:     []filePort{{Number: 9090, Protocol: "GRPC", Name: "grpc"}},
			Instances: []fileInstance{{ID: "beta-1", Address: "10.2.0.1"}},
		},
		{
			Name: "gamma", Namespace: "e2e", Hosts: []string{"gamma.e2e.internal"},
			Ports:     []filePort{{Number: 5432, Protocol: "TCP", Name: "tcp"}},
			Instances: []fileInstance{{ID: "gamma-1", Address: "10.3.0.1"}},
		},
	}}
	writeRegistryFile(t, dir, "e2e.yaml", reg)
	want := append(slices.Clone(exampleKeys), "e2e/alpha", "e2e/beta", "e2e/gamma")

	g := startGalleon(t, bin, "--file-dir", dir)
	ist := istiod.Start(t, istiod.Options{Release: rel, ConfigSources: []string{g.Addr}})

	// 1. Every service of every file is a ServiceEntry in istiod.
	ses := waitForServiceEntries(t, ctx, ist, "initial state", func(ses map[string]serviceEntry) string {
		var missing []string
		for _, k := range want {
			if _, ok := ses[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			return "missing " + strings.Join(missing, ", ")
		}
		if len(ses) != len(want) {
			return fmt.Sprintf("%d ServiceEntries, want %d", len(ses), len(want))
		}
		return ""
	})
	if got := ses["e2e/alpha"]; !slices.Equal(got.Spec.Hosts, []string{"alpha.e2e.internal"}) ||
		!slices.Equal(got.endpoints(), []string{"10.1.0.1", "10.1.0.2"}) || !slices.Equal(got.ports(), []uint32{8080}) {
		t.Errorf("e2e/alpha: hosts %v endpoints %v ports %v", got.Spec.Hosts, got.endpoints(), got.ports())
	}
	// The initial sync is followed by one full push; start from a settled istiod.
	counters, err := ist.WaitPushed(ctx, istiod.PushCounters{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after initial sync: %+v", counters)

	// step edits the registry, waits until istiod holds the result and has pushed it, and returns
	// the full pushes it caused.
	step := func(what string, edit func(), ok func(map[string]serviceEntry) string) float64 {
		t.Helper()
		before := counters
		edit()
		writeRegistryFile(t, dir, "e2e.yaml", reg)
		waitForServiceEntries(t, ctx, ist, what, ok)
		after, err := ist.WaitPushed(ctx, before)
		if err != nil {
			t.Fatalf("%s: istiod did not push: %v", what, err)
		}
		counters = after
		t.Logf("%s: full pushes +%v, EDS updates +%v", what, after.FullPushes-before.FullPushes, after.EDSUpdates-before.EDSUpdates)
		return after.FullPushes - before.FullPushes
	}

	// 2. An added service arrives.
	if full := step("add e2e/delta", func() {
		reg.Services = append(reg.Services, fileService{
			Name: "delta", Namespace: "e2e", Hosts: []string{"delta.e2e.internal"},
			Ports:     []filePort{{Number: 7070, Protocol: "HTTP", Name: "http"}},
			Instances: []fileInstance{{ID: "delta-1", Address: "10.4.0.1"}},
		})
	}, func(ses map[string]serviceEntry) string {
		if _, ok := ses["e2e/delta"]; !ok {
			return "e2e/delta missing"
		}
		return ""
	}); full < 1 {
		t.Errorf("adding a service caused %v full pushes, want >= 1", full)
	}

	// 3. A changed service (new port) arrives.
	if full := step("change e2e/beta port 9090 -> 9091", func() {
		reg.Services[1].Ports[0].Number = 9091
	}, func(ses map[string]serviceEntry) string {
		if p := ses["e2e/beta"].ports(); !slices.Equal(p, []uint32{9091}) {
			return fmt.Sprintf("e2e/beta ports %v", p)
		}
		return ""
	}); full < 1 {
		t.Errorf("changing a port caused %v full pushes, want >= 1", full)
	}

	// 4. A removed service disappears.
	if full := step("remove e2e/gamma", func() {
		reg.Services = slices.DeleteFunc(reg.Services, func(s fileService) bool { return s.Name == "gamma" })
	}, func(ses map[string]serviceEntry) string {
		if _, ok := ses["e2e/gamma"]; ok {
			return "e2e/gamma still present"
		}
		return ""
	}); full < 1 {
		t.Errorf("removing a service caused %v full pushes, want >= 1", full)
	}

	// 5. An endpoint-only change (an instance moves, another is added) is an EDS update: no full push.
	edsBefore := counters.EDSUpdates
	if full := step("endpoint-only change of e2e/alpha", func() {
		reg.Services[0].Instances[1].Address = "10.1.0.3"
		reg.Services[0].Instances = append(reg.Services[0].Instances,
			fileInstance{ID: "alpha-3", Address: "10.1.0.4", Labels: map[string]string{"version": "v1"}})
	}, func(ses map[string]serviceEntry) string {
		if ep := ses["e2e/alpha"].endpoints(); !slices.Equal(ep, []string{"10.1.0.1", "10.1.0.3", "10.1.0.4"}) {
			return fmt.Sprintf("e2e/alpha endpoints %v", ep)
		}
		return ""
	}); full != 0 {
		t.Errorf("an endpoint-only change caused %v full pushes, want 0 (the ServiceEntry must stay byte-identical apart from its endpoints, with a stable create_time)", full)
	}
	if counters.EDSUpdates <= edsBefore {
		t.Errorf("an endpoint-only change caused no EDS update (pilot_inbound_updates{type=\"eds\"} stayed %v)", edsBefore)
	}

	// 6. A port change of the same service is a full push.
	if full := step("change e2e/alpha port 8080 -> 8081", func() {
		reg.Services[0].Ports[0].Number = 8081
	}, func(ses map[string]serviceEntry) string {
		if p := ses["e2e/alpha"].ports(); !slices.Equal(p, []uint32{8081}) {
			return fmt.Sprintf("e2e/alpha ports %v", p)
		}
		return ""
	}); full < 1 {
		t.Errorf("changing a port caused %v full pushes, want >= 1", full)
	}
}
