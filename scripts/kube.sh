#!/usr/bin/env bash
# Builds and caches a Kubernetes API server, etcd, kubectl and Helm for the deploy tests
# (test/kube): the chart is rendered by a real Helm, the kustomizations by kubectl, and applied to a
# real kube-apiserver backed by a real etcd, and istiod reads `k8s://` from it.
#
#   scripts/kube.sh build [TOOL...]   build kube-apiserver, kubectl, etcd and helm (or the TOOLs named) unless cached; prints each path on stdout
#   scripts/kube.sh path TOOL         print TOOL's cached path (exit 1 if it has not been built)
#   scripts/kube.sh crds              download the Prometheus Operator's module (pinned in scripts/tools/crds) and print its ServiceMonitor CRD's path
#   scripts/kube.sh versions          print "TOOL VERSION" for each tool
#   scripts/kube.sh regen             rewrite the wrapper module scripts/tools/kubernetes from the pins below and istiod.sh's 1.31-dev pin (maintainers, on a version bump)
#
# kube-apiserver, kubectl and etcd do not install with `go install module@version`: Kubernetes'
# go.mod points its k8s.io/* staging modules at ./staging, and etcd's main package is in a root
# module the proxy does not serve. Helm would, but is built with them to share their libraries.
# So all four are built, like Consul (scripts/consul.sh), through a wrapper module with go.sum
# committed: `build` asks the proxy only for .mod and .zip files (scripts/gofetch.sh). The staging
# replace directives become published versions (k8s.io/api => k8s.io/api v0.36.3, the release's).
#
# One wrapper module, scripts/tools/kubernetes, builds all four and istiod's 1.31 development line
# (scripts/istiod.sh): one build list, so the Kubernetes libraries, gRPC, etcd's client and the
# rest that these five commands share are compiled once. Go's build cache keys a package by the
# versions of everything it imports; with one module per tool (Kubernetes libraries at v0.35.4,
# v0.36.1 and v0.37.0) nearly nothing was shared. The versions are chosen to meet there: Kubernetes
# 1.36.3, Helm 3.21.4 (Kubernetes libraries v0.36.2) and Istio's 1.31 line (v0.36.1), each raised
# by MVS to the highest any of them asks for. docs/benchmarks.md ("Cold make test") has the sizes.
# GALLEON_KUBE_APISERVER_BIN, GALLEON_KUBECTL_BIN, GALLEON_ETCD_BIN and GALLEON_HELM_BIN skip a build. Cached at
# $(scripts/cache-dir.sh bin TOOL VERSION). Cold build times on 2 cores: README.md, Quick start.
set -euo pipefail

KUBE_VERSION=1.36.3
ETCD_VERSION=3.6.16
HELM_VERSION=3.21.4

# The wrapper module every tool here is built from (and istiod 1.31-dev, scripts/istiod.sh).
WRAPPER_DIR=tools/kubernetes

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/cache-dir.sh
source "$SCRIPT_DIR/cache-dir.sh"
# shellcheck source=scripts/gofetch.sh
source "$SCRIPT_DIR/gofetch.sh"

# A go.work above the repository must not change which versions get built.
export GOWORK=off

TOOLS=(kube-apiserver kubectl etcd helm)

usage() {
	sed -n '6,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

# tool_fields TOOL: sets VERSION (without v), MODULE (the upstream module), MODDIR (the wrapper
# module), PKG (what is built), ENVVAR (the override) and LDFLAGS.
tool_fields() {
	MODDIR="$SCRIPT_DIR/$WRAPPER_DIR"
	case "$1" in
	kube-apiserver | kubectl)
		VERSION=$KUBE_VERSION MODULE=k8s.io/kubernetes PKG=k8s.io/kubernetes/cmd/$1
		ENVVAR=GALLEON_KUBE_APISERVER_BIN
		[[ $1 == kubectl ]] && ENVVAR=GALLEON_KUBECTL_BIN
		local v minor
		minor=$(cut -d. -f2 <<<"$KUBE_VERSION")
		LDFLAGS=""
		for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			LDFLAGS+=" -X $v.gitVersion=v$KUBE_VERSION -X $v.gitMajor=${KUBE_VERSION%%.*} -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
		done
		;;
	etcd)
		# etcd's own main package lives in the repository's root module (go.etcd.io/etcd/v3), which
		# the proxy does not serve at 3.6; scripts/tools/kubernetes/etcd/main.go calls the same etcdmain.Main.
		VERSION=$ETCD_VERSION MODULE=go.etcd.io/etcd/server/v3 PKG=./etcd ENVVAR=GALLEON_ETCD_BIN LDFLAGS=""
		;;
	helm)
		local v=helm.sh/helm/v3/internal/version
		VERSION=$HELM_VERSION MODULE=helm.sh/helm/v3 PKG=helm.sh/helm/v3/cmd/helm ENVVAR=GALLEON_HELM_BIN
		LDFLAGS="-X $v.version=v$HELM_VERSION -X $v.gitTreeState=clean"
		;;
	*)
		echo "kube.sh: unknown tool $1; known: ${TOOLS[*]}" >&2
		exit 2
		;;
	esac
}

check_pin() {
	local got
	got=$(galleon_gomod_require "$MODDIR" "$MODULE")
	if [[ "$got" != "v$VERSION" ]]; then
		echo "kube.sh: ${MODDIR#"$SCRIPT_DIR"/}/go.mod requires $MODULE ${got:-nothing}, expected v$VERSION: run scripts/kube.sh regen" >&2
		exit 1
	fi
}

