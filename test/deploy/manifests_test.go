// Package deploy checks the deployment files under deploy/ of the main module, first without a cluster:
//
//   - every YAML document under deploy/kubernetes decodes strictly (unknown or duplicate fields
//     are errors, as with kubectl's --validate=strict) into the Kubernetes type of its kind;
//   - the pods are consistent: container ports match --listen/--http, probes target the HTTP
//     port, the --file-dir is a read-only ConfigMap mount, selectors select the pods, security and
//     resource settings are there;
//   - the registry files in ConfigMaps (and the Helm sample values) parse with the file
//     adapter itself and are rejected nowhere;
//   - the commented istiod mesh-config examples parse with istiod's own MeshConfig code and point
//     at the adapter;
//   - the sidecar patch, applied to istiod's Deployment as `kubectl patch --type strategic`
//     would, gives a valid pod with galleon-file as a native sidecar;
//   - the containers' command lines start the real galleon-file and get it ready (skipped with
//     -short);
//   - the Helm chart and the kustomization, rendered by the helm and kubectl `devtool build
//     kube` builds (toolcache.KubeTool), give objects that pass the same checks;
//   - TestChartOnAPIServer (cluster_test.go) applies every layout to a real kube-apiserver.
package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	meshconfig "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/util/protomarshal"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/galleon-mesh/galleon/adapters/file"
	"github.com/galleon-mesh/galleon/model"
	"github.com/galleon-mesh/galleon/test/internal/proc"
	"github.com/galleon-mesh/galleon/test/kube"
)

// The adapter the manifests deploy, and its defaults (daemon).
const (
	adapterName   = "galleon-file"
	defaultListen = ":16010"
	defaultHTTP   = ":16014"
)

// ---------------------------------------------------------------------------------------------
// Loading and strict decoding

// object is one decoded YAML document.
type object struct {
	file       string // relative to the repository root
	line       int    // first line of the document
	apiVersion string
	kind       string
	name       string
	namespace  string
	obj        any // *appsv1.Deployment, *corev1.Service, ...
}

func (o object) String() string {
	return fmt.Sprintf("%s:%d (%s %s)", o.file, o.line, o.kind, o.name)
}

// kustomization is the part of kustomize's Kustomization these manifests use; anything else
// in a kustomization.yaml is reported as unknown.
type kustomization struct {
	metav1.TypeMeta `json:",inline"`
	Namespace       string   `json:"namespace,omitempty"`
	Resources       []string `json:"resources,omitempty"`
	Images          []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

// kinds maps "apiVersion/kind" to a new object of the right type. A kind not listed is an
// error: add it here (with its checks) when a manifest needs it.
var kinds = map[string]func() any{
	"v1/Namespace":                                  func() any { return &corev1.Namespace{} },
	"v1/ConfigMap":                                  func() any { return &corev1.ConfigMap{} },
	"v1/Service":                                    func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                             func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                            func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":                 func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":            func() any { return &networkingv1.NetworkPolicy{} },
	"kustomize.config.k8s.io/v1beta1/Kustomization": func() any { return &kustomization{} },
}

// decodeStrict decodes one YAML document into v the way the API server's strict field
// validation does: duplicate keys and unknown fields are errors, field names are
// case-sensitive.
func decodeStrict(doc []byte, v any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// decodeObject decodes doc by its apiVersion and kind.
func decodeObject(doc []byte) (object, error) {
	var tm struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return object{}, err
	}
	newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return object{}, fmt.Errorf("unknown apiVersion/kind %q/%q: add it to kinds in this test (with checks) if it is right", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := decodeStrict(doc, obj); err != nil {
		return object{}, fmt.Errorf("%s %s: %w", tm.Kind, tm.Metadata.Name, err)
	}
	return object{apiVersion: tm.APIVersion, kind: tm.Kind, name: tm.Metadata.Name, namespace: tm.Metadata.Namespace, obj: obj}, nil
}

// document is one YAML document of a multi-document file.
type document struct {
	line int
	data []byte
}

var separator = regexp.MustCompile(`^---\s*(#.*)?$`)

// splitDocuments splits a multi-document YAML file on "---" lines and drops documents that are
// only comments and blank lines.
func splitDocuments(data []byte) []document {
	var docs []document
	var cur bytes.Buffer
	start, meaningful := 1, false
	flush := func() {
		if meaningful {
			docs = append(docs, document{line: start, data: bytes.Clone(cur.Bytes())})
		}
		cur.Reset()
		meaningful = false
	}
	for i, line := range strings.SplitAfter(string(data), "\n") {
		if separator.MatchString(strings.TrimRight(line, "\r\n")) {
			flush()
			start = i + 2
			continue
		}
		cur.WriteString(line)
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			meaningful = true
		}
	}
	flush()
	return docs
}

// decodeAll decodes every document of a YAML stream; file names the stream in messages.
func decodeAll(t *testing.T, file string, data []byte) []object {
	t.Helper()
	var out []object
	for _, d := range splitDocuments(data) {
		o, err := decodeObject(d.data)
		if err != nil {
			t.Errorf("%s:%d: %v", file, d.line, err)
			continue
		}
		o.file, o.line = file, d.line
		out = append(out, o)
	}
	return out
}

// repoRoot is the main module's directory, two levels above this package (test/deploy).
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.Contains(gomod, []byte("module github.com/galleon-mesh/galleon\n")) {
		t.Fatalf("%s is not the main module's directory (go.mod: %v)", root, err)
	}
	return root
}

