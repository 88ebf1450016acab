package xdsclient_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/galleon-mesh/galleon/internal/xdsclient"
	"github.com/galleon-mesh/galleon/internal/xdsclient/xdsclienttest"
)

const seType = "networking.istio.io/v1/ServiceEntry"

func serviceEntry(hosts ...string) *networking.ServiceEntry {
	return &networking.ServiceEntry{
		Hosts:      hosts,
		Ports:      []*networking.ServicePort{{Number: 9080, Protocol: "HTTP", Name: "http", TargetPort: 9081}},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: networking.ServiceEntry_STATIC,
		ExportTo:   []string{"bookinfo"},
		Endpoints: []*networking.WorkloadEntry{{
			Address: "10.0.0.11", Labels: map[string]string{"version": "v1"}, Locality: "us-east1/us-east1-b", Weight: 2,
		}},
	}
}

func TestUnwrapToObject(t *testing.T) {
	created := time.Date(2026, 4, 1, 12, 30, 45, 123e6, time.FixedZone("CEST", 2*3600))
	a := xdsclienttest.MCPResource(t, "bookinfo/reviews", "sha256:abc", created, map[string]string{"app": "reviews"},
		serviceEntry("reviews.bookinfo.internal"))

	r, err := xdsclient.Unwrap(seType, a)
	if err != nil {
		t.Fatal(err)
	}
	if r.Namespace != "bookinfo" || r.Name != "reviews" || r.Key() != "bookinfo/reviews" || r.Version != "sha256:abc" || !r.CreateTime.Equal(created) {
		t.Errorf("resource = %+v", r)
	}
	obj, err := r.Object()
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	got, err := yaml.JSONToYAML(j)
	if err != nil {
		t.Fatal(err)
	}
	want := `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  creationTimestamp: "2026-04-01T10:30:45Z"
  labels:
    app: reviews
  name: reviews
  namespace: bookinfo
  resourceVersion: sha256:abc
spec:
  endpoints:
  - address: 10.0.0.11
    labels:
      version: v1
    locality: us-east1/us-east1-b
    weight: 2
  exportTo:
  - bookinfo
  hosts:
  - reviews.bookinfo.internal
  location: MESH_INTERNAL
  ports:
  - name: http
    number: 9080
    protocol: HTTP
    targetPort: 9081
  resolution: STATIC
`
	if string(got) != want {
		t.Errorf("object YAML:\n%s\nwant:\n%s", got, want)
	}
}

func TestUnwrapErrors(t *testing.T) {
	se := serviceEntry("a.example")
	body, err := anypb.New(se)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		any  *anypb.Any
		want string
	}{
		// go-control-plane's caches stamp the request type URL instead of
		// the MCP Resource one: istiod drops everything.
		{"collection type URL", &anypb.Any{TypeUrl: seType, Value: xdsclienttest.MCPResource(t, "ns/a", "1", time.Time{}, nil, se).GetValue()}, "istiod ignores it"},
		{"bare body", body, "istiod ignores it"},
		{"name without namespace", xdsclienttest.MCPResource(t, "a", "1", time.Time{}, nil, se), "istiod skips it"},
		{"name with three parts", xdsclienttest.MCPResource(t, "ns/a/b", "1", time.Time{}, nil, se), "istiod skips it"},
		{"garbage", &anypb.Any{TypeUrl: xdsclient.MCPResourceTypeURL, Value: []byte{0xff, 0xff}}, "cannot decode"},
	} {
		if _, err := xdsclient.Unwrap(seType, tc.any); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestGroupVersionKind(t *testing.T) {
	for _, tc := range []struct{ collection, body, apiVersion, kind string }{
		{"networking.istio.io/v1/ServiceEntry", "", "networking.istio.io/v1", "ServiceEntry"},
		{"networking.istio.io/v1alpha3/WorkloadEntry", "", "networking.istio.io/v1alpha3", "WorkloadEntry"},
		{"security.istio.io/v1/AuthorizationPolicy", "", "security.istio.io/v1", "AuthorizationPolicy"},
		{"type.googleapis.com/istio.networking.v1alpha3.ServiceEntry", "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry", "networking.istio.io/v1alpha3", "ServiceEntry"},
		{"odd", "type.googleapis.com/envoy.config.cluster.v3.Cluster", "envoy.config.cluster.v3", "Cluster"},
	} {
		av, k := xdsclient.GroupVersionKind(tc.collection, tc.body)
		if av != tc.apiVersion || k != tc.kind {
			t.Errorf("GroupVersionKind(%q, %q) = %q, %q; want %q, %q", tc.collection, tc.body, av, k, tc.apiVersion, tc.kind)
		}
	}
}

func TestDiffSotW(t *testing.T) {
	res := func(name, version string, hosts ...string) xdsclient.Resource {
		r, err := xdsclient.Unwrap(seType, xdsclienttest.MCPResource(t, name, version, time.Time{}, nil, serviceEntry(hosts...)))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	prev := []xdsclient.Resource{res("ns/keep", "1", "k"), res("ns/change", "1", "c"), res("ns/gone", "1", "g")}
	next := []xdsclient.Resource{res("ns/new", "1", "n"), res("ns/change", "2", "c"), res("ns/keep", "1", "k"), res("ns/new", "1", "dup")}
	d := xdsclient.DiffSotW(prev, next)
	if strings.Join(d.Added, ",") != "ns/new" || strings.Join(d.Updated, ",") != "ns/change" || strings.Join(d.Removed, ",") != "ns/gone" {
		t.Errorf("diff = %+v", d)
	}
	if !xdsclient.DiffSotW(next, next).Empty() {
		t.Error("a state differs from itself")
	}
	if d := xdsclient.DiffSotW(nil, prev); len(d.Added) != 3 || d.Empty() {
		t.Errorf("first response diff = %+v", d)
	}

	// Without versions, the content decides.
	a, b := res("ns/x", "", "one"), res("ns/x", "", "two")
	if d := xdsclient.DiffSotW([]xdsclient.Resource{a}, []xdsclient.Resource{b}); strings.Join(d.Updated, ",") != "ns/x" {
		t.Errorf("unversioned change not seen: %+v", d)
	}
	if d := xdsclient.DiffSotW([]xdsclient.Resource{a}, []xdsclient.Resource{res("ns/x", "", "one")}); !d.Empty() {
		t.Errorf("unversioned identical resource seen as changed: %+v", d)
	}
}
