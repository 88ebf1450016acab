package istiod

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Config is one entry of /debug/configz. In istio 1.29.2 the endpoint
// (pilot/pkg/xds/debug.go:450 configz) lists every config of every Pilot schema, each converted by
// crd.ConvertConfig (pilot/pkg/config/kube/crd/conversion.go:104) to a Kubernetes-style object:
//
//	{"kind":"ServiceEntry","apiVersion":"networking.istio.io/v1",
//	 "metadata":{"name":"se0","namespace":"default","resourceVersion":"...","creationTimestamp":"...",
//	             "labels":{...},"annotations":{...}},
//	 "spec":{...}}
//
// For configs from an xds:// source, resourceVersion is the MCP Metadata.version the source sent
// (pkg/adsc/adsc.go:572 and :1204; istiod substitutes a timestamp only when it is empty), and
// creationTimestamp is Metadata.create_time (1970-01-01 when unset). apiVersion is the requested
// GVK (networking.istio.io/v1 for ServiceEntry).
type Config struct {
	Kind              string            `json:"kind"`
	APIVersion        string            `json:"apiVersion"`
	Namespace         string            `json:"namespace"`
	Name              string            `json:"name"`
	ResourceVersion   string            `json:"resourceVersion"`
	CreationTimestamp time.Time         `json:"creationTimestamp"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	Spec              json.RawMessage   `json:"spec"`
}

// Key is "Kind/namespace/name".
func (c Config) Key() string { return c.Kind + "/" + c.Namespace + "/" + c.Name }

type configzEntry struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Metadata   struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		ResourceVersion   string            `json:"resourceVersion"`
		CreationTimestamp time.Time         `json:"creationTimestamp"`
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

// ConfigDump returns every config istiod holds (/debug/configz on the monitoring port).
func (i *Istiod) ConfigDump(ctx context.Context) ([]Config, error) {
	body, err := i.Get(ctx, "/debug/configz")
	if err != nil {
		return nil, err
	}
	var entries []configzEntry
	if err := json.Unmarshal(body, &entries); err != nil {
		return nil, fmt.Errorf("parsing /debug/configz: %w", err)
	}
	out := make([]Config, 0, len(entries))
	for _, e := range entries {
		out = append(out, Config{
			Kind:              e.Kind,
			APIVersion:        e.APIVersion,
			Namespace:         e.Metadata.Namespace,
			Name:              e.Metadata.Name,
			ResourceVersion:   e.Metadata.ResourceVersion,
			CreationTimestamp: e.Metadata.CreationTimestamp,
			Labels:            e.Metadata.Labels,
			Annotations:       e.Metadata.Annotations,
			Spec:              e.Spec,
		})
	}
	return out, nil
}

// ConfigsOfKind returns the configs of one kind (e.g. "ServiceEntry"), keyed by "namespace/name".
func (i *Istiod) ConfigsOfKind(ctx context.Context, kind string) (map[string]Config, error) {
	all, err := i.ConfigDump(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]Config{}
	for _, c := range all {
		if c.Kind == kind {
			out[c.Namespace+"/"+c.Name] = c
		}
	}
	return out, nil
}

// Service is one entry of /debug/registryz: a model.Service built by istiod's ServiceEntry
// registry (pilot/pkg/xds/debug.go registryz; JSON of pilot/pkg/model/service.go Service). Raw
// keeps the whole entry.
type Service struct {
	Hostname  string        `json:"hostname"`
	Namespace string        `json:"-"`
	Registry  string        `json:"-"` // "External" for ServiceEntries
	Ports     []ServicePort `json:"ports"`
	// Resolution is model.Resolution: 0 ClientSideLB (STATIC), 1 DNSLB, 2 Passthrough (NONE), 3 DNSRoundRobinLB.
	Resolution     int    `json:"Resolution"`
	MeshExternal   bool   `json:"MeshExternal"`
	DefaultAddress string `json:"defaultAddress"`
	Attributes     struct {
		ServiceRegistry string            `json:"ServiceRegistry"`
		Name            string            `json:"Name"`
		Namespace       string            `json:"Namespace"`
		Labels          map[string]string `json:"Labels"`
		ObjectName      string            `json:"ObjectName"`
	} `json:"Attributes"`
	Raw json.RawMessage `json:"-"`
}

// ServicePort is a port of a Service.
type ServicePort struct {
	Name     string `json:"name"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
}

// Registryz returns the services istiod's registries know (/debug/registryz): with only xds://
// sources, one per ServiceEntry host.
func (i *Istiod) Registryz(ctx context.Context) ([]Service, error) {
	body, err := i.Get(ctx, "/debug/registryz")
	if err != nil {
		return nil, err
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		return nil, fmt.Errorf("parsing /debug/registryz: %w", err)
	}
	out := make([]Service, 0, len(raws))
	for _, r := range raws {
		var s Service
		if err := json.Unmarshal(r, &s); err != nil {
			return nil, fmt.Errorf("parsing /debug/registryz entry: %w", err)
		}
		s.Namespace = s.Attributes.Namespace
		s.Registry = s.Attributes.ServiceRegistry
		s.Raw = r
		out = append(out, s)
	}
	return out, nil
}