// yamlFiles lists the *.yaml / *.yml files under dir (relative to the repository root).
func yamlFiles(t *testing.T, root, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// manifests decodes every YAML document under deploy/kubernetes, by file.
func manifests(t *testing.T) map[string][]object {
	t.Helper()
	root := repoRoot(t)
	files := yamlFiles(t, root, "deploy/kubernetes")
	if len(files) == 0 {
		t.Fatal("no YAML files under deploy/kubernetes")
	}
	out := map[string][]object{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		out[f] = decodeAll(t, f, data)
	}
	return out
}

// inDir returns the objects of the files directly in dir.
func inDir(all map[string][]object, dir string) []object {
	var out []object
	files := make([]string, 0, len(all))
	for f := range all {
		if filepath.ToSlash(filepath.Dir(f)) == dir {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	for _, f := range files {
		out = append(out, all[f]...)
	}
	return out
}

func find[T any](objs []object) []*T {
	var out []*T
	for _, o := range objs {
		if v, ok := o.obj.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// Pod checks

// adapterFlags returns the effective value of each of the container's flags that the
// daemon reads (the command line wins over GALLEON_* literal env values, which win over the
// defaults), and every --flag given.
func adapterFlags(t *testing.T, where string, c corev1.Container) map[string]string {
	t.Helper()
	flags := map[string]string{"listen": defaultListen, "http": defaultHTTP}
	for _, e := range c.Env {
		if name, ok := strings.CutPrefix(e.Name, "GALLEON_"); ok && e.ValueFrom == nil {
			flags[strings.ReplaceAll(strings.ToLower(name), "_", "-")] = e.Value
		}
	}
	for i := 0; i < len(c.Args); i++ {
		a := c.Args[i]
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			t.Errorf("%s: container %s: argument %q is not a --flag (galleon-file takes no positional arguments)", where, c.Name, a)
			continue
		}
		if n, v, hasValue := strings.Cut(name, "="); hasValue {
			flags[n] = v
		} else if i+1 < len(c.Args) && !strings.HasPrefix(c.Args[i+1], "--") {
			flags[name] = c.Args[i+1]
			i++
		} else {
			flags[name] = "true"
		}
	}
	return flags
}

// hostPort splits a --listen/--http address.
func hostPort(t *testing.T, where, flag, addr string) (host string, port int32) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: --%s %q: %v", where, flag, addr, err)
		return "", 0
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil || n <= 0 || n > 65535 {
		t.Errorf("%s: --%s %q: port is not 1-65535 (a fixed port is needed in a pod)", where, flag, addr)
	}
	return h, int32(n)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// probePort resolves a probe's port (a number or a container port name) in container c.
func probePort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	if p.Type == intstr.Int {
		for _, cp := range c.Ports {
			if cp.ContainerPort == p.IntVal {
				return p.IntVal, true
			}
		}
		return p.IntVal, false
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// adapterPod describes where an adapter container runs, for the checks and the smoke run.
type adapterPod struct {
	where     string
	spec      corev1.PodSpec
	container corev1.Container
	sidecar   bool // an init container with restartPolicy: Always
}

// checkAdapterPod checks the adapter container c in pod spec and returns its --file-dir mount's
// ConfigMap name ("" when it has none).
func checkAdapterPod(t *testing.T, a adapterPod) (registryConfigMap string) {
	t.Helper()
	where, spec, c := a.where, a.spec, a.container
	flags := adapterFlags(t, where, c)

	if len(c.Command) != 0 {
		t.Errorf("%s: container %s sets command %q: the image's ENTRYPOINT is the adapter; give flags as args", where, c.Name, c.Command)
	}
	if c.Image == "" {
		t.Errorf("%s: container %s has no image", where, c.Name)
	}

	// Ports: --listen and --http are declared exactly, unless on loopback, where nothing
	// outside the pod (kubelet probes, Services) could reach them.
	declared := map[int32]corev1.ContainerPort{}
	for _, p := range c.Ports {
		declared[p.ContainerPort] = p
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			t.Errorf("%s: port %d is %s; the adapter listens on TCP", where, p.ContainerPort, p.Protocol)
		}
	}
	listenHost, listenPort := hostPort(t, where, "listen", flags["listen"])
	httpHost, httpPort := hostPort(t, where, "http", flags["http"])
	if listenPort == httpPort {
		t.Errorf("%s: --listen and --http share port %d", where, listenPort)
	}
	wanted := map[int32]bool{}
	listeners := []struct {
		flag string
		host string
		port int32
	}{{"listen", listenHost, listenPort}, {"http", httpHost, httpPort}}
	if sl := flags["shard-listen"]; sl != "" {
		for _, a := range strings.Split(sl, ",") {
			h, p := hostPort(t, where, "shard-listen", a)
			listeners = append(listeners, struct {
				flag string
				host string
				port int32
			}{"shard-listen", h, p})
		}
	}
	for _, l := range listeners {
		_, ok := declared[l.port]
		switch {
		case loopback(l.host) && ok:
			t.Errorf("%s: --%s=%s is loopback-only but port %d is declared as a containerPort", where, l.flag, flags[l.flag], l.port)
		case !loopback(l.host) && !ok:
			t.Errorf("%s: --%s=%s: no containerPort %d declared", where, l.flag, flags[l.flag], l.port)
		}
		wanted[l.port] = true
	}
	for port := range declared {
		if !wanted[port] {
			t.Errorf("%s: containerPort %d matches neither --listen (%s), --http (%s) nor --shard-listen (%s)", where, port, flags["listen"], flags["http"], flags["shard-listen"])
		}
	}
	if loopback(httpHost) {
		t.Errorf("%s: --http=%s is loopback-only: the kubelet's probes could not reach it", where, flags["http"])
	}

	// Probes: startup and liveness on /healthz, readiness on /readyz, all on the HTTP port.
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startupProbe", c.StartupProbe, "/healthz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil {
			t.Errorf("%s: container %s has no %s", where, c.Name, p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g == nil {
			t.Errorf("%s: %s is not an httpGet probe", where, p.name)
			continue
		}
		port, ok := probePort(c, g.Port)
		switch {
		case !ok:
			t.Errorf("%s: %s port %s is not a port of container %s", where, p.name, g.Port.String(), c.Name)
		case port != httpPort:
			t.Errorf("%s: %s targets port %d, not the HTTP port %d (--http)", where, p.name, port, httpPort)
		}
		if g.Path != p.path {
			t.Errorf("%s: %s path %q, want %q", where, p.name, g.Path, p.path)
		}
	}

	// --file-dir: a read-only mount of a ConfigMap volume.
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		if _, dup := volumes[v.Name]; dup {
			t.Errorf("%s: volume %q defined twice", where, v.Name)
		}
		volumes[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("%s: volumeMount %q names no volume of the pod", where, m.Name)
		}
	}
	if dir, ok := flags["file-dir"]; ok {
		var mount *corev1.VolumeMount
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].MountPath == dir {
				mount = &c.VolumeMounts[i]
			}
		}
		switch {
		case mount == nil:
			t.Errorf("%s: --file-dir=%s is not a volumeMount of container %s", where, dir, c.Name)
		case volumes[mount.Name].ConfigMap == nil:
			t.Errorf("%s: --file-dir=%s: volume %q is not a ConfigMap", where, dir, mount.Name)
		default:
			if !mount.ReadOnly {
				t.Errorf("%s: --file-dir=%s is mounted read-write; the adapter only reads it", where, dir)
			}
			if mount.SubPath != "" {
				t.Errorf("%s: --file-dir=%s uses subPath: ConfigMap updates never reach subPath mounts", where, dir)
			}
			registryConfigMap = volumes[mount.Name].ConfigMap.Name
		}
	} else if c.Name == adapterName {
		t.Errorf("%s: %s without --file-dir", where, adapterName)
	}

	// Security: non-root, read-only root file system, no privilege escalation, no
	// capabilities, RuntimeDefault seccomp (on the container or the pod).
	sc, psc := c.SecurityContext, spec.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if !isTrue(sc.RunAsNonRoot) && !(sc.RunAsNonRoot == nil && isTrue(psc.RunAsNonRoot)) {
		t.Errorf("%s: container %s: runAsNonRoot is not true", where, c.Name)
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Errorf("%s: container %s: readOnlyRootFilesystem is not true", where, c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: container %s: allowPrivilegeEscalation is not false", where, c.Name)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		t.Errorf("%s: container %s: capabilities must drop ALL and add none", where, c.Name)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: container %s: seccompProfile is not RuntimeDefault", where, c.Name)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: container %s is privileged", where, c.Name)
	}

	// Resources: requests for scheduling, a memory limit.
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("%s: container %s: requests.cpu and requests.memory must be set", where, c.Name)
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: container %s: limits.memory must be set", where, c.Name)
	}

	checkPodPorts(t, where, spec)
	return registryConfigMap
}

func isTrue(b *bool) bool { return b != nil && *b }

// checkPodPorts checks that no two containers of a pod declare the same port number or name,
// and that port names are valid IANA service names (what Services and probes refer to).
func checkPodPorts(t *testing.T, where string, spec corev1.PodSpec) {
	t.Helper()
	numbers, names := map[int32]string{}, map[string]string{}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, p := range c.Ports {
			if other, dup := numbers[p.ContainerPort]; dup {
				t.Errorf("%s: port %d declared by containers %s and %s", where, p.ContainerPort, other, c.Name)
			}
			numbers[p.ContainerPort] = c.Name
			if p.Name == "" {
				continue
			}
			for _, msg := range validation.IsValidPortName(p.Name) {
				t.Errorf("%s: container %s: port name %q: %s", where, c.Name, p.Name, msg)
			}
			if other, dup := names[p.Name]; dup {
				t.Errorf("%s: port name %q used by containers %s and %s", where, p.Name, other, c.Name)
			}
			names[p.Name] = c.Name
		}
	}
}

