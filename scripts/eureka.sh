#!/usr/bin/env bash
# Builds and caches PolarisMesh's server (an implementation of the Eureka REST API) for the Eureka adapter's tests.
#
#   scripts/eureka.sh build                          build polaris-server 1.18.1 unless cached; prints its path last on stdout
#   scripts/eureka.sh path                           print the cached path (exit 1 if it has not been built)
#   scripts/eureka.sh config DIR EUREKA HTTP GRPC    write DIR/polaris-server.yaml: Eureka API on 127.0.0.1:EUREKA (base URL /eureka), Polaris's api-http on HTTP and service-grpc on GRPC
#   scripts/eureka.sh tidy                           refresh scripts/tools/polaris/go.mod + go.sum (maintainers; asks the proxy for more than a build does)
#
# No Netflix or Spring Eureka server can be installed here (no Maven repository), so the tests run
# against PolarisMesh's server, a Go program that serves the Eureka REST API (/eureka/apps,
# /eureka/apps/delta, /eureka/apps/{app}[/{id}], status overrides; XML and JSON) over an embedded
# bolt store. It is built from the Go module proxy through a wrapper module committed in
# scripts/tools/polaris (`tool github.com/polarismesh/polaris`, pinned at v1.18.1, plus Polaris's
# own `replace gopkg.in/yaml.v2`); with its go.sum committed, `build` asks the proxy only for .mod
# and .zip files (scripts/gofetch.sh). GALLEON_POLARIS_BIN=/path/to/polaris-server skips the build.
# One fix is applied at build time, to a copy of the module the build is pointed at with
# `go build -modfile` (PATCHES below, in scripts/tools/polaris): Polaris's bolt store never hands a
# deleted instance to its cache, so a cancelled instance (DELETE /eureka/apps/{app}/{id}) stayed in
# /eureka/apps until its lease ran out (durationInSecs, 90 s by default), where Eureka drops it at
# once. Cached at $(scripts/cache-dir.sh bin polaris-server 1.18.1). Cold build (empty module and build
# caches) on 2 cores: about 2.5 min idle, downloads included (~330 MB module source, ~430 MB build
# cache, 53 MiB binary).
#
# The configuration is adapters/eureka/eurekatest/polaris-server.yaml.tmpl, the module's
# release/conf/polaris-server.yaml made fit for tests (loopback only, the xds-v3, service-nacos and
# config-grpc apiservers removed, fast cache refresh); eurekatest fills in the same placeholders.
# Run the server in DIR (`cd DIR && TZ=UTC polaris-server start -c polaris-server.yaml`): its store
# (./polaris.bolt) and logs (./log) are relative paths, and it writes local times into instance
# records but reads them back as UTC. Ready in about 0.5 s; SIGTERM stops it in 5-15 s.
set -euo pipefail

POLARIS_VERSION=1.18.1
POLARIS_MODULE=github.com/polarismesh/polaris
# Fixes applied at build time to a copy of the module (patch -p1), each a unified diff.
PATCHES=(boltdb-deleted-instances.patch)

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
TOOLS_DIR="$SCRIPT_DIR/tools/polaris"
CONFIG_TEMPLATE="$REPO_DIR/adapters/eureka/eurekatest/polaris-server.yaml.tmpl"
# shellcheck source=scripts/cache-dir.sh
source "$SCRIPT_DIR/cache-dir.sh"
# shellcheck source=scripts/gofetch.sh
source "$SCRIPT_DIR/gofetch.sh"

# A go.work above the repository must not change which versions get built.
export GOWORK=off

