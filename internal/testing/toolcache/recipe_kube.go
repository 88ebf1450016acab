package toolcache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Versions of the Kubernetes-side tools the deploy tests run (test/kube).
const (
	KubeVersion = "1.36.3" // kube-apiserver and kubectl
	EtcdVersion = "3.6.16"
	HelmVersion = "3.21.4"
)

// kubeWrapper is the one wrapper module that builds the four Kubernetes-side tools and istiod's
// 1.31 development line: one build list, so the Kubernetes libraries, gRPC, etcd's client and the
// rest these five commands share are compiled once. (Go's build cache keys a package by the
// versions of everything it imports; with one module per tool nearly nothing was shared.)
// kube-apiserver, kubectl and etcd do not install with `go install module@version`: Kubernetes'
// go.mod points its k8s.io/* staging modules at ./staging, and etcd's main package is in a root
// module the proxy does not serve. The staging replace directives become published versions.
const kubeWrapper = "scripts/tools/kubernetes"

// KubeToolNames are the Kubernetes-side tools, in build order.
func KubeToolNames() []string { return []string{"kube-apiserver", "kubectl", "etcd", "helm"} }

// KubeTool is the recipe of one Kubernetes-side tool: kube-apiserver, kubectl, etcd or helm.
func KubeTool(name string) (Recipe, error) {
	r := Recipe{
		Name: name, Make: "kube", ModDir: kubeWrapper,
		PinFix: "run `go run ./internal/testing/devtool regen kube`",
		about:  "first time, a few minutes",
	}
	var pkg, ldflags string
	switch name {
	case "kube-apiserver", "kubectl":
		r.Version, r.Module, pkg = KubeVersion, "k8s.io/kubernetes", "k8s.io/kubernetes/cmd/"+name
		r.EnvVar = "GALLEON_KUBE_APISERVER_BIN"
		if name == "kubectl" {
			r.EnvVar = "GALLEON_KUBECTL_BIN"
		}
		major, rest, _ := strings.Cut(KubeVersion, ".")
		minor, _, _ := strings.Cut(rest, ".")
		for _, v := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
			ldflags += fmt.Sprintf(" -X %s.gitVersion=v%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean", v, KubeVersion, v, major, v, minor, v)
		}
	case "etcd":
		// etcd's own main package lives in the repository's root module (go.etcd.io/etcd/v3),
		// which the proxy does not serve at 3.6; scripts/tools/kubernetes/etcd/main.go calls the
		// same etcdmain.Main.
		r.Version, r.Module, pkg, r.EnvVar = EtcdVersion, "go.etcd.io/etcd/server/v3", "./etcd", "GALLEON_ETCD_BIN"
	case "helm":
		const v = "helm.sh/helm/v3/internal/version"
		r.Version, r.Module, pkg, r.EnvVar = HelmVersion, "helm.sh/helm/v3", "helm.sh/helm/v3/cmd/helm", "GALLEON_HELM_BIN"
		ldflags = fmt.Sprintf("-X %s.version=v%s -X %s.gitTreeState=clean", v, HelmVersion, v)
	default:
		return Recipe{}, fmt.Errorf("unknown tool %s; known: %s", name, strings.Join(KubeToolNames(), " "))
	}
	r.ModuleVersion = "v" + r.Version
	r.build = goBuild(pkg, ldflags, fmt.Sprintf("go build %s from %s@%s (%s/go.sum)", name, r.Module, r.ModuleVersion, kubeWrapper),
		"retry later, or set "+r.EnvVar+" to a "+name+" "+r.Version+" binary")
	return r, nil
}

// ServiceMonitorCRD returns the path of the Prometheus Operator's ServiceMonitor CRD (a YAML file
// in the operator's module, pinned in scripts/tools/crds, whose go.sum verifies it), downloading
// the module first if the module cache lacks it. The chart's ServiceMonitor is applied after it.
func ServiceMonitorCRD(ctx context.Context) (string, error) {
	const module, dir = "github.com/prometheus-operator/prometheus-operator", "scripts/tools/crds"
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("the ServiceMonitor CRD is pinned in %s, which cannot be found: %v (run it in the repository)", dir, err)
	}
	modDir := filepath.Join(root, dir)
	version, err := GoModRequire(modDir, module)
	if err != nil || version == "" {
		return "", fmt.Errorf("%s/go.mod does not require %s (%v): restore it", dir, module, err)
	}
	modCache, err := goOutput(ctx, modDir, nil, "env", "GOMODCACHE")
	if err != nil {
		return "", err
	}
	path := filepath.Join(modCache, module+"@"+version, "example", "prometheus-operator-crd", "monitoring.coreos.com_servicemonitors.yaml")
	if _, err := os.Stat(path); err == nil {
		return path, nil // downloaded before, and verified then
	}
	log := LogPath("crds")
	if err := RunGo(ctx, log, modDir, []string{"GOFLAGS=" + os.Getenv("GOFLAGS") + " -mod=readonly"}, "mod", "download", module); err != nil {
		return "", Failure("crds", log, "go mod download "+module+" ("+dir+"/go.sum)", "retry later")
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s@%s has no ServiceMonitor CRD at %s: %v (the file moved: update ServiceMonitorCRD)", module, version, path, err)
	}
	return path, nil
}