// selects reports whether sel selects a pod with labels lbls.
func selects(t *testing.T, where string, sel *metav1.LabelSelector, lbls map[string]string) bool {
	t.Helper()
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		t.Errorf("%s: empty selector: it would select every pod of the namespace", where)
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("%s: selector: %v", where, err)
		return false
	}
	return s.Matches(labels.Set(lbls))
}

// adapterDeployment finds the adapter's Deployment and container among objs.
func adapterDeployment(t *testing.T, objs []object) (*appsv1.Deployment, adapterPod) {
	t.Helper()
	var found []object
	for _, o := range objs {
		if _, ok := o.obj.(*appsv1.Deployment); ok {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one Deployment, found %v", found)
	}
	d := found[0].obj.(*appsv1.Deployment)
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == adapterName {
			return d, adapterPod{where: found[0].String(), spec: d.Spec.Template.Spec, container: c}
		}
	}
	t.Fatalf("%s: no container %s", found[0], adapterName)
	return nil, adapterPod{}
}

// checkWorkload checks a Deployment of the adapter with its Service, ServiceAccount,
// ConfigMap, PodDisruptionBudget and NetworkPolicy from the same set of objects, and returns
// the adapter pod and its registry ConfigMap.
func checkWorkload(t *testing.T, objs []object) (adapterPod, *corev1.ConfigMap, *corev1.Service) {
	t.Helper()
	d, pod := adapterDeployment(t, objs)
	where := pod.where
	cmName := checkAdapterPod(t, pod)
	tmpl := d.Spec.Template

	if !selects(t, where+": spec.selector", d.Spec.Selector, tmpl.Labels) {
		t.Errorf("%s: spec.selector does not select the pod template's labels %v", where, tmpl.Labels)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("%s: replicas must be at least 2 for HA", where)
	}
	if tmpl.Labels["sidecar.istio.io/inject"] != "false" {
		t.Errorf("%s: the pod must carry the label sidecar.istio.io/inject: \"false\" (istiod connects with plain gRPC)", where)
	}
	if tmpl.Annotations["prometheus.io/scrape"] != "true" || tmpl.Annotations["prometheus.io/path"] != "/metrics" {
		t.Errorf("%s: prometheus.io/scrape and /path annotations missing", where)
	}
	_, httpPort := hostPort(t, where, "http", adapterFlags(t, where, pod.container)["http"])
	if tmpl.Annotations["prometheus.io/port"] != strconv.Itoa(int(httpPort)) {
		t.Errorf("%s: prometheus.io/port %q is not the HTTP port %d", where, tmpl.Annotations["prometheus.io/port"], httpPort)
	}

	// ServiceAccount.
	saName := tmpl.Spec.ServiceAccountName
	var sa *corev1.ServiceAccount
	for _, s := range find[corev1.ServiceAccount](objs) {
		if s.Name == saName {
			sa = s
		}
	}
	if sa == nil {
		t.Errorf("%s: serviceAccountName %q is not among the manifests", where, saName)
	}
	if tmpl.Spec.AutomountServiceAccountToken == nil || *tmpl.Spec.AutomountServiceAccountToken {
		t.Errorf("%s: automountServiceAccountToken should be false: the adapter does not use the Kubernetes API", where)
	}

	// ConfigMap of the registry.
	var cm *corev1.ConfigMap
	for _, c := range find[corev1.ConfigMap](objs) {
		if c.Name == cmName {
			cm = c
		}
	}
	if cmName != "" && cm == nil {
		t.Errorf("%s: the --file-dir ConfigMap %q is not among the manifests", where, cmName)
	}

	// Service: selects the pods, every targetPort is a container port, ports keep the
	// container's numbers (istiod's configSources address uses the Service port).
	services := find[corev1.Service](objs)
	if len(services) != 1 {
		t.Fatalf("want one Service, found %d", len(services))
	}
	svc := services[0]
	sw := "Service " + svc.Name
	if !selects(t, sw, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, tmpl.Labels) {
		t.Errorf("%s: selector %v does not select the pods (%v)", sw, svc.Spec.Selector, tmpl.Labels)
	}
	for _, p := range svc.Spec.Ports {
		port, ok := probePort(pod.container, p.TargetPort)
		if !ok {
			t.Errorf("%s: port %s: targetPort %s is not a port of container %s", sw, p.Name, p.TargetPort.String(), pod.container.Name)
		} else if port != p.Port {
			t.Errorf("%s: port %s: %d forwards to %d; keep the adapter's numbers", sw, p.Name, p.Port, port)
		}
		for _, msg := range validation.IsValidPortName(p.Name) {
			t.Errorf("%s: port name %q: %s", sw, p.Name, msg)
		}
	}

	// PodDisruptionBudget: selects the pods and lets at least one replica stay up.
	for _, pdb := range find[policyv1.PodDisruptionBudget](objs) {
		pw := "PodDisruptionBudget " + pdb.Name
		if !selects(t, pw, pdb.Spec.Selector, tmpl.Labels) {
			t.Errorf("%s: selector does not select the pods", pw)
		}
		if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.Type != intstr.Int || mu.IntVal < 1 || d.Spec.Replicas == nil || mu.IntVal >= *d.Spec.Replicas {
			t.Errorf("%s: want maxUnavailable a number from 1 to replicas-1", pw)
		}
	}

	// NetworkPolicy: selects the pods and names existing ports.
	for _, np := range find[networkingv1.NetworkPolicy](objs) {
		nw := "NetworkPolicy " + np.Name
		if !selects(t, nw, &np.Spec.PodSelector, tmpl.Labels) {
			t.Errorf("%s: podSelector does not select the pods", nw)
		}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port == nil {
					continue
				}
				if _, ok := probePort(pod.container, *p.Port); !ok {
					t.Errorf("%s: port %s is not a port of container %s", nw, p.Port.String(), pod.container.Name)
				}
			}
		}
	}
	return pod, cm, svc
}