usage() {
	sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

check_pin() {
	local got
	got=$(galleon_gomod_require "$TOOLS_DIR" "$POLARIS_MODULE")
	if [[ "$got" != "v$POLARIS_VERSION" ]]; then
		echo "eureka.sh: scripts/tools/polaris/go.mod requires $POLARIS_MODULE ${got:-nothing}, expected v$POLARIS_VERSION: fix the go.mod, then run scripts/eureka.sh tidy" >&2
		exit 1
	fi
}

# patched_module LOG WORKDIR: copies Polaris's module out of the module cache into
# WORKDIR/polaris, applies PATCHES there and writes WORKDIR/build.mod + build.sum: the committed
# go.mod and go.sum plus `replace github.com/polarismesh/polaris => WORKDIR/polaris`, for
# `go build -modfile`. (`go build -overlay` refuses files in the module cache.) Returns 1 when go
# could not get the module (galleon_go_failure explains), 2 when a patch does not apply.
patched_module() {
	local log=$1 work=$2 dir p
	# -find: locate the package without loading its imports (fetches Polaris's own .mod and .zip only).
	galleon_go_retry "$log" "$TOOLS_DIR" list -mod=readonly -find -f '{{.Dir}}' "$POLARIS_MODULE" || return 1
	dir=$(cd "$TOOLS_DIR" && GOFLAGS=-mod=readonly go list -find -f '{{.Dir}}' "$POLARIS_MODULE") || return 1
	cp -R "$dir" "$work/polaris"
	chmod -R u+w "$work/polaris"
	for p in "${PATCHES[@]}"; do
		if ! patch -s -p1 -d "$work/polaris" <"$TOOLS_DIR/$p" >>"$log" 2>&1; then
			echo "eureka.sh: scripts/tools/polaris/$p does not apply to $POLARIS_MODULE@v$POLARIS_VERSION; do: update the patch for this version (patch's output: $log)" >&2
			return 2
		fi
	done
	cp "$TOOLS_DIR/go.mod" "$work/build.mod"
	cp "$TOOLS_DIR/go.sum" "$work/build.sum"
	(cd "$TOOLS_DIR" && go mod edit -modfile="$work/build.mod" -replace="$POLARIS_MODULE=$work/polaris")
}

build_polaris() {
	local out=$1 log work rc=0 v=$POLARIS_MODULE/common/version
	log=$(galleon_go_log "polaris-server-$POLARIS_VERSION")
	echo "building polaris-server $POLARIS_VERSION from scripts/tools/polaris/go.mod (first time, ~2.5 min, more on a busy machine; log $log)..." >&2
	work=$(mktemp -d "${TMPDIR:-/tmp}/galleon-polaris.XXXXXX")
	patched_module "$log" "$work" || rc=$?
	if ((rc == 0)); then
		galleon_go_build "$log" "$TOOLS_DIR" "$out" "$POLARIS_MODULE" -modfile="$work/build.mod" \
			-ldflags "$GALLEON_TOOL_LDFLAGS -X $v.Version=v$POLARIS_VERSION" || rc=1
	fi
	rm -rf "$work"
	if ((rc == 1)); then
		galleon_go_failure eureka.sh "$log" "go build $POLARIS_MODULE@v$POLARIS_VERSION from scripts/tools/polaris/go.sum" \
			"retry later, or set GALLEON_POLARIS_BIN to a polaris-server $POLARIS_VERSION binary built with scripts/tools/polaris/*.patch"
	fi
	((rc == 0)) || return 1
	"$out" version >&2 || true
}

# config DIR EUREKA HTTP GRPC: the template with its placeholders filled in.
write_config() {
	local dir=$1 eureka=$2 http=$3 grpc=$4 p
	for p in "$eureka" "$http" "$grpc"; do
		if ! [[ "$p" =~ ^[0-9]+$ ]] || ((p < 1 || p > 65535)); then
			echo "eureka.sh config: $p is not a port number" >&2
			exit 2
		fi
	done
	[[ -d "$dir" ]] || { echo "eureka.sh config: $dir is not a directory" >&2; exit 2; }
	sed -e "s/@LISTEN_IP@/127.0.0.1/g" -e "s/@EUREKA_PORT@/$eureka/g" \
		-e "s/@HTTP_PORT@/$http/g" -e "s/@GRPC_PORT@/$grpc/g" \
		"$CONFIG_TEMPLATE" >"$dir/polaris-server.yaml"
	printf '%s\n' "$dir/polaris-server.yaml"
}

cmd=${1:-}
case "$cmd" in
build)
	if galleon_env_binary eureka.sh GALLEON_POLARIS_BIN polaris-server; then
		exit 0
	fi
	check_pin
	galleon_build_cached polaris-server "$POLARIS_VERSION" build_polaris
	;;
path)
	if galleon_env_binary eureka.sh GALLEON_POLARIS_BIN polaris-server; then
		exit 0
	fi
	bin=$(galleon_bin_path polaris-server "$POLARIS_VERSION")
	if [[ ! -x "$bin" ]]; then
		echo "$bin does not exist; run scripts/eureka.sh build (or make eureka)" >&2
		exit 1
	fi
	printf '%s\n' "$bin"
	;;
config)
	[[ $# -eq 5 ]] || usage
	write_config "$2" "$3" "$4" "$5"
	;;
tidy)
	cd "$TOOLS_DIR"
	GOFLAGS=-mod=mod go mod tidy
	check_pin
	;;
*) usage ;;
esac