build_tool() {
	local out=$1 log
	log=$(galleon_go_log "$TOOL-$VERSION")
	echo "building $TOOL $VERSION from ${MODDIR#"$SCRIPT_DIR"/}/go.mod (first time, a few minutes; log $log)..." >&2
	if ! galleon_go_build "$log" "$MODDIR" "$out" "$PKG" -ldflags "$GALLEON_TOOL_LDFLAGS $LDFLAGS"; then
		galleon_go_failure kube.sh "$log" "go build $TOOL from $MODULE@v$VERSION (${MODDIR#"$SCRIPT_DIR"/}/go.sum)" \
			"retry later, or set $ENVVAR to a $TOOL $VERSION binary"
		return 1
	fi
}

# regen: the wrapper module's go.mod from the pins (the four upstream modules, istio.io/istio from
# scripts/istiod.sh), Kubernetes' staging replace directives (read from its go.mod in the module
# cache) turned into published versions, then `go mod tidy` for the rest of the build list and
# go.sum. Asks the proxy for .info: only for maintainers moving to another version.
regen() {
	local moddir=$SCRIPT_DIR/$WRAPPER_DIR kmod istio staging tmp
	tmp=$(mktemp -d)
	# Expanded now on purpose: tmp is local to this function and gone when the trap runs.
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" EXIT
	kmod=$(cd "$tmp" && go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
	[[ -f "$kmod" ]] || { echo "kube.sh: could not download k8s.io/kubernetes@v$KUBE_VERSION's go.mod" >&2; exit 1; }
	istio=$(bash "$SCRIPT_DIR/istiod.sh" releases | awk -v d="scripts/$WRAPPER_DIR" '$2 == d { print $3 }')
	[[ -n "$istio" ]] || { echo "kube.sh: scripts/istiod.sh has no release built from scripts/$WRAPPER_DIR" >&2; exit 1; }
	staging="v0.${KUBE_VERSION#*.}"
	{
		echo "// Wrapper module that builds kube-apiserver and kubectl $KUBE_VERSION, etcd $ETCD_VERSION, Helm $HELM_VERSION"
		echo "// (scripts/kube.sh) and pilot-discovery from Istio's 1.31 development line (scripts/istiod.sh)"
		echo "// with one build list, so what they share is compiled once. Generated by scripts/kube.sh regen:"
		echo "// Kubernetes' replace directives turned into published versions, the rest by go mod tidy."
		echo "module galleon-kubernetes-build"
		echo
		grep -m1 -E '^go [0-9]' "$kmod"
		echo
		echo "tool ("
		printf '\t%s\n' k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl helm.sh/helm/v3/cmd/helm istio.io/istio/pilot/cmd/pilot-discovery
		echo ")"
		echo
		echo "require ("
		printf '\t%s\n' "k8s.io/kubernetes v$KUBE_VERSION" "go.etcd.io/etcd/server/v3 v$ETCD_VERSION" "helm.sh/helm/v3 v$HELM_VERSION" "istio.io/istio $istio"
		echo ")"
		echo
		echo "replace ("
		# k8s.io/api => ./staging/src/k8s.io/api becomes k8s.io/api => k8s.io/api v0.36.x.
		awk -v v="$staging" '$2 == "=>" && $3 ~ /^\.\/staging\// { printf "\t%s => %s %s\n", $1, $1, v }' "$kmod"
		echo ")"
	} >"$moddir/go.mod"
	rm -f "$moddir/go.sum"
	# The checksum database answers 404 for github.com/openshift/api (Istio's dependency).
	(cd "$moddir" && GONOSUMDB=github.com/openshift/api GOFLAGS=-mod=mod go mod tidy)
	echo "kube.sh: regenerated scripts/$WRAPPER_DIR/go.mod and go.sum" >&2
}

cmd=${1:-}
[[ $# -gt 0 ]] && shift
case "$cmd" in
build)
	[[ $# -eq 0 ]] && set -- "${TOOLS[@]}"
	for TOOL in "$@"; do
		tool_fields "$TOOL"
		if galleon_env_binary kube.sh "$ENVVAR" "$TOOL"; then
			continue
		fi
		check_pin
		galleon_build_cached "$TOOL" "$VERSION" build_tool
	done
	;;
path)
	[[ $# -eq 1 ]] || usage
	TOOL=$1
	tool_fields "$TOOL"
	if galleon_env_binary kube.sh "$ENVVAR" "$TOOL"; then
		exit 0
	fi
	bin=$(galleon_bin_path "$TOOL" "$VERSION")
	if [[ ! -x "$bin" ]]; then
		echo "$bin does not exist; run scripts/kube.sh build $TOOL (or make kube)" >&2
		exit 1
	fi
	printf '%s\n' "$bin"
	;;
crds)
	# The CRD is a YAML file in the operator's module; go.sum in scripts/tools/crds verifies it.
	log=$(galleon_go_log crds)
	moddir="$SCRIPT_DIR/tools/crds" module=github.com/prometheus-operator/prometheus-operator
	if ! GOFLAGS="${GOFLAGS:-} -mod=readonly" galleon_go_retry "$log" "$moddir" mod download "$module"; then
		galleon_go_failure kube.sh "$log" "go mod download $module (scripts/tools/crds/go.sum)" "retry later"
		exit 1
	fi
	version=$(galleon_gomod_require "$moddir" "$module")
	printf '%s/%s@%s/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml\n' "$(go env GOMODCACHE)" "$module" "$version"
	;;
versions)
	for TOOL in "${TOOLS[@]}"; do
		tool_fields "$TOOL"
		printf '%s %s\n' "$TOOL" "$VERSION"
	done
	;;
regen)
	[[ $# -eq 0 ]] || usage
	regen
	;;
*) usage ;;
esac