// ---------------------------------------------------------------------------------------------
// Registry files

// registrySink records what the file registry reports on its first scan.
type registrySink struct {
	mu       sync.Mutex
	services []model.Service
	rejected []string
	replaced chan struct{}
	once     sync.Once
}

func (s *registrySink) Replace(services []model.Service) {
	s.mu.Lock()
	s.services = services
	s.mu.Unlock()
	s.once.Do(func() { close(s.replaced) })
}
func (s *registrySink) Update(model.Service)    {}
func (s *registrySink) Delete(model.ServiceKey) {}
func (s *registrySink) Rejected(record string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejected = append(s.rejected, fmt.Sprintf("%s: %v", record, err))
}
func (s *registrySink) Unreachable(err error) {
	if err != nil {
		s.Rejected("(directory)", err)
	}
}
func (s *registrySink) Degraded(part string, err error) {
	if err != nil {
		s.Rejected("(part "+part+")", err)
	}
}

// writeRegistry writes registry files (name -> content) to a new directory.
func writeRegistry(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// parseRegistry runs the file adapter once over files, as galleon-file would over the
// mounted ConfigMap, and returns the services it serves. Every rejection is an error.
func parseRegistry(t *testing.T, where string, files map[string]string) []model.Service {
	t.Helper()
	if len(files) == 0 {
		t.Errorf("%s: no registry files", where)
		return nil
	}
	for name := range files {
		// galleon-file reads only *.yaml / *.yml not starting with "."; anything else in the
		// ConfigMap would be silently ignored.
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			t.Errorf("%s: key %q is not a name galleon-file reads (*.yaml or *.yml, not starting with '.')", where, name)
		}
		for _, msg := range validation.IsConfigMapKey(name) {
			t.Errorf("%s: key %q: %s", where, name, msg)
		}
	}
	reg, err := file.New(file.Config{Dir: writeRegistry(t, files), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	sink := &registrySink{replaced: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx, sink) }()
	select {
	case <-sink.replaced:
	case err := <-done:
		cancel()
		t.Fatalf("%s: file registry stopped: %v", where, err)
	case <-time.After(10 * time.Second):
		t.Errorf("%s: the file registry did not list the files within 10s", where)
	}
	cancel()
	<-done
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, r := range sink.rejected {
		t.Errorf("%s: galleon-file rejects %s", where, r)
	}
	if len(sink.services) == 0 {
		t.Errorf("%s: the registry defines no service", where)
	}
	for _, s := range sink.services {
		if s.Name == "" || len(s.Ports) == 0 || len(s.Hosts) == 0 {
			t.Errorf("%s: service %s/%s has no name, port or host", where, s.Namespace, s.Name)
		}
	}
	return sink.services
}

// ---------------------------------------------------------------------------------------------
// istiod's mesh config examples

// uncomment turns a commented example into YAML: "##" lines are prose and dropped, "# x"
// becomes "x", "#" alone a blank line; other lines are kept.
func uncomment(data []byte) []byte {
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "##"):
		case strings.HasPrefix(line, "# "):
			out.WriteString(line[2:])
		case strings.TrimRight(line, "\r\n") == "#":
			out.WriteString("\n")
		default:
			out.WriteString(line)
		}
	}
	return out.Bytes()
}

// meshConfigExample reads a commented mesh-config example ConfigMap and parses its "mesh" key
// with istiod's own code (defaults and validation), after a strict decode that catches the
// misspelt fields istiod would silently ignore.
func meshConfigExample(t *testing.T, rel string) *meshconfig.MeshConfig {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	if docs := splitDocuments(data); len(docs) != 0 {
		t.Errorf("%s: must stay commented out (applying a ConfigMap \"istio\" would replace istiod's mesh config), found YAML at line %d", rel, docs[0].line)
	}
	objs := decodeAll(t, rel+" (uncommented)", uncomment(data))
	if len(objs) != 1 || objs[0].kind != "ConfigMap" {
		t.Fatalf("%s: want one commented ConfigMap, found %v", rel, objs)
	}
	cm := objs[0].obj.(*corev1.ConfigMap)
	if cm.Name != "istio" {
		t.Errorf("%s: ConfigMap %q, want \"istio\" (istiod's mesh config)", rel, cm.Name)
	}
	text, ok := cm.Data["mesh"]
	if !ok {
		t.Fatalf("%s: no data.mesh", rel)
	}
	if err := protomarshal.ApplyYAMLStrict(text, &meshconfig.MeshConfig{}); err != nil {
		t.Errorf("%s: mesh: %v", rel, err)
	}
	mc, err := mesh.ApplyMeshConfigDefaults(text)
	if err != nil {
		t.Fatalf("%s: istiod rejects the mesh config: %v", rel, err)
	}
	return mc
}

// checkConfigSources checks that configSources keep k8s:// and list want.
func checkConfigSources(t *testing.T, rel string, mc *meshconfig.MeshConfig, want string) {
	t.Helper()
	var got []string
	for _, s := range mc.ConfigSources {
		got = append(got, s.Address)
	}
	if !slices.Contains(got, "k8s://") {
		t.Errorf("%s: configSources %q lack k8s://: listing configSources drops istiod's Kubernetes source", rel, got)
	}
	if !slices.Contains(got, want) {
		t.Errorf("%s: configSources %q lack %s", rel, got, want)
	}
}

// ---------------------------------------------------------------------------------------------
// Tests

