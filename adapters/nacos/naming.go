package nacos

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"text/template"

	"github.com/spf13/pflag"

	"github.com/galleon-mesh/galleon/model"
	dubboreg "github.com/galleon-mesh/galleon/registry/dubbo"
)

// The mapping's flags (Naming.AddFlags). Error messages quote a setting by its flag.
const (
	flagHostTemplate      = "nacos-host-template"
	flagDubboHostTemplate = "nacos-dubbo-host-template"
	flagNamespace         = "namespace"
	flagNamespaceMetaKey  = "nacos-namespace-meta-key"
	flagProtocolKey       = "nacos-protocol-key"
	flagClusterAs         = "nacos-cluster-as"
	flagProtectThreshold  = "nacos-protect-threshold"
	flagDubboProtocols    = "nacos-dubbo-protocols"
	flagDubbo             = "nacos-dubbo"
)

// Defaults of Naming.
const (
	// DefaultHostTemplate is the host of a Nacos service: its name, group and namespace, each
	// one DNS label (hostData), as Higress's McpBridge names Nacos services
	// (<service>.<group>.<namespace>.nacos): "orders.default-group.public.nacos". Each of the
	// three is unique per value, so the host is unique per (namespace, group, service).
	DefaultHostTemplate = "{{.Service}}.{{.Group}}.{{.Namespace}}.nacos"
	// DefaultDubboHostTemplate is the host of a Dubbo interface or application: the same as
	// galleon-zookeeper's (its DefaultDubboHostTemplate), so that a Dubbo estate moving from
	// ZooKeeper to Nacos keeps its hosts. {{.Namespace}} is the Istio namespace here, as there.
	DefaultDubboHostTemplate = "{{.Name}}.{{.Namespace}}.dubbo"
	// DefaultIstioNamespace is the namespace of the ServiceEntries.
	DefaultIstioNamespace = "default"
	// DefaultProtocolKey is the instance metadata key naming its port's protocol.
	DefaultProtocolKey = "protocol"
	// ClusterAsLabel serves an instance's cluster as the endpoint label nacos-cluster.
	ClusterAsLabel = "label"
	// ClusterAsLocality serves an instance's cluster as its locality's region.
	ClusterAsLocality = "locality"
	// clusterLabel is the label an instance's cluster is served as (ClusterAsLabel).
	clusterLabel = "nacos-cluster"
	// defaultCluster is Nacos's cluster of an instance registered without one
	// (Constants.DEFAULT_CLUSTER_NAME): no locality.
	defaultCluster = "DEFAULT"
)

// Naming is how Nacos services map onto ServiceEntries (docs/adapters/nacos.md, "Mapping").
type Naming struct {
	// HostTemplate renders a plain service's host: a Go text/template with {{.Name}} (the
	// ServiceEntry's name), {{.Service}}, {{.Group}}, {{.Namespace}} (the Nacos service name,
	// group and namespace, each a DNS label: hostData) and {{.Metadata}} (the metadata of the
	// service's first instance). Default DefaultHostTemplate.
	HostTemplate string
	// DubboHostTemplate renders a Dubbo service's host: {{.Name}} (registry/dubbo's
	// ServiceName), {{.Namespace}} (the Istio namespace), {{.Interface}}, {{.Group}},
	// {{.Version}} (Dubbo's), {{.NacosNamespace}}, {{.NacosGroup}}. Default
	// DefaultDubboHostTemplate.
	DubboHostTemplate string
	// Namespace is the Istio namespace of the ServiceEntries. Default DefaultIstioNamespace.
	Namespace string
	// NamespaceMetaKey, when set, is the instance metadata key whose value (of the first
	// instance that has one) is the service's Istio namespace instead of Namespace.
	NamespaceMetaKey string
	// ProtocolKey is the instance metadata key naming its port's Istio protocol (http, grpc,
	// tcp, ...); an instance without it is HTTP. Default DefaultProtocolKey.
	ProtocolKey string
	// Cluster says how an instance's cluster is served: ClusterAsLabel (default) or
	// ClusterAsLocality.
	Cluster string
	// ProtectThreshold is the protect threshold (0 to 1) applied when the server applied none:
	// when the healthy share of a service's enabled instances is at most this, every enabled
	// instance is served. 0: only the server's.
	ProtectThreshold float64
	// DubboProtocols overrides the protocol of a Dubbo protocol name, e.g. {"hessian": "HTTP"},
	// as galleon-zookeeper's --zk-dubbo-protocol.
	DubboProtocols map[string]string
	// Dubbo recognises Dubbo's services (providers:<interface>:<version>:<group>, Dubbo 3
	// applications) and maps them as galleon-zookeeper does.
	Dubbo bool
}

