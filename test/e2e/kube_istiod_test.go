package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/galleon-mesh/galleon/test/istiod"
	"github.com/galleon-mesh/galleon/test/kube"
)

// readmeConfigSources returns the configSources addresses of the README's mesh config (the
// block the deploy section tells operators to copy), so that the test runs what the README says.
func readmeConfigSources(t *testing.T) []string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```yaml\n(configSources:\n.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no ```yaml block starting with configSources: (the mesh config operators copy)")
	}
	var mesh struct {
		ConfigSources []struct {
			Address string `json:"address"`
		} `json:"configSources"`
	}
	if err := yaml.UnmarshalStrict(block[1], &mesh); err != nil {
		t.Fatalf("README.md's mesh config: %v\n%s", err, block[1])
	}
	var out []string
	for _, s := range mesh.ConfigSources {
		out = append(out, s.Address)
	}
	return out
}

// externalServiceEntry is a ServiceEntry of namespace k8s-e2e for one external TLS host, as YAML.
func externalServiceEntry(name, host string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: %s
  namespace: k8s-e2e
spec:
  hosts: [%s]
  location: MESH_EXTERNAL
  resolution: DNS
  ports:
  - {number: 443, name: tls, protocol: TLS}
`, name, host)
}

// TestKubernetesAndGalleonToIstiod runs istiod the way the README deploys it: with its
// Kubernetes registry on a real API server (Istio's CRDs applied from the istio module's own CRD
// file) and the README's mesh config, `k8s://` and Galleon's `xds://` side by side. A ServiceEntry
// created in the API server, a Kubernetes Service and Galleon's ServiceEntries must all be in
// istiod, a change on either side must arrive, and a Galleon endpoint change must stay EDS-only.
func TestKubernetesAndGalleonToIstiod(t *testing.T) {
	istiod.ForEachRelease(t, testKubernetesAndGalleonToIstiod)
}

func testKubernetesAndGalleonToIstiod(t *testing.T, rel istiod.Release) {
	bin := galleonBinary(t, "galleon-file")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	sources := readmeConfigSources(t)
	if len(sources) != 2 || sources[0] != "k8s://" || !strings.HasPrefix(sources[1], "xds://") {
		t.Fatalf("README.md's configSources are %q; this test expects k8s:// then one xds:// address", sources)
	}

	c := kube.Start(t)
	istiod.PrepareCluster(t, c, rel)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ApplyYAML(ctx, []byte(`apiVersion: v1
kind: Namespace
metadata:
  name: k8s-e2e
---
`+externalServiceEntry("payments-api", "payments.example.com")+`---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: k8s-e2e
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
`), "galleon-e2e"); err != nil {
		t.Fatalf("applying the Kubernetes side: %v", err)
	}

	dir := t.TempDir()
	reg := fileRegistry{Services: []fileService{{
		Name: "inventory", Namespace: "vms", Hosts: []string{"inventory.vms.internal"},
		Ports: []filePort{{Number: 8080, Protocol: "HTTP", Name: "http"}},
		Instances: []fileInstance{
			{ID: "inventory-1", Address: "10.9.0.1"},
			{ID: "inventory-2", Address: "10.9.0.2"},
		},
	}}}
	writeRegistryFile(t, dir, "vms.yaml", reg)
	g := startGalleon(t, bin, "--file-dir", dir)

	// The README's sources, with its example address replaced by this test's galleon-file.
	ist := istiod.Start(t, istiod.Options{
		Release:       rel,
		Kubeconfig:    c.Kubeconfig,
		ConfigSources: []string{sources[0], "xds://" + g.Addr},
	})

	waitForServiceEntries(t, ctx, ist, "the API server's and Galleon's ServiceEntries", func(ses map[string]serviceEntry) string {
		var missing []string
		for _, k := range []string{"k8s-e2e/payments-api", "vms/inventory"} {
			if _, ok := ses[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			return "missing " + strings.Join(missing, ", ")
		}
		return ""
	})
	// The Kubernetes registry is on: the Service is one of istiod's services, beside the
	// ServiceEntries' hosts.
	var hosts []string
	if err := ist.WaitFor(ctx, func() (bool, error) {
		svcs, err := ist.Registryz(ctx)
		if err != nil {
			return false, err
		}
		hosts = hosts[:0]
		for _, s := range svcs {
			hosts = append(hosts, s.Hostname)
		}
		for _, h := range []string{"web.k8s-e2e.svc.cluster.local", "payments.example.com", "inventory.vms.internal"} {
			if !slices.Contains(hosts, h) {
				return false, fmt.Errorf("%s not in /debug/registryz", h)
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("istiod's registries: %v; it has %v", err, hosts)
	}

	counters, err := ist.WaitPushed(ctx, istiod.PushCounters{})
	if err != nil {
		t.Fatal(err)
	}

	// A Galleon endpoint change: EDS only, whatever the Kubernetes side holds.
	before := counters
	reg.Services[0].Instances[1].Address = "10.9.0.3"
	writeRegistryFile(t, dir, "vms.yaml", reg)
	waitForServiceEntries(t, ctx, ist, "Galleon endpoint change", func(ses map[string]serviceEntry) string {
		if ep := ses["vms/inventory"].endpoints(); !slices.Equal(ep, []string{"10.9.0.1", "10.9.0.3"}) {
			return fmt.Sprintf("vms/inventory endpoints %v", ep)
		}
		return ""
	})
	after, err := ist.WaitPushed(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	if full := after.FullPushes - before.FullPushes; full != 0 {
		t.Errorf("a Galleon endpoint change caused %v full pushes with k8s:// beside it, want 0", full)
	}
	if after.EDSUpdates <= before.EDSUpdates {
		t.Errorf("a Galleon endpoint change caused no EDS update (%v before, %v after)", before.EDSUpdates, after.EDSUpdates)
	}

	// A ServiceEntry created in the API server while istiod runs arrives too, and Galleon's stay.
	if _, err := client.ApplyYAML(ctx, []byte(externalServiceEntry("ledger-api", "ledger.example.com")), "galleon-e2e"); err != nil {
		t.Fatal(err)
	}
	waitForServiceEntries(t, ctx, ist, "a ServiceEntry created in the API server", func(ses map[string]serviceEntry) string {
		for _, k := range []string{"k8s-e2e/ledger-api", "k8s-e2e/payments-api", "vms/inventory"} {
			if _, ok := ses[k]; !ok {
				return k + " missing"
			}
		}
		return ""
	})
}