// TestManifestsDecodeStrictly decodes every document under deploy/kubernetes by kind and
// checks names, and that the manifests leave the namespace to kustomize / kubectl -n.
func TestManifestsDecodeStrictly(t *testing.T) {
	all := manifests(t)
	n := 0
	for f, objs := range all {
		for _, o := range objs {
			n++
			if o.kind == "Kustomization" {
				continue
			}
			for _, msg := range validation.IsDNS1123Subdomain(o.name) {
				t.Errorf("%s: name %q: %s", o, o.name, msg)
			}
			if o.namespace != "" {
				t.Errorf("%s: sets metadata.namespace %q; the namespace comes from kustomization.yaml or kubectl -n", o, o.namespace)
			}
		}
		if len(objs) == 0 && !strings.Contains(f, "mesh-config") {
			t.Errorf("%s: no object in it", f)
		}
	}
	t.Logf("%d objects in %d files decoded strictly", n, len(all))
}

// TestStandalone checks deploy/kubernetes/standalone: the Deployment and everything it
// refers to, its kustomization, and its registry.
func TestStandalone(t *testing.T) {
	const dir = "deploy/kubernetes/standalone"
	all := manifests(t)
	objs := inDir(all, dir)
	pod, cm, svc := checkWorkload(t, objs)
	if cm == nil {
		t.Fatal("no registry ConfigMap")
	}
	parseRegistry(t, "ConfigMap "+cm.Name, cm.Data)

	// The kustomization applies every manifest of the directory, in istio-system.
	ks := find[kustomization](objs)
	if len(ks) != 1 {
		t.Fatalf("%s: want one kustomization.yaml, found %d", dir, len(ks))
	}
	if ks[0].Namespace != "istio-system" {
		t.Errorf("%s/kustomization.yaml: namespace %q, want istio-system (the configSources address names it)", dir, ks[0].Namespace)
	}
	var listed, present []string
	listed = append(listed, ks[0].Resources...)
	for f, objs := range all {
		if filepath.ToSlash(filepath.Dir(f)) == dir && len(objs) > 0 && filepath.Base(f) != "kustomization.yaml" {
			present = append(present, filepath.Base(f))
		}
	}
	sort.Strings(listed)
	sort.Strings(present)
	if !reflect.DeepEqual(listed, present) {
		t.Errorf("%s/kustomization.yaml resources %q, want every manifest of the directory %q", dir, listed, present)
	}

	// istiod's configSources example points at the Service's gRPC port.
	var grpcPort int32
	listen := adapterFlags(t, pod.where, pod.container)["listen"]
	_, listenPort := hostPort(t, pod.where, "listen", listen)
	for _, p := range svc.Spec.Ports {
		if port, ok := probePort(pod.container, p.TargetPort); ok && port == listenPort {
			grpcPort = p.Port
		}
	}
	if grpcPort == 0 {
		t.Fatalf("Service %s exposes no port for --listen %s", svc.Name, listen)
	}
	rel := dir + "/istiod-mesh-config.yaml"
	checkConfigSources(t, rel, meshConfigExample(t, rel),
		fmt.Sprintf("xds://%s.%s.svc:%d", svc.Name, ks[0].Namespace, grpcPort))

	// The NetworkPolicy lets istiod's pods reach the gRPC port.
	istiod := decodeAll(t, "istiodDeployment", []byte(istiodDeployment))[0].obj.(*appsv1.Deployment)
	for _, np := range find[networkingv1.NetworkPolicy](objs) {
		allowed := false
		for _, rule := range np.Spec.Ingress {
			grpc := len(rule.Ports) == 0
			for _, p := range rule.Ports {
				if p.Port == nil {
					grpc = true
				} else if port, ok := probePort(pod.container, *p.Port); ok && port == listenPort {
					grpc = true
				}
			}
			if !grpc {
				continue
			}
			if len(rule.From) == 0 {
				allowed = true
			}
			for _, peer := range rule.From {
				if peer.PodSelector != nil && peer.IPBlock == nil &&
					selects(t, "NetworkPolicy "+np.Name, peer.PodSelector, istiod.Spec.Template.Labels) {
					allowed = true
				}
			}
		}
		if !allowed {
			t.Errorf("NetworkPolicy %s: istiod's pods (labels %v) cannot reach the gRPC port %d", np.Name, istiod.Spec.Template.Labels, listenPort)
		}
	}
}

// istiodDeployment is istiod's Deployment as Istio 1.29.2's istiod Helm chart renders it with
// default values (`helm template istiod manifests/charts/istio-control/istio-discovery -n
// istio-system`), trimmed of most labels and env, with a release image: the base the sidecar
// patch is applied to, and the pod the standalone NetworkPolicy must let in.
const istiodDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: istiod
  namespace: istio-system
  labels: {app: istiod, istio: pilot, istio.io/rev: default}
spec:
  strategy:
    rollingUpdate: {maxSurge: 100%, maxUnavailable: 25%}
  selector:
    matchLabels: {istio: pilot}
  template:
    metadata:
      labels: {app: istiod, istio: pilot, istio.io/rev: default, sidecar.istio.io/inject: "false", istio.io/dataplane-mode: none}
      annotations: {prometheus.io/port: "15014", prometheus.io/scrape: "true", sidecar.istio.io/inject: "false"}
    spec:
      tolerations:
      - {key: cni.istio.io/not-ready, operator: Exists}
      serviceAccountName: istiod
      containers:
      - name: discovery
        image: "docker.io/istio/pilot:1.29.2"
        args: [discovery, --monitoringAddr=:15014, --log_output_level=default:info, --domain, cluster.local, --keepaliveMaxServerConnectionAge, 30m]
        ports:
        - {containerPort: 8080, protocol: TCP, name: http-debug}
        - {containerPort: 15010, protocol: TCP, name: grpc-xds}
        - {containerPort: 15012, protocol: TCP, name: tls-xds}
        - {containerPort: 15017, protocol: TCP, name: https-webhooks}
        - {containerPort: 15014, protocol: TCP, name: http-monitoring}
        readinessProbe:
          httpGet: {path: /ready, port: 8080}
          initialDelaySeconds: 1
          periodSeconds: 3
          timeoutSeconds: 5
        env:
        - {name: REVISION, value: default}
        - {name: PILOT_CERT_PROVIDER, value: istiod}
        - name: GOMAXPROCS
          valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: "1"}}
        resources:
          requests: {cpu: 500m, memory: 2048Mi}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          capabilities: {drop: [ALL]}
        volumeMounts:
        - {name: istio-token, mountPath: /var/run/secrets/tokens, readOnly: true}
        - {name: local-certs, mountPath: /var/run/secrets/istio-dns}
        - {name: cacerts, mountPath: /etc/cacerts, readOnly: true}
        - {name: istio-kubeconfig, mountPath: /var/run/secrets/remote, readOnly: true}
        - {name: istio-csr-dns-cert, mountPath: /var/run/secrets/istiod/tls, readOnly: true}
        - {name: istio-csr-ca-configmap, mountPath: /var/run/secrets/istiod/ca, readOnly: true}
      volumes:
      - {name: local-certs, emptyDir: {medium: Memory}}
      - name: istio-token
        projected:
          sources:
          - serviceAccountToken: {audience: istio-ca, expirationSeconds: 43200, path: istio-token}
      - {name: cacerts, secret: {secretName: cacerts, optional: true}}
      - {name: istio-kubeconfig, secret: {secretName: istio-kubeconfig, optional: true}}
      - {name: istio-csr-dns-cert, secret: {secretName: istiod-tls, optional: true}}
      - {name: istio-csr-ca-configmap, configMap: {name: istio-ca-root-cert, defaultMode: 420, optional: true}}
