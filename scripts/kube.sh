#!/usr/bin/env bash
# Builds and caches a Kubernetes API server, etcd, kubectl and Helm for the deploy tests
# (test/kube): the chart is rendered by a real Helm, the kustomizations by kubectl, and applied to a
# real kube-apiserver backed by a real etcd, and istiod reads `k8s://` from it.
#
#   scripts/kube.sh build [TOOL...]   build kube-apiserver, kubectl, etcd and helm (or the TOOLs named) unless cached; prints each path on stdout
#   scripts/kube.sh path TOOL         print TOOL's cached path (exit 1 if it has not been built)
#   scripts/kube.sh crds              download the Prometheus Operator's module (pinned in scripts/tools/crds) and print its ServiceMonitor CRD's path
#   scripts/kube.sh versions          print "TOOL VERSION" for each tool
#   scripts/kube.sh regen TOOL        rewrite TOOL's wrapper module (scripts/tools/{kubernetes,etcd,helm}) from the upstream go.mod (maintainers, on a version bump)
#
# None of the three installs with `go install module@version`: each upstream go.mod has replace
# directives (Kubernetes points its k8s.io/* staging modules at ./staging, etcd its nested modules
# at ../api etc.). So each is built, like Consul (scripts/consul.sh), through a wrapper module
# committed in scripts/tools/{kubernetes,etcd,helm} with the upstream `require` blocks and its replace directives
# turned into published versions (Kubernetes' staging modules at v0.X.Y of the same release). With
# go.sum committed, `build` asks the proxy only for .mod and .zip files (scripts/gofetch.sh).
# GALLEON_KUBE_APISERVER_BIN, GALLEON_KUBECTL_BIN, GALLEON_ETCD_BIN and GALLEON_HELM_BIN skip a build. Cached at
# $(scripts/cache-dir.sh bin TOOL VERSION). Cold build times on 2 cores: README.md, Quick start.
set -euo pipefail

KUBE_VERSION=1.35.4
ETCD_VERSION=3.6.16
HELM_VERSION=3.22.0

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
	MODDIR="$SCRIPT_DIR/tools/$1"
	case "$1" in
	kube-apiserver | kubectl)
		VERSION=$KUBE_VERSION MODULE=k8s.io/kubernetes PKG=k8s.io/kubernetes/cmd/$1 MODDIR="$SCRIPT_DIR/tools/kubernetes"
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
		# the proxy does not serve at 3.6; scripts/tools/etcd/main.go calls the same etcdmain.Main.
		VERSION=$ETCD_VERSION MODULE=go.etcd.io/etcd/server/v3 PKG=. ENVVAR=GALLEON_ETCD_BIN LDFLAGS=""
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
		echo "kube.sh: ${MODDIR#"$SCRIPT_DIR"/}/go.mod requires $MODULE ${got:-nothing}, expected v$VERSION: run scripts/kube.sh regen $TOOL" >&2
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

# regen TOOL: the wrapper module from the upstream go.mod, read from the module cache (go mod
# download puts it there), then a build with -mod=mod to complete go.sum. Asks the proxy for
# .info: only for maintainers moving to another version.
regen() {
	local mod goline tmp staging
	tmp=$(mktemp -d)
	# Expanded now on purpose: tmp is local to this function and gone when the trap runs.
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" EXIT
	mod=$(cd "$tmp" && go mod download -json "$MODULE@v$VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
	[[ -f "$mod" ]] || { echo "kube.sh: could not download $MODULE@v$VERSION's go.mod" >&2; exit 1; }
	goline=$(grep -m1 -E '^go [0-9]' "$mod" || echo "go 1.25")
	staging="v0.${VERSION#*.}"
	mkdir -p "$MODDIR"
	{
		echo "// Wrapper module that builds $PKG $VERSION for the deploy tests (scripts/kube.sh). Generated by"
		echo "// scripts/kube.sh regen from $MODULE's own go.mod: its require and exclude blocks, its replace"
		echo "// directives turned into published versions."
		echo "module galleon-$(basename "$MODDIR")-build"
		echo
		echo "$goline"
		echo
		echo "require $MODULE v$VERSION"
		echo
		galleon_gomod_blocks "$mod"
		if [[ "$MODULE" == k8s.io/kubernetes ]]; then
			# k8s.io/api => ./staging/src/k8s.io/api becomes k8s.io/api => k8s.io/api v0.35.x.
			echo "replace ("
			awk -v v="$staging" '$2 == "=>" && $3 ~ /^\.\/staging\// { printf "\t%s => %s %s\n", $1, $1, v }' "$mod"
			echo ")"
		fi
	} >"$MODDIR/go.mod"
	rm -f "$MODDIR/go.sum"
	local pkgs=("$PKG")
	# One wrapper module builds both: go.sum must cover both commands' packages.
	[[ "$MODULE" == k8s.io/kubernetes ]] && pkgs=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)
	(cd "$MODDIR" && GOFLAGS=-mod=mod go build -o "$tmp/" "${pkgs[@]}")
	echo "kube.sh: regenerated ${MODDIR#"$SCRIPT_DIR"/}/go.mod and go.sum for $VERSION" >&2
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
	[[ $# -eq 1 ]] || usage
	TOOL=$1
	tool_fields "$TOOL"
	regen
	;;
*) usage ;;
esac
