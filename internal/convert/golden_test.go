package convert

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/galleon-mesh/galleon/model"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the current output")

// caseFile is the test-only YAML shape of a golden case input: the options
// and the service, with enums spelled as words so cases stay readable.
type caseFile struct {
	Options struct {
		Mode                  string `json:"mode"` // "" or "ServiceEntry", "WorkloadEntry"
		PanicThresholdPercent int    `json:"panicThresholdPercent"`
	} `json:"options"`
	Service serviceYAML `json:"service"`
}

type serviceYAML struct {
	Registry    string            `json:"registry"`
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	Hosts       []string          `json:"hosts"`
	Addresses   []string          `json:"addresses"`
	Ports       []portYAML        `json:"ports"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Location    string            `json:"location"`   // "", "internal", "external"
	Resolution  string            `json:"resolution"` // "", "auto", "static", "dns", "none"
	ExportTo    []string          `json:"exportTo"`
	Instances   []instanceYAML    `json:"instances"`
}

type portYAML struct {
	Number   uint32 `json:"number"`
	Protocol string `json:"protocol"`
	Name     string `json:"name"`
}

type instanceYAML struct {
	ID             string            `json:"id"`
	Address        string            `json:"address"`
	Ports          map[uint32]uint32 `json:"ports"`
	Labels         map[string]string `json:"labels"`
	Locality       string            `json:"locality"`
	Network        string            `json:"network"`
	Weight         uint32            `json:"weight"`
	Health         string            `json:"health"` // "", "healthy", "unhealthy", "draining"
	ServiceAccount string            `json:"serviceAccount"`
}

func (c *caseFile) options() (Options, error) {
	opts := Options{PanicThresholdPercent: c.Options.PanicThresholdPercent}
	switch c.Options.Mode {
	case "", "ServiceEntry":
		opts.Mode = ModeServiceEntry
	case "WorkloadEntry":
		opts.Mode = ModeWorkloadEntry
	default:
		return opts, fmt.Errorf("unknown mode %q", c.Options.Mode)
	}
	return opts, nil
}

func (s *serviceYAML) model() (model.Service, error) {
	out := model.Service{
		Namespace:   s.Namespace,
		Name:        s.Name,
		Hosts:       s.Hosts,
		Addresses:   s.Addresses,
		Labels:      s.Labels,
		Annotations: s.Annotations,
		ExportTo:    s.ExportTo,
	}
	for _, p := range s.Ports {
		out.Ports = append(out.Ports, model.Port{Number: p.Number, Protocol: model.Protocol(p.Protocol), Name: p.Name})
	}
	switch s.Location {
	case "", "internal":
	case "external":
		out.Location = model.MeshExternal
	default:
		return out, fmt.Errorf("unknown location %q", s.Location)
	}
	resolutions := map[string]model.Resolution{
		"": model.ResolutionAuto, "auto": model.ResolutionAuto, "static": model.ResolutionStatic,
		"dns": model.ResolutionDNS, "none": model.ResolutionNone,
	}
	r, ok := resolutions[s.Resolution]
	if !ok {
		return out, fmt.Errorf("unknown resolution %q", s.Resolution)
	}
	out.Resolution = r
	healths := map[string]model.Health{
		"": model.Healthy, "healthy": model.Healthy, "unhealthy": model.Unhealthy, "draining": model.Draining,
	}
	for _, i := range s.Instances {
		h, ok := healths[i.Health]
		if !ok {
			return out, fmt.Errorf("instance %q: unknown health %q", i.ID, i.Health)
		}
		out.Instances = append(out.Instances, model.Instance{
			ID: i.ID, Address: i.Address, Ports: i.Ports, Labels: i.Labels, Locality: i.Locality,
			Network: i.Network, Weight: i.Weight, Health: h, ServiceAccount: i.ServiceAccount,
		})
	}
	return out, nil
}

func loadCase(t *testing.T, path string) (model.Service, Options) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c caseFile
	// Strict, so that a misspelt field fails the case instead of being
	// silently ignored.
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	svc, err := c.Service.model()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	opts, err := c.options()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	opts.Registry = c.Service.Registry
	return svc, opts
}

// renderedResource is how a resource appears in a golden file.
type renderedResource struct {
	Kind        string            `json:"kind"`
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Spec        json.RawMessage   `json:"spec"`
}

// render writes resources as a multi-document YAML stream. protojson's
// output is not byte-stable, but JSONToYAML re-encodes it with sorted keys.
func render(rs []Resource) ([]byte, error) {
	var out bytes.Buffer
	for i, r := range rs {
		spec, err := protojson.Marshal(r.Spec)
		if err != nil {
			return nil, err
		}
		j, err := json.Marshal(renderedResource{
			Kind: r.Kind.String(), Namespace: r.Namespace, Name: r.Name,
			Labels: r.Labels, Annotations: r.Annotations, Spec: spec,
		})
		if err != nil {
			return nil, err
		}
		y, err := yaml.JSONToYAML(j)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(y)
	}
	return out.Bytes(), nil
}

// shuffled returns a copy of svc with every list in a different order and
// every map rebuilt, which must not change the output.
func shuffled(svc model.Service, seed int64) model.Service {
	rng := rand.New(rand.NewSource(seed))
	perm := func(n int, swap func(i, j int)) { rng.Shuffle(n, swap) }
	out := svc
	out.Hosts = append([]string(nil), svc.Hosts...)
	perm(len(out.Hosts), func(i, j int) { out.Hosts[i], out.Hosts[j] = out.Hosts[j], out.Hosts[i] })
	out.Addresses = append([]string(nil), svc.Addresses...)
	perm(len(out.Addresses), func(i, j int) { out.Addresses[i], out.Addresses[j] = out.Addresses[j], out.Addresses[i] })
	out.Ports = append([]model.Port(nil), svc.Ports...)
	perm(len(out.Ports), func(i, j int) { out.Ports[i], out.Ports[j] = out.Ports[j], out.Ports[i] })
	out.Labels = copyMap(svc.Labels)
	out.Instances = nil
	for _, inst := range svc.Instances {
		inst.Labels = copyMap(inst.Labels)
		out.Instances = append(out.Instances, inst)
	}
	perm(len(out.Instances), func(i, j int) { out.Instances[i], out.Instances[j] = out.Instances[j], out.Instances[i] })
	return out
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestGolden converts every testdata/<case>.yaml and compares the result
// with testdata/<case>.golden.yaml; -update rewrites the golden files. Each
// case is also converted with its lists shuffled, which must give the same
// bytes.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cases := 0
	for _, in := range inputs {
		if strings.HasSuffix(in, ".golden.yaml") {
			continue
		}
		cases++
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			svc, opts := loadCase(t, in)
			rs, err := Convert(svc, opts)
			if err != nil {
				t.Fatalf("Convert: %v", err)
			}
			got, err := render(rs)
			if err != nil {
				t.Fatal(err)
			}
			goldenPath := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(goldenPath, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(goldenPath)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/convert -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("output differs from %s (run with -update if the change is intended):\n--- got\n%s\n--- want\n%s", goldenPath, got, want)
			}

			for seed := int64(1); seed <= 5; seed++ {
				rs2, err := Convert(shuffled(svc, seed), opts)
				if err != nil {
					t.Fatalf("Convert(shuffled %d): %v", seed, err)
				}
				again, err := render(rs2)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again, got) {
					t.Errorf("shuffled input %d gives different output:\n%s", seed, again)
				}
			}
		})
	}
	if cases < 10 {
		t.Fatalf("found %d golden cases in testdata, want at least 10", cases)
	}
}