`

// patchedIstiod applies the sidecar patch to istiod's Deployment as `kubectl patch
// deployment istiod --type strategic --patch-file ...` does, and decodes the result strictly.
func patchedIstiod(t *testing.T, all map[string][]object) (base, patched *appsv1.Deployment, pod adapterPod) {
	t.Helper()
	const rel = "deploy/kubernetes/sidecar/istiod-patch.yaml"
	objs := all[rel]
	if len(objs) != 1 || objs[0].kind != "Deployment" || objs[0].name != "istiod" {
		t.Fatalf("%s: want one Deployment patch named istiod, found %v", rel, objs)
	}
	patchYAML, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	patchJSON, err := yaml.YAMLToJSONStrict(patchYAML)
	if err != nil {
		t.Fatal(err)
	}
	baseObjs := decodeAll(t, "istiodDeployment", []byte(istiodDeployment))
	if len(baseObjs) != 1 {
		t.Fatal("istiodDeployment does not decode")
	}
	base = baseObjs[0].obj.(*appsv1.Deployment)
	baseJSON, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := strategicpatch.StrategicMergePatch(baseJSON, patchJSON, appsv1.Deployment{})
	if err != nil {
		t.Fatalf("%s: strategic merge: %v", rel, err)
	}
	patched = &appsv1.Deployment{}
	if err := decodeStrict(merged, patched); err != nil {
		t.Fatalf("%s: patched istiod: %v", rel, err)
	}
	where := rel + " applied to istiod"
	for _, c := range patched.Spec.Template.Spec.InitContainers {
		if c.Name == adapterName {
			return base, patched, adapterPod{where: where, spec: patched.Spec.Template.Spec, container: c, sidecar: true}
		}
	}
	t.Fatalf("%s: no init container %s", where, adapterName)
	return nil, nil, adapterPod{}
}

// TestSidecarPatch checks deploy/kubernetes/sidecar: the patch gives istiod a native sidecar
// that listens on loopback, starts first, and leaves istiod's own container alone.
func TestSidecarPatch(t *testing.T) {
	all := manifests(t)
	base, patched, pod := patchedIstiod(t, all)
	where, c := pod.where, pod.container
	cmName := checkAdapterPod(t, pod)

	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("%s: init container %s needs restartPolicy: Always (a native sidecar)", where, c.Name)
	}
	if c.StartupProbe == nil {
		t.Errorf("%s: a native sidecar without startupProbe does not hold istiod back until it listens", where)
	}
	flags := adapterFlags(t, where, c)
	host, port := hostPort(t, where, "listen", flags["listen"])
	if !loopback(host) {
		t.Errorf("%s: --listen=%s: the sidecar's gRPC port should listen on loopback only", where, flags["listen"])
	}
	// istiod's own ports and ControlZ (9876, loopback, not declared) must stay free.
	_, httpPort := hostPort(t, where, "http", flags["http"])
	for _, p := range []int32{port, httpPort} {
		if p == 9876 {
			t.Errorf("%s: port %d is istiod's ControlZ port", where, p)
		}
	}

	// istiod's container and volumes are untouched; the registry volume is added.
	if !apiequality.Semantic.DeepEqual(base.Spec.Template.Spec.Containers, patched.Spec.Template.Spec.Containers) {
		t.Errorf("%s: istiod's containers changed", where)
	}
	for _, v := range base.Spec.Template.Spec.Volumes {
		if !slices.ContainsFunc(patched.Spec.Template.Spec.Volumes, func(p corev1.Volume) bool { return apiequality.Semantic.DeepEqual(p, v) }) {
			t.Errorf("%s: istiod's volume %s changed or was dropped", where, v.Name)
		}
	}
	if !apiequality.Semantic.DeepEqual(base.ObjectMeta, patched.ObjectMeta) || !apiequality.Semantic.DeepEqual(base.Spec.Selector, patched.Spec.Selector) {
		t.Errorf("%s: the patch changes istiod's metadata or selector", where)
	}

	// The registry ConfigMap of the sidecar directory.
	var cm *corev1.ConfigMap
	for _, o := range inDir(all, "deploy/kubernetes/sidecar") {
		if c, ok := o.obj.(*corev1.ConfigMap); ok && c.Name == cmName {
			cm = c
		}
	}
	if cm == nil {
		t.Fatalf("deploy/kubernetes/sidecar: no ConfigMap %q for the sidecar's --file-dir", cmName)
	}
	parseRegistry(t, "sidecar ConfigMap "+cm.Name, cm.Data)

	rel := "deploy/kubernetes/sidecar/istiod-mesh-config.yaml"
	checkConfigSources(t, rel, meshConfigExample(t, rel), fmt.Sprintf("xds://127.0.0.1:%d", port))
}

// TestHelmSampleRegistryParses parses the Helm chart's sample registry (values-bookinfo.yaml)
// with the file adapter, and checks the chart's default values leave the registry empty (so a
// user's files are never merged with the sample's).
func TestHelmSampleRegistryParses(t *testing.T) {
	root := repoRoot(t)
	type values struct {
		Registry struct {
			Files map[string]string `json:"files"`
		} `json:"registry"`
	}
	for _, c := range []struct {
		rel   string
		empty bool
	}{{"deploy/helm/values-bookinfo.yaml", false}, {"deploy/helm/galleon/values.yaml", true}} {
		data, err := os.ReadFile(filepath.Join(root, c.rel))
		if err != nil {
			t.Fatal(err)
		}
		var v values
		if err := yaml.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", c.rel, err)
		}
		if c.empty {
			if len(v.Registry.Files) != 0 {
				t.Errorf("%s: registry.files should be empty: Helm merges maps, so a user's files would be served next to the defaults", c.rel)
			}
			continue
		}
		parseRegistry(t, c.rel, v.Registry.Files)
	}
}

