package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/galleon-mesh/galleon/test/internal/proc"
)

// exampleHosts returns the hosts of every service of examples/file, keyed "namespace/name", as
// Galleon serves them: the listed hosts, or "<name>.<namespace>.internal" when none are, sorted.
func exampleHosts(t *testing.T) map[string][]string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "examples", "file", "*.yaml"))
	if len(files) == 0 {
		t.Fatalf("no examples/file/*.yaml in %s", root)
	}
	out := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var reg fileRegistry
		if err := yaml.Unmarshal(b, &reg); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, s := range reg.Services {
			ns := s.Namespace
			if ns == "" {
				ns = "default"
			}
			hosts := slices.Clone(s.Hosts)
			if len(hosts) == 0 {
				hosts = []string{s.Name + "." + ns + ".internal"}
			}
			sort.Strings(hosts)
			out[ns+"/"+s.Name] = hosts
		}
	}
	return out
}

// runGalleonctl runs galleonctl to completion and returns its stdout; it fails the test when the
// command fails or writes to stderr.
func runGalleonctl(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = proc.Env(nil, nil, []string{"GALLEON_"})
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("galleonctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("galleonctl %s wrote to stderr:\n%s", strings.Join(args, " "), stderr.String())
	}
	return stdout.String()
}

// TestGalleonctlAgainstGalleonFile runs galleonctl, built from cmd/galleonctl, against
// galleon-file serving a copy of examples/file: `get -o names` and `get -o yaml` list every
// service with the right hosts, and a `watch --delta` running in the background reports each
// change of the registry directory on one line.
func TestGalleonctlAgainstGalleonFile(t *testing.T) {
	ctl := galleonBinary(t, "galleonctl")
	bin := galleonBinary(t, "galleon-file")
	dir := t.TempDir()
	keys := copyExamples(t, dir)
	hosts := exampleHosts(t)
	sort.Strings(keys)
	if len(keys) != len(hosts) || len(keys) < 2 {
		t.Fatalf("examples/file: %d services by name, %d by hosts", len(keys), len(hosts))
	}
	g := startGalleon(t, bin, "--file-dir", dir)

	// get -o names: one namespace/name per line, sorted.
	names := strings.Fields(runGalleonctl(t, ctl, "get", "--addr", g.Addr, "-o", "names"))
	if !slices.Equal(names, keys) {
		t.Errorf("galleonctl get -o names:\n got %v\nwant %v", names, keys)
	}

	// get -o yaml: a kubectl-style List of ServiceEntries.
	out := runGalleonctl(t, ctl, "get", "--addr", "xds://"+g.Addr, "-o", "yaml")
	var list struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Items      []struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name            string            `json:"name"`
				Namespace       string            `json:"namespace"`
				ResourceVersion string            `json:"resourceVersion"`
				Annotations     map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				Hosts []string `json:"hosts"`
				Ports []struct {
					Number uint32 `json:"number"`
				} `json:"ports"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := yaml.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("galleonctl get -o yaml is not YAML: %v\n%s", err, out)
	}
	if list.Kind != "List" || list.APIVersion != "v1" {
		t.Errorf("galleonctl get -o yaml: apiVersion %q kind %q, want v1 List", list.APIVersion, list.Kind)
	}
	var got []string
	for _, it := range list.Items {
		key := it.Metadata.Namespace + "/" + it.Metadata.Name
		got = append(got, key)
		if it.Kind != "ServiceEntry" || it.APIVersion != "networking.istio.io/v1" {
			t.Errorf("%s: apiVersion %q kind %q, want networking.istio.io/v1 ServiceEntry", key, it.APIVersion, it.Kind)
		}
		if it.Metadata.ResourceVersion == "" {
			t.Errorf("%s: empty resourceVersion", key)
		}
		if it.Metadata.Annotations["galleon.io/registry"] != "file" {
			t.Errorf("%s: annotations %v, want galleon.io/registry: file", key, it.Metadata.Annotations)
		}
		if h := slices.Sorted(slices.Values(it.Spec.Hosts)); !slices.Equal(h, hosts[key]) {
			t.Errorf("%s: hosts %v, want %v", key, h, hosts[key])
		}
		if len(it.Spec.Ports) == 0 {
			t.Errorf("%s: no ports", key)
		}
	}
	sort.Strings(got)
	if !slices.Equal(got, keys) {
		t.Errorf("galleonctl get -o yaml lists\n %v\nwant %v", got, keys)
	}

	// watch --delta in the background: the first response adds everything, then each change of
	// the directory is one line.
	watch, err := proc.Start(t, proc.Config{
		Name: "galleonctl-watch",
		Path: ctl,
		Args: []string{"watch", "--addr", g.Addr, "--delta"},
		Env:  proc.Env(nil, nil, []string{"GALLEON_"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// waitLine waits for a watch line matching re and returns it.
	waitLine := func(what string, re *regexp.Regexp) string {
		t.Helper()
		var line string
		start := time.Now()
		err := watch.WaitFor(ctx, func() (bool, error) {
			line = re.FindString(watch.Log())
			return line != "", nil
		})
		if err != nil {
			t.Fatalf("galleonctl watch --delta: no line for %s (%v); output so far:\n%s", what, err, watch.Log())
		}
		t.Logf("%s after %v: %s", what, time.Since(start).Round(time.Millisecond), line)
		return line
	}
	line := waitLine("the initial state", regexp.MustCompile(`(?m)^\S+ ServiceEntry delta .*resources=\d+ added=\[[^\]]*\].*$`))
	if want := fmt.Sprintf("resources=%d added=[%s]", len(keys), strings.Join(keys, " ")); !strings.Contains(line, want) {
		t.Errorf("first watch line %q does not contain %q", line, want)
	}

	// An instance of bookinfo/details moves: an update of that one service.
	path := filepath.Join(dir, "bookinfo.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const oldAddr, newAddr = "address: 10.10.1.11", "address: 10.10.1.99"
	if bytes.Count(b, []byte(oldAddr)) != 1 {
		t.Fatalf("%s: expected exactly one %q (examples/file/bookinfo.yaml changed?)", path, oldAddr)
	}
	writeFileAtomic(t, path, bytes.Replace(b, []byte(oldAddr), []byte(newAddr), 1))
	waitLine("the moved instance", regexp.MustCompile(fmt.Sprintf(`(?m)^\S+ ServiceEntry delta .*resources=%d updated=\[bookinfo/details\]$`, len(keys))))

	// A service is added in a new file, then removed.
	svc := fileService{
		Name: "watched", Namespace: "e2e", Ports: []filePort{{Number: 8080, Protocol: "HTTP"}},
		Instances: []fileInstance{{Address: "10.9.0.1"}},
	}
	writeRegistryFile(t, dir, "e2e.yaml", fileRegistry{Services: []fileService{svc}})
	waitLine("the added service", regexp.MustCompile(fmt.Sprintf(`(?m)^\S+ ServiceEntry delta .*resources=%d added=\[e2e/watched\]$`, len(keys)+1)))
	writeRegistryFile(t, dir, "e2e.yaml", fileRegistry{Services: []fileService{}})
	waitLine("the removed service", regexp.MustCompile(fmt.Sprintf(`(?m)^\S+ ServiceEntry delta .*resources=%d removed=\[e2e/watched\]$`, len(keys))))

	if exited, err := watch.Exited(); exited {
		t.Errorf("galleonctl watch exited: %v", err)
	}
	if strings.Contains(watch.Log(), "warning:") {
		t.Errorf("galleonctl watch reported warnings:\n%s", watch.Log())
	}
}

// writeFileAtomic replaces path with b (temp file + rename, as editors do).
func writeFileAtomic(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