// AddFlags defines the mapping's flags on fs, each setting a field of n, with the command's
// defaults.
func (n *Naming) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&n.HostTemplate, flagHostTemplate, DefaultHostTemplate, "host of a Nacos service: Go template with {{.Service}}, {{.Group}}, {{.Namespace}} (Nacos's, each a DNS label; DEFAULT_GROUP is default-group, the default namespace public), {{.Name}} (the ServiceEntry's name) and {{.Metadata}} (the first instance's)")
	fs.StringVar(&n.DubboHostTemplate, flagDubboHostTemplate, DefaultDubboHostTemplate, "host of a Dubbo interface or application: Go template with {{.Name}}, {{.Namespace}} (the Istio namespace), {{.Interface}}, {{.Group}}, {{.Version}}, {{.NacosNamespace}}, {{.NacosGroup}}; the default is galleon-zookeeper's")
	fs.StringVar(&n.Namespace, flagNamespace, DefaultIstioNamespace, "namespace of the ServiceEntries")
	fs.StringVar(&n.NamespaceMetaKey, flagNamespaceMetaKey, "", "instance metadata key whose value, when set, is the service's ServiceEntry namespace instead of --"+flagNamespace)
	fs.StringVar(&n.ProtocolKey, flagProtocolKey, DefaultProtocolKey, "instance metadata key naming the Istio protocol of its port (http, http2, grpc, tcp, ...); none: HTTP")
	fs.StringVar(&n.Cluster, flagClusterAs, ClusterAsLabel, "an instance's cluster becomes: label (the endpoint label "+clusterLabel+") or locality (the endpoint's locality region; cluster DEFAULT: none)")
	fs.Float64Var(&n.ProtectThreshold, flagProtectThreshold, 0, "protect threshold (0 to 1) for servers that apply none: when at most this share of a service's enabled instances is healthy, serve them all, as Nacos clients do (0: the server's only)")
	fs.StringToStringVar(&n.DubboProtocols, flagDubboProtocols, nil, "protocol of a Dubbo protocol name, name=PROTOCOL,... overriding "+dubboreg.DefaultProtocols)
	fs.BoolVar(&n.Dubbo, flagDubbo, true, "map Dubbo's services (providers:<interface>:<version>:<group>, Dubbo 3 applications) to the names and hosts galleon-zookeeper gives them")
}

// hostData is what HostTemplate is executed with.
type hostData struct {
	// Name is the ServiceEntry's name (serviceName).
	Name string
	// Service, Group and Namespace are the Nacos service's, each a DNS label (nameLabel).
	Service, Group, Namespace string
	// Metadata is the metadata of the service's first instance (by address and port).
	Metadata map[string]string
}

// dubboHostData is what DubboHostTemplate is executed with: galleon-zookeeper's fields (Name,
// Namespace, Interface, Group, Version) with the same meaning, and the Nacos namespace and
// group the service is in.
type dubboHostData struct {
	Name, Namespace           string
	Interface, Group, Version string
	NacosNamespace            string
	NacosGroup                string
}

// mapper maps Nacos services; compiled from a Naming, then read only.
type mapper struct {
	naming     Naming
	host       *template.Template
	dubboHost  *template.Template
	protocols  dubboreg.Protocols
	asLocality bool
}