// TestContainerCommandLines runs the real galleon-file with each manifest's container args and
// literal env (the --file-dir pointed at a copy of its ConfigMap, the ports moved to free loopback
// ports) and checks it becomes ready and serves every service of the ConfigMap.
func TestContainerCommandLines(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs galleon-file; skipped with -short")
	}
	all := manifests(t)
	objs := inDir(all, "deploy/kubernetes/standalone")
	_, standalone := adapterDeployment(t, objs)
	_, _, sidecar := patchedIstiod(t, all)
	bin := buildAdapter(t)
	for _, c := range []struct {
		name string
		pod  adapterPod
		cms  []object
	}{
		{"standalone", standalone, objs},
		{"sidecar", sidecar, inDir(all, "deploy/kubernetes/sidecar")},
	} {
		t.Run(c.name, func(t *testing.T) {
			runContainer(t, bin, c.pod, c.cms)
		})
	}
}

// buildAdapter builds ../cmd/galleon-file of the main module into a temporary directory.
func buildAdapter(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), adapterName)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/"+adapterName)
	cmd.Dir = repoRoot(t)
	cmd.Env = proc.Env(nil, []string{"GOWORK"}, nil, "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%s", adapterName, err, b)
	}
	return out
}

// runContainer starts bin as the pod's adapter container would run.
func runContainer(t *testing.T, bin string, pod adapterPod, objs []object) {
	flags := adapterFlags(t, pod.where, pod.container)
	var cm *corev1.ConfigMap
	for _, o := range objs {
		if c, ok := o.obj.(*corev1.ConfigMap); ok {
			for _, v := range pod.spec.Volumes {
				if v.ConfigMap != nil && v.ConfigMap.Name == c.Name {
					cm = c
				}
			}
		}
	}
	if cm == nil {
		t.Fatalf("%s: no ConfigMap volume", pod.where)
	}
	want := len(parseRegistry(t, "ConfigMap "+cm.Name, cm.Data))
	dir := writeRegistry(t, cm.Data)

	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addrs, err := proc.FreeAddrs(2)
		if err != nil {
			t.Fatal(err)
		}
		// The container's args with the paths and ports of this machine.
		var args []string
		for _, a := range pod.container.Args {
			switch {
			case strings.HasPrefix(a, "--file-dir="):
				a = "--file-dir=" + dir
			case strings.HasPrefix(a, "--listen="):
				a = "--listen=" + addrs[0]
			case strings.HasPrefix(a, "--http="):
				a = "--http=" + addrs[1]
			case a == "--file-dir" || a == "--listen" || a == "--http":
				t.Fatalf("%s: write %s=VALUE in one argument", pod.where, a)
			}
			args = append(args, a)
		}
		if _, ok := flags["file-dir"]; !ok {
			t.Fatalf("%s: no --file-dir", pod.where)
		}
		if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--listen=") }) {
			args = append(args, "--listen="+addrs[0])
		}
		if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--http=") }) {
			args = append(args, "--http="+addrs[1])
		}
		var env []string
		for _, e := range pod.container.Env {
			switch {
			case e.ValueFrom == nil:
				env = append(env, e.Name+"="+e.Value)
			case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
				// What the kubelet puts there: the limit in bytes.
				env = append(env, fmt.Sprintf("%s=%d", e.Name, pod.container.Resources.Limits.Memory().Value()))
			}
		}
		p, err := proc.Start(t, proc.Config{
			Name: adapterName,
			Path: bin,
			Args: args,
			Env:  proc.Env(nil, nil, []string{"GALLEON_", "GOMEMLIMIT"}, env...),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var status struct {
			Synced   bool `json:"synced"`
			Services int  `json:"services"`
		}
		lastErr = p.WaitFor(ctx, func() (bool, error) {
			if exited, err := p.Exited(); exited {
				return false, proc.Permanent(fmt.Errorf("exited: %v", err))
			}
			resp, err := http.Get("http://" + addrs[1] + "/readyz")
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, errors.New("/readyz: " + resp.Status)
			}
			resp, err = http.Get("http://" + addrs[1] + "/debug/status")
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			return true, json.NewDecoder(resp.Body).Decode(&status)
		})
		cancel()
		if lastErr == nil {
			if err := proc.DialOK(addrs[0]); err != nil {
				t.Errorf("%s: gRPC port: %v", pod.where, err)
			}
			if !status.Synced || status.Services != want {
				t.Errorf("%s: /debug/status synced=%v services=%d, want synced and %d services", pod.where, status.Synced, status.Services, want)
			}
			t.Logf("%s: %s %s: ready, %d services", pod.where, adapterName, strings.Join(args, " "), status.Services)
			p.Stop()
			return
		}
		log := p.Log()
		p.Stop()
		if !strings.Contains(log, "address already in use") {
			break
		}
	}
	t.Fatalf("%s: galleon-file with the container's args did not become ready: %v", pod.where, lastErr)
}