// compile fills the defaults of n, checks it and returns the mapper; each error names the flag
// to fix.
func (n *Naming) compile() (*mapper, []error) {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if n.HostTemplate == "" {
		n.HostTemplate = DefaultHostTemplate
	}
	if n.DubboHostTemplate == "" {
		n.DubboHostTemplate = DefaultDubboHostTemplate
	}
	if n.Namespace == "" {
		n.Namespace = DefaultIstioNamespace
	}
	if err := model.CheckNamespace(n.Namespace); err != nil {
		add("--%s %w", flagNamespace, err)
	}
	if n.ProtocolKey == "" {
		n.ProtocolKey = DefaultProtocolKey
	}
	switch n.Cluster {
	case "":
		n.Cluster = ClusterAsLabel
	case ClusterAsLabel, ClusterAsLocality:
	default:
		add("--%s %q: want %s or %s", flagClusterAs, n.Cluster, ClusterAsLabel, ClusterAsLocality)
	}
	if math.IsNaN(n.ProtectThreshold) || n.ProtectThreshold < 0 || n.ProtectThreshold > 1 {
		add("--%s %v: want a share from 0 to 1, e.g. 0.5 (0: the server's threshold only)", flagProtectThreshold, n.ProtectThreshold)
	}
	protocols, err := dubboreg.NewProtocols(n.DubboProtocols)
	if err != nil {
		add("--%s: %w", flagDubboProtocols, err)
	}
	m := &mapper{naming: *n, protocols: protocols, asLocality: n.Cluster == ClusterAsLocality}
	m.naming.DubboProtocols = maps.Clone(n.DubboProtocols)
	if m.host, err = parseHost(n.HostTemplate, hostData{Name: "orders", Service: "orders", Group: "default-group", Namespace: "public", Metadata: map[string]string{}}); err != nil {
		add("--%s: %w", flagHostTemplate, err)
	}
	if m.dubboHost, err = parseHost(n.DubboHostTemplate, dubboHostData{Name: "org-apache-demo-demoservice-g1-1-0-0--b805551c2d", Namespace: "default", Interface: "org.apache.demo.DemoService", Group: "g1", Version: "1.0.0", NacosNamespace: "public", NacosGroup: "default-group"}); err != nil {
		add("--%s: %w", flagDubboHostTemplate, err)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return m, nil
}

// parseHost parses a host template as registry.ParseHostTemplate does, but with missing
// metadata keys rendering empty (missingkey=zero): a template may read a key only some
// services' instances carry, and those render the default template instead (hostOf).
func parseHost(text string, sample any) (*template.Template, error) {
	t, err := template.New("host").Option("missingkey=zero").Parse(text)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	if err := t.Execute(&b, sample); err != nil {
		return nil, err
	}
	if model.HostName(b.String()) == "" {
		return nil, fmt.Errorf("%q renders %q for a sample service, which is not a host name", text, b.String())
	}
	return t, nil
}

// Nacos's defaults, as its API names them.
const (
	publicNamespace = "public"
	defaultGroup    = "DEFAULT_GROUP"
)

// namespaceOf is the namespace ID as an operator reads it: "public" for the default one,
// which the API also takes as "".
func namespaceOf(ns string) string {
	if ns == "" {
		return publicNamespace
	}
	return ns
}

// nameLabel is s as one DNS label, unique per s: s itself when it is a DNS label without
// "--"; else s lower-cased and sanitised, '-' runs collapsed, shortened to fit, then "--" and
// 10 hex digits of the SHA-256 of s ("Orders" -> "orders--<hash>"). reserved, when not empty,
// is what another value stands for (default-group for DEFAULT_GROUP): s equal to it is hashed
// too, so that the two stay apart.
func nameLabel(s, reserved string) string {
	if s != "" && s != reserved && model.DNSLabel(s) == s && !strings.Contains(s, "--") {
		return s
	}
	return hashed(s, s)
}

// hashed is prefix sanitised and shortened, then "--" and 10 hex digits of SHA-256(key).
func hashed(prefix, key string) string {
	sum := sha256.Sum256([]byte(key))
	suffix := "--" + hex.EncodeToString(sum[:])[:10]
	p := collapse(model.DNSLabel(strings.ToLower(prefix)))
	if room := model.MaxDNSLabel - len(suffix); len(p) > room {
		p = strings.Trim(p[:room], "-")
	}
	if p == "" {
		p = "nacos"
	}
	return p + suffix
}

// collapse replaces runs of '-' by one.
func collapse(s string) string {
	for strings.Contains(s, "--") {
		s = strings.ReplaceAll(s, "--", "-")
	}
	return s
}

// groupLabel is {{.Group}}: default-group for DEFAULT_GROUP, else nameLabel.
func groupLabel(group string) string {
	if group == defaultGroup || group == "" {
		return "default-group"
	}
	return nameLabel(group, "default-group")
}

// serviceName is the ServiceEntry name of a plain Nacos service, unique per (namespace, group,
// service): the service name itself when the service is in the default namespace and group and
// its name is a DNS label without "--" ("orders"); else a readable prefix (service, group unless
// DEFAULT_GROUP, namespace unless public; sanitised, joined by '-') then "--" and 10 hex digits
// of SHA-256("nacos" NUL namespace NUL group NUL service): "orders-shop--3f2a...". Names of the
// first kind never contain "--", those of the second always do.
func serviceName(ref refName) string {
	if ref.namespace == publicNamespace && ref.group == defaultGroup && model.DNSLabel(ref.service) == ref.service && !strings.Contains(ref.service, "--") {
		return ref.service
	}
	parts := []string{ref.service}
	if ref.group != defaultGroup {
		parts = append(parts, ref.group)
	}
	if ref.namespace != publicNamespace {
		parts = append(parts, ref.namespace)
	}
	// hashed cuts the prefix's end when it must: the service, first, stays readable.
	return hashed(strings.Join(parts, "-"), "nacos\x00"+ref.namespace+"\x00"+ref.group+"\x00"+ref.service)
}

// refName is a service reference with the defaults filled in: namespace "public" for "",
// group DEFAULT_GROUP for "".
type refName struct{ namespace, group, service string }

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