// TestHelmChart renders deploy/helm/galleon with the sample values and checks the objects like
// the plain manifests, with the Helm `devtool build kube` builds (TestChartOnAPIServer applies them).
func TestHelmChart(t *testing.T) {
	helm := kube.Helm(t)
	root := repoRoot(t)
	chart := filepath.Join(root, "deploy/helm/galleon")
	run := func(args ...string) (string, error) {
		out, err := runTool(nil, helm, args...)
		return string(out), err
	}
	if out, err := run("lint", "--strict", chart, "-f", filepath.Join(root, "deploy/helm/values-bookinfo.yaml")); err != nil {
		t.Errorf("%v\n%s", err, out)
	}

	out, err := run("template", "galleon-file", chart, "-n", "istio-system", "-f", filepath.Join(root, "deploy/helm/values-bookinfo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, "helm template (values-bookinfo.yaml)", []byte(out))
	_, cm, svc := checkWorkload(t, objs)
	if cm == nil {
		t.Fatal("no registry ConfigMap rendered")
	}
	parseRegistry(t, "rendered ConfigMap "+cm.Name, cm.Data)
	if svc.Name != adapterName {
		t.Errorf("release galleon-file: Service %q, want %q (the address in NOTES.txt and the docs)", svc.Name, adapterName)
	}

	// No registry: galleon-file cannot run, so rendering fails with a message.
	if _, err := run("template", "galleon-file", chart); err == nil || !strings.Contains(err.Error(), "registry.files") {
		t.Errorf("rendering galleon-file without a registry: want an error naming registry.files, got %v", err)
	}

	// existingConfigMap, env, extra args and another adapter name.
	out, err = run("template", "vms", chart, "-n", "mesh",
		"--set", "registry.existingConfigMap=vm-registry",
		"--set", "adapter.env.GALLEON_LOG_LEVEL=debug",
		"--set", "extraArgs={--namespace=vms}",
		"--set", "replicaCount=3",
		"--set", "ports.grpc=17010")
	if err != nil {
		t.Fatal(err)
	}
	objs = decodeAll(t, "helm template (existingConfigMap)", []byte(out))
	if len(find[corev1.ConfigMap](objs)) != 0 {
		t.Error("existingConfigMap: the chart still renders a ConfigMap")
	}
	d, pod := adapterDeployment(t, objs)
	if got := checkAdapterPod(t, pod); got != "vm-registry" {
		t.Errorf("existingConfigMap: --file-dir mounts %q, want vm-registry", got)
	}
	flags := adapterFlags(t, pod.where, pod.container)
	if flags["listen"] != ":17010" || flags["namespace"] != "vms" || flags["log-level"] != "debug" || *d.Spec.Replicas != 3 {
		t.Errorf("values not applied: flags %v, replicas %d", flags, *d.Spec.Replicas)
	}
	if d.Name != "vms-galleon-file" {
		t.Errorf("release vms: Deployment %q, want vms-galleon-file", d.Name)
	}
}

// TestKustomizeBuild renders deploy/kubernetes/standalone with kubectl's kustomize (the kubectl
// `devtool build kube` builds) and checks every object lands in istio-system.
func TestKustomizeBuild(t *testing.T) {
	kubectl := kube.Kubectl(t)
	out := render(t, nil, kubectl, "kustomize", filepath.Join(repoRoot(t), "deploy/kubernetes/standalone"))
	objs := decodeAll(t, "kubectl kustomize standalone", out)
	for _, o := range objs {
		if o.namespace != "istio-system" {
			t.Errorf("%s: namespace %q, want istio-system", o, o.namespace)
		}
	}
	checkWorkload(t, objs)
	if len(objs) < 6 {
		t.Errorf("kustomize rendered %d objects, want at least 6", len(objs))
	}
}

// TestHelmChartFleet renders the chart in fleet mode (deploy/helm/values-fleet.yaml): the
// registry list in a ConfigMap mounted as a directory and passed as --registries, and the list
// as rendered is one galleon-fleet accepts (--check). Without a list, rendering fails saying so.
func TestHelmChartFleet(t *testing.T) {
	helm := kube.Helm(t)
	root := repoRoot(t)
	chart := filepath.Join(root, "deploy/helm/galleon")
	values := filepath.Join(root, "deploy/helm/values-fleet.yaml")
	if out, err := runTool(nil, helm, "lint", "--strict", chart, "-f", values); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
	out, err := runTool(nil, helm, "template", "galleon-fleet", chart, "-n", "istio-system", "-f", values)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, "helm template (values-fleet.yaml)", out)
	var d *appsv1.Deployment
	for _, dep := range find[appsv1.Deployment](objs) {
		d = dep
	}
	if d == nil || len(d.Spec.Template.Spec.Containers) != 1 || d.Spec.Template.Spec.Containers[0].Name != "galleon-fleet" {
		t.Fatalf("want one Deployment with a galleon-fleet container, got %+v", d)
	}
	c := d.Spec.Template.Spec.Containers[0]
	list := ""
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--registries="); ok {
			list = v
		}
	}
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.MountPath == filepath.Dir(list) {
			mount = &c.VolumeMounts[i]
		}
	}
	if list == "" || mount == nil || !mount.ReadOnly || mount.SubPath != "" {
		t.Fatalf("args %v, mounts %+v: want --registries=<dir>/registries.yaml with <dir> a whole read-only volume mount (no subPath: edits must reach the pod)", c.Args, c.VolumeMounts)
	}
	var cm *corev1.ConfigMap
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name && v.ConfigMap != nil {
			for _, m := range find[corev1.ConfigMap](objs) {
				if m.Name == v.ConfigMap.Name {
					cm = m
				}
			}
		}
	}
	if cm == nil || cm.Data[filepath.Base(list)] == "" {
		t.Fatalf("no rendered ConfigMap holds %s for volume %s", filepath.Base(list), mount.Name)
	}
	// The list as the pod will read it is a good one.
	file := filepath.Join(t.TempDir(), "registries.yaml")
	if err := os.WriteFile(file, []byte(cm.Data[filepath.Base(list)]), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "galleon-fleet")
	build := exec.Command("go", "build", "-o", bin, "./cmd/galleon-fleet")
	build.Dir = root
	build.Env = proc.Env(nil, []string{"GOWORK"}, nil, "GOWORK=off")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/galleon-fleet: %v\n%s", err, b)
	}
	if b, err := exec.Command(bin, "--registries", file, "--check").CombinedOutput(); err != nil || !strings.Contains(string(b), "is good") {
		t.Errorf("galleon-fleet --check on the rendered list: %v\n%s", err, b)
	}

	if _, err := runTool(nil, helm, "template", "galleon-fleet", chart, "--set", "adapter.name=galleon-fleet"); err == nil || !strings.Contains(err.Error(), "fleet.registries") {
		t.Errorf("rendering galleon-fleet without a list: want an error naming fleet.registries, got %v", err)
	}
}

// TestHelmChartShards renders the chart with shards (docs/configuration.md#shards): the adapter
// gets --shard-listen with one port per shard from shards.firstPort, each a named container
// port the Service and the NetworkPolicy open (checkWorkload checks they name real ports), and
// a count the binary would refuse fails rendering.
func TestHelmChartShards(t *testing.T) {
	helm := kube.Helm(t)
	chart := filepath.Join(repoRoot(t), "deploy/helm/galleon")
	out, err := runTool(nil, helm, "template", "galleon", chart, "-n", "istio-system", "-f", filepath.Join(repoRoot(t), "deploy/helm/values-bookinfo.yaml"),
		"--set", "shards.count=3", "--set", "shards.firstPort=16030")
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, "helm template (shards)", out)
	pod, _, svc := checkWorkload(t, objs)
	if got := adapterFlags(t, pod.where, pod.container)["shard-listen"]; got != ":16030,:16031,:16032" {
		t.Errorf("--shard-listen %q, want :16030,:16031,:16032", got)
	}
	want := []string{"grpc-shard-0", "grpc-shard-1", "grpc-shard-2"}
	var served, open []string
	for _, p := range svc.Spec.Ports {
		if strings.HasPrefix(p.Name, "grpc-shard-") {
			served = append(served, p.Name)
		}
	}
	for _, np := range find[networkingv1.NetworkPolicy](objs) {
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port != nil && strings.HasPrefix(p.Port.String(), "grpc-shard-") {
					open = append(open, p.Port.String())
				}
			}
		}
	}
	if !slices.Equal(served, want) || !slices.Equal(open, want) {
		t.Errorf("Service ports %v, NetworkPolicy ports %v: want %v in both", served, open, want)
	}

	if _, err := runTool(nil, helm, "template", "galleon", chart, "--set", "registry.existingConfigMap=registry", "--set", "shards.count=65"); err == nil ||
		!strings.Contains(err.Error(), "shards.count") {
		t.Errorf("shards.count=65: want an error naming shards.count, got %v", err)
	}
}
